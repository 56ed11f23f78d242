/* Code rewritten in place on read-write-execute pages, with memory references through
 * several registers: (1) two functions copied alternately to one address and called,
 * 1,000 times; (2) a function that rewrites the immediate of an instruction later in its
 * own running block (the new value takes effect at once); (3) one that rewrites an
 * instruction it has already executed (taking effect on the next call); on the main
 * thread, then on 4 threads at once, each with its own page. Every call is checked against
 * the value computed in C; prints sums and the number of wrong calls. */
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

/* Runs the three parts on a page of its own; returns the number of calls whose result
 * differs from the value computed here in C, and the sum of the results in *sum. */
static long work(long seed, long *sum)
{
    unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    long total = 0, wrong = 0;
    long data[4];
    for (int i = 0; i < 1000; i++) {
        data[0] = 3 + seed; data[1] = 40; data[2] = 43 + seed; data[3] = i & 7;
        long want = (i & 1) ? data[0] * data[3] : data[1] + data[2];
        if (i & 1) copy(p, f2, sizeof f2); else copy(p, f1, sizeof f1);
        long r = ((fn1)p)(data);
        wrong += r != want || data[0] != ((i & 1) ? want : 3 + seed);
        total += r + data[0];
    }
    copy(p + 64, g_code, sizeof g_code);
    long a[2], b[16];
    for (int k = 0; k < 16; k++) b[k] = k * k + seed;
    for (int i = 0; i < 500; i++) {
        a[0] = i;
        long k = (i * 7 + seed) & 15;
        long r = ((fn3)(p + 64))(a, b, k);
        wrong += r != i + b[1] + k + b[k] || a[1] != r;
        total += r;
    }
    copy(p + 128, h_code, sizeof h_code);
    long c[3], prev = 0;
    for (int i = 0; i < 500; i++) {
        c[0] = i * 3;
        long k = (i + seed) % 100;
        long r = ((fn2)(p + 128))(c, k);
        wrong += r != prev + i * 3 || c[2] != r;
        prev = k;
        total += r;
    }
    munmap(p, 4096);
    *sum = total;
    return wrong;
}

struct job { long seed, sum, wrong; };

static void *thread_main(void *arg)
{
    struct job *j = arg;
    j->wrong = work(j->seed, &j->sum);
    return 0;
}

int main(void)
{
    long sum, wrong = work(0, &sum);
    printf("rwx: main %ld, %ld wrong\n", sum, wrong);
    pthread_t t[4];
    struct job j[4];
    for (int i = 0; i < 4; i++) {
        j[i].seed = i + 1;
        pthread_create(&t[i], 0, thread_main, &j[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    for (int i = 0; i < 4; i++) printf("rwx: thread %d %ld, %ld wrong\n", i, j[i].sum, j[i].wrong);
    return 0;
}
