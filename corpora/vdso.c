/* Calls the kernel's vDSO (clock_gettime, gettimeofday and time through the C library),
 * so that profiles hold code of the `[vdso]` module, which has no file: tests/callgrind.rs
 * checks its functions are named as the vDSO's own symbol table names them. */
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

int main(void) {
    struct timespec ts;
    struct timeval tv;
    long odd = 0;
    for (int i = 0; i < 100; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        gettimeofday(&tv, NULL);
        odd += (ts.tv_nsec ^ tv.tv_usec ^ time(NULL)) & 1;
    }
    printf("%d\n", odd <= 100);
    return 0;
}
