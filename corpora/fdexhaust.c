/* Exhausts its descriptors: first raises RLIMIT_NOFILE's soft limit to the hard one and
   reads it back (as Java does at start-up), then lowers it to 64 (checking the previous
   limit prlimit reports), opens /dev/null until EMFILE, then (still with no descriptor
   free) works, makes a thread and forks a child, closes them all and checks that every
   number below the limit can be taken again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long work(unsigned n, unsigned seed)
{
    unsigned *a = malloc(n * sizeof *a);
    unsigned long s = 0;
    for (unsigned i = 0; i < n; i++) a[i] = (i + seed) * 2654435761u;
    for (unsigned i = 0; i < n; i++) s += a[(i * 17) % n] ^ (s >> 3);
    free(a);
    return s;
}

static void *worker(void *arg)
{
    *(unsigned long *)arg = work(1 << 12, 5);
    return NULL;
}

int main(void)
{
    struct rlimit got = {0, 0}, back = {0, 0}, old = {0, 0};
    int gr = getrlimit(RLIMIT_NOFILE, &got);
    struct rlimit up = {got.rlim_max, got.rlim_max};
    int sr = setrlimit(RLIMIT_NOFILE, &up);
    int br = getrlimit(RLIMIT_NOFILE, &back);
    int same = br == 0 && back.rlim_cur == up.rlim_cur && back.rlim_max == up.rlim_max && up.rlim_max > 64;
    printf("limit: get %d, raised %d, read back %s\n", gr, sr, same ? "as set" : "otherwise");
    struct rlimit rl = {64, 64};
    if (prlimit(0, RLIMIT_NOFILE, &rl, &old) != 0) { perror("prlimit"); return 1; }
    printf("previous limit %s\n", old.rlim_cur == back.rlim_cur && old.rlim_max == back.rlim_max ? "as read" : "otherwise");
    int fds[64], n = 0, fd;
    while ((fd = open("/dev/null", O_RDONLY)) >= 0) fds[n++] = fd;
    int e = errno;
    unsigned long s = work(1 << 14, 1), t = 0;
    pthread_t th;
    int tr = pthread_create(&th, NULL, worker, &t);
    if (tr == 0) pthread_join(th, NULL);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) _exit((int)(work(100, 2) & 0x3f));
    int st = 0;
    waitpid(p, &st, 0);
    printf("opened %d until %s; thread %d work %lu; child exit %d\n", n, strerror(e), tr, s + t, WEXITSTATUS(st));
    for (int i = 0; i < n; i++) close(fds[i]);
    int again = 0;
    while ((fd = open("/dev/null", O_RDONLY)) >= 0) again++;
    printf("opened %d again\n", again);
    return 0;
}
