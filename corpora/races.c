/* Data races, and the same programs correctly synchronised, for `dep races`.
 *
 * Usage: races MODE [THREADS]
 *   counter          two threads increment a shared counter without a lock    (race)
 *   counter_mutex    the same under a mutex                                   (no race)
 *   counter_atomic   the same with an atomic add                              (no race)
 *   counter_relaxed  the same with relaxed atomic loads and stores (plain moves
 *                    in the code; the declaration says _Atomic)                (no race)
 *   counter_serial   the first thread ends before the second starts, neither
 *                    joined: still no synchronisation between them            (race)
 *   counter_beside   each update follows a critical section of another lock,
 *                    which may order them in a run, not in every run   (potential race)
 *   overflow         a strcpy overflows a name into the lock-protected balance
 *                    next to it, without taking the lock (the paper's example) (race)
 *   overflow_ok      the name fits                                            (no race)
 *   trylock          a thread whose trylock failed updates the data anyway     (race)
 *   trylock_ok       a failed trylock falls back to waiting for the lock       (no race)
 *   flag             data handed over behind a plain flag, no barrier          (race)
 *   flag_atomic      the flag is a sequentially consistent atomic              (no race)
 *   flag_condvar     handed over with a mutex and a condition variable         (no race)
 *   join             written by a thread, read by main after pthread_join      (no race)
 *   rwlock           readers and a writer under a rwlock                       (no race)
 *   spin             a counter under a spinlock                                (no race)
 *   many [N]         N threads (default 64) update a mutex-protected total and
 *                    an unprotected hit count                                  (race)
 *
 * Each racing access carries a `race:NAME` comment on its line: the tests find the lines
 * expected in the report there, not from dep. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 20000

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

/* ---------------------------------------------------------------- counter */

static volatile long counter;
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;

static void *count_plain(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        counter++; /* race:counter */
    return NULL;
}

static void *count_locked(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&counter_lock);
        counter++;
        pthread_mutex_unlock(&counter_lock);
    }
    return NULL;
}

static long other;
static _Atomic long relaxed_counter;

static void *count_relaxed(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        long v = atomic_load_explicit(&relaxed_counter, memory_order_relaxed);
        atomic_store_explicit(&relaxed_counter, v + 1, memory_order_relaxed);
    }
    return NULL;
}

static void *count_beside(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&counter_lock);
        other++;
        pthread_mutex_unlock(&counter_lock);
        counter++; /* race:counter-beside */
    }
    return NULL;
}

static void *count_atomic(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        __atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static int run_serial(void) {
    pthread_t a = spawn(count_plain, NULL);
    pause_ms(50);
    pthread_t b = spawn(count_plain, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("counter %ld\n", counter);
    return 0;
}

static int run_counter(void *(*fn)(void *)) {
    pthread_t a = spawn(fn, NULL), b = spawn(fn, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("counter %ld\n", counter);
    return 0;
}

/* ---------------------------------------------------------------- overflow */

struct account {
    char name[16];
    long balance; /* guarded by lock */
    pthread_mutex_t lock;
};

static struct account account = {"", 0, PTHREAD_MUTEX_INITIALIZER};
static char new_name[64];

static void *deposit(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&account.lock);
        account.balance += 1; /* race:overflow */
        pthread_mutex_unlock(&account.lock);
    }
    return NULL;
}

static void *rename_account(void *arg) {
    (void)arg;
    for (int i = 0; i < 50; i++) {
        strcpy(account.name, new_name); /* race:overflow-copy */
        pause_ms(1);
    }
    return NULL;
}

static int run_overflow(int overflow) {
    /* Built at run time, so the copy is a call to the C library's strcpy. */
    size_t n = overflow ? 20 : 10;
    memset(new_name, 'x', n);
    new_name[n] = 0;
    pthread_t a = spawn(deposit, NULL), b = spawn(rename_account, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("balance %ld\n", account.balance);
    return 0;
}

/* ---------------------------------------------------------------- trylock */

static pthread_mutex_t try_lock = PTHREAD_MUTEX_INITIALIZER;
static long guarded;
static sem_t holding, tried;

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&try_lock);
    sem_post(&holding);
    guarded += 1; /* race:trylock-holder */
    sem_wait(&tried);
    pthread_mutex_unlock(&try_lock);
    return NULL;
}

static void *trier(void *fallback) {
    sem_wait(&holding);
    if (pthread_mutex_trylock(&try_lock) == 0) {
        guarded += 2;
        pthread_mutex_unlock(&try_lock);
        sem_post(&tried);
    } else if (fallback) {
        sem_post(&tried);
        pthread_mutex_lock(&try_lock);
        guarded += 2;
        pthread_mutex_unlock(&try_lock);
    } else {
        guarded += 2; /* race:trylock */
        sem_post(&tried);
    }
    return NULL;
}

