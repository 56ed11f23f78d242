/* strings: text processing over generated text: tokenizing into words, hashing them into
 * an open-addressing hash table of counts, substring search (Horspool and Rabin-Karp,
 * checked against each other) and ranking the most frequent words. Like 197.parser and
 * 255.vortex: byte scanning, hashing, table probes, string compares.
 *
 * usage: strings [KiB of text]       (default 24576; 1024 runs ~0.1 s)
 * prints: word statistics, search counts and checksums.
 */
#include "common.h"
#include <string.h>

struct entry {
    uint64_t hash;
    const char *word; /* points into the text; NULL when the slot is free */
    uint32_t len;
    uint32_t count;
};

struct table {
    struct entry *slots;
    size_t cap, used;
};

static uint64_t hash_word(const char *s, size_t n) {
    uint64_t h = FNV_INIT;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void table_grow(struct table *t);

static void table_add(struct table *t, const char *w, uint32_t len) {
    if (2 * (t->used + 1) > t->cap) table_grow(t);
    uint64_t h = hash_word(w, len);
    size_t i = h & (t->cap - 1);
    for (;;) {
        struct entry *e = &t->slots[i];
        if (!e->word) {
            *e = (struct entry){h, w, len, 1};
            t->used++;
            return;
        }
        if (e->hash == h && e->len == len && memcmp(e->word, w, len) == 0) {
            e->count++;
            return;
        }
        i = (i + 1) & (t->cap - 1);
    }
}

static void table_grow(struct table *t) {
    struct table n = {NULL, t->cap ? t->cap * 2 : 1024, 0};
    n.slots = xmalloc(n.cap * sizeof *n.slots);
    memset(n.slots, 0, n.cap * sizeof *n.slots);
    for (size_t i = 0; i < t->cap; i++) {
        struct entry *e = &t->slots[i];
        if (!e->word) continue;
        size_t j = e->hash & (n.cap - 1);
        while (n.slots[j].word) j = (j + 1) & (n.cap - 1);
        n.slots[j] = *e;
        n.used++;
    }
    free(t->slots);
    *t = n;
}

static int is_word_char(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* Lowercases the text in place and adds every word to the table; returns the word count. */
static size_t tokenize(char *text, size_t n, struct table *t) {
    size_t words = 0, i = 0;
    while (i < n) {
        while (i < n && !is_word_char((unsigned char)text[i])) i++;
        size_t start = i;
        while (i < n && is_word_char((unsigned char)text[i])) {
            if (text[i] >= 'A' && text[i] <= 'Z') text[i] = (char)(text[i] - 'A' + 'a');
            i++;
        }
        if (i > start) {
            table_add(t, text + start, (uint32_t)(i - start));
            words++;
        }
    }
    return words;
}

/* Occurrences of pat in text (overlapping), Boyer-Moore-Horspool. */
static size_t count_horspool(const char *text, size_t n, const char *pat, size_t m) {
    size_t skip[256];
    for (int c = 0; c < 256; c++) skip[c] = m;
    for (size_t k = 0; k + 1 < m; k++) skip[(unsigned char)pat[k]] = m - 1 - k;
    size_t count = 0;
    for (size_t i = 0; i + m <= n;) {
        unsigned char last = (unsigned char)text[i + m - 1];
        if (last == (unsigned char)pat[m - 1] && memcmp(text + i, pat, m - 1) == 0) count++;
        i += skip[last];
    }
    return count;
}

/* The same count by Rabin-Karp rolling hashes. */
static size_t count_rabin_karp(const char *text, size_t n, const char *pat, size_t m) {
    if (m > n) return 0;
    const uint64_t B = 257;
    uint64_t hp = 0, ht = 0, pow = 1;
    for (size_t k = 0; k < m; k++) {
        hp = hp * B + (unsigned char)pat[k];
        ht = ht * B + (unsigned char)text[k];
        if (k) pow *= B;
    }
    size_t count = 0;
    for (size_t i = 0;; i++) {
        if (ht == hp && memcmp(text + i, pat, m) == 0) count++;
        if (i + m >= n) break;
        ht = (ht - (unsigned char)text[i] * pow) * B + (unsigned char)text[i + m];
    }
    return count;
}

static int by_count(const struct entry *a, const struct entry *b) {
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    size_t l = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->word, b->word, l);
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

int main(int argc, char **argv) {
    size_t n = (size_t)size_arg(argc, argv, 24576) * 1024;
    char *text = xmalloc(n + 1);
    gen_text(text, n, 6);
    text[n] = 0;

    /* 1. Search: patterns taken from the text itself and a few that are rare or absent. */
    rng_seed(7);
    uint64_t h = FNV_INIT;
    size_t total_found = 0;
    for (int p = 0; p < 24; p++) {
        char pat[32];
        size_t m;
        if (p < 16) {
            size_t at = (size_t)rng_below(n - 40);
            m = 3 + (size_t)(p % 10);
            memcpy(pat, text + at, m);
        } else {
            m = 5 + (size_t)(p % 7);
            for (size_t k = 0; k < m; k++) pat[k] = "qxzjkv"[rng_below(6)];
        }
        pat[m] = 0;
        size_t a = count_horspool(text, n, pat, m), b = count_rabin_karp(text, n, pat, m);
        if (a != b) {
            printf("search %s: horspool %zu, rabin-karp %zu\n", pat, a, b);
            return 1;
        }
        total_found += a;
        h = mix(h, a);
    }
    printf("search: 24 patterns, %zu occurrences, checksum %016llx\n", total_found, (unsigned long long)h);

    /* 2. Tokenize and count words twice over (the second pass finds every word present). */
    struct table t = {NULL, 0, 0};
    size_t words = tokenize(text, n, &t);
    words += tokenize(text, n, &t);
    /* 3. Rank: the 10 most frequent words, and a checksum over every distinct word. */
    struct entry *all = xmalloc(t.used * sizeof *all);
    size_t k = 0;
    uint64_t wh = 0;
    for (size_t i = 0; i < t.cap; i++)
        if (t.slots[i].word) {
            all[k++] = t.slots[i];
            wh += t.slots[i].hash * t.slots[i].count; /* order-independent */
        }
    struct entry top[10];
    size_t ntop = 0;
    for (size_t i = 0; i < k; i++) {
        /* Insertion into the running top ten. */
        size_t j = ntop < 10 ? ntop++ : 10;
        if (j == 10 && by_count(&all[i], &top[9]) >= 0) continue;
        if (j == 10) j = 9;
        while (j > 0 && by_count(&all[i], &top[j - 1]) < 0) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = all[i];
    }
    printf("words: %zu tokens, %zu distinct, checksum %016llx\n", words, k, (unsigned long long)wh);
    printf("top:");
    for (size_t i = 0; i < ntop; i++) printf(" %.*s:%u", (int)top[i].len, top[i].word, top[i].count);
    printf("\n");
    free(all);
    free(t.slots);
    free(text);
    return 0;
}
