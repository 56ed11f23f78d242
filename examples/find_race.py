#!/usr/bin/env python3
"""Candidate data races in a Parquet trace (`dep recover PROFILE --format parquet -o DIR`).

Usage: find_race.py DIR [BINARY]

dep numbers synchronisation points from one process-wide counter: before and after each
atomic instruction and system call, at thread start and end (DIR/syncs). Every reference
carries `order`, its thread's last point before it. The numbers order the points in time, so
a vector clock per thread can follow them in sequence. A thread learns another's clock:
- when it was created by it (DIR/threads);
- through the C library's synchronisation functions, as ThreadSanitizer models them
  (DIR/calls: entries and returns of the functions dep watches): an unlock, a condition
  signal, a semaphore post or a barrier leaves the thread's clock at the object (the first
  argument); a lock, wait or barrier that returned, successfully where it can fail, takes
  what was left there; a condition wait also gives its mutex up at entry and takes it back;
  a pthread_join that returned takes the end clock of the thread whose pthread_t it was
  given (DIR/threads' `tls`); a lock taken, by the points, while another thread held it in
  a way that excludes this one was taken after that holder gave it up (a waiting reader
  polls with plain loads, and a writer's release is a plain store: neither makes a point);
- through atomic instructions on one address outside those functions (each leaves its
  clock there at its point before, and takes what was left there before its point after:
  two atomics whose points interleave count as ordered both ways).
A reference in thread A happens before one in thread B if B's clock there knows a point of A
after the former's order. Two references from different threads to one address, at least
one a write, neither happening before the other, race: those are reported, however this run
happened to interleave them. References inside the watched functions (but for a
pthread_once's initialiser) are the library's own business and are left out, and so is
the synchronisation inside them (the stack cache that pthread_create and thread exit share
would order threads that do not synchronise); so are an atomic's own references (between
its two points): synchronisation, not data. Stacks need no special case: a thread touches
another's stack only after reuse, which a join orders.

Not seen: synchronisation through plain loads and stores (x86 compiles acquire loads,
release stores and relaxed atomics to plain movs, so a spinlock released by a store or a
flag polled with a load shows up as a race), a hand-off through a system call (a pipe, a
futex called directly), joins not made through pthread_join (C11's thrd_join calls glibc's
join internally, unwatched), readers under a reader lock ordered by each other (one clock per
lock), and references that overlap at different addresses (only equal `addr` is compared). A
profile recorded with --no-sync has no points and no calls: every address two threads use,
one writing, is reported.

Prints a header, then one line per address: the symbol covering it (from `nm BINARY`, placed
at the binary's load address from DIR/modules.parquet), the threads, the references involved
(reads and writes) and their pcs with counts.
"""

import bisect
import csv
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

import duckdb


def symbols(binary, modules):
    """(start, end, name) of the binary's data and code symbols, at their run-time addresses."""
    base = 0
    with open(binary, "rb") as f:
        position_independent = f.read(18)[16:18] == b"\x03\x00"  # ELF e_type ET_DYN
    if position_independent:
        name = os.path.basename(os.path.realpath(binary))
        bases = [b for (path, b) in modules if os.path.basename(path) == name]
        if not bases:
            return []
        base = bases[0]
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4:
            start = int(f[0], 16) + base
            syms.append((start, start + max(int(f[1], 16), 1), f[3]))
    return syms


def join(clock, other):
    for t, p in other.items():
        if clock.get(t, -2) < p:
            clock[t] = p


