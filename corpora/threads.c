/* Threads: 8 pthreads sharing mutex-protected counters, private per-thread arrays, and a nested pthread_create. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { NTHREADS = 8, ITERS = 20000, ARRLEN = 4096 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counter_a, counter_b;

struct arg { int id; long sum; long nested_sum; };

static void *nested(void *p)
{
    long *out = p, s = 0;
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_lock(&lock);
        counter_a++;
        pthread_mutex_unlock(&lock);
        s += i % 7;
    }
    *out = s;
    return NULL;
}

static void *worker(void *p)
{
    struct arg *a = p;
    pthread_t child;
    if (a->id == 0 && pthread_create(&child, NULL, nested, &a->nested_sum) != 0) abort();

    long *arr = malloc(ARRLEN * sizeof *arr);
    for (int i = 0; i < ARRLEN; i++) arr[i] = (long)i * (a->id + 1);
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_lock(&lock);
        counter_a++;
        counter_b += a->id;
        pthread_mutex_unlock(&lock);
        a->sum += arr[i % ARRLEN];
    }
    free(arr);

    if (a->id == 0 && pthread_join(child, NULL) != 0) abort();
    return NULL;
}

int main(void)
{
    pthread_t th[NTHREADS];
    struct arg args[NTHREADS] = {0};
    for (int i = 0; i < NTHREADS; i++) {
        args[i].id = i;
        if (pthread_create(&th[i], NULL, worker, &args[i]) != 0) return 1;
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);

    long total = 0;
    for (int i = 0; i < NTHREADS; i++) {
        printf("threads: thread %d sum=%ld\n", i, args[i].sum);
        total += args[i].sum;
    }
    printf("threads: nested sum=%ld\n", args[0].nested_sum);
    printf("threads: counter_a=%ld (expect %d) counter_b=%ld total=%ld\n",
           counter_a, (NTHREADS + 1) * ITERS, counter_b, total);
    return 0;
}
