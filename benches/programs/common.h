/* Shared helpers for the benchmark programs: a deterministic generator and a checksum. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* xorshift64*: the same sequence on every run and machine. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull | 1; }

static inline uint64_t rng_next(void) {
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* A value in [0, n). */
static inline uint64_t rng_below(uint64_t n) { return rng_next() % n; }

/* FNV-1a over bytes, chained through h. */
static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define FNV_INIT 0xcbf29ce484222325ull

static inline uint64_t mix(uint64_t h, uint64_t v) { return fnv1a(h, &v, sizeof v); }

/* The optional size argument: argv[1] if given, else the default. */
static inline long size_arg(int argc, char **argv, long dflt) {
    if (argc < 2) return dflt;
    char *end;
    long v = strtol(argv[1], &end, 10);
    if (*end != 0 || v <= 0) {
        fprintf(stderr, "usage: %s [size > 0]\n", argv[0]);
        exit(2);
    }
    return v;
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Text of n bytes: words of a Zipf-like vocabulary, punctuation and line breaks. */
static inline void gen_text(char *out, size_t n, uint64_t seed) {
    enum { VOCAB = 4096 };
    static char words[VOCAB][12];
    static int lens[VOCAB];
    rng_seed(seed);
    for (int i = 0; i < VOCAB; i++) {
        int len = 2 + (int)rng_below(9);
        for (int k = 0; k < len; k++) words[i][k] = "etaoinshrdlucmfwypvbgkjqxz"[rng_below(rng_below(26) + 1)];
        lens[i] = len;
    }
    size_t pos = 0;
    int on_line = 0;
    while (pos < n) {
        /* Skewed choice: small indices are far more frequent. */
        uint64_t a = rng_below(VOCAB), b = rng_below(VOCAB);
        int w = (int)(a * b / VOCAB);
        for (int k = 0; k < lens[w] && pos < n; k++) {
            char c = words[w][k];
            if (on_line == 0 && k == 0 && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
            out[pos++] = c;
        }
        if (pos >= n) break;
        uint64_t r = rng_below(100);
        on_line++;
        if (r < 6) out[pos++] = ',';
        else if (r < 9) {
            out[pos++] = '.';
            on_line = 0;
        }
        if (pos < n) out[pos++] = (on_line > 0 && on_line % 12 == 0) ? '\n' : ' ';
    }
}

#endif
