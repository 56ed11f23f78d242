/* Synchronous faults inside a hot loop of one block. DynamoRIO makes the loop a trace, which
 * dep repeats (four copies of the block, its checks made in the first), so faults land in
 * every copy: a loop reading bytes until it runs into a PROT_NONE page starts 1 to 301 bytes
 * before the page, 600 times, each fault escaped with siglongjmp. The bytes summed before
 * each fault and the faulting addresses are printed as a checksum (the same natively). */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf env;
static volatile unsigned long faults, wrong_addr;
static unsigned char *guard;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    faults++;
    if ((unsigned char *)si->si_addr != guard) wrong_addr++;
    siglongjmp(env, 1);
}

/* Sums bytes from `p` on into `*out`, for ever: only a fault ends it. */
__attribute__((noinline, noreturn)) static void sum_until_fault(const volatile unsigned char *p, volatile unsigned long *out)
{
    unsigned long s = 0;
    for (;;) {
        s += *p++;
        *out = s;
    }
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0) return 1;

    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *mem = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    for (long i = 0; i < pg; i++) mem[i] = (unsigned char)(i * 37 + 11);
    guard = mem + pg;
    if (mprotect(guard, (size_t)pg, PROT_NONE) != 0) return 1;

    volatile unsigned long partial = 0, total = 0;
    for (volatile int round = 0; round < 600; round++) {
        int before = 1 + (round * 7) % 301;
        if (sigsetjmp(env, 1) == 0) {
            partial = 0;
            sum_until_fault(guard - before, &partial);
        }
        total = total * 31 + partial;
    }
    printf("fault_loop: %lu faults, %lu at another address, checksum %016lx\n", faults, wrong_addr, total);
    return faults == 600 && wrong_addr == 0 ? 0 : 1;
}
