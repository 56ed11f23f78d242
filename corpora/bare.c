/* Static and libc-free, so Valgrind and DynamoRIO run exactly the same instructions on the
 * same addresses: _start moves to a stack in .bss, every datum is static, output is a raw
 * write. Used by the lackey oracle (tests/lackey.rs). Covers rep strings forward and
 * backward (movs, stos, cmps, scas, lods), push/pop/call/ret, xlat, lock cmpxchg, xchg with
 * memory, SSE and AVX loads and stores, and a signal handler entered and left through the
 * kernel (rt_sigaction with our own restorer), and (not under Valgrind) xlat, rep lodsb and
 * the XSAVE family. Build: -O1 -static -nostdlib -fno-pie
 * -no-pie -fno-builtin -mavx. Prints one checksum line. */
typedef unsigned long u64;
typedef unsigned char u8;

u8 bare_stack[1 << 16] __attribute__((aligned(64)));
static u8 src[4096] __attribute__((aligned(64)));
static u8 dst[4096] __attribute__((aligned(64)));
static u64 words[512] __attribute__((aligned(64)));
static u8 table[256];
static volatile u64 lockword, xword;
volatile u64 signals;
static u64 sum;

static long sys(long n, long a, long b, long c, long d)
{
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return r;
}

__attribute__((noinline)) static u64 mix(u64 h, u64 v) { return (h ^ v) * 1099511628211UL; }

/* Recursion: calls, returns and stack frames. */
__attribute__((noinline)) static u64 depth(u64 n) { return n == 0 ? 1 : mix(depth(n - 1), n); }

static void rep_strings(void)
{
    for (int i = 0; i < 4096; i++) src[i] = (u8)(i * 7 + 3);
    u8 *s = src, *d = dst;
    u64 n = 1000;
    __asm__ volatile("rep movsb" : "+S"(s), "+D"(d), "+c"(n) : : "memory");
    s = src + 8; d = dst + 1024; n = 100;
    __asm__ volatile("rep movsq" : "+S"(s), "+D"(d), "+c"(n) : : "memory");
    /* backward, overlapping */
    s = dst + 1999; d = dst + 2047; n = 700;
    __asm__ volatile("std; rep movsb; cld" : "+S"(s), "+D"(d), "+c"(n) : : "memory");
    d = dst + 3000; n = 333;
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(0x5a) : "memory");
    d = (u8 *)words; n = 64;
    __asm__ volatile("rep stosq" : "+D"(d), "+c"(n) : "a"(0x1122334455667788UL) : "memory");
    /* compare until the first difference */
    src[600] ^= 1;
    s = src; d = dst; n = 1000;
    __asm__ volatile("repe cmpsb" : "+S"(s), "+D"(d), "+c"(n) : : "memory", "cc");
    sum = mix(sum, n);
    /* scan for a byte, as strlen does */
    dst[1500] = 0;
    d = dst + 1024; n = 4096;
    __asm__ volatile("repne scasb" : "+D"(d), "+c"(n) : "a"(0) : "memory", "cc");
    sum = mix(sum, n);
#ifndef LACKEY /* Valgrind 3.19 runs rep lodsb as one lodsb: its result differs from the CPU's */
    s = src; n = 16;
    u64 last;
    __asm__ volatile("rep lodsb" : "+S"(s), "+c"(n), "=a"(last) : : "memory");
    sum = mix(sum, last & 0xff);
#endif
}

static void stack_and_atomics(void)
{
    u64 v = 0, w = 0;
    __asm__ volatile("push %2; push %3; pop %0; pop %1" : "=&r"(v), "=&r"(w) : "r"(0x42UL), "r"(0x43UL) : "memory");
    sum = mix(mix(sum, v), w);
    for (int i = 0; i < 256; i++) table[i] = (u8)(255 - i);
#ifndef LACKEY /* Valgrind 3.19's lackey aborts on xlat (addEvent_Ir's size assertion) */
    u64 x = 17;
    __asm__ volatile("xlat" : "+a"(x) : "b"(table) : "memory");
    sum = mix(sum, x);
#endif
    u64 expect = 0, got;
    __asm__ volatile("lock cmpxchg %2, %1" : "=a"(got), "+m"(lockword) : "r"(5UL), "0"(expect) : "memory", "cc");
    __asm__ volatile("lock cmpxchg %2, %1" : "=a"(got), "+m"(lockword) : "r"(6UL), "0"(expect) : "memory", "cc");
    u64 y = 9;
    __asm__ volatile("xchg %0, %1" : "+r"(y), "+m"(xword) : : "memory");
    sum = mix(mix(sum, got), y);
    sum = mix(sum, depth(20));
}