# The watched functions' synchronisation, by the name DIR/calls gives (each function's first
# alias): what their entry releases to, and what their return acquires from (the argument
# numbers of the objects), and whether only a return of 0 acquires.
RELEASE = {
    "pthread_mutex_unlock": (0,),
    "pthread_spin_unlock": (0,),
    "pthread_rwlock_unlock": (0,),
    "pthread_cond_signal": (0,),
    "pthread_cond_broadcast": (0,),
    "sem_post": (0,),
    "pthread_barrier_wait": (0,),
    "pthread_cond_wait": (1,),
    "pthread_cond_timedwait": (1,),
}
ACQUIRE = {
    "pthread_mutex_lock": ((0,), False),
    "pthread_mutex_trylock": ((0,), True),
    "pthread_mutex_timedlock": ((0,), True),
    "pthread_spin_lock": ((0,), False),
    "pthread_spin_trylock": ((0,), True),
    "pthread_rwlock_rdlock": ((0,), False),
    "pthread_rwlock_tryrdlock": ((0,), True),
    "pthread_rwlock_timedrdlock": ((0,), True),
    "pthread_rwlock_wrlock": ((0,), False),
    "pthread_rwlock_trywrlock": ((0,), True),
    "pthread_rwlock_timedwrlock": ((0,), True),
    "pthread_cond_wait": ((0, 1), False),
    "pthread_cond_timedwait": ((0, 1), False),
    "pthread_barrier_wait": ((0,), False),
    "sem_wait": ((0,), True),
    "sem_trywait": ((0,), True),
    "sem_timedwait": ((0,), True),
    "pthread_once": ((0,), False),
    "pthread_join": ((), True),
}


# Locks whose holders exclude each other, by the functions that take them: exclusive
# (mutexes, spinlocks, write locks, a condition wait's mutex at its return) or shared (read
# locks); and the functions that give them up, with the argument naming the lock.
EXCLUSIVE = {"pthread_mutex_lock", "pthread_mutex_trylock", "pthread_mutex_timedlock", "pthread_spin_lock",
             "pthread_spin_trylock", "pthread_rwlock_wrlock", "pthread_rwlock_trywrlock",
             "pthread_rwlock_timedwrlock", "pthread_cond_wait", "pthread_cond_timedwait"}
SHARED = {"pthread_rwlock_rdlock", "pthread_rwlock_tryrdlock", "pthread_rwlock_timedrdlock"}
GIVE_UP = {"pthread_mutex_unlock": 0, "pthread_spin_unlock": 0, "pthread_rwlock_unlock": 0,
           "pthread_cond_wait": 1, "pthread_cond_timedwait": 1}


def calls(db):
    """From DIR/calls: each thread's synchronisation at calls, as (thread, point before it or
    -1, references before it, its number in the span from 1, objects released, objects
    acquired, pthread_t joined or None), in the thread's order; the ranges of references
    inside watched calls, as (thread, first, end); and the sections each thread held a lock
    in, as (lock, exclusive, index of the acquiring sync, index of the releasing sync)."""
    rows = db.execute("""SELECT thread, coalesce("order"::BIGINT, -1), refs, event, func, arg0, arg1, value
                         FROM calls ORDER BY thread, seq""").fetchall()
    syncs, inside, depth, first, before = [], [], defaultdict(int), {}, defaultdict(int)
    held, sections = {}, []  # (thread, lock) -> (exclusive, acquiring sync)

    def sync(t, lo, refs, released, acquired, tls):
        before[(t, lo)] += 1
        syncs.append((t, lo, refs, before[(t, lo)], released, acquired, tls))

    for t, lo, refs, event, func, a0, a1, value in rows:
        args = (a0, a1)
        if event == "call":
            if func in RELEASE:
                sync(t, lo, refs, [args[i] for i in RELEASE[func]], [], None)
            if func in GIVE_UP and (t, args[GIVE_UP[func]]) in held:
                exclusive, start = held.pop((t, args[GIVE_UP[func]]))
                sections.append((args[GIVE_UP[func]], exclusive, start, len(syncs) - 1))
            if func != "pthread_once":
                if depth[t] == 0:
                    first[t] = refs
                depth[t] += 1
            continue
        if func != "pthread_once" and depth[t] > 0:
            depth[t] -= 1
            if depth[t] == 0:
                inside.append((t, first.pop(t), refs))
        objects, may_fail = ACQUIRE.get(func, (None, False))
        # A return without a value left through a tail call: taken to have succeeded. The
        # value is an int: rax's upper half is garbage.
        if objects is None or (may_fail and value is not None and value % 2**32 != 0):
            continue
        acquired = [args[i] for i in objects]
        if func == "pthread_once":  # whoever ran the initialiser released it; all acquire
            sync(t, lo, refs, [], acquired, None)
            sync(t, lo, refs, acquired, [], None)
        else:
            sync(t, lo, refs, [], acquired, a0 if func == "pthread_join" else None)
            if func in EXCLUSIVE or func in SHARED:
                lock = a1 if func in ("pthread_cond_wait", "pthread_cond_timedwait") else a0
                held[(t, lock)] = (func in EXCLUSIVE, len(syncs) - 1)
    # A call that never returned: everything after its entry.
    inside += [(t, f, 2**63) for t, f in first.items()]
    return syncs, inside, sections


