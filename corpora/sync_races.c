/* Races a detector finds only by modelling synchronisation objects, the kernel, thread-local
 * storage, reader locks, atomics beside plain accesses and stdio locks, each beside a
 * race-free variant (the verdicts ThreadSanitizer gives).
 *
 * Usage: sync_races MODE
 *   destroy          a thread locks a mutex that main destroys without joining it     (race)
 *   destroy_ok       main destroys it after the join                                 (no race)
 *   free_barrier     a thread waits on a heap barrier main frees without joining     (race)
 *   free_barrier_ok  main frees it after the join                                    (no race)
 *   read_buf         read(2) fills a buffer main reads at the same time              (race)
 *   read_buf_ok      main reads it after the join                                    (no race)
 *   pipe             data written after the byte that hands it over through a pipe   (race)
 *   pipe_ok          data written before it                                          (no race)
 *   eventfd_ok       handed over through an eventfd that main waits on with epoll    (no race)
 *   socket_ok        handed over through a socket pair                               (no race)
 *   tls              a thread's __thread variable, written by it and main unordered   (race)
 *   tls_ok           written by it, then read by main after a semaphore              (no race)
 *   rdlock           two threads write under the read side of a rwlock               (race)
 *   rdlock_ok        the writers take the write side                                 (no race)
 *   atomic_plain     a plain store to x beside another thread's atomic add to it     (race)
 *   atomic_ok        both add atomically                                             (no race)
 *   stdio            one thread updates g under flockfile(stdout), one without       (race)
 *   stdio_ok         both under flockfile(stdout)                                    (no race)
 *
 * Each racing access carries a `race:NAME` comment on its line (the line of the call, for a
 * library call): the tests read the expected lines from here, not from dep. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void pause_ms(int ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

static pthread_t spawn(void *(*fn)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0) {
        perror("pthread_create");
        exit(1);
    }
    return t;
}

static void check(int ok, const char *what) {
    if (!ok) {
        perror(what);
        exit(1);
    }
}

/* ------------------------------------------------- synchronisation objects as memory */

static pthread_mutex_t m;
static long guarded;

static void *use_mutex(void *arg) {
    (void)arg;
    /* After main's destroy, as a rule: both uses race with it. (Used first, the unlock's
     * read replaces the lock's in the shadow, so only the unlock would.) */
    pause_ms(20);
    pthread_mutex_lock(&m); /* race:obj-lock */
    guarded++;
    pthread_mutex_unlock(&m); /* race:obj-unlock */
    return NULL;
}

static int run_destroy(int ordered) {
    pthread_mutex_init(&m, NULL);
    pthread_t a = spawn(use_mutex, NULL);
    if (ordered) pthread_join(a, NULL);
    pthread_mutex_destroy(&m); /* race:obj-destroy */
    if (!ordered) pthread_join(a, NULL);
    printf("guarded %ld\n", guarded);
    return 0;
}

static void *wait_barrier(void *arg) {
    pthread_barrier_wait(arg); /* race:barrier-wait */
    return NULL;
}

static int run_free_barrier(int ordered) {
    pthread_barrier_t *b = malloc(sizeof *b);
    pthread_barrier_init(b, NULL, 1);
    pthread_t a = spawn(wait_barrier, b);
    if (ordered) pthread_join(a, NULL);
    else pause_ms(20);
    free(b); /* race:barrier-free */
    if (!ordered) pthread_join(a, NULL);
    return 0;
}

/* ------------------------------------------------------------ the kernel's accesses */

static char buf[64];
static int fds[2];

static void *fill(void *arg) {
    (void)arg;
    check(read(fds[0], buf, sizeof buf) > 0, "read"); /* race:kernel-read */
    return NULL;
}

static int run_read_buf(int ordered) {
    check(pipe(fds) == 0, "pipe");
    check(write(fds[1], "hello, world", 12) == 12, "write");
    pthread_t a = spawn(fill, NULL);
    if (ordered) pthread_join(a, NULL);
    else pause_ms(20);
    int sum = 0;
    for (size_t i = 0; i < sizeof buf; i++) sum += buf[i]; /* race:kernel-use */
    if (!ordered) pthread_join(a, NULL);
    printf("sum %d\n", sum);
    return 0;
}

/* ------------------------------------------------------ hand-over through the kernel */

static long data;

static void *give_pipe(void *arg) {
    int late = *(int *)arg;
    if (!late) data = 42;
    check(write(fds[1], "x", 1) == 1, "write");
    if (late) data = 42; /* race:pipe-give */
    return NULL;
}

static int run_pipe(int late) {
    check(pipe(fds) == 0, "pipe");
    pthread_t a = spawn(give_pipe, &late);
    char c;
    check(read(fds[0], &c, 1) == 1, "read");
    if (late) pause_ms(20);
    printf("data %ld\n", data); /* race:pipe-take */
    pthread_join(a, NULL);
    return 0;
}

static int efd;

