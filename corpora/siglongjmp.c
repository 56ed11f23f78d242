/* Synchronous faults: SIGSEGV on a PROT_NONE page, SIGFPE from integer divide-by-zero and
 * SIGILL from ud2 (which dep's window checks fault on too), each escaped via siglongjmp. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf env;
static volatile sig_atomic_t last_sig;

static void on_fault(int sig)
{
    last_sig = sig;
    siglongjmp(env, sig);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fault;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0 || sigaction(SIGFPE, &sa, NULL) != 0 ||
        sigaction(SIGILL, &sa, NULL) != 0)
        return 1;

    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *mem = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    memset(mem, 7, pg);
    if (mprotect(mem + pg, pg, PROT_NONE) != 0) return 1; /* second page inaccessible */

    volatile unsigned char *vmem = mem;
    /* volatile: these are modified between sigsetjmp and siglongjmp */
    volatile int segv_caught = 0, fpe_caught = 0;
    volatile unsigned long sum = 0;

    for (volatile int i = 0; i < 10; i++) {
        if (sigsetjmp(env, 1) == 0) {
            for (long j = 0; j < pg; j += 64) sum += vmem[j];    /* readable page */
            sum += vmem[pg + i * 128];                          /* faults */
            printf("siglongjmp: ERROR no fault at iteration %d\n", i);
        } else if (last_sig == SIGSEGV) {
            segv_caught++;
        }
    }

    volatile int zero = 0, num = 1000;
    for (volatile int i = 0; i < 3; i++) {
        if (sigsetjmp(env, 1) == 0) {
            sum += num / zero;                                  /* idiv by zero -> SIGFPE */
            printf("siglongjmp: ERROR no SIGFPE at iteration %d\n", i);
        } else if (last_sig == SIGFPE) {
            fpe_caught++;
        }
    }

    volatile int ill_caught = 0;
    for (volatile int i = 0; i < 3; i++) {
        if (sigsetjmp(env, 1) == 0) {
            __asm__ volatile("ud2");                            /* invalid opcode -> SIGILL */
            printf("siglongjmp: ERROR no SIGILL at iteration %d\n", i);
        } else if (last_sig == SIGILL) {
            ill_caught++;
        }
    }

    printf("siglongjmp: segv_caught=%d fpe_caught=%d ill_caught=%d sum=%lu\n", segv_caught,
           fpe_caught, ill_caught, (unsigned long)sum);
    munmap(mem, 2 * pg);
    return (segv_caught == 10 && fpe_caught == 3 && ill_caught == 3) ? 0 : 1;
}
