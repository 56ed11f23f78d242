/* vfork: a child that _exits with a status, and one that execs /bin/echo; the parent
   (suspended until then) waits for each and prints the statuses. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long work(unsigned n)
{
    unsigned long s = 0;
    for (unsigned i = 0; i < n; i++) s = s * 31 + (i ^ (s >> 7));
    return s;
}

int main(void)
{
    static unsigned long s;
    s = work(100000);
    fflush(stdout);
    int st;
    pid_t p = vfork();
    if (p == 0) _exit(9);
    waitpid(p, &st, 0);
    printf("vfork child 1: exit %d, work %lu\n", WEXITSTATUS(st), s);
    fflush(stdout);
    p = vfork();
    if (p == 0) {
        execl("/bin/echo", "echo", "vfork child 2 exec'd", (char *)NULL);
        _exit(127);
    }
    waitpid(p, &st, 0);
    s += work(50000);
    printf("vfork child 2: exit %d, work %lu\n", WEXITSTATUS(st), s);
    return 0;
}