static void *give_eventfd(void *arg) {
    (void)arg;
    pause_ms(20);
    data = 7;
    uint64_t one = 1;
    check(write(efd, &one, sizeof one) == sizeof one, "write eventfd");
    return NULL;
}

static int run_eventfd(void) {
    efd = eventfd(0, 0);
    int ep = epoll_create1(0);
    check(efd >= 0 && ep >= 0, "eventfd/epoll");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    check(epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) == 0, "epoll_ctl");
    pthread_t a = spawn(give_eventfd, NULL);
    struct epoll_event got;
    check(epoll_wait(ep, &got, 1, -1) == 1, "epoll_wait");
    printf("data %ld\n", data);
    pthread_join(a, NULL);
    return 0;
}

static void *give_socket(void *arg) {
    (void)arg;
    data = 9;
    check(send(fds[1], "y", 1, 0) == 1, "send");
    return NULL;
}

static int run_socket(void) {
    check(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
    pthread_t a = spawn(give_socket, NULL);
    char c;
    check(recv(fds[0], &c, 1, 0) == 1, "recv");
    printf("data %ld\n", data);
    pthread_join(a, NULL);
    return 0;
}

/* ---------------------------------------------------------- thread-local storage */

static __thread long mine;
static long *handed;
static sem_t handed_over;

static void *own_tls(void *arg) {
    int late = *(int *)arg;
    mine = 1;
    handed = &mine;
    sem_post(&handed_over);
    if (late) mine = 2; /* race:tls-own */
    pause_ms(40);
    return NULL;
}

static int run_tls(int late) {
    sem_init(&handed_over, 0, 0);
    pthread_t a = spawn(own_tls, &late);
    sem_wait(&handed_over);
    if (late) pause_ms(10);
    printf("mine %ld\n", *handed); /* race:tls-other */
    pthread_join(a, NULL);
    return 0;
}

/* --------------------------------------------------------------------- reader locks */

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long table[4];

static void *update_under(void *arg) {
    int shared = *(int *)arg;
    for (int i = 0; i < 1000; i++) {
        if (shared) pthread_rwlock_rdlock(&rw);
        else pthread_rwlock_wrlock(&rw);
        table[i % 4]++; /* race:rdlock */
        pthread_rwlock_unlock(&rw);
    }
    return NULL;
}

static int run_rdlock(int shared) {
    pthread_t a = spawn(update_under, &shared), b = spawn(update_under, &shared);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("table %ld\n", table[0] + table[1] + table[2] + table[3]);
    return 0;
}

/* ------------------------------------------------------------ atomics beside plain */

long x; /* a plain C name the demangler must leave alone */

static void *add_atomically(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST); /* race:atomic-add */
    return NULL;
}

static void *store_plainly(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) *(volatile long *)&x = i; /* race:plain-store */
    return NULL;
}

static int run_atomic(int plain) {
    pthread_t a = spawn(add_atomically, NULL), b = spawn(plain ? store_plainly : add_atomically, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("x %ld\n", x);
    return 0;
}

/* --------------------------------------------------------------------- stdio locks */

long g;

static void *print_locked(void *arg) {
    int locked = *(int *)arg;
    for (int i = 0; i < 200; i++) {
        if (locked) flockfile(stdout);
        g++; /* race:stdio */
        if (locked) funlockfile(stdout);
    }
    return NULL;
}

static int run_stdio(int both) {
    int yes = 1;
    pthread_t a = spawn(print_locked, &yes), b = spawn(print_locked, &both);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("g %ld\n", g);
    return 0;
}

int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "destroy")) return run_destroy(0);
    if (!strcmp(m, "destroy_ok")) return run_destroy(1);
    if (!strcmp(m, "free_barrier")) return run_free_barrier(0);
    if (!strcmp(m, "free_barrier_ok")) return run_free_barrier(1);
    if (!strcmp(m, "read_buf")) return run_read_buf(0);
    if (!strcmp(m, "read_buf_ok")) return run_read_buf(1);
    if (!strcmp(m, "pipe")) return run_pipe(1);
    if (!strcmp(m, "pipe_ok")) return run_pipe(0);
    if (!strcmp(m, "eventfd_ok")) return run_eventfd();
    if (!strcmp(m, "socket_ok")) return run_socket();
    if (!strcmp(m, "tls")) return run_tls(1);
    if (!strcmp(m, "tls_ok")) return run_tls(0);
    if (!strcmp(m, "rdlock")) return run_rdlock(1);
    if (!strcmp(m, "rdlock_ok")) return run_rdlock(0);
    if (!strcmp(m, "atomic_plain")) return run_atomic(1);
    if (!strcmp(m, "atomic_ok")) return run_atomic(0);
    if (!strcmp(m, "stdio")) return run_stdio(0);
    if (!strcmp(m, "stdio_ok")) return run_stdio(1);
    fprintf(stderr, "usage: sync_races MODE (see sync_races.c)\n");
    return 2;
}
