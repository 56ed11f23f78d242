/* Threads still computing when the main thread exits: exit_group stops them wherever they
 * are. DynamoRIO suspends each one and asks where it stands before the process ends (and
 * when it synchronises with all threads at other times); the recording must neither mistake
 * that question for an interruption of a thread that runs on, nor lose where a thread
 * stopped. Usage: busy_exit [THREADS [MICROSECONDS]] (defaults 1 and 20000). Prints only
 * "bye": what the threads computed depends on how long they ran. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile long cells[4096];

static void *spin(void *arg) {
    long i = (long)arg, a = 1, b = 2, c = 3;
    for (;;) {
        /* Addresses from values computed in registers, so each block records some. */
        a = a * 6364136223846793005L + b;
        b ^= a >> 7;
        c += b;
        cells[(a >> 20) & 4095] += b;
        cells[(b >> 30) & 4095] ^= c;
        cells[(c >> 11) & 4095] += i;
        i++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    int us = argc > 2 ? atoi(argv[2]) : 20000;
    for (long k = 0; k < n; k++) {
        pthread_t t;
        if (pthread_create(&t, NULL, spin, (void *)k) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    usleep(us);
    printf("bye\n");
    fflush(stdout);
    exit(0);
}