def clocks(db, syncs, sections, wanted):
    """Each segment (thread, point, n) of `wanted`, its references after the point and after
    the n first of `syncs` in that span: the thread's vector clock there, {thread: point};
    and where each segment after a call's synchronisation stands among the points, in an
    order in which nothing happens before what came earlier (a segment after none stands at
    its point).

    A call's synchronisation stands at its thread's last point before it, but a lock can be
    taken after points that came later: a reader waiting for a writer polls with plain
    loads (x86's acquire loads) and sees the writer's plain release store, and neither makes
    a point. Holders exclude each other, so a lock taken while another thread's section of
    it that excludes this one is open (by the points) was taken after that section's
    release: it stands just after it."""
    threads = db.execute("SELECT thread, parent, spawn, tls FROM threads ORDER BY thread").fetchall()
    spawned_at = {(p, s): c for c, p, s, _ in threads if p is not None}
    by_tls = defaultdict(list)
    for t, _, _, tls in threads:
        if tls is not None:
            by_tls[tls].append(t)
    releases, acquires = defaultdict(list), defaultdict(list)
    atomics = db.execute("""SELECT DISTINCT r.thread, s.lo, s.hi, r.addr FROM refs r
                            JOIN spans s ON s.thread = r.thread AND s.lo = r."order"
                            ASOF LEFT JOIN inside i ON i.thread = r.thread AND r.seq >= i.lo
                            WHERE s.atomic AND (i.hi IS NULL OR r.seq >= i.hi)""")
    for t, lo, hi, a in atomics.fetchall():
        releases[(t, lo)].append(a)
        acquires[(t, hi)].append(a)
    last = dict(db.execute("SELECT thread, max(lo) FROM spans GROUP BY thread").fetchall())
    # A pthread_t is reused once its thread is joined: a join takes the first not joined
    # yet. The joins in the order of their points.
    joined, taken = {}, set()
    for i, (t, lo, _, _, _, _, tls) in sorted(enumerate(syncs), key=lambda e: e[1][1]):
        if tls is not None:
            j = next((j for j in by_tls.get(tls, []) if j not in taken and j != t), None)
            joined[i] = j
            if j is not None:
                taken.add(j)
    # Points, then each call's synchronisation once its thread's point before it, the
    # joined thread's end and its thread's synchronisation before it have passed (it comes
    # before the thread's next point, which follows all of them).
    events = [(p, 0, t, 0, None) for t, p in db.execute("SELECT thread, lo FROM spans").fetchall()]
    after = {}  # sync -> the least place a lock's exclusion puts it at
    while True:
        at, keys = {}, []
        for i, (t, lo, _, n, _, _, _) in enumerate(syncs):
            key = max(lo, last.get(joined.get(i), -1), at.get((t, lo, n - 1), (lo,))[0], after.get(i, -1))
            at[(t, lo, n)] = (key, 1, t, n)
            keys.append(key)
        # Per lock, its sections by where they start, with the furthest end so far: a lock
        # taken at k looks back only over sections that may still be open at k.
        moved, by_lock = False, defaultdict(list)
        for lock, exclusive, start, end in sections:
            by_lock[lock].append((keys[start], keys[end], exclusive, syncs[start][0]))
        reach = {}
        for lock, secs in by_lock.items():
            secs.sort()
            far, r = -1, []
            for sec in secs:
                far = max(far, sec[1])
                r.append(far)
            reach[lock] = r
        for lock, exclusive, start, _ in sections:
            k, t, secs, r = keys[start], syncs[start][0], by_lock[lock], reach[lock]
            j = bisect.bisect_right(secs, (k, float("inf")))
            while j > 0 and r[j - 1] > k:
                j -= 1
                s, e, other, u = secs[j]
                if u != t and (exclusive or other) and s <= k < e and after.get(start, -1) < e + 0.5:
                    after[start], moved = e + 0.5, True
        if not moved:
            break
    events += [(keys[i], 1, t, n, i) for i, (t, _, _, n, _, _, _) in enumerate(syncs)]
    events.sort(key=lambda e: e[:4])
    at_spawn, end, at_addr, vc, out = {}, {}, {}, {}, {}
    for p, kind, t, n, i in events:
        c = vc.setdefault(t, dict(at_spawn.get(t, {})))
        if kind == 1:
            _, lo, _, _, released, acquired, tls = syncs[i]
            for a in released:
                join(at_addr.setdefault(a, {}), c)
            for a in acquired:
                join(c, at_addr.get(a, {}))
            if tls is not None:
                j = joined.get(i)
                # Not known which thread: every thread ended so far may be it.
                for e in end.values() if j is None else [end[j]] if j in end else []:
                    join(c, e)
            if (t, lo, n) in wanted:
                out[(t, lo, n)] = dict(c)
            continue
        c[t] = p
        for a in acquires.get((t, p), []):
            join(c, at_addr.get(a, {}))
        for a in releases.get((t, p), []):
            join(at_addr.setdefault(a, {}), c)
        if (t, p) in spawned_at:
            at_spawn[spawned_at[(t, p)]] = dict(c)
        if p == last[t]:
            end[t] = dict(c)
        if (t, p, 0) in wanted:
            out[(t, p, 0)] = dict(c)
    return out, at


