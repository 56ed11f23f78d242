/* sort: quicksort and mergesort of integers and of strings, each result verified against
 * the other. Like the sorting inner loops of SPECint: compares, swaps, recursion.
 *
 * usage: sort [number of integers]   (default 8000000; strings: a tenth as many;
 *                                    400000 runs ~0.1 s)
 * prints: checksums of the sorted sequences.
 */
#include "common.h"
#include <string.h>

static void insertion_int(int32_t *a, long n) {
    for (long i = 1; i < n; i++) {
        int32_t v = a[i];
        long j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

static void quicksort_int(int32_t *a, long n) {
    while (n > 16) {
        /* Median of three as the pivot. */
        int32_t x = a[0], y = a[n / 2], z = a[n - 1];
        int32_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        long i = 0, j = n - 1;
        for (;;) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i >= j) break;
            int32_t t = a[i];
            a[i] = a[j];
            a[j] = t;
            i++;
            j--;
        }
        /* Recurse on the smaller side, loop on the larger. */
        long left = j + 1;
        if (left < n - left) {
            quicksort_int(a, left);
            a += left;
            n -= left;
        } else {
            quicksort_int(a + left, n - left);
            n = left;
        }
    }
    insertion_int(a, n);
}

static void mergesort_int(int32_t *a, int32_t *tmp, long n) {
    if (n <= 16) {
        insertion_int(a, n);
        return;
    }
    long h = n / 2;
    mergesort_int(a, tmp, h);
    mergesort_int(a + h, tmp, n - h);
    if (a[h - 1] <= a[h]) return;
    memcpy(tmp, a, (size_t)h * sizeof *a);
    long i = 0, j = h, k = 0;
    while (i < h && j < n) a[k++] = tmp[i] <= a[j] ? tmp[i++] : a[j++];
    while (i < h) a[k++] = tmp[i++];
}

static int str_less(const char *a, const char *b) {
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return (unsigned char)*a < (unsigned char)*b;
}

static void quicksort_str(const char **a, long n) {
    while (n > 12) {
        const char *p = a[n / 2];
        long i = 0, j = n - 1;
        for (;;) {
            while (str_less(a[i], p)) i++;
            while (str_less(p, a[j])) j--;
            if (i >= j) break;
            const char *t = a[i];
            a[i] = a[j];
            a[j] = t;
            i++;
            j--;
        }
        long left = j + 1;
        if (left < n - left) {
            quicksort_str(a, left);
            a += left;
            n -= left;
        } else {
            quicksort_str(a + left, n - left);
            n = left;
        }
    }
    for (long i = 1; i < n; i++) {
        const char *v = a[i];
        long j = i - 1;
        while (j >= 0 && str_less(v, a[j])) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

/* Stable bottom-up mergesort. */
static void mergesort_str(const char **a, const char **tmp, long n) {
    const char **src = a, **dst = tmp;
    for (long w = 1; w < n; w *= 2) {
        for (long lo = 0; lo < n; lo += 2 * w) {
            long mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            long i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = str_less(src[j], src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        const char **t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
}

int main(int argc, char **argv) {
    long n = size_arg(argc, argv, 8000000);
    rng_seed(2);
    int32_t *orig = xmalloc((size_t)n * sizeof *orig), *q = xmalloc((size_t)n * sizeof *q), *m = xmalloc((size_t)n * sizeof *m);
    int32_t *tmp = xmalloc((size_t)n * sizeof *tmp);
    for (long i = 0; i < n; i++) orig[i] = (int32_t)(rng_next() >> 33) - (1 << 29); /* some duplicates, some negative */
    memcpy(q, orig, (size_t)n * sizeof *q);
    memcpy(m, orig, (size_t)n * sizeof *m);
    quicksort_int(q, n);
    mergesort_int(m, tmp, n);
    uint64_t h = FNV_INIT;
    for (long i = 0; i < n; i++) {
        if (q[i] != m[i] || (i > 0 && q[i - 1] > q[i])) {
            printf("integers: mismatch at %ld\n", i);
            return 1;
        }
        h = mix(h, (uint64_t)(uint32_t)q[i] * (uint64_t)(i + 1));
    }
    printf("integers: %ld sorted, min %d max %d median %d, checksum %016llx\n", n, q[0], q[n - 1], q[n / 2], (unsigned long long)h);

    /* Strings: words over a small alphabet with shared prefixes, so compares go deep. */
    long ns = n / 10 > 1 ? n / 10 : 2;
    char *pool = xmalloc((size_t)ns * 24);
    const char **sq = xmalloc((size_t)ns * sizeof *sq), **sm = xmalloc((size_t)ns * sizeof *sm);
    const char **stmp = xmalloc((size_t)ns * sizeof *stmp);
    char *p = pool;
    for (long i = 0; i < ns; i++) {
        int len = 4 + (int)rng_below(18);
        int prefix = (int)rng_below(4);
        for (int k = 0; k < len; k++) p[k] = k < prefix ? 'a' : "abcdefgh"[rng_below(8)];
        p[len] = 0;
        sq[i] = sm[i] = p;
        p += len + 1;
    }
    quicksort_str(sq, ns);
    mergesort_str(sm, stmp, ns);
    h = FNV_INIT;
    for (long i = 0; i < ns; i++) {
        if (strcmp(sq[i], sm[i]) != 0 || (i > 0 && strcmp(sq[i - 1], sq[i]) > 0)) {
            printf("strings: mismatch at %ld\n", i);
            return 1;
        }
        h = fnv1a(h, sq[i], strlen(sq[i]) + 1);
    }
    printf("strings: %ld sorted, first %s last %s, checksum %016llx\n", ns, sq[0], sq[ns - 1], (unsigned long long)h);
    free(orig);
    free(q);
    free(m);
    free(tmp);
    free(pool);
    free(sq);
    free(sm);
    free(stmp);
    return 0;
}
