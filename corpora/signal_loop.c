/* Asynchronous signals: a 1ms SIGALRM itimer (plus explicit raise()) interrupting a hot array loop at arbitrary points.
   An optional argument sets the number of passes (default 3000, about 0.2 s natively). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/time.h>

enum { N = 1 << 16 };

static volatile sig_atomic_t hits;
static unsigned arr[N];

static void on_alarm(int sig)
{
    (void)sig;
    hits++;
}

int main(int argc, char **argv)
{
    int PASSES = argc > 1 ? atoi(argv[1]) : 3000;
    if (PASSES < 2) PASSES = 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGALRM, &sa, NULL) != 0) return 1;

    struct itimerval it = { { 0, 1000 }, { 0, 1000 } };
    if (setitimer(ITIMER_REAL, &it, NULL) != 0) return 1;

    raise(SIGALRM); /* guarantees the handler runs at least once */
    for (unsigned i = 0; i < N; i++) arr[i] = i * 2654435761u;
    unsigned long sum = 0;
    for (int p = 0; p < PASSES; p++) {
        if (p == PASSES / 2) raise(SIGALRM);
        for (unsigned i = 0; i < N; i++) {
            unsigned v = arr[i] ^ (arr[(i * 7 + p) & (N - 1)] >> 3);
            arr[i] = v + p;
            sum += v & 0xff;
        }
    }

    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);

    unsigned long h = 0;
    for (unsigned i = 0; i < N; i++) h = h * 31 + arr[i];
    printf("signal_loop: sum=%lu checksum=%016lx\n", sum, h);
    if (hits > 0) printf("signal_loop: handler ran\n");
    else printf("signal_loop: handler did NOT run\n");
    return 0;
}
