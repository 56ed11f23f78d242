/* A hot loop whose body is one straight path of about 150 blocks: DynamoRIO's trace of it
   is longer than one buffer-check group, so the buffer can be handed off in the middle of
   a trace, where every register expires. Each block reads through the same base pointer,
   whose shadow the trace optimizer knows from block to block until such a hand-off, and
   whose value changes from pass to pass.
   An optional argument sets the number of passes (default 100000). */
#include <stdio.h>
#include <stdlib.h>

enum { N = 256 };
static unsigned long arr[N + 64];
/* Read each pass, so that the compiler cannot fold the base into the code. */
static unsigned long *volatile where = arr;

/* One block: a branch that always goes the same way (kept a branch by the empty asm),
   and a load through the base pointer. */
#define STEP(k)                                                   \
    if (base[(k) & (N - 1)] != (unsigned long)-1) {               \
        acc += base[((k) * 7) & (N - 1)] ^ (k);                   \
        __asm__ volatile("" ::: "memory");                        \
    } else {                                                      \
        acc ^= (k);                                               \
        __asm__ volatile("" ::: "memory");                        \
    }
#define STEP10(k) STEP(k) STEP(k + 1) STEP(k + 2) STEP(k + 3) STEP(k + 4) STEP(k + 5) STEP(k + 6) STEP(k + 7) STEP(k + 8) STEP(k + 9)

__attribute__((noinline)) static unsigned long pass(const unsigned long *base, unsigned long acc)
{
    STEP10(0) STEP10(10) STEP10(20) STEP10(30) STEP10(40) STEP10(50) STEP10(60) STEP10(70)
    STEP10(80) STEP10(90) STEP10(100) STEP10(110) STEP10(120) STEP10(130) STEP10(140)
    return acc;
}

int main(int argc, char **argv)
{
    long passes = argc > 1 ? atol(argv[1]) : 100000;
    for (unsigned i = 0; i < N; i++) arr[i] = i * 2654435761u;
    unsigned long acc = 0;
    for (long p = 0; p < passes; p++) {
        /* A base that moves from pass to pass: a value recorded in the wrong place gives
           wrong addresses. */
        acc = pass(where + (p & 63), acc + (unsigned long)p);
        arr[p & (N - 1)] += acc & 0xff;
    }
    printf("longtrace: %lu\n", acc);
    return 0;
}
