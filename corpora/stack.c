/* Stack-heavy code: deep recursion, alloca, VLAs, setjmp/longjmp out of nested frames, stack-passed arguments. */
#include <alloca.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

static jmp_buf jb;

__attribute__((noinline)) static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static long ack(long m, long n)
{
    if (m == 0) return n + 1;
    if (n == 0) return ack(m - 1, 1);
    return ack(m - 1, ack(m, n - 1));
}

/* Each frame keeps a local buffer live across the recursive call. */
__attribute__((noinline)) static unsigned long deep(int depth)
{
    volatile unsigned char local[64];
    for (int i = 0; i < 64; i++) local[i] = (unsigned char)(depth + i);
    unsigned long below = depth ? deep(depth - 1) : 0;
    return below * 3 + local[depth % 64];
}

__attribute__((noinline)) static unsigned long use_alloca(int n)
{
    unsigned *p = alloca(n * sizeof *p);
    for (int i = 0; i < n; i++) p[i] = i * 2654435761u;
    unsigned long s = 0;
    for (int i = 0; i < n; i += 3) s += p[i] >> 8;
    return s;
}

__attribute__((noinline)) static long use_vla(int rows, int cols)
{
    long m[rows][cols];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) m[r][c] = r * cols + c;
    long tr = 0;
    for (int i = 0; i < rows && i < cols; i++) tr += m[i][i];
    return tr + m[rows - 1][cols - 1];
}

/* 8 integer + 10 fp args: args 7..8 and fp 9..10 go on the stack, plus a large struct by value. */
struct big { long v[6]; };
__attribute__((noinline)) static double many_args(long a1, long a2, long a3, long a4, long a5, long a6, long a7,
                                                  long a8, double d1, double d2, double d3, double d4, double d5,
                                                  double d6, double d7, double d8, double d9, double d10, struct big b)
{
    long bs = 0;
    for (int i = 0; i < 6; i++) bs += b.v[i] * (i + 1);
    return (double)(a1 + 2 * a2 + 3 * a3 + 4 * a4 + 5 * a5 + 6 * a6 + 7 * a7 + 8 * a8 + bs) +
           d1 + d2 * 2 + d3 * 3 + d4 * 4 + d5 * 5 + d6 * 6 + d7 * 7 + d8 * 8 + d9 * 9 + d10 * 10;
}

__attribute__((noinline)) static int dive(int depth, int target)
{
    volatile char pad[32];
    memset((char *)pad, depth, sizeof pad);
    if (depth == target) longjmp(jb, depth + pad[0]); /* setjmp returns depth*2 */
    if (depth > 1000) return -1;                       /* unreachable safety bound */
    return dive(depth + 1, target) + pad[1];
}

int main(void)
{
    printf("stack: fib(25)=%ld ack(2,3)=%ld ack(3,5)=%ld\n", fib(25), ack(2, 3), ack(3, 5));
    printf("stack: deep(10000)=%lu\n", deep(10000));
    printf("stack: alloca=%lu vla=%ld\n", use_alloca(5000), use_vla(37, 53));
    struct big b = { { 1, 2, 3, 4, 5, 6 } };
    printf("stack: many_args=%.2f\n", many_args(1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, b));

    volatile int jumps = 0, jsum = 0;
    for (volatile int t = 1; t <= 5; t++) {
        int rv = setjmp(jb);
        if (rv == 0) {
            dive(0, t * 20);
            printf("stack: ERROR dive returned\n");
        } else {
            jumps++;
            jsum += rv;
        }
    }
    printf("stack: longjmps=%d sum=%d\n", jumps, jsum);
    return 0;
}
