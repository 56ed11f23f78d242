/* matrix: dense double-precision matrix multiplication (row-oriented i-k-j order and a
 * cache-blocked version, checked against each other) and a 5-point Jacobi stencil on a
 * square grid. Like the floating-point kernels inside SPECint programs (twolf, vpr):
 * strided and sequential array references in tight loops.
 *
 * usage: matrix [n]                  (default 800; 256 runs ~0.1 s)
 *   n x n matrices; a 4n x 4n grid relaxed 40 times
 * prints: checksums of the product and of the grid.
 */
#include "common.h"
#include <string.h>

static void matmul_ikj(const double *a, const double *b, double *c, long n) {
    memset(c, 0, (size_t)(n * n) * sizeof *c);
    for (long i = 0; i < n; i++)
        for (long k = 0; k < n; k++) {
            double aik = a[i * n + k];
            const double *brow = b + k * n;
            double *crow = c + i * n;
            for (long j = 0; j < n; j++) crow[j] += aik * brow[j];
        }
}

#define BS 48

static void matmul_blocked(const double *a, const double *b, double *c, long n) {
    memset(c, 0, (size_t)(n * n) * sizeof *c);
    for (long ii = 0; ii < n; ii += BS)
        for (long kk = 0; kk < n; kk += BS)
            for (long jj = 0; jj < n; jj += BS) {
                long ie = ii + BS < n ? ii + BS : n, ke = kk + BS < n ? kk + BS : n, je = jj + BS < n ? jj + BS : n;
                for (long i = ii; i < ie; i++)
                    for (long k = kk; k < ke; k++) {
                        double aik = a[i * n + k];
                        for (long j = jj; j < je; j++) c[i * n + j] += aik * b[k * n + j];
                    }
            }
}

/* Jacobi relaxation: interior points become the average of their four neighbours. */
static void stencil(double *g, double *t, long m, int iters) {
    for (int it = 0; it < iters; it++) {
        for (long i = 1; i < m - 1; i++)
            for (long j = 1; j < m - 1; j++)
                t[i * m + j] = 0.25 * (g[(i - 1) * m + j] + g[(i + 1) * m + j] + g[i * m + j - 1] + g[i * m + j + 1]);
        for (long i = 1; i < m - 1; i++) memcpy(g + i * m + 1, t + i * m + 1, (size_t)(m - 2) * sizeof *g);
    }
}

int main(int argc, char **argv) {
    long n = size_arg(argc, argv, 800);
    rng_seed(5);
    double *a = xmalloc((size_t)(n * n) * sizeof *a), *b = xmalloc((size_t)(n * n) * sizeof *b);
    double *c1 = xmalloc((size_t)(n * n) * sizeof *c1), *c2 = xmalloc((size_t)(n * n) * sizeof *c2);
    /* Small integers: every product and sum is exact, so both orders agree bit for bit. */
    for (long i = 0; i < n * n; i++) {
        a[i] = (double)((int64_t)rng_below(17) - 8);
        b[i] = (double)((int64_t)rng_below(13) - 6);
    }
    matmul_ikj(a, b, c1, n);
    matmul_blocked(a, b, c2, n);
    if (memcmp(c1, c2, (size_t)(n * n) * sizeof *c1) != 0) {
        printf("matmul: the two orders disagree\n");
        return 1;
    }
    double trace = 0, sum = 0;
    uint64_t h = FNV_INIT;
    for (long i = 0; i < n; i++) trace += c1[i * n + i];
    for (long i = 0; i < n * n; i++) {
        sum += c1[i];
        h = mix(h, (uint64_t)(int64_t)c1[i]);
    }
    printf("matmul: %ld x %ld, trace %.0f, sum %.0f, checksum %016llx\n", n, n, trace, sum, (unsigned long long)h);

    long m = 4 * n;
    double *g = xmalloc((size_t)(m * m) * sizeof *g), *t = xmalloc((size_t)(m * m) * sizeof *t);
    for (long i = 0; i < m; i++)
        for (long j = 0; j < m; j++) g[i * m + j] = (i == 0 || j == 0) ? 100.0 : (i == m - 1 || j == m - 1) ? -50.0 : 0.0;
    memcpy(t, g, (size_t)(m * m) * sizeof *g);
    stencil(g, t, m, 40);
    double gs = 0;
    h = FNV_INIT;
    for (long i = 0; i < m * m; i++) {
        gs += g[i];
        uint64_t bits;
        memcpy(&bits, &g[i], sizeof bits);
        h = mix(h, bits);
    }
    printf("stencil: %ld x %ld grid, 40 sweeps, sum %.6f, near corner %.6e, checksum %016llx\n", m, m, gs, g[3 * m + 3],
           (unsigned long long)h);
    free(a);
    free(b);
    free(c1);
    free(c2);
    free(g);
    free(t);
    return 0;
}