def table(db, name, columns, rows):
    """A table of `rows` with `columns` ({name: type}), through a CSV file (inserting row by
    row is slow)."""
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
        csv.writer(f).writerows(rows)
        f.flush()
        cols = ", ".join(f"'{c}': '{t}'" for c, t in columns.items())
        db.execute(f"CREATE TABLE {name} AS SELECT * FROM read_csv('{f.name}', header = false, delim = ',', auto_detect = false, columns = {{{cols}}})")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    d = sys.argv[1]
    db = duckdb.connect()
    db.execute("SET enable_progress_bar = false")  # it would draw on stdout
    db.execute(f"CREATE VIEW refs AS SELECT * FROM read_parquet('{d}/references/*.parquet')")
    db.execute(f"CREATE VIEW threads AS SELECT * FROM read_parquet('{d}/threads.parquet')")
    db.execute(f"CREATE VIEW calls AS SELECT * FROM read_parquet('{d}/calls/*.parquet')")
    # Each thread's points; a point before an instruction followed by one after the same
    # instruction brackets an atomic's references.
    db.execute(f"""
        CREATE TABLE spans AS
        SELECT thread, "order" AS lo, lead("order") OVER w AS hi,
               coalesce(NOT after AND lead(after) OVER w AND lead(insn) OVER w = insn
                        AND lead(block) OVER w = block, false) AS atomic
        FROM read_parquet('{d}/syncs/*.parquet')
        WINDOW w AS (PARTITION BY thread ORDER BY "order")""")
    syncs, inside, sections = calls(db)
    table(db, "inside", {"thread": "UINTEGER", "lo": "UBIGINT", "hi": "UBIGINT"}, inside)
    table(db, "at_calls", {"thread": "UINTEGER", "lo": "BIGINT", "refs": "UBIGINT", "n": "BIGINT"}, [s[:4] for s in syncs])
    # The references to addresses two threads use, one writing, but the atomics' and those
    # inside watched calls (the last range starting at or before them ends after them), by
    # segment (the span, -1 before the thread's first point, and the number of the
    # synchronisations at calls before them in the span, their last one's n) and pc.
    acc = db.execute("""
        WITH shared AS (
            SELECT addr FROM refs GROUP BY addr
            HAVING count(DISTINCT thread) > 1 AND bool_or(kind = 'W')),
        r AS (
            SELECT r.addr, coalesce(r."order"::BIGINT, -1) AS lo, r.seq, r.thread, r.pc, r.kind
            FROM refs r JOIN shared USING (addr)
            LEFT JOIN spans s ON s.thread = r.thread AND s.lo = r."order"
            WHERE NOT coalesce(s.atomic, false)),
        outside AS (
            SELECT r.* FROM r ASOF LEFT JOIN inside i ON i.thread = r.thread AND r.seq >= i.lo
            WHERE i.hi IS NULL OR r.seq >= i.hi)
        SELECT r.addr, r.lo, coalesce(c.n, 0) AS n, r.thread, r.pc, r.kind, count(*)
        FROM outside r ASOF LEFT JOIN at_calls c ON c.thread = r.thread AND c.lo = r.lo AND r.seq >= c.refs
        GROUP BY ALL ORDER BY ALL""").fetchall()
    vcs, at = clocks(db, syncs, sections, {(t, lo, n) for (_, lo, n, t, _, _, _) in acc})
    # Per address, in order of the segments' places: each against the last write and each
    # thread's last read.
    spans = defaultdict(lambda: [False, False])  # (addr, thread, lo, n) -> [reads, writes]
    for addr, lo, n, t, _, kind, _ in acc:
        spans[(addr, t, lo, n)][kind == "W"] = True

    def place(s):
        addr, t, lo, n = s[0]
        return (addr, at[(t, lo, n)] if n else (lo, 0, t, 0))

    racing, last_write, last_read = set(), {}, defaultdict(dict)
    for (addr, t, lo, n), (reads, writes) in sorted(spans.items(), key=place):
        vc = vcs.get((t, lo, n), {t: lo})
        earlier = [last_write[addr]] if addr in last_write else []
        if writes:
            earlier += last_read[addr].values()
        for u, ulo, un in earlier:
            if u != t and vc.get(u, -2) <= ulo:
                racing |= {(addr, t, lo, n), (addr, u, ulo, un)}
        if writes:
            last_write[addr] = (t, lo, n)
        if reads:
            last_read[addr][t] = (t, lo, n)
    by_addr = defaultdict(list)
    for addr, lo, n, t, pc, kind, count in acc:
        if (addr, t, lo, n) in racing:
            by_addr[addr].append((t, pc, kind, count))
    syms = []
    if len(sys.argv) == 3:
        modules = db.execute(f"SELECT path, base FROM read_parquet('{d}/modules.parquet') WHERE event = 'load'")
        syms = symbols(sys.argv[2], modules.fetchall())
    print("address symbol threads reads writes pcs")
    for addr in sorted(by_addr):
        acc = by_addr[addr]
        name = next((s for (lo, hi, s) in syms if lo <= addr < hi), "-")
        threads = ",".join(str(t) for t in sorted({a[0] for a in acc}))
        reads = sum(a[3] for a in acc if a[2] == "R")
        writes = sum(a[3] for a in acc if a[2] == "W")
        pcs = defaultdict(int)
        for _, pc, kind, n in acc:
            pcs[(pc, kind)] += n
        pcs = ",".join(f"{pc:#x}:{kind}x{n}" for (pc, kind), n in sorted(pcs.items()))
        print(f"{addr:#x} {name} {threads} {reads} {writes} {pcs}")


if __name__ == "__main__":
    main()
