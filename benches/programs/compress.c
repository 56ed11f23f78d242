/* compress: an LZ77 compressor with hash chains and lazy matching (gzip-like, without
 * entropy coding) and its decompressor, over generated text; verifies the round trip.
 * Like 164.gzip / 256.bzip2: byte loops, hash tables, match searching.
 *
 * usage: compress [KiB of text]      (default 24576; 1024 runs ~0.1 s)
 * prints: input and compressed sizes, a checksum of the compressed stream.
 */
#include "common.h"
#include <string.h>

#define WINDOW (1 << 16)
#define WMASK (WINDOW - 1)
#define HBITS 16
#define MIN_MATCH 4
#define MAX_MATCH 258
#define MAX_CHAIN 48

static inline uint32_t hash4(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (v * 2654435761u) >> (32 - HBITS);
}

static unsigned char *put_varint(unsigned char *o, uint32_t v) {
    while (v >= 0x80) {
        *o++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *o++ = (unsigned char)v;
    return o;
}

static const unsigned char *get_varint(const unsigned char *p, uint32_t *v) {
    uint32_t r = 0;
    int s = 0;
    while (*p & 0x80) {
        r |= (uint32_t)(*p++ & 0x7f) << s;
        s += 7;
    }
    *v = r | (uint32_t)*p++ << s;
    return p;
}

static int32_t head[1 << HBITS];
static int32_t prev[WINDOW];

/* Longest match for position i among earlier positions with the same hash. */
static int longest(const unsigned char *in, size_t n, size_t i, int *dist) {
    int best = 0;
    int32_t cand = head[hash4(in + i)];
    size_t maxlen = n - i < MAX_MATCH ? n - i : MAX_MATCH;
    for (int chain = 0; cand >= 0 && chain < MAX_CHAIN; chain++) {
        size_t c = (size_t)cand;
        if (i - c > WINDOW - 1) break;
        if (in[c + best] == in[i + best]) {
            size_t l = 0;
            while (l < maxlen && in[c + l] == in[i + l]) l++;
            if ((int)l > best) {
                best = (int)l;
                *dist = (int)(i - c);
                if (l == maxlen) break;
            }
        }
        int32_t nx = prev[c & WMASK];
        if (nx >= cand) break;
        cand = nx;
    }
    return best;
}

static void insert(const unsigned char *in, size_t i) {
    uint32_t h = hash4(in + i);
    prev[i & WMASK] = head[h];
    head[h] = (int32_t)i;
}

/* Records: varint(len << 1) + literals, or varint((len - MIN_MATCH) << 1 | 1) + varint(dist). */
static size_t compress(const unsigned char *in, size_t n, unsigned char *out) {
    memset(head, 0xff, sizeof head);
    unsigned char *o = out;
    size_t lit_start = 0, i = 0;
    while (i < n) {
        int dist = 0, len = 0, inserted = 0;
        if (i + MIN_MATCH <= n) {
            len = longest(in, n, i, &dist);
            /* Lazy matching: prefer a longer match starting one byte later. */
            if (len >= MIN_MATCH && len < 32 && i + 1 + MIN_MATCH <= n) {
                insert(in, i);
                inserted = 1;
                int d2 = 0;
                int l2 = longest(in, n, i + 1, &d2);
                if (l2 > len + 1) {
                    i++; /* in[i] joins the literal run */
                    len = l2;
                    dist = d2;
                    inserted = 0;
                }
            }
        }
        if (len >= MIN_MATCH) {
            if (!inserted) insert(in, i);
            if (i > lit_start) {
                o = put_varint(o, (uint32_t)(i - lit_start) << 1);
                memcpy(o, in + lit_start, i - lit_start);
                o += i - lit_start;
            }
            o = put_varint(o, (uint32_t)(len - MIN_MATCH) << 1 | 1);
            o = put_varint(o, (uint32_t)dist);
            for (size_t k = i + 1; k < i + (size_t)len && k + MIN_MATCH <= n; k++) insert(in, k);
            i += (size_t)len;
            lit_start = i;
        } else {
            if (i + MIN_MATCH <= n) insert(in, i);
            i++;
        }
    }
    if (n > lit_start) {
        o = put_varint(o, (uint32_t)(n - lit_start) << 1);
        memcpy(o, in + lit_start, n - lit_start);
        o += n - lit_start;
    }
    return (size_t)(o - out);
}

static size_t decompress(const unsigned char *in, size_t n, unsigned char *out) {
    const unsigned char *p = in, *end = in + n;
    unsigned char *o = out;
    while (p < end) {
        uint32_t v;
        p = get_varint(p, &v);
        if (v & 1) {
            uint32_t len = (v >> 1) + MIN_MATCH, dist;
            p = get_varint(p, &dist);
            const unsigned char *s = o - dist;
            for (uint32_t k = 0; k < len; k++) o[k] = s[k]; /* overlapping copies allowed */
            o += len;
        } else {
            memcpy(o, p, v >> 1);
            o += v >> 1;
            p += v >> 1;
        }
    }
    return (size_t)(o - out);
}

int main(int argc, char **argv) {
    size_t n = (size_t)size_arg(argc, argv, 24576) * 1024;
    unsigned char *text = xmalloc(n + 8);
    gen_text((char *)text, n, 1);
    unsigned char *comp = xmalloc(n + n / 64 + 64);
    unsigned char *back = xmalloc(n + MAX_MATCH);
    uint64_t h = FNV_INIT;
    size_t total = 0;
    /* Two blocks: the text, then the text with every 64th byte changed (worse matches). */
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            for (size_t i = 0; i < n; i += 64) text[i] = (unsigned char)('a' + (i / 64) % 26);
        size_t c = compress(text, n, comp);
        size_t d = decompress(comp, c, back);
        if (d != n || memcmp(back, text, n) != 0) {
            printf("round %d: round trip FAILED (%zu -> %zu -> %zu)\n", round, n, c, d);
            return 1;
        }
        h = fnv1a(h, comp, c);
        total += c;
        printf("round %d: %zu -> %zu bytes (%.2f%%)\n", round, n, c, 100.0 * (double)c / (double)n);
    }
    printf("compress: %zu bytes in, %zu out, checksum %016llx\n", 2 * n, total, (unsigned long long)h);
    free(text);
    free(comp);
    free(back);
    return 0;
}
