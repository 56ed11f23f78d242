/* Code on a read-write-execute page that rewrites its own running block: g() rewrites
 * the immediate of an instruction two instructions later in its block (the new value takes
 * effect at once), h() rewrites an instruction it has already executed (taking effect on
 * the next call); on the main thread, then on 4 threads with a page each. A known failure
 * under dep record (collector/README.md): each part alone runs correctly, both on one page
 * do not. Not in the test suite until fixed; prints only sums. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* mov rax,[rdi+8]; add rax,[rdi+16]; ret */
static const unsigned char f1[] = {0x48, 0x8b, 0x47, 0x08, 0x48, 0x03, 0x47, 0x10, 0xc3};
/* mov rax,[rdi]; imul rax,[rdi+24]; mov [rdi],rax; ret */
static const unsigned char f2[] = {0x48, 0x8b, 0x07, 0x48, 0x0f, 0xaf, 0x47, 0x18, 0x48, 0x89, 0x07, 0xc3};
/* long g(long *a, long *b, long k):
 *   mov rax,[rdi]; mov rcx,[rsi+8]; mov [rip+6],dl (the imm8 two instructions on);
 *   add rax,rcx; add rax,imm8; add rax,[rsi+rdx*8]; mov [rdi+8],rax; ret
 * = a[0] + b[1] + k + b[k], also stored in a[1] */
static const unsigned char g_code[] = {0x48, 0x8b, 0x07, 0x48, 0x8b, 0x4e, 0x08, 0x88, 0x15, 0x06, 0x00, 0x00, 0x00,
                                       0x48, 0x01, 0xc8, 0x48, 0x83, 0xc0, 0x00, 0x48, 0x03, 0x04, 0xd6, 0x48, 0x89,
                                       0x47, 0x08, 0xc3};
/* long h(long *a, long k):
 *   mov eax,imm32 (the k of the previous call); add rax,[rdi]; mov [rip-13],esi (that imm32);
 *   mov [rdi+16],rax; ret */
static const unsigned char h_code[] = {0xb8, 0x00, 0x00, 0x00, 0x00, 0x48, 0x03, 0x07, 0x89, 0x35,
                                       0xf3, 0xff, 0xff, 0xff, 0x48, 0x89, 0x47, 0x10, 0xc3};

typedef long (*fn1)(long *);
typedef long (*fn3)(long *, long *, long);
typedef long (*fn2)(long *, long);

static void copy(unsigned char *dst, const unsigned char *src, size_t n)
{
    for (size_t k = 0; k < n; k++) ((volatile unsigned char *)dst)[k] = src[k];
}

static long work(long seed)
{
    unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    long total = 0;
    long data[4];
    for (int i = 0; i < 1000; i++) {
        data[0] = 3 + seed; data[1] = 40; data[2] = 43 + seed; data[3] = i & 7;
        if (i & 1) copy(p, f2, sizeof f2); else copy(p, f1, sizeof f1);
        total += ((fn1)p)(data);
        total += data[0];
    }
    copy(p + 64, g_code, sizeof g_code);
    long a[2], b[16];
    for (int k = 0; k < 16; k++) b[k] = k * k + seed;
    for (int i = 0; i < 500; i++) {
        a[0] = i;
        long k = (i * 7 + seed) & 15;
        total += ((fn3)(p + 64))(a, b, k) + a[1];
    }
    copy(p + 128, h_code, sizeof h_code);
    long c[3];
    for (int i = 0; i < 500; i++) {
        c[0] = i * 3;
        total += ((fn2)(p + 128))(c, (i + seed) % 100) + c[2];
    }
    munmap(p, 4096);
    return total;
}

static void *thread_main(void *arg)
{
    long *slot = arg;
    *slot = work(*slot);
    return 0;
}

int main(void)
{
    printf("rwx: main %ld\n", work(0));
    pthread_t t[4];
    long r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = i + 1;
        pthread_create(&t[i], 0, thread_main, &r[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    for (int i = 0; i < 4; i++) printf("rwx: thread %d %ld\n", i, r[i]);
    return 0;
}
