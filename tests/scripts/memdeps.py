#!/usr/bin/env python3
"""Memory dependences from a reference trace alone, for checking `dep wet` independently.

Reads `dep recover --format text` (`<thread> <pc> <R|W> <addr> <size>`) from the file
named as its argument, or stdin; with `--kernel-refs`, the kernel's writes for a system
call (`... kernel` lines, a run of them one instance of the call) are the call's writes,
and the kernel's reads add no dependence (WET gives the call no port for them). Per
thread, remembers the last write of every byte (the writing pc and that write's ordinal
among the pc's writes); for every read, the distinct last writers of its bytes. Prints
`<reader-pc> <writer-pc> <count>` for every pair, sorted: how many (read, writer) pairs
there were. Threads are independent: a read in one thread never depends on another's write.
"""
import sys
from collections import Counter


def main():
    pairs = Counter()
    last = {}        # byte -> (pc, ordinal), for the current thread
    writes = Counter()
    thread = None
    kernel_run = None  # the pc of the run of kernel lines under way
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    for line in src:
        t, pc, kind, addr, size, *rest = line.split()
        kernel = rest == ["kernel"]
        if t != thread:
            thread, last, writes = t, {}, Counter()
        a, n = int(addr, 16), int(size)
        if kernel:
            if kind == "W":
                if kernel_run != pc:
                    writes[pc] += 1
                k = writes[pc] - 1
                # dep follows a kernel access's first MiB (profile/src/syscalls SHADOWED).
                for b in range(a, a + min(n, 1 << 20)):
                    last[b] = (pc, k)
            kernel_run = pc
            continue
        kernel_run = None
        if kind == "R":
            seen = set()
            for b in range(a, a + n):
                w = last.get(b)
                if w is not None and w not in seen:
                    seen.add(w)
                    pairs[(pc, w[0])] += 1
        else:
            k = writes[pc]
            writes[pc] += 1
            for b in range(a, a + n):
                last[b] = (pc, k)
    for (r, w), c in sorted(pairs.items()):
        print(r, w, c)


if __name__ == "__main__":
    main()
