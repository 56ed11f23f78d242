/* Thousands of threads over a run, at most WINDOW alive at once, for the scale tests.
 *
 * Usage: many_threads [TOTAL [WINDOW]]   (defaults 3000 and 64)
 *
 * Main keeps WINDOW threads alive: once the window is full it joins the oldest thread before
 * creating the next, so threads are created and joined all through the run. Each thread
 * fills a private heap buffer and a stack array, folds them into a checksum, adds its share
 * to a mutex-protected total and histogram, and bumps an unprotected hit count: the one
 * deliberate race, marked `race:NAME` on its line (the tests read the marker from here).
 * Main reads each thread's result after joining it (ordered by the join). It prints only
 * values that do not depend on scheduling; the racy count is never printed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WORDS 256
#define LOCKED_ROUNDS 8
#define BUCKETS 16

struct job {
    unsigned id;
    uint64_t result;
};

static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t total;            /* under total_lock */
static uint64_t histogram[BUCKETS]; /* under total_lock */
static volatile unsigned long hits;

static void *work(void *arg) {
    struct job *j = arg;
    uint64_t *heap = malloc(WORDS * sizeof *heap);
    uint64_t stack[WORDS];
    if (!heap) {
        perror("malloc");
        exit(1);
    }
    uint64_t x = j->id * 2654435761u + 1;
    for (int i = 0; i < WORDS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        heap[i] = x;
        stack[WORDS - 1 - i] = x >> 3;
    }
    uint64_t sum = 0;
    for (int i = 0; i < WORDS; i++)
        sum += heap[i] ^ stack[i];
    free(heap);
    for (int r = 0; r < LOCKED_ROUNDS; r++) {
        pthread_mutex_lock(&total_lock);
        total += sum & 0xffff;
        histogram[(sum >> (r * 4)) % BUCKETS]++;
        pthread_mutex_unlock(&total_lock);
    }
    hits++; /* race:hits */
    j->result = sum;
    return NULL;
}

static uint64_t join(pthread_t t, const struct job *j) {
    if (pthread_join(t, NULL) != 0) {
        perror("pthread_join");
        exit(1);
    }
    return j->result;
}

int main(int argc, char **argv) {
    unsigned total_threads = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 3000;
    unsigned window = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 64;
    if (window == 0 || window > 1024) {
        fprintf(stderr, "window must be 1..1024\n");
        return 2;
    }
    pthread_t *t = calloc(window, sizeof *t);
    struct job *jobs = calloc(window, sizeof *jobs);
    if (!t || !jobs) {
        perror("calloc");
        return 1;
    }
    uint64_t check = 0;
    for (unsigned n = 0; n < total_threads; n++) {
        unsigned slot = n % window;
        if (n >= window) /* the oldest thread, created WINDOW threads ago */
            check = check * 31 + join(t[slot], &jobs[slot]);
        jobs[slot].id = n;
        if (pthread_create(&t[slot], NULL, work, &jobs[slot]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    unsigned first = total_threads > window ? total_threads - window : 0;
    for (unsigned n = first; n < total_threads; n++)
        check = check * 31 + join(t[n % window], &jobs[n % window]);
    uint64_t buckets = 0;
    for (int b = 0; b < BUCKETS; b++)
        buckets += histogram[b];
    printf("threads=%u window=%u total=%llu buckets=%llu check=%016llx\n", total_threads, window,
           (unsigned long long)total, (unsigned long long)buckets, (unsigned long long)check);
    return 0;
}
