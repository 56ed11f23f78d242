/* String instructions: rep movs/stos (large and zero counts), backwards std;rep movsb, repe cmpsb, repne scasb.
   An optional argument sets the unit of the large counts in KiB (16 to 1024, default 1024:
   moves of megabytes); the exporters' round trips run it smaller, as their traces hold a
   record per iteration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The unit of the large counts: a megabyte unless the argument says otherwise. */
static size_t MB = 1024UL * 1024UL;

static unsigned long hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    unsigned long h = 14695981039346656037UL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211UL;
    return h;
}

static void rep_movsb(void *d, const void *s, size_t n)
{ __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory"); }

static void rep_movsq(void *d, const void *s, size_t nq)
{ __asm__ volatile("rep movsq" : "+D"(d), "+S"(s), "+c"(nq) : : "memory"); }

static void rep_stosb(void *d, unsigned char v, size_t n)
{ __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(v) : "memory"); }

static void rep_stosq(void *d, unsigned long v, size_t nq)
{ __asm__ volatile("rep stosq" : "+D"(d), "+c"(nq) : "a"(v) : "memory"); }

/* Copy n bytes from high to low addresses (DF=1): rdi/rsi start at the last byte. */
static void rep_movsb_backwards(void *d, const void *s, size_t n)
{
    if (n == 0) return;
    char *dl = (char *)d + n - 1;
    const char *sl = (const char *)s + n - 1;
    __asm__ volatile("std\n\trep movsb\n\tcld" : "+D"(dl), "+S"(sl), "+c"(n) : : "memory", "cc");
}

/* Returns index of first differing byte (or n if equal). */
static size_t repe_cmpsb(const void *a, const void *b, size_t n)
{
    size_t left = n;
    if (n == 0) return 0;
    __asm__ volatile("repe cmpsb" : "+D"(b), "+S"(a), "+c"(left) : : "memory", "cc");
    /* rcx counts down once per compared byte, including the mismatching one. */
    const unsigned char *pa = (const unsigned char *)a - 1, *pb = (const unsigned char *)b - 1;
    return *pa == *pb ? n : n - left - 1;
}

/* strlen via repne scasb. */
static size_t repne_scasb_strlen(const char *s)
{
    size_t cnt = (size_t)-1;
    __asm__ volatile("repne scasb" : "+D"(s), "+c"(cnt) : "a"(0) : "memory", "cc");
    return ~cnt - 1;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        MB = strtoul(argv[1], NULL, 10) * 1024UL;
        /* The fixed counts below need 8 units to be at least 128 KiB. */
        if (MB < 16 * 1024UL || MB > 1024UL * 1024UL) return 2;
    }
    size_t big = 8 * MB;
    unsigned char *a = malloc(big), *b = malloc(big);
    if (!a || !b) return 1;
    for (size_t i = 0; i < big; i++) a[i] = (unsigned char)(i * 131 + (i >> 12));

    rep_movsb(b, a, 4 * MB + 3);
    printf("repstring: movsb 4MB+3 hash=%016lx eq=%d\n", hash(b, 4 * MB + 3), memcmp(a, b, 4 * MB + 3) == 0);

    rep_movsq(b, a, big / 8);
    printf("repstring: movsq 8MB hash=%016lx eq=%d\n", hash(b, big), memcmp(a, b, big) == 0);

    rep_stosb(b, 0x5a, 2 * MB + 1);
    rep_stosq(b + 4 * MB, 0x0123456789abcdefUL, MB / 8);
    printf("repstring: stos hash=%016lx\n", hash(b, big));

    unsigned char before = b[0];
    rep_movsb(b, a, 0); /* count 0: no memory touched */
    printf("repstring: movsb count0 unchanged=%d\n", b[0] == before);

    /* Overlapping move to a higher address needs a backwards copy. */
    memcpy(b, a, MB);
    rep_movsb_backwards(b + 100, b, MB);
    printf("repstring: backwards hash=%016lx eq=%d\n", hash(b, MB + 100), memcmp(b + 100, a, MB) == 0);

    memcpy(b, a, 65536);
    b[40000] ^= 0xff;
    printf("repstring: cmpsb first_diff=%zu equal_case=%zu\n",
           repe_cmpsb(a, b, 65536), repe_cmpsb(a, b, 1000));

    char *str = (char *)b;
    memset(str, 'x', 123456);
    str[123456] = '\0';
    printf("repstring: scasb strlen=%zu libc=%zu\n", repne_scasb_strlen(str), strlen(str));

    free(a);
    free(b);
    return 0;
}
