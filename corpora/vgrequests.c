/* Valgrind client requests and pops to stack-relative memory.
 *
 * A client request is the amd64 sequence Valgrind documents in valgrind.h: rax points at
 * six words (the request and five arguments), rdx holds the default answer, then four
 * `rol rdi` that rotate it by 128 bits in all (no change) and `xchg rbx, rbx`. Natively it
 * does nothing and rdx keeps the default; V8 (node), glib and others issue them.
 * DynamoRIO drops the sequence from the block and answers itself (RUNNING_ON_VALGRIND is 1
 * there), so the requests come once after other instructions in a block and once at the
 * start of one (after a conditional branch), and the answers are printed.
 *
 * `pop [rsp+d]` addresses its destination with rsp after the pop's increment (Intel SDM
 * vol. 2B, POP); 64- and 16-bit forms. */
#include <stdio.h>

#define REQ_RUNNING_ON_VALGRIND 0x1001
#define REQ_DISCARD_TRANSLATIONS 0x1002

/* A request after other instructions in its block. */
__attribute__((noinline)) static unsigned long request(unsigned long req, unsigned long a1, unsigned long a2,
                                                       unsigned long dflt)
{
    volatile unsigned long args[6] = {req, a1, a2, 0, 0, 0};
    unsigned long res;
    __asm__ volatile("rolq $3, %%rdi\n\trolq $13, %%rdi\n\trolq $61, %%rdi\n\trolq $51, %%rdi\n\t"
                     "xchgq %%rbx, %%rbx"
                     : "=d"(res)
                     : "a"(&args[0]), "0"(dflt)
                     : "cc", "memory");
    return res;
}

/* A request at the start of a block: a conditional branch ends the block before it. */
__attribute__((noinline)) static unsigned long request_at_block_start(unsigned long req, unsigned long dflt, int flag)
{
    volatile unsigned long args[6] = {req, 0, 0, 0, 0, 0};
    unsigned long res;
    __asm__ volatile("testl %2, %2\n\tjz 1f\n1:\n\t"
                     "rolq $3, %%rdi\n\trolq $13, %%rdi\n\trolq $61, %%rdi\n\trolq $51, %%rdi\n\t"
                     "xchgq %%rbx, %%rbx\n\t"
                     "addq $1, %%rdx"
                     : "=d"(res)
                     : "a"(&args[0]), "r"(flag), "0"(dflt)
                     : "cc", "memory");
    return res;
}

/* Copies a stack word with pushes and pops to stack-relative memory (below the red zone);
 * returns what the copies make of it. */
__attribute__((noinline)) static unsigned long pops(unsigned long v)
{
    unsigned long r;
    __asm__ volatile("subq $192, %%rsp\n\t"
                     "movq %1, 8(%%rsp)\n\t"
                     "movq $0, 32(%%rsp)\n\t"
                     "pushq 8(%%rsp)\n\t"   /* the word, from rsp+8 before the push */
                     "popq 24(%%rsp)\n\t"   /* to rsp+24 after the pop */
                     "pushq 8(%%rsp)\n\t"
                     "popw 32(%%rsp)\n\t"   /* 16 bits, to rsp+32 after a 2-byte increment */
                     "popw 36(%%rsp)\n\t"
                     "addq $4, %%rsp\n\t"
                     "movq 24(%%rsp), %0\n\t"
                     "addq 32(%%rsp), %0\n\t"
                     "addq $192, %%rsp"
                     : "=&r"(r)
                     : "r"(v)
                     : "memory");
    return r;
}

int main(void)
{
    unsigned long sum = 0, on = 0;
    for (int i = 0; i < 1000; i++) {
        on += request(REQ_RUNNING_ON_VALGRIND, 0, 0, 0);
        sum += request(REQ_DISCARD_TRANSLATIONS, (unsigned long)&main, 64, 7);
        sum += request_at_block_start(REQ_RUNNING_ON_VALGRIND, (unsigned long)i, i & 1);
        sum += pops((unsigned long)i * 0x9e3779b97f4a7c15ul);
    }
    printf("running on valgrind: %lu of 1000\n", on);
    printf("sum %lu\n", sum);
    return 0;
}
