/* Closes every descriptor above 2 (a close() loop, close_range, dup2 onto high numbers), as daemons and closefrom() do, then works: a profiler's own channel must survive. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

static unsigned long work(unsigned n)
{
    unsigned long *a = malloc(n * sizeof *a), s = 0;
    for (unsigned i = 0; i < n; i++) a[i] = i * 2654435761u;
    for (unsigned r = 0; r < 20; r++)
        for (unsigned i = 0; i < n; i++) s += a[(i * 7 + r) % n] ^ (s >> 3);
    free(a);
    return s;
}

int main(void)
{
    unsigned long s = work(1 << 14);
    for (int fd = 3; fd < 4096; fd++) close(fd);
    s += work(1 << 14);
    syscall(SYS_close_range, 3u, ~0u, 0u);
    s += work(1 << 14);
    for (int fd = 900; fd < 1000; fd++) dup2(1, fd);
    for (int fd = 900; fd < 1000; fd++) close(fd);
    s += work(1 << 14);
    printf("closefds: %lu\n", s);
    return 0;
}
