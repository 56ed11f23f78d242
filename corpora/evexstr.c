/* evexstr: AVX-512 registers the program writes survive dep's client. glibc's EVEX string
 * functions keep state in ymm16-31, which DynamoRIO did not save across its own code until
 * it saw a zmm or opmask write; the client's code ran in between and overwrote them
 * (strrchr ran past its string). Checks libc's string functions against naive loops at
 * every alignment, the short program name glibc derives with strrchr, and, where the CPU
 * has AVX-512VL, that ymm16 holds across 64 blocks DynamoRIO builds one after another.
 * Prints what it checked; exits 1 on a wrong result. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *naive_strrchr(const char *s, int c)
{
    const char *last = NULL;
    for (;; s++) {
        if (*s == (char)c) last = s;
        if (!*s) return last;
    }
}

static size_t naive_strlen(const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512vl"))) static int ymm16_kept(void)
{
    unsigned long long in[4] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL, 0x1111222233334444ULL,
                                0x5555666677778888ULL};
    unsigned long long out[4] = {0, 0, 0, 0};
    __asm__ volatile("vmovdqu64 (%0), %%ymm16\n\t"
                     ".rept 64\n\t"
                     "jmp 1f\n"
                     "1:\n\t"
                     ".endr\n\t"
                     "vmovdqu64 %%ymm16, (%1)\n\t"
                     :
                     : "r"(in), "r"(out)
                     : "xmm16", "memory");
    return memcmp(in, out, sizeof in) == 0;
}
#endif

int main(int argc, char **argv)
{
    (void)argc;
    int bad = 0;
    const char *want = naive_strrchr(argv[0], '/');
    want = want ? want + 1 : argv[0];
    if (strcmp(program_invocation_short_name, want) != 0) {
        printf("evexstr: short name %.40s, want %s\n", program_invocation_short_name, want);
        bad = 1;
    }
    static char buf[512];
    int wrong = 0;
    for (int align = 0; align < 64; align++) {
        for (int len = 0; len < 200; len += 7) {
            char *s = buf + align;
            memset(buf, 'x', sizeof buf);
            for (int i = 0; i < len; i++) s[i] = (char)('a' + (i * 7 + align) % 26);
            if (len > 3) s[len / 3] = '/';
            s[len] = 0;
            s[len + 1] = '/'; /* past the end: must not be found */
            wrong += strrchr(s, '/') != naive_strrchr(s, '/');
            wrong += strlen(s) != naive_strlen(s);
            wrong += memchr(s, 0, len + 1) != s + len;
        }
    }
    printf("evexstr: %d wrong string results\n", wrong);
    bad |= wrong != 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vl")) {
        int kept = ymm16_kept();
        printf("evexstr: ymm16 %s across 64 new blocks\n", kept ? "kept" : "LOST");
        bad |= !kept;
    } else {
        printf("evexstr: lacks AVX-512VL: ymm16 not checked\n");
    }
#endif
    return bad;
}
