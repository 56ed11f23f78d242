/* Exit-status propagation: computes a small sum, prints it, and exits with status 3. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    unsigned long sum = 0;
    for (unsigned i = 1; i <= 100000; i++) sum += (i * 2654435761u) >> 7;
    printf("exit_code: sum=%lu, exiting with 3\n", sum);
    fflush(stdout);
    exit(sum ? 3 : 1);
}
