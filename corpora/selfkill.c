/* Writes a known array (4096 stores to `marker`), then idles for about 0.6 s in short
   sleeps, running only a few blocks, and kills itself with SIGKILL: nothing fills a trace
   buffer after the stores, so only a hand-off on a timer brings them to the profile. It
   prints the array's address (for the test to find its stores) and nothing else. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile unsigned marker[4096];

int main(void)
{
    printf("marker %p %zu\n", (void *)marker, sizeof marker);
    fflush(stdout);
    for (unsigned i = 0; i < 4096; i++) marker[i] = i * 2654435761u;
    for (int i = 0; i < 300; i++) usleep(2000);
    raise(SIGKILL);
    return 0;
}