#ifndef LACKEY
static u8 xarea[8192] __attribute__((aligned(64)));

/* XSAVE reads only XSTATE_BV (offset 512) of the area it writes; XSAVEC writes it all;
 * XRSTOR reads it (profile/FORMAT.md). Every state component the OS enabled (XCR0).
 * XSAVEC leaves a component's region alone while the CPU tracks it as in its initial
 * state (XINUSE), which DynamoRIO's own use of x87 changes: fld1/fstp put x87 in use
 * first, so that the FCW byte mixed in below is written in every run. */
static void xstate(void)
{
    __asm__ volatile("fld1\n\tfstp %%st(0)" ::: "st");
    __asm__ volatile("xsave (%0)\n\t"
                     "xsaveopt (%0)\n\t"
                     "xrstor (%0)\n\t"
                     "xsavec 4096(%0)"
                     :
                     : "r"(xarea), "a"(-1), "d"(-1)
                     : "memory");
    sum = mix(sum, xarea[0] + xarea[4096]);
}
#endif

static void vectors(void)
{
    for (int i = 0; i < 64; i++) {
        __asm__ volatile("movdqu (%0), %%xmm0\n\t"
                         "paddb %%xmm0, %%xmm0\n\t"
                         "movdqa %%xmm0, (%1)\n\t"
                         "vmovdqu 16(%0), %%ymm1\n\t"
                         "vmovdqu %%ymm1, 32(%1)\n\t"
                         "vzeroupper"
                         :
                         : "r"(src + 3 + i * 48), "r"(dst + i * 64)
                         : "xmm0", "xmm1", "memory");
    }
    for (int i = 0; i < 4096; i += 512) sum = mix(sum, *(u64 *)(dst + i));
}

/* The handler and restorer, in asm: no compiler frame on the signal stack. */
void handler(int);
void restorer(void);
__asm__(".text\n"
        "handler:\n"
        "  movq signals(%rip), %rax\n"
        "  addq $1, %rax\n"
        "  movq %rax, signals(%rip)\n"
        "  ret\n"
        "restorer:\n"
        "  movl $15, %eax\n"
        "  syscall\n");

struct ksigaction { void (*h)(int); u64 flags; void (*restorer)(void); u64 mask; };

static void signal_round_trip(void)
{
    struct ksigaction sa = { handler, 0x04000000 /* SA_RESTORER */, restorer, 0 };
    sys(13 /* rt_sigaction */, 10 /* SIGUSR1 */, (long)&sa, 0, 8);
    long pid = sys(39 /* getpid */, 0, 0, 0, 0);
    for (int i = 0; i < 3; i++) sys(62 /* kill */, pid, 10, 0, 0);
    sum = mix(sum, signals);
}

static void print_hex(u64 v)
{
    static char line[] = "bare: checksum 0000000000000000\n";
    for (int i = 0; i < 16; i++) line[15 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
    sys(1, 1, (long)line, sizeof line - 1, 0);
}

__attribute__((used, noinline)) void bare_main(void)
{
    sum = 14695981039346656037UL;
    rep_strings();
    stack_and_atomics();
    vectors();
#ifndef LACKEY
    xstate();
#endif
    signal_round_trip();
    print_hex(sum);
    sys(231 /* exit_group */, 0, 0, 0, 0);
}

__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "  leaq bare_stack+65536(%rip), %rsp\n"
        "  call bare_main\n"
        "  hlt\n");
