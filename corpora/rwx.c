/* Code rewritten in place on a read-write-execute page, with memory references through
 * rdi: two functions copied alternately to one address and called, 1,000 times, on the
 * main thread and then on 4 threads at once, each with its own page. Prints only sums.
 * Code that rewrites its own running block is in rwx_selfmod.c (a known failure). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* mov rax,[rdi+8]; add rax,[rdi+16]; ret */
static const unsigned char f1[] = {0x48, 0x8b, 0x47, 0x08, 0x48, 0x03, 0x47, 0x10, 0xc3};
/* mov rax,[rdi]; imul rax,[rdi+24]; mov [rdi],rax; ret */
static const unsigned char f2[] = {0x48, 0x8b, 0x07, 0x48, 0x0f, 0xaf, 0x47, 0x18, 0x48, 0x89, 0x07, 0xc3};
typedef long (*fn1)(long *);

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
