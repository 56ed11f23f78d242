#!/usr/bin/env python3
"""Candidate data races in a Parquet trace (`dep recover PROFILE --format parquet -o DIR`).

Usage: find_race.py DIR [BINARY]

dep numbers synchronisation points from one process-wide counter: before and after each
atomic instruction and system call, at thread start and end (DIR/syncs). Every reference
carries `order`, its thread's last point before it. The numbers order the points in time, so
a vector clock per thread can follow them in sequence: a thread learns another's clock when
it was created by it (DIR/threads), when it joins it (taken to be the creator, at its first
point after the end of the thread), and through atomic instructions on one address (each
leaves its clock there at its point before, and takes what was left there before its point
after: two atomics whose points interleave count as ordered both ways). A reference with
order a in thread A happens before one in thread B if B's clock at the latter's order knows
a point of A after a. Two references from different threads to one address, at least one a
write, neither happening before the other, race: those are reported, however this run
happened to interleave them. Stacks need no special case: a thread touches another's stack only after reuse,
which a join orders. An atomic's own references (between its two points) are
synchronisation, not data, and are left out.

Not seen: synchronisation through plain loads and stores (x86 compiles acquire loads,
release stores and relaxed atomics to plain movs, so a spinlock released by a store or a
flag polled with a load shows up as a race), a hand-off through a futex system call alone
(some of glibc's condition variable and rwlock paths), a join by another thread than the
creator, and references that overlap at different addresses (only equal `addr` is compared).
A profile recorded with --no-sync has no points: every address two threads use, one writing,
is reported.

Prints a header, then one line per address: the symbol covering it (from `nm BINARY`, placed
at the binary's load address from DIR/modules.parquet), the threads, the references involved
(reads and writes) and their pcs with counts.
"""

import os
import subprocess
import sys
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


def clocks(db, wanted):
    """Each (thread, point) of `wanted`: the thread's vector clock there, {thread: point}."""
    created = db.execute("SELECT thread, parent, spawn FROM threads WHERE parent IS NOT NULL").fetchall()
    spawns = {c: (p, s) for c, p, s in created}
    spawned_at = {(p, s): c for c, (p, s) in spawns.items()}
    releases, acquires = defaultdict(list), defaultdict(list)
    atomics = db.execute("""SELECT DISTINCT r.thread, s.lo, s.hi, r.addr FROM refs r
                            JOIN spans s ON s.thread = r.thread AND s.lo = r."order" WHERE s.atomic""")
    for t, lo, hi, a in atomics.fetchall():
        releases[(t, lo)].append(a)
        acquires[(t, hi)].append(a)
    at_spawn, ended, at_addr, vc, out = {}, defaultdict(list), {}, {}, {}
    last = dict(db.execute("SELECT thread, max(lo) FROM spans GROUP BY thread").fetchall())
    for t, p in db.execute("SELECT thread, lo FROM spans ORDER BY lo").fetchall():
        c = vc.setdefault(t, dict(at_spawn.get(t, {})))
        for e in ended.pop(t, []):
            join(c, e)
        c[t] = p
        for a in acquires.get((t, p), []):
            join(c, at_addr.get(a, {}))
        for a in releases.get((t, p), []):
            join(at_addr.setdefault(a, {}), c)
        if (t, p) in spawned_at:
            at_spawn[spawned_at[(t, p)]] = dict(c)
        if p == last[t] and t in spawns:
            ended[spawns[t][0]].append(dict(c))
        if (t, p) in wanted:
            out[(t, p)] = dict(c)
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    d = sys.argv[1]
    db = duckdb.connect()
    db.execute("SET enable_progress_bar = false")  # it would draw on stdout
    db.execute(f"CREATE VIEW refs AS SELECT * FROM read_parquet('{d}/references/*.parquet')")
    db.execute(f"CREATE VIEW threads AS SELECT * FROM read_parquet('{d}/threads.parquet')")
    # Each thread's points; a point before an instruction followed by one after the same
    # instruction brackets an atomic's references.
    db.execute(f"""
        CREATE TABLE spans AS
        SELECT thread, "order" AS lo, lead("order") OVER w AS hi,
               coalesce(NOT after AND lead(after) OVER w AND lead(insn) OVER w = insn
                        AND lead(block) OVER w = block, false) AS atomic
        FROM read_parquet('{d}/syncs/*.parquet')
        WINDOW w AS (PARTITION BY thread ORDER BY "order")""")
    # References but the atomics' to addresses two threads use, one writing, by span and pc
    # (-1: before the thread's first point).
    acc = db.execute("""
        WITH shared AS (
            SELECT addr FROM refs GROUP BY addr
            HAVING count(DISTINCT thread) > 1 AND bool_or(kind = 'W'))
        SELECT r.addr, coalesce(r."order"::BIGINT, -1) AS lo, r.thread, r.pc, r.kind, count(*)
        FROM refs r JOIN shared USING (addr)
        LEFT JOIN spans s ON s.thread = r.thread AND s.lo = r."order"
        WHERE NOT coalesce(s.atomic, false)
        GROUP BY ALL ORDER BY ALL""").fetchall()
    vcs = clocks(db, {(t, lo) for (_, lo, t, _, _, _) in acc})
    # Per address, in order of the points (an order in which nothing happens before what
    # came earlier): each span against the last write and each thread's last read.
    spans = defaultdict(lambda: [False, False])  # (addr, lo, thread) -> [reads, writes]
    for addr, lo, t, _, kind, _ in acc:
        spans[(addr, lo, t)][kind == "W"] = True
    racing, last_write, last_read = set(), {}, defaultdict(dict)
    for (addr, lo, t), (reads, writes) in spans.items():
        vc = vcs.get((t, lo), {t: lo})
        earlier = [last_write[addr]] if addr in last_write else []
        if writes:
            earlier += last_read[addr].items()
        for u, ulo in earlier:
            if u != t and vc.get(u, -2) <= ulo:
                racing |= {(addr, lo, t), (addr, ulo, u)}
        if writes:
            last_write[addr] = (t, lo)
        if reads:
            last_read[addr][t] = lo
    by_addr = defaultdict(list)
    for addr, lo, t, pc, kind, n in acc:
        if (addr, lo, t) in racing:
            by_addr[addr].append((t, pc, kind, n))
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
