/* Blocks every signal (sigfillset), then works on the main thread and on a thread that
   inherits the mask, raises SIGUSR1 and SIGALRM while they are blocked (they stay pending),
   and finally unblocks SIGUSR1 alone, whose handler then runs once. It does not print
   sigpending(): under DynamoRIO that call does not see signals DynamoRIO holds for the
   program (rt_sigpending is unhandled there, its issue i#92). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile sig_atomic_t usr1;

static void on_usr1(int sig) { (void)sig; usr1++; }

static unsigned long work(unsigned n, unsigned seed)
{
    unsigned *a = malloc(n * sizeof *a);
    unsigned long s = 0;
    for (unsigned i = 0; i < n; i++) a[i] = (i + seed) * 2654435761u;
    for (unsigned r = 0; r < 10; r++)
        for (unsigned i = 0; i < n; i++) s += a[(i * 13 + r) % n] ^ (s >> 5);
    free(a);
    return s;
}

static void *worker(void *arg)
{
    sigset_t m;
    pthread_sigmask(SIG_SETMASK, NULL, &m);
    unsigned long s = work(1 << 13, 7);
    printf("thread: all blocked %d, work %lu\n", sigismember(&m, SIGTERM) && sigismember(&m, SIGUSR2), s);
    return arg;
}

int main(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t all, one;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    unsigned long s = work(1 << 14, 1);
    raise(SIGUSR1);
    raise(SIGALRM);
    printf("main: work %lu, handler ran %d while blocked\n", s, (int)usr1);
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    sigemptyset(&one);
    sigaddset(&one, SIGUSR1);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    s += work(1 << 12, 3);
    printf("main: handler ran %d after unblocking, work %lu\n", (int)usr1, s);
    return 0;
}
