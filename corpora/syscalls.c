/* Syscalls and TLS: raw `syscall` instructions (clobber rcx/r11), libc syscall wrappers, and FS-relative __thread data in 2 threads. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static long raw_syscall3(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

static __thread long tls_sum;
static __thread int tls_arr[256];
static __thread int tls_init = 5;   /* initialized TLS (.tdata) */

static void *tls_worker(void *p)
{
    long id = (long)p;
    for (int i = 0; i < 256; i++) tls_arr[i] = (int)(i * (id + 1)) + tls_init;
    for (int rep = 0; rep < 2000; rep++)
        for (int i = 0; i < 256; i += 4) tls_sum += tls_arr[i] ^ rep;
    tls_init += (int)id;
    return (void *)(tls_sum + tls_init);
}

int main(void)
{
    const char m1[] = "syscalls: raw syscall write\n";
    fflush(stdout);
    long n1 = raw_syscall3(SYS_write, 1, (long)m1, sizeof m1 - 1);
    const char m2[] = "syscalls: libc write\n";
    long n2 = write(1, m2, sizeof m2 - 1);
    long n3 = syscall(SYS_write, 1, "syscalls: syscall(SYS_write)\n", 29);

    pid_t p1 = getpid();
    long p2 = raw_syscall3(SYS_getpid, 0, 0, 0);
    long p3 = syscall(SYS_getpid);
    long tid = syscall(SYS_gettid);

    int fds[2];
    char buf[32] = {0};
    if (pipe(fds) != 0) return 1;
    long w = raw_syscall3(SYS_write, fds[1], (long)"pipe-data", 9);
    long r = raw_syscall3(SYS_read, fds[0], (long)buf, sizeof buf);
    close(fds[0]);
    close(fds[1]);

    void *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 1, 65536);
    long mu = raw_syscall3(SYS_munmap, (long)m, 65536, 0);

    printf("syscalls: write lens=%ld,%ld,%ld pid_consistent=%d main_tid_is_pid=%d pipe=%ld/%ld '%s' munmap=%ld\n",
           n1, n2, n3, p1 == p2 && p2 == p3, tid == p1, w, r, buf, mu);

    pthread_t th[2];
    for (long i = 0; i < 2; i++) pthread_create(&th[i], NULL, tls_worker, (void *)(i + 1));
    long res[2];
    for (int i = 0; i < 2; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        res[i] = (long)ret;
    }
    tls_worker((void *)0); /* main thread's own TLS copy */
    printf("syscalls: tls thread1=%ld thread2=%ld main=%ld main_tls_init=%d\n", res[0], res[1], tls_sum, tls_init);
    return 0;
}
