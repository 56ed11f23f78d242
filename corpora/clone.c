/* clone with unusual flags: a child sharing memory but not a thread (CLONE_VM, SIGCHLD), a
   vfork-style CLONE_VM|CLONE_VFORK child, a fork-like clone with only SIGCHLD, and a child
   with CLONE_FILES that opens a descriptor the parent then sees. Each writes its result into
   memory the parent reads. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long shared[4];
static volatile int child_fd = -1;

static unsigned long work(unsigned n, unsigned seed)
{
    unsigned long s = seed;
    for (unsigned i = 0; i < n; i++) s = s * 6364136223846793005ul + (i ^ (s >> 11));
    return s;
}

static int child(void *arg)
{
    long k = (long)arg;
    shared[k] = work(20000 + 1000 * k, k);
    if (k == 3) child_fd = open("/dev/null", O_RDONLY);
    return (int)k + 20;
}

static void run(long k, int flags)
{
    size_t size = 256 << 10;
    char *stack = malloc(size);
    pid_t p = clone(child, stack + size, flags, (void *)k);
    int st = 0;
    if (p < 0 || waitpid(p, &st, __WALL) != p) {
        printf("clone %ld failed\n", k);
        exit(1);
    }
    printf("clone %ld: exit %d, result seen %d\n", k, WEXITSTATUS(st), shared[k] == work(20000 + 1000 * k, k));
    fflush(stdout);
    free(stack);
}

int main(void)
{
    fflush(stdout);
    run(0, CLONE_VM | SIGCHLD);
    run(1, CLONE_VM | CLONE_VFORK | SIGCHLD);
    run(2, SIGCHLD);
    run(3, CLONE_VM | CLONE_FILES | SIGCHLD);
    printf("clone 2 (no CLONE_VM) left the parent's memory alone: %d\n", shared[2] == 0);
    printf("descriptor opened by the CLONE_FILES child is open here: %d\n", child_fd >= 0 && fcntl(child_fd, F_GETFD) >= 0);
    return 0;
}
