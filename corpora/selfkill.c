/* Writes a known array (4096 stores to `marker`), then spends some 0.3 s of CPU in few
   block executions (300,000 of a block of 200 register divisions, about 600 KB of DEP_c,
   no memory reference) and kills itself with SIGKILL: nothing fills a trace buffer after
   the stores, so only a hand-off on a timer brings them to the profile. It prints the
   array's address (for the test to find its stores) and nothing else. An optional argument
   sets the number of block executions (the exporters' round trips run fewer). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned marker[4096];

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300000;
    printf("marker %p %zu\n", (void *)marker, sizeof marker);
    fflush(stdout);
    for (unsigned i = 0; i < 4096; i++) marker[i] = i * 2654435761u;
    unsigned long a = ~0ul, d = 0, div = 3;
    for (int i = 0; i < n; i++)
        __asm__ volatile(".rept 200\n\tdivq %[v]\n\t.endr" : "+a"(a), "+d"(d) : [v] "r"(div));
    raise(SIGKILL);
    return 0;
}
