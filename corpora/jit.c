/* JIT / self-modifying code: different machine code (lengths, memory refs) repeatedly written and run at one reused address. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef long (*fn2)(long, long);

/* Each variant is a complete function taking (rdi, rsi) and returning rax. */
static const unsigned char v_const[] = { 0xB8, 0x2A, 0x00, 0x00, 0x00, 0xC3 };        /* mov eax,42; ret */
static const unsigned char v_add[]   = { 0x8D, 0x04, 0x37, 0xC3 };                    /* lea eax,[rdi+rsi]; ret */
static const unsigned char v_tri[]   = { 0x31, 0xC0,                                   /* xor eax,eax */
                                         0x85, 0xFF,                                   /* test edi,edi */
                                         0x7E, 0x06,                                   /* jle done */
                                         0x01, 0xF8,                                   /* loop: add eax,edi */
                                         0xFF, 0xCF,                                   /* dec edi */
                                         0x75, 0xFA,                                   /* jnz loop */
                                         0xC3 };                                       /* done: ret */
static const unsigned char v_mul[]   = { 0x89, 0xF8, 0x0F, 0xAF, 0xC6, 0xFF, 0xC0, 0xC3 }; /* mov eax,edi; imul eax,esi; inc eax; ret */
static const unsigned char v_sum[]   = { 0x31, 0xC0,                                   /* xor eax,eax */
                                         0x48, 0x85, 0xF6,                             /* test rsi,rsi */
                                         0x7E, 0x0C,                                   /* jle done */
                                         0x48, 0x03, 0x07,                             /* loop: add rax,[rdi] */
                                         0x48, 0x83, 0xC7, 0x08,                       /* add rdi,8 */
                                         0x48, 0xFF, 0xCE,                             /* dec rsi */
                                         0x75, 0xF4,                                   /* jnz loop */
                                         0xC3 };                                       /* done: ret */

struct variant { const char *name; const unsigned char *code; size_t len; };

int main(void)
{
    static const struct variant vs[] = {
        { "const", v_const, sizeof v_const }, { "add", v_add, sizeof v_add },
        { "tri", v_tri, sizeof v_tri },       { "mul", v_mul, sizeof v_mul },
        { "sum", v_sum, sizeof v_sum },
    };
    long arr[100];
    for (int i = 0; i < 100; i++) arr[i] = i * 3;

    long pg = sysconf(_SC_PAGESIZE);

    /* Part 1: W^X -- write while RW, mprotect to RX, call; same address every round. */
    unsigned char *page = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 1;
    fn2 f = (fn2)(void *)page;
    long total = 0;
    for (int round = 0; round < 15; round++) {
        const struct variant *v = &vs[round % 5];
        if (mprotect(page, pg, PROT_READ | PROT_WRITE) != 0) return 1;
        memset(page, 0xCC, 64); /* int3 filler so stale longer code can't silently survive */
        memcpy(page, v->code, v->len);
        __builtin___clear_cache((char *)page, (char *)page + v->len);
        if (mprotect(page, pg, PROT_READ | PROT_EXEC) != 0) return 1;
        long a = (v->code == v_sum) ? (long)arr : round + 5, b = (v->code == v_sum) ? 100 - round : round + 2;
        long r = f(a, b);
        if (round < 5) printf("jit: wx %-5s -> %ld\n", v->name, r);
        total += r;
    }
    printf("jit: wx total=%ld\n", total);
    munmap(page, pg);

    /* Part 2: RWX page -- patch code in place (no permission change), including same-length imm32 patches. */
    unsigned char *rwx = mmap(NULL, pg, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (rwx == MAP_FAILED) return 1;
    f = (fn2)(void *)rwx;
    total = 0;
    memcpy(rwx, v_const, sizeof v_const);
    for (int i = 0; i < 20; i++) {
        int imm = i * 1000 + 7;
        memcpy(rwx + 1, &imm, 4);          /* rewrite only the immediate of mov eax,imm32 */
        total += f(0, 0);
        if (i % 5 == 4) {                  /* occasionally swap in a whole different function */
            memcpy(rwx, v_tri, sizeof v_tri);
            total += f(i, 0);
            memcpy(rwx, v_const, sizeof v_const);
        }
    }
    printf("jit: rwx total=%ld\n", total);

    /* Part 3: code on the page writes new code into another function on the same page. */
    static const unsigned char writer[] = { 0x89, 0x3D, 0x00, 0x00, 0x00, 0x00, 0xC3 }; /* mov [rip+disp32],edi; ret */
    unsigned char *target = rwx + 256;
    memcpy(rwx + 128, writer, sizeof writer);
    int disp = (int)((target + 1) - (rwx + 128 + 6)); /* address of target's imm32 relative to next insn */
    memcpy(rwx + 128 + 2, &disp, 4);
    memcpy(target, v_const, sizeof v_const);
    fn2 w = (fn2)(void *)(rwx + 128), t = (fn2)(void *)target;
    total = 0;
    for (int i = 0; i < 10; i++) {
        w(i * i + 1, 0);                   /* JIT code patches target's immediate */
        total += t(0, 0);
    }
    printf("jit: self-write total=%ld\n", total);
    munmap(rwx, pg);
    return 0;
}