static int run_trylock(int fallback) {
    sem_init(&holding, 0, 0);
    sem_init(&tried, 0, 0);
    pthread_t a = spawn(holder, NULL), b = spawn(trier, fallback ? &fallback : NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("guarded %ld\n", guarded);
    return 0;
}

/* ---------------------------------------------------------------- flag */

static long payload;
static volatile int flag;
static int sc_flag;
static int ready;
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;

static void *give_plain(void *arg) {
    (void)arg;
    pause_ms(20);
    payload = 42; /* race:flag-data */
    flag = 1;     /* race:flag */
    return NULL;
}

static long taken;

static void *take_plain(void *arg) {
    (void)arg;
    while (!flag) /* race:flag-wait */
        ;
    taken = payload; /* race:flag-read */
    return NULL;
}

static void *give_atomic(void *arg) {
    (void)arg;
    pause_ms(20);
    payload = 42;
    __atomic_store_n(&sc_flag, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *take_atomic(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&sc_flag, __ATOMIC_ACQUIRE))
        ;
    return (void *)payload;
}

static void *give_condvar(void *arg) {
    (void)arg;
    pause_ms(20);
    pthread_mutex_lock(&ready_lock);
    payload = 42;
    ready = 1;
    pthread_cond_signal(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
    return NULL;
}

static void *take_condvar(void *arg) {
    (void)arg;
    pthread_mutex_lock(&ready_lock);
    while (!ready)
        pthread_cond_wait(&ready_cond, &ready_lock);
    pthread_mutex_unlock(&ready_lock);
    return (void *)payload;
}

static int run_flag(void *(*give)(void *), void *(*take)(void *)) {
    pthread_t b = spawn(take, NULL), a = spawn(give, NULL);
    void *got;
    pthread_join(a, NULL);
    pthread_join(b, &got);
    printf("payload %ld\n", got ? (long)got : taken);
    return 0;
}

/* ---------------------------------------------------------------- join */

struct result {
    long sum;
    long items[32];
};

static void *fill(void *arg) {
    struct result *r = arg;
    for (int i = 0; i < 32; i++) {
        r->items[i] = i * i;
        r->sum += r->items[i];
    }
    return NULL;
}

static int run_join(void) {
    struct result on_stack = {0, {0}};
    struct result *on_heap = calloc(1, sizeof *on_heap);
    pthread_t a = spawn(fill, &on_stack), b = spawn(fill, on_heap);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("sums %ld %ld\n", on_stack.sum, on_heap->sum);
    free(on_heap);
    /* Threads that start after others ended reuse their stacks. */
    for (int round = 0; round < 3; round++) {
        struct result r = {0, {0}};
        pthread_t c = spawn(fill, &r);
        pthread_join(c, NULL);
    }
    return 0;
}

/* ---------------------------------------------------------------- rwlock, spin */

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static long table[8];
static pthread_spinlock_t spin;

static void *rw_reader(void *arg) {
    long s = 0;
    (void)arg;
    for (int i = 0; i < ROUNDS / 10; i++) {
        pthread_rwlock_rdlock(&table_lock);
        s += table[i % 8];
        pthread_rwlock_unlock(&table_lock);
    }
    return (void *)s;
}

static void *rw_writer(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS / 10; i++) {
        pthread_rwlock_wrlock(&table_lock);
        table[i % 8] += i;
        pthread_rwlock_unlock(&table_lock);
    }
    return NULL;
}

static int run_rwlock(void) {
    pthread_t a = spawn(rw_reader, NULL), b = spawn(rw_writer, NULL), c = spawn(rw_reader, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    printf("table %ld\n", table[0]);
    return 0;
}

static void *count_spin(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_spin_lock(&spin);
        counter++;
        pthread_spin_unlock(&spin);
    }
    return NULL;
}

/* ---------------------------------------------------------------- many */

static long total;
static volatile long hits;
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static void *many_worker(void *arg) {
    long *mine = arg;
    for (int i = 0; i < 2000; i++) {
        *mine += i;
        pthread_mutex_lock(&total_lock);
        total += i;
        pthread_mutex_unlock(&total_lock);
    }
    /* After the thread's last unlock nothing orders these with other threads' updates. */
    for (int i = 0; i < 100; i++)
        hits++; /* race:many */
    return NULL;
}

static int run_many(int n) {
    pthread_t *t = calloc(n, sizeof *t);
    long *slots = calloc(n, sizeof *slots);
    for (int i = 0; i < n; i++)
        t[i] = spawn(many_worker, &slots[i]);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("total %ld hits %ld\n", total, hits);
    free(t);
    free(slots);
    return 0;
}

int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "counter")) return run_counter(count_plain);
    if (!strcmp(m, "counter_mutex")) return run_counter(count_locked);
    if (!strcmp(m, "counter_atomic")) return run_counter(count_atomic);
    if (!strcmp(m, "counter_serial")) return run_serial();
    if (!strcmp(m, "counter_relaxed")) return run_counter(count_relaxed);
    if (!strcmp(m, "counter_beside")) return run_counter(count_beside);
    if (!strcmp(m, "overflow")) return run_overflow(1);
    if (!strcmp(m, "overflow_ok")) return run_overflow(0);
    if (!strcmp(m, "trylock")) return run_trylock(0);
    if (!strcmp(m, "trylock_ok")) return run_trylock(1);
    if (!strcmp(m, "flag")) return run_flag(give_plain, take_plain);
    if (!strcmp(m, "flag_atomic")) return run_flag(give_atomic, take_atomic);
    if (!strcmp(m, "flag_condvar")) return run_flag(give_condvar, take_condvar);
    if (!strcmp(m, "join")) return run_join();
    if (!strcmp(m, "rwlock")) return run_rwlock();
    if (!strcmp(m, "spin")) {
        pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE);
        return run_counter(count_spin);
    }
    if (!strcmp(m, "many")) return run_many(argc > 2 ? atoi(argv[2]) : 64);
    fprintf(stderr, "usage: races MODE [THREADS] (see races.c)\n");
    return 2;
}
