/* Calls into the C library that a profiler must name and attribute as Valgrind does: qsort
 * with a callback (libc's local msort_with_tmp calling back into the program), printf,
 * malloc/free of many sizes, memcpy and memset of large blocks (libc's ifunc-selected
 * variants), each first reached through a lazily bound PLT slot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

static unsigned long sum(const unsigned *v, size_t n)
{
    unsigned long s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    return s;
}

static void copy_blocks(unsigned char *dst, const unsigned char *src, size_t n, int rounds)
{
    for (int r = 0; r < rounds; r++) {
        memcpy(dst, src, n);
        memset(dst + n / 2, r, n / 4);
    }
}

int main(void)
{
    enum { N = 20000, BLOCK = 1 << 20 };
    unsigned *v = malloc(N * sizeof *v);
    if (!v) return 1;
    unsigned seed = 2463534242u;
    for (int i = 0; i < N; i++) {
        seed ^= seed << 13; seed ^= seed >> 17; seed ^= seed << 5;
        v[i] = seed % 1000000;
    }
    qsort(v, N, sizeof *v, by_value);

    unsigned long held = 0;
    for (int i = 0; i < 2000; i++) {
        char *p = malloc(16 + (size_t)(i % 97) * 24);
        if (!p) return 1;
        p[0] = (char)i;
        held += (unsigned char)p[0];
        free(p);
    }

    unsigned char *a = malloc(BLOCK), *b = malloc(BLOCK);
    if (!a || !b) return 1;
    for (size_t i = 0; i < BLOCK; i++) a[i] = (unsigned char)(i * 7);
    copy_blocks(b, a, BLOCK, 8);

    printf("libcalls: min=%u max=%u sum=%lu held=%lu b=%u,%u\n", v[0], v[N - 1], sum(v, N), held, b[0], b[BLOCK - 1]);
    free(a);
    free(b);
    free(v);
    return 0;
}
