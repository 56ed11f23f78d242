/* Baseline: printf, malloc/free, qsort, string functions and a struct array -- common libc paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item { char name[16]; int key; double weight; };

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return strcmp(x->name, y->name);
}

static unsigned long fnv(const void *p, size_t n, unsigned long h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211UL;
    return h;
}

int main(void)
{
    enum { N = 64 };
    struct item *items = malloc(N * sizeof *items);
    if (!items) return 1;
    unsigned seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        items[i].key = (int)((seed >> 16) % 100);
        snprintf(items[i].name, sizeof items[i].name, "item%02d", i);
        items[i].weight = items[i].key * 0.5 + i;
    }
    qsort(items, N, sizeof *items, cmp_item);

    unsigned long h = 14695981039346656037UL;
    size_t total_len = 0;
    double wsum = 0;
    for (int i = 0; i < N; i++) {
        total_len += strlen(items[i].name);
        h = fnv(&items[i].key, sizeof items[i].key, h);
        h = fnv(items[i].name, strlen(items[i].name), h);
        wsum += items[i].weight;
    }

    char *buf = malloc(4096);
    const char *msg = "hello, memory trace";
    size_t mlen = strlen(msg);
    for (size_t off = 0; off + mlen < 4096; off += mlen) memcpy(buf + off, msg, mlen);
    int eq = strncmp(buf, msg, mlen) == 0 && strcmp("abc", "abd") < 0;
    h = fnv(buf, 4096 - 4096 % mlen, h);

    printf("hello: first=%s/%d last=%s/%d\n", items[0].name, items[0].key,
           items[N - 1].name, items[N - 1].key);
    printf("hello: total_len=%zu wsum=%.1f eq=%d checksum=%016lx\n", total_len, wsum, eq, h);
    free(buf);
    free(items);
    return 0;
}
