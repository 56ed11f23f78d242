/* A process to attach to (dep record --attach): 2 threads block reading a pipe and main blocks
 * reading stdin, so the attach finds every thread inside a system call. A line on stdin (or its
 * end) lets them go: each thread sums a private array and bumps a shared counter under a mutex;
 * main joins them, prints the sums and exits with 5. With --block-signals the workers start with
 * every signal blocked, as xz's do; with --block-briefly they unblock them 100 ms after
 * starting, as a thread just created does once it runs (ready is printed before then). */
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NTHREADS = 2, LEN = 50000 };

static int go[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long shared;

static int briefly;
static void *worker(void *p)
{
    long id = (long)p, sum = 0;
    char c;
    if (briefly) {
        sigset_t none;
        sigemptyset(&none);
        usleep(100000);
        pthread_sigmask(SIG_SETMASK, &none, NULL);
    }
    while (read(go[0], &c, 1) != 1) {}
    long *arr = malloc(LEN * sizeof *arr);
    for (long i = 0; i < LEN; i++) arr[i] = i * (id + 3) % 1009;
    for (long i = 0; i < LEN; i++) {
        sum += arr[(i * 7) % LEN];
        if (i % 1000 == 0) {
            pthread_mutex_lock(&lock);
            shared += id + 1;
            pthread_mutex_unlock(&lock);
        }
    }
    free(arr);
    return (void *)sum;
}

int main(int argc, char **argv)
{
    pthread_t t[NTHREADS];
    sigset_t all, old;
    sigfillset(&all);
    briefly = argc > 1 && strcmp(argv[1], "--block-briefly") == 0;
    int block = briefly || (argc > 1 && strcmp(argv[1], "--block-signals") == 0);
    if (pipe(go) != 0) return 1;
    if (block) pthread_sigmask(SIG_SETMASK, &all, &old);
    for (long i = 0; i < NTHREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) return 1;
    if (block) pthread_sigmask(SIG_SETMASK, &old, NULL);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    // DynamoRIO's takeover signal interrupts the read this waits in (EINTR): wait on, as a
    // program that retries interrupted calls does.
    while (!fgets(line, sizeof line, stdin)) {
        if (!ferror(stdin) || errno != EINTR) {
            line[0] = 0;
            break;
        }
        clearerr(stdin);
    }
    if (write(go[1], "gg", NTHREADS) != NTHREADS) return 1;
    long total = 0;
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
        printf("thread %d sum %ld\n", i, (long)r);
    }
    printf("shared %ld total %ld\n", shared, total);
    return 5;
}
