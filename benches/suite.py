#!/usr/bin/env python3
"""Benchmark suite for `dep`: the paper's section 7 (Tables 1 and 2) on this machine.

    python3 benches/suite.py [--quick] [--out DIR] [--repeat N] [--programs a,b]
                             [--lackey-small] [--no-lackey] [--no-peer] [--raw2trace-main]
                             [--no-outputs]
                             [--analyses default|all|none] [--dep PATH]

For each program (six C programs from benches/programs at their default size, `gzip -c` on a
generated ~40 MB text, `xz -T2 --block-size=1MiB -c` (three threads) on a ~3 MB one, and the real python3
interpreter on a small compute script) it times,
wall clock: at that main size native, `dep record --discard`, `dep record -o P`,
`dep recover P --format null`, `dep record --truth --discard` and `valgrind --tool=none`; at a
small size (~0.1 s natively) `dep record -o P` with `dep stats P --json` (Table 2),
`dep recover P --format binary -o FILE` and `dep record --truth -o P2`; at a tiny size
`valgrind --tool=lackey --trace-mem=yes`. Beside dep it measures the peer, DynamoRIO's
drmemtrace (issue 24; built once from /work/shared/peers into ~/.cache/dep-bench, skipped
with --no-peer): at the main size `drrun -- prog` (no client) and `drrun -t drmemtrace
-offline`, at the small size drmemtrace again, `drraw2trace` and drcachesim basic_counts
(drraw2trace at the main size only with --raw2trace-main: ~20 minutes per 20 MiB of gzip
input), and bytes on disk per memory reference of both. On gzip, python3 and xz (--analyses)
it times dep's analyses of the main-size profile against `dep recover P --format null` on
the same profile: `dep races`, `dep wet --count`, `dep wet`, `dep callgrind`, `dep dcfg` and
`dep dcfg --check` of the files dcfg wrote (with its peak RSS). It prints the slowdown and size
tables with the paper's figures beside them and writes results.json, slowdowns.svg,
sizes.svg and table.txt into the output directory (default target/bench-results).
benches/README.md explains why the expensive measurements run at reduced sizes.

Python 3.11 standard library only. See benches/README.md for the details and the schema.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import hashlib
import json
import math
import os
import platform
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from xml.sax.saxutils import escape as _xml_escape

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
# The dep binary: --dep PATH, or $DEP_BENCH_DEP, or the repository's release build (built by
# ensure_dep when missing).
DEP_DEFAULT = os.path.join(REPO, "target", "release", "dep")
DEP = os.environ.get("DEP_BENCH_DEP") or DEP_DEFAULT
PROGRAMS_SRC = os.path.join(BENCH_DIR, "programs")
PROGRAMS_BIN = os.path.join(REPO, "target", "bench-programs")
# DynamoRIO's source tarball and build script for the drmemtrace peer (issue 24).
PEER_SRC = os.environ.get("DEP_BENCH_PEERS", "/work/shared/peers")

C_PROGRAMS = ["compress", "sort", "pointer_chase", "interp", "matrix", "strings"]
# Three sizes per program. MAIN: the C programs' default size (no argument, ~1.5-2 s
# natively), gzip on ~40 MB and python3 at ~1 s; everything the paper's Tables 1 and 2 and
# the recovery figure need runs at this size. SMALL: the README's ~0.1 s size, for the two
# measurements whose cost grows with the full address trace (`dep record --truth -o`, which
# compresses ~34 bytes per reference, and `dep recover --format binary`, which writes 24
# bytes per reference: tens of GB and several minutes per program at the main size); matrix
# uses n = 200 there because it makes ~10x more references per second than the others.
# TINY: ~1/8 of the small work (~0.01 s natively) for lackey, which prints every access as
# text and runs ~1500x slower than native (2-3 minutes per program even at the small size).
SMALL_SIZE = {"compress": 1024, "sort": 400000, "pointer_chase": 60000,
              "interp": 200000, "matrix": 200, "strings": 1024}
TINY_SIZE = {"compress": 128, "sort": 50000, "pointer_chase": 8000,
             "interp": 25000, "matrix": 128, "strings": 128}
# --quick: MAIN = the README's small sizes; SMALL and TINY = ~1/30 of that (~3 ms natively).
QUICK_MAIN_SIZE = {"compress": 1024, "sort": 400000, "pointer_chase": 60000,
                   "interp": 200000, "matrix": 256, "strings": 1024}
QUICK_TINY_SIZE = {"compress": 32, "sort": 12500, "pointer_chase": 2000,
                   "interp": 6000, "matrix": 64, "strings": 32}

DR_RAW_BYTES_PER_REF = 5   # room kept for drmemtrace's raw files (it writes up to ~4.1)
ADDR_BYTES = 8   # one x86-64 address: a BB_pc or Mem_addr record as `dep stats` counts it
GZIP_BYTES = {"main": 40 << 20, "small": 2 << 20, "tiny": 128 << 10}
GZIP_BYTES_QUICK = {"main": 3 << 20, "small": 32 << 10, "tiny": 32 << 10}
# xz -T2 --block-size=1MiB -c: xz's threaded encoder, a main thread reading and writing and
# two workers compressing 1 MiB blocks (both at the main size only); ~2 s, ~0.1 s and
# ~0.01 s natively (-6 allocates ~90 MB of match finder at start-up whatever the input).
XZ_BYTES = {"main": 3 << 20, "small": 256 << 10, "tiny": 16 << 10}
XZ_BYTES_QUICK = {"main": 256 << 10, "small": 16 << 10, "tiny": 16 << 10}
XZ_THREADS = 2
FILE_PROGRAMS = ("gzip", "xz")        # programs whose size argument is an input file
# The programs whose main-size profile the analyses run on by default (--analyses): on the
# C programs they would make a full suite run much longer.
ANALYSIS_PROGRAMS = ("gzip", "python3", "xz")
# The output columns --no-outputs leaves out: `step` skips them (dcfg_check reads the files
# dcfg writes).
OUTPUT_COLUMNS = ("edges", "edges_1", "dcfg", "dcfg_check", "callgrind", "recover_text",
                  "champsim", "umt")
PY_N = {"main": 800000, "small": 20000}      # ~0.75-1 s and ~0.06 s natively
PY_N_QUICK = {"main": 30000, "small": 2000}  # ~0.1 s and ~0.05 s (start-up)
PY_LACKEY_SKIP = ("python3: interpreter start-up alone runs 20-40 s under lackey "
                  "(over 300x of a ~0.05 s native run); skipped")

# Slowdown columns: key in the JSON "ratios", header, time key, native time key it divides.
COLUMNS = [
    ("discard", "discard", "discard_s", "native_s"),
    ("skip", "skip all", "skip_s", "native_s"),
    ("record", "record", "record_s", "native_s"),
    ("truth", "truth", "truth_s", "native_s"),
    ("valgrind_none", "vg none", "valgrind_none_s", "native_s"),
    ("recover_null", "rec null", "recover_null_s", "native_s"),
    ("recover_null_1", "rec 1cpu", "recover_null_1_s", "native_s"),
    ("edges", "edges", "edges_s", "native_s"),
    ("edges_1", "edg 1cpu", "edges_1_s", "native_s"),
    ("dcfg", "dcfg+tr", "dcfg_s", "native_s"),
    ("callgrind", "callgrnd", "callgrind_s", "native_s"),
    ("recover_text", "rec text", "recover_text_s", "native_s"),
    ("champsim", "champsim", "champsim_s", "native_s"),
    ("umt", "umt", "umt_s", "native_s"),
    # The analyses (ANALYSIS_PROGRAMS, --analyses): printed in their own table, as a ratio to
    # recover_null (ANALYSES below); here against native like every column.
    ("races", "races", "races_s", "native_s"),
    ("wet_deps", "wet deps", "wet_deps_s", "native_s"),
    ("wet", "wet", "wet_s", "native_s"),
    ("dcfg_check", "dcfg chk", "dcfg_check_s", "native_s"),
    ("record_small", "record/s", "record_small_s", "native_small_s"),
    ("truth_small", "truth/s", "truth_small_s", "native_small_s"),
    ("recover_binary_small", "recbin/s", "recover_binary_small_s", "native_small_s"),
    ("lackey", "lackey/t", "lackey_s", "native_tiny_s"),
    # The peer, DynamoRIO's drmemtrace (issue 24): printed in their own table beside dep's.
    ("dr_null", "dr null", "dr_null_s", "native_s"),
    ("drm_skip", "drm skip", "drm_skip_s", "native_s"),
    ("drmemtrace", "drmemtr", "drmemtrace_s", "native_s"),
    ("raw2trace", "raw2tr", "raw2trace_s", "native_s"),
    ("drmemtrace_small", "drmemt/s", "drmemtrace_small_s", "native_small_s"),
    ("raw2trace_small", "raw2tr/s", "raw2trace_small_s", "native_small_s"),
]
PEER_COLUMNS = ("dr_null", "drm_skip", "drmemtrace", "raw2trace", "drmemtrace_small", "raw2trace_small")
ANALYSIS_COLUMNS = ("races", "wet_deps", "wet", "dcfg_check")   # only in the analyses table
# The analyses table: key in the JSON "analysis_ratios", header, time key; each divided by
# recover_null_s of the same program and run (callgrind and dcfg run on every program).
ANALYSES = [
    ("races", "races", "races_s"),
    ("wet_deps", "wet deps", "wet_deps_s"),
    ("wet", "wet", "wet_s"),
    ("callgrind", "callgrnd", "callgrind_s"),
    ("dcfg", "dcfg+tr", "dcfg_s"),
    ("dcfg_check", "dcfg chk", "dcfg_check_s"),
    ("index", "index", "index_s"),
    ("seek", "seek 10%", "seek_s"),
]
ANALYSIS_BASE = "recover_null_s"
LEGEND = {
    "discard": "dep record --discard",
    "skip": "dep record --discard --skip-instrs 10^18 (a window past the end: every block only counts "
            "its instructions; compare dr null)",
    "record": "dep record -o P",
    "truth": "dep record --truth --discard",
    "valgrind_none": "valgrind --tool=none",
    "recover_null": "dep recover --format null",
    "recover_null_1": "dep recover --format null --jobs 1 (one core)",
    "edges": "dep edges P -o /dev/null (edge counts merged chunk-parallel, all cores)",
    "edges_1": "dep edges P -o /dev/null --jobs 1 (one core)",
    "dcfg": "dep dcfg P -o D --trace T (DCFG and DCFG-trace, all cores)",
    "callgrind": "dep callgrind P -o F (Callgrind profile, all cores)",
    "recover_text": "dep recover P --format text -o /dev/null (all cores)",
    "champsim": "dep export champsim P --thread T -o /dev/null for every thread T (all cores)",
    "umt": "dep export umt P -o D, D's three execution files linked to /dev/null (all cores)",
    "races": "dep races P -o /dev/null (data races between threads)",
    "wet_deps": "dep wet P --count (WET dependences computed and summarized, no trace written)",
    "wet": "dep wet P -o /dev/null (WET dependence trace)",
    "dcfg_check": "dep dcfg --check D T (decode and check dcfg's DCFG and DCFG-trace)",
    "index": "dep index P (the seek index: every chunk recovered and counted, all cores)",
    "seek": "dep recover P --format null --thread T --from-instr A --to-instr B: the middle "
            "tenth of the longest thread, with the index",
    "record_small": "dep record -o P (small size)",
    "truth_small": "dep record --truth -o P2 (small size)",
    "recover_binary_small": "dep recover --format binary -o F (small size)",
    "lackey": "valgrind lackey --trace-mem=yes (tiny size)",
    "dr_null": "drrun -- prog (DynamoRIO, no client)",
    "drm_skip": "drrun -t drmemtrace -offline -outdir D -trace_after_instrs 10^18 -- prog (its "
                "untraced phase: counting only; compare skip)",
    "drmemtrace": "drrun -t drmemtrace -offline -outdir D -- prog (raw, lz4)",
    "raw2trace": "drraw2trace -indir D (main size, --raw2trace-main only)",
    "drmemtrace_small": "drrun -t drmemtrace -offline (small size)",
    "raw2trace_small": "drraw2trace -indir D (small size)",
}
# Table 2 ratios: key, header, numerator, denominator (stream names of `dep stats --json`).
T2 = [
    ("dep_c_to_bb_pc", "DEP_c/BB_pc", "dep_c", "bb_pc"),
    ("cf_bit_to_bb_pc", "CF_bit/BB_pc", "cf_bit", "bb_pc"),
    ("dep_m_to_mem_addr", "DEP_m/Mem_addr", "dep_m", "mem_addr"),
]

# The paper, section 7: Table 1 (seconds: native, BB_pc+Mem_addr, DEP) and Table 2 averages.
PAPER_TABLE1 = {
    "164.gzip": (181, 943, 625), "175.vpr/place": (91, 462, 319), "176.gcc": (77.3, 618, 513),
    "181.mcf": (182, 355, 282), "186.crafty": (114, 983, 613), "197.parser": (203, 1081, 880),
    "252.eon.cook": (53.1, 262, 176), "253.perlbmk": (183, 1309, 1064),
    "254.gap": (85.4, 672, 563), "255.vortex": (147, 1552, 1249),
    "256.bzip2": (178, 979, 648), "300.twolf": (305, 1316, 1053),
}


def _paper():
    dep = [d / n for n, _, d in PAPER_TABLE1.values()]
    base = [b / n for n, b, _ in PAPER_TABLE1.values()]
    return {
        "source": "DEP/Adept paper, section 7 (SPECint2000 ref inputs, Pentium D 840, 32-bit)",
        "table2_average": {"dep_c_to_bb_pc": 0.6033, "cf_bit_to_bb_pc": 0.2323,
                           "dep_m_to_mem_addr": 0.4779},
        "collection_slowdown": 5.0,     # "average less than 5 times slowdown"
        "recovery_slowdown": 21.0,      # section 7.3: recovery takes 21x native
        "full_trace_scan_slowdown": 7.5,
        "ewpp_slowdown": 23.0,
        "table1_dep_slowdown_mean": sum(dep) / len(dep),
        "table1_dep_slowdown_geomean": geomean(dep),
        "table1_bbpc_memaddr_slowdown_mean": sum(base) / len(base),
        "table1_bbpc_memaddr_slowdown_geomean": geomean(base),
        "table1_seconds": {k: {"native": n, "bb_pc_mem_addr": b, "dep": d}
                           for k, (n, b, d) in PAPER_TABLE1.items()},
    }


def geomean(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def mean(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def log(msg=""):
    print(msg, flush=True)


def human_bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return str(n)


# ---------------------------------------------------------------------------------------
# Running and timing commands

class CommandFailed(Exception):
    pass


def run_timed(argv, *, timeout=3600, stdout=subprocess.DEVNULL, cwd=None, env=None,
              group=False):
    """Run argv once; return (wall seconds, child CPU seconds, stderr text, stdout bytes|None).
    group: in a process group of its own, killed whole on a timeout or an interruption (a
    wrapper such as GNU time and the command under it), where otherwise argv[0] alone is.

    Raises CommandFailed on a non-zero exit status, a timeout or a spawn error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, env=env,
                                start_new_session=group)
    except OSError as e:
        raise CommandFailed(f"cannot run {argv[0]}: {e}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as e:    # as subprocess.run: kill it, reap it, then say why
        try:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:    # it ended meanwhile
            pass
        proc.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            raise CommandFailed(f"timed out after {timeout} s: {' '.join(argv)}")
        raise
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = err.decode("utf-8", "replace")
    if proc.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-8:])
        raise CommandFailed(f"exit status {proc.returncode}: {' '.join(argv)}\n{tail}")
    return wall, cpu, err, out if stdout == subprocess.PIPE else None


def best_of(argv, n, **kw):
    """Best (minimum) wall time of n runs, with its CPU time and the last stderr."""
    best = None
    for _ in range(max(1, n)):
        wall, cpu, err, _ = run_timed(argv, **kw)
        if best is None or wall < best[0]:
            best = (wall, cpu, err)
    return best


GNU_TIME = "/usr/bin/time"


def run_peak(argv, *, timeout=3600):
    """run_timed for a command whose peak memory is wanted: (wall seconds, CPU seconds,
    peak resident set in KiB or None, stderr text). The peak is GNU time's %M: the child's
    own ru_maxrss can't be taken here, because Linux starts an exec'd process's maxrss at
    the hiwater RSS of the process it replaced, the forked (vforked) Python process with
    all of the suite's memory; time's own few MiB are what it starts from there. Without
    /usr/bin/time the peak is None."""
    if not os.access(GNU_TIME, os.X_OK):
        wall, c, err, _ = run_timed(argv, timeout=timeout)
        return wall, c, None, err
    fd, out = tempfile.mkstemp(prefix="dep-bench-time-")
    os.close(fd)
    try:
        wall, c, err, _ = run_timed([GNU_TIME, "-f", "%M", "-o", out, "--"] + argv,
                                    timeout=timeout, group=True)
        with open(out) as f:
            last = (f.read().strip().splitlines() or [""])[-1]
    finally:
        os.remove(out)
    return wall, c, int(last) if last.isdigit() else None, err


def profile_files(path):
    """A profile and the per-process profiles a fork/exec'ing program adds: P, P.1, P.2..."""
    files = [path] if os.path.exists(path) else []
    extra = [f for f in glob.glob(glob.escape(path) + ".*") if re.fullmatch(r"\d+", f[len(path) + 1:])]
    return files + sorted(extra, key=lambda f: int(f[len(path) + 1:]))


def remove_profile(path):
    for f in profile_files(path):
        try:
            os.remove(f)
        except OSError:
            pass


def free_bytes(path):
    return shutil.disk_usage(path).free


def tree_bytes(path):
    """Bytes of the files under a directory (0 if it does not exist)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# ---------------------------------------------------------------------------------------
# Inputs

def build_programs():
    log(f"building benches/programs into {os.path.relpath(PROGRAMS_BIN, REPO)}")
    proc = subprocess.run(["make", "-s", "-C", PROGRAMS_SRC, f"OUT={PROGRAMS_BIN}"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise CommandFailed("make failed:\n" + proc.stdout.decode("utf-8", "replace"))


def ensure_dep():
    if os.access(DEP, os.X_OK):
        return
    if DEP != DEP_DEFAULT:    # --dep or $DEP_BENCH_DEP: that binary or none, never a build
        sys.exit(f"suite.py: {DEP} (--dep or $DEP_BENCH_DEP) is not an executable file")
    log(f"{DEP} missing: cargo build --release --workspace (several minutes the first time)")
    proc = subprocess.run(["cargo", "build", "--release", "--workspace"], cwd=REPO)
    if proc.returncode != 0 or not os.access(DEP, os.X_OK):
        sys.exit("suite.py: cannot build dep")


# ---------------------------------------------------------------------------------------
# The peer: DynamoRIO's drmemtrace (issue 24), built once from the shared source tarball

def peer_cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dep-bench")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _failure_line(text):
    """The one line that says why build-drmemtrace.sh failed: its last step ("[build-
    drmemtrace Ns] step") and the first line after it naming an error (the first compiler
    or cmake error in the log tail it prints), else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    step, start = None, 0
    for i, ln in enumerate(lines):
        m = re.match(r"\[build-drmemtrace \d+s\] (.*)", ln)
        if m:
            step, start = m[1], i + 1
    tail = lines[start:] or lines[-1:]
    pat = r"\berror\b|\bfatal\b|not found|no such file|denied|unsupported|cannot|failed"
    why = next((ln for ln in tail if re.search(pat, ln, re.I)), tail[-1] if tail else "no output")
    return (f"{step}: {why}" if step else why)[:300]


def peer_from_prefix(prefix):
    """The drrun and drraw2trace of a build-drmemtrace.sh install, or CommandFailed."""
    drrun = os.path.join(prefix, "bin64", "drrun")
    raw2trace = os.path.join(prefix, "clients", "bin64", "drraw2trace")
    for exe in (drrun, raw2trace):
        if not os.access(exe, os.X_OK):
            raise CommandFailed(f"{exe} missing")
    version = None
    try:
        with open(os.path.join(prefix, "SOURCE-REVISIONS.txt")) as f:
            version = f.readline().strip() or None
    except OSError:
        pass
    return {"prefix": prefix, "drrun": drrun, "raw2trace": raw2trace, "version": version}


def ensure_peer(args):
    """(peer, None) with the drmemtrace install to measure, or (None, reason) to skip the
    peer columns. Builds PEER_SRC/dynamorio-src.tar.zst with PEER_SRC/build-drmemtrace.sh
    into ~/.cache/dep-bench/drmemtrace-<sha256 of the tarball>/ the first time (5-11
    minutes on 2 cores) and reuses that install afterwards; --peer-prefix names an
    install to use instead."""
    if args.no_peer:
        return None, "--no-peer"
    if args.peer_prefix:
        try:
            return peer_from_prefix(os.path.abspath(args.peer_prefix)), None
        except CommandFailed as e:
            return None, f"--peer-prefix {args.peer_prefix}: {e}"
    tarball = os.path.join(args.peer_src, "dynamorio-src.tar.zst")
    script = os.path.join(args.peer_src, "build-drmemtrace.sh")
    for f in (tarball, script):
        if not os.path.isfile(f):
            return None, f"{f} not found (--peer-src DIR names the directory holding it)"
    digest = sha256_file(tarball)[:16]
    prefix = os.path.join(peer_cache_root(), f"drmemtrace-{digest}")
    stamp = os.path.join(prefix, ".dep-bench-complete")
    if os.path.exists(stamp):
        try:
            peer = peer_from_prefix(prefix)
            log(f"drmemtrace: reusing {prefix}")
            return peer, None
        except CommandFailed:
            pass                                  # damaged: build it again
    build = prefix + ".build"
    build_log = prefix + ".build.log"
    os.makedirs(peer_cache_root(), exist_ok=True)
    log(f"drmemtrace: building {os.path.basename(tarball)} into {prefix} (once; 5-11 minutes "
        f"on 2 cores; log {build_log})")
    t0 = time.perf_counter()
    try:
        with open(build_log, "wb") as lf:
            proc = subprocess.run(["bash", script, tarball, prefix, build], stdout=lf,
                                  stderr=subprocess.STDOUT, timeout=3 * 3600)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout after 3 hours"
    except OSError as e:
        return None, f"cannot run {script}: {e}"
    if rc != 0:
        try:
            with open(build_log, "rb") as lf:
                why = _failure_line(lf.read().decode("utf-8", "replace"))
        except OSError:
            why = "no log"
        return None, f"build failed (exit {rc}): {why} [log {build_log}]"
    try:
        peer = peer_from_prefix(prefix)
    except CommandFailed as e:
        return None, f"build finished without its outputs: {e} [log {build_log}]"
    with open(stamp, "w") as f:
        f.write(f"sha256 {sha256_file(tarball)} of {tarball}\n"
                f"built {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} "
                f"in {time.perf_counter() - t0:.0f} s\n")
    os.replace(build_log, os.path.join(prefix, "build.log"))
    shutil.rmtree(build, ignore_errors=True)      # the build tree is not needed to run
    log(f"drmemtrace: built in {(time.perf_counter() - t0) / 60:.1f} min")
    return peer, None


def make_text(path, nbytes, seed=20240601):
    """Deterministic English-like text: seeded random words with a Zipf distribution.

    The same (nbytes, seed) always gives the same bytes; an existing file of the right size
    and version is reused."""
    stamp = path + ".stamp"
    want = f"v1 {nbytes} {seed}"
    if os.path.exists(path) and os.path.getsize(path) == nbytes and os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().strip() == want:
                return
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    letter_w = [12, 9, 8, 8, 7, 6, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]
    vocab = set()
    while len(vocab) < 20000:
        n = min(14, int(rng.expovariate(1 / 5.0)) + 1)
        vocab.add("".join(rng.choices(letters, letter_w, k=n)))
    vocab = sorted(vocab)
    rng.shuffle(vocab)
    cum = []
    acc = 0.0
    for i in range(len(vocab)):
        acc += 1.0 / (i + 1)
        cum.append(acc)
    size = 0
    with open(path, "w", encoding="ascii", newline="\n") as f:
        while size < nbytes:
            words = rng.choices(vocab, cum_weights=cum, k=120000)
            sentences = []
            for i in range(0, len(words), 12):
                s = " ".join(words[i:i + 12])
                sentences.append(s[0].upper() + s[1:] + ".")
            chunk = "\n".join(" ".join(sentences[j:j + 6])
                              for j in range(0, len(sentences), 6)) + "\n"
            f.write(chunk)
            size += len(chunk)
        f.truncate(nbytes)
    with open(stamp, "w") as f:
        f.write(want + "\n")


PY_WORKLOAD = '''\
"""Deterministic pure-Python compute workload for benches/suite.py (~1 s at n = 800000)."""
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y

    def add(self, o):
        return Vec(self.x + o.x, self.y + o.y)


def main(n):
    seed = 12345
    words = {}
    total = 0
    for i in range(n):                       # dict and string formatting
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        w = format(seed % 50021, "x")
        words[w] = words.get(w, 0) + 1
        total += len(w)
    top = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    acc = Vec(0, 0)
    for i in range(n // 2):                  # object allocation and method calls
        acc = acc.add(Vec(i & 7, i % 13))
    s = " ".join(str(i) for i in range(n // 10))
    parts = [p[::-1] for p in s.split(" ") if p.endswith("7")]
    f = sum(fib(16) for _ in range(n // 20000 + 1))   # recursion
    print(len(words), total, top, acc.x, acc.y, len(parts), f)


main(int(sys.argv[1]) if len(sys.argv) > 1 else 800000)
'''


def real_python():
    """The real interpreter behind `python3` (PATH may hold a pyenv bash shim)."""
    try:
        out = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
        exe = out.stdout.decode().strip()
        if exe and os.access(exe, os.X_OK):
            return os.path.realpath(exe)
    except (OSError, subprocess.CalledProcessError):
        pass
    return os.path.realpath(sys.executable)


# ---------------------------------------------------------------------------------------
# The measurements of one program

def dep_stats(profile):
    """Sum `dep stats --json` totals over P, P.1, ...; return (summary dict, raw totals)."""
    files = profile_files(profile)
    if not files:
        raise CommandFailed(f"no profile written at {profile}")
    streams = ("bb_pc", "cf_bit", "mem_addr", "dep_c", "dep_m", "truth")
    counts = ("instructions", "blocks", "refs", "reads", "writes", "conditional_branches",
              "indirect_branches", "unresolved_branches", "blocks_without_plan", "chunks")
    tot = {s: {"raw": 0, "compressed": 0} for s in streams}
    tot.update({c: 0 for c in counts})
    width = None
    threads = 0
    for f in files:
        _, _, _, out = run_timed([DEP, "stats", f, "--json"], stdout=subprocess.PIPE,
                                 timeout=1800)
        d = json.loads(out)
        width = d.get("width", width)
        threads += len(d.get("threads", []))
        t = d["total"]
        for s in streams:
            for k in ("raw", "compressed"):
                tot[s][k] += int(t.get(s, {}).get(k, 0) or 0)
        for c in counts:
            tot[c] += int(t.get(c, 0) or 0)
    tot["width"] = width
    tot["threads"] = threads
    tot["profiles"] = len(files)
    return tot


def table2_from(tot):
    """The Table 2 ratios: raw (as `dep stats` reports them, against 8-byte BB_pc and
    Mem_addr records on x86-64), against the paper's 4-byte records, and compressed."""
    res = {}
    for key, _, num, den in T2:
        n, d = tot[num], tot[den]
        base4 = 4 * (tot["blocks"] if den == "bb_pc" else tot["refs"])
        res[key] = {
            "raw": n["raw"] / d["raw"] if d["raw"] else None,
            "vs_4byte": n["raw"] / base4 if base4 else None,
            "compressed": n["compressed"] / d["compressed"] if d["compressed"] else None,
        }
    return res


def measure(name, spec, args, workdir, result, save):
    """Run every measurement of one program, filling result; errors are recorded and the
    remaining measurements still run (those needing a missing profile are skipped).

    At the program's main size: native, discard, record (-> stats, recover null), truth
    (--truth --discard), valgrind none; with spec["analyses"] also races, wet --count, wet and
    dcfg --check on that profile. At its small size (`small_argv`): native, record
    (-> recover binary), record --truth -o. At its tiny size (`tiny_argv`): native, lackey."""
    argv = spec["argv"]
    analyses = bool(spec.get("analyses"))
    result["analyses"] = analyses
    nat_reps = max(2, args.repeat)
    errors = result.setdefault("errors", {})
    skipped = result.setdefault("skipped", {})
    notes = result.setdefault("notes", [])
    cpu = result.setdefault("cpu_s", {})
    load = result.setdefault("loadavg", {})
    sizes = result.setdefault("sizes", {})
    peak = result.setdefault("peak_rss_kib", {})
    result["argv"] = argv
    result["small_argv"] = spec.get("small_argv")
    result["tiny_argv"] = spec.get("tiny_argv")
    profile = os.path.join(workdir, f"{name}.dep")
    small_profile = os.path.join(workdir, f"{name}.small.dep")
    truth_profile = os.path.join(workdir, f"{name}.truth.dep")
    binfile = os.path.join(workdir, f"{name}.bin")

    def step(key, label, fn, base="native_s"):
        if args.no_outputs and key in OUTPUT_COLUMNS:
            return
        log(f"  {label}")
        load[key] = round(os.getloadavg()[0], 2)
        t0 = time.perf_counter()
        try:
            fn()
        except CommandFailed as e:
            errors[key] = str(e)
            log(f"    FAILED: {str(e).splitlines()[0]}")
        except Exception as e:  # keep going whatever happens
            errors[key] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
            log(f"    ERROR: {type(e).__name__}: {e}")
        else:
            secs = result.get(key + "_s")
            if secs is not None:
                nat = result.get(base)
                ratio = f"  ({secs / nat:.1f}x)" if nat and key + "_s" != base else ""
                log(f"    {secs:9.3f} s{ratio}   [step {time.perf_counter() - t0:.1f} s]")
        save()

    def timed(key, cmd, reps=None, before=None):
        """Best of reps runs of cmd; before() runs ahead of each (e.g. removing a profile)."""
        best = None
        for _ in range(max(1, reps or args.repeat)):
            if before:
                before()
            wall, c, err, _ = run_timed(cmd)
            if best is None or wall < best[0]:
                best = (wall, c, err)
        result[key + "_s"], cpu[key] = best[0], best[1]
        return best[2]

    def disk_check(what):
        if free_bytes(workdir) < args.min_free:
            raise CommandFailed(f"skipped {what}: less than {human_bytes(args.min_free)} free "
                                f"in {workdir}")

    def parse_discard(err, key):
        m = re.search(r"discarded (\d+) chunks: DEP_c (\d+) bytes, DEP_m (\d+) bytes, "
                      r"truth (\d+) bytes", err)
        if m:
            result[key + "_counts"] = {"chunks": int(m[1]), "dep_c": int(m[2]),
                                       "dep_m": int(m[3]), "truth": int(m[4])}
        else:
            notes.append(f"{key}: no 'discarded' line on stderr")

    # -- main size ------------------------------------------------------------------------
    def native():
        wall, c, _ = best_of(argv, nat_reps)
        result["native_s"], cpu["native"] = wall, c
        result["native_runs"] = nat_reps

    def discard():
        parse_discard(timed("discard", [DEP, "record", "--discard", "--"] + argv), "discard")

    def skip():
        timed("skip", [DEP, "record", "--discard", "--skip-instrs", str(10**18), "--"] + argv)

    def record():
        disk_check("dep record")
        timed("record", [DEP, "record", "-o", profile, "--"] + argv,
              before=lambda: remove_profile(profile))
        files = profile_files(profile)
        sizes["profile_bytes"] = sum(os.path.getsize(f) for f in files)
        sizes["profile_files"] = len(files)

    def warm_profile():
        """Reads the profile through the page cache. `dep record` writes it with O_DIRECT,
        so the first reader alone would read it from disk: the two-core recovery, timed
        first, paid that (compress: 9.3 s cold, 7.2 s warm) and the one-core run after it
        did not, which made two cores look slower against one than they are. Every
        reader is timed warm."""
        for f in profile_files(profile):
            with open(f, "rb", buffering=0) as h:
                while h.read(8 << 20):
                    pass

    def recover_null():
        warm_profile()
        err = timed("recover_null", [DEP, "recover", profile, "--format", "null"])
        m = re.search(r"recovered (\d+) blocks, (\d+) instructions, (\d+) reads, (\d+) writes",
                      err)
        if not m:
            notes.append("recover null: no 'recovered' line on stderr")
            return
        rec = {"blocks": int(m[1]), "instructions": int(m[2]), "reads": int(m[3]),
               "writes": int(m[4])}
        result["recovered"] = rec
        # Table 2's DEP_c/BB_pc and DEP_m/Mem_addr at the main size without `dep stats`
        # (which zstd-compresses the baselines: minutes per program at this size): BB_pc
        # and Mem_addr are one address per block and per reference, DEP_c and DEP_m come
        # from the --discard run of the same deterministic program.
        dc = result.get("discard_counts")
        refs = rec["reads"] + rec["writes"]
        sizes["bb_pc_raw"] = ADDR_BYTES * rec["blocks"]
        sizes["mem_addr_raw"] = ADDR_BYTES * refs
        if dc:
            sizes["dep_c_raw"], sizes["dep_m_raw"] = dc["dep_c"], dc["dep_m"]
            result["table2_main"] = {
                "dep_c_to_bb_pc": {"raw": dc["dep_c"] / sizes["bb_pc_raw"],
                                   "vs_4byte": dc["dep_c"] / (4 * rec["blocks"])},
                "dep_m_to_mem_addr": {"raw": dc["dep_m"] / sizes["mem_addr_raw"],
                                      "vs_4byte": dc["dep_m"] / (4 * refs)},
            }

    def truth():
        parse_discard(timed("truth", [DEP, "record", "--truth", "--discard", "--"] + argv),
                      "truth")
        if "truth_counts" in result:
            sizes["truth_raw"] = result["truth_counts"]["truth"]

    def valgrind_none():
        timed("valgrind_none", ["valgrind", "-q", "--tool=none"] + argv)

    # -- small size -----------------------------------------------------------------------
    sargv = spec.get("small_argv")

    def native_small():
        wall, c, _ = best_of(sargv, max(3, nat_reps))
        result["native_small_s"], cpu["native_small"] = wall, c
        result["native_small_runs"] = max(3, nat_reps)

    def record_small():
        disk_check("dep record (small)")
        timed("record_small", [DEP, "record", "-o", small_profile, "--"] + sargv,
              before=lambda: remove_profile(small_profile))
        files = profile_files(small_profile)
        sizes["small_profile_bytes"] = sum(os.path.getsize(f) for f in files)
        t0 = time.perf_counter()
        tot = dep_stats(small_profile)
        result["stats_wall_s"] = time.perf_counter() - t0
        result["stats"] = tot
        result["table2"] = table2_from(tot)
        for s in ("bb_pc", "cf_bit", "mem_addr", "dep_c", "dep_m"):
            sizes["small_" + s + "_raw"] = tot[s]["raw"]
            sizes["small_" + s + "_compressed"] = tot[s]["compressed"]
        if tot.get("width") and tot["width"] != 8 * ADDR_BYTES:
            notes.append(f"profile width {tot['width']}: the main-size BB_pc/Mem_addr sizes "
                         f"assume {8 * ADDR_BYTES}-bit addresses")

    def recover_binary_small():
        refs = (result.get("stats") or {}).get("refs")
        expected = 24 * refs + 4096 if refs else None   # 24-byte records and a header
        sizes["recover_binary_expected_bytes"] = expected
        free = free_bytes(workdir)
        if expected is None or free < 3 * expected:
            skipped["recover_binary_small"] = (f"{human_bytes(expected)} of output expected, "
                                               f"only {human_bytes(free)} free (< 3x)")
            log(f"    skipped: {skipped['recover_binary_small']}")
            return

        def rm():
            if os.path.exists(binfile):
                os.remove(binfile)
        try:
            timed("recover_binary_small", [DEP, "recover", small_profile, "--format",
                                           "binary", "-o", binfile], before=rm)
            sizes["recover_binary_bytes"] = os.path.getsize(binfile)
        finally:
            rm()

    def truth_small():
        disk_check("dep record --truth (small)")
        try:
            timed("truth_small", [DEP, "record", "--truth", "-o", truth_profile, "--"] + sargv,
                  before=lambda: remove_profile(truth_profile))
            files = profile_files(truth_profile)
            sizes["truth_small_profile_bytes"] = sum(os.path.getsize(f) for f in files)
        finally:
            remove_profile(truth_profile)

    # -- tiny size ------------------------------------------------------------------------
    def lackey():
        targv = spec["tiny_argv"]
        wall, c, _ = best_of(targv, max(5, nat_reps))
        result["native_tiny_s"], cpu["native_tiny"] = wall, c
        log(f"    native at this size {wall:.4f} s")
        timed("lackey", ["valgrind", "--tool=lackey", "--trace-mem=yes",
                         "--log-file=/dev/null"] + targv, reps=1)

    # -- the peer: DynamoRIO with no client and drmemtrace (issue 24) -------------------
    peer = args.peer
    dr_out = os.path.join(workdir, f"{name}.drmemtrace")
    dr_small_out = os.path.join(workdir, f"{name}.small.drmemtrace")
    dr_dirs = {}

    def drmemtrace(key, outdir, run_argv, dep_refs):
        """drrun -t drmemtrace -offline into a fresh outdir (best of --repeat); the raw
        files' bytes on disk. os.sync() (untimed) before each run, so the write-back of
        an earlier trace does not land in this measurement."""
        disk_check(f"drmemtrace ({key})")
        # Its raw files took 0.2-4.1 bytes per reference in /work/shared/peers/results
        # (14 GB for matrix at the main size): want 5 per reference dep counted, and the rest.
        need = DR_RAW_BYTES_PER_REF * dep_refs + args.min_free if dep_refs else 0
        if free_bytes(workdir) < need:
            raise CommandFailed(f"skipped {key}: ~{human_bytes(need - args.min_free)} of raw "
                                f"files expected, only {human_bytes(free_bytes(workdir))} free")

        def fresh():
            shutil.rmtree(outdir, ignore_errors=True)
            os.sync()
            os.makedirs(outdir)
        timed(key, [peer["drrun"], "-t", "drmemtrace", "-offline", "-outdir", outdir, "--"]
              + run_argv, before=fresh)
        dirs = sorted(glob.glob(os.path.join(outdir, "drmemtrace.*.dir")))
        if not dirs:
            raise CommandFailed(f"no drmemtrace.*.dir written in {outdir}")
        sizes[key + "_raw_bytes"] = sum(tree_bytes(os.path.join(d, "raw")) for d in dirs)
        sizes[key + "_dirs"] = len(dirs)     # one per process
        dr_dirs[key] = dirs

    def raw2trace(key, dirs):
        """drraw2trace on each process's directory, once (it is slow); times summed."""
        wall = cpu_s = 0.0
        for d in dirs:
            shutil.rmtree(os.path.join(d, "trace"), ignore_errors=True)
            os.sync()
            w, c, _, _ = run_timed([peer["raw2trace"], "-indir", d], timeout=6 * 3600)
            wall, cpu_s = wall + w, cpu_s + c
        result[key + "_s"], cpu[key] = wall, cpu_s
        sizes[key + "_trace_bytes"] = sum(tree_bytes(os.path.join(d, "trace")) for d in dirs)

    def basic_counts(key, dirs):
        """drcachesim's basic_counts over the converted traces: drmemtrace's own counts."""
        tot, wall = {}, 0.0
        names_ = {"(fetched) instructions": "instructions", "non-fetched instructions":
                  "non_fetched", "data loads": "loads", "data stores": "stores",
                  "prefetches": "prefetches", "threads": "threads"}
        for d in dirs:
            w, _, err, out = run_timed([peer["drrun"], "-t", "drcachesim", "-indir", d,
                                        "-simulator_type", "basic_counts"],
                                       stdout=subprocess.PIPE, timeout=6 * 3600)
            wall += w
            text = err + "\n" + out.decode("utf-8", "replace")
            for m in re.finditer(r"^\s*(\d+) total (.+?)\s*$", text, re.M):
                if m[2] in names_:
                    k = names_[m[2]]
                    tot[k] = tot.get(k, 0) + int(m[1])
        if "loads" not in tot or "stores" not in tot:
            raise CommandFailed("basic_counts printed no 'total data loads/stores' lines")
        tot["refs"] = tot["loads"] + tot["stores"]
        result[key] = tot
        result[key + "_wall_s"] = wall
        log(f"    {tot['refs']} loads+stores, {tot.get('instructions')} instructions")

    def peer_main():
        step("dr_null", "drrun -- prog (DynamoRIO, no client)",
             lambda: timed("dr_null", [peer["drrun"], "--"] + argv))
        # Its untraced phase beside dep's --skip-instrs past the end (issue 30): counting
        # instructions, as a window's start needs, and nothing written.
        step("drm_skip", "drrun -t drmemtrace -offline -trace_after_instrs 10^18",
             lambda: timed("drm_skip", [peer["drrun"], "-t", "drmemtrace", "-offline", "-outdir",
                                        dr_out, "-trace_after_instrs", str(10**18), "--"] + argv,
                           before=lambda: (shutil.rmtree(dr_out, ignore_errors=True),
                                           os.makedirs(dr_out))))
        step("drmemtrace", "drrun -t drmemtrace -offline -outdir D",
             lambda: drmemtrace("drmemtrace", dr_out, argv,
                                (result.get("recovered") or {}).get("reads", 0)
                                + (result.get("recovered") or {}).get("writes", 0)))
        if args.raw2trace_main and dr_dirs.get("drmemtrace"):
            step("raw2trace", "drraw2trace -indir D (--raw2trace-main)",
                 lambda: raw2trace("raw2trace", dr_dirs["drmemtrace"]))
            if "raw2trace_s" in result:
                step("basic_counts", "drcachesim basic_counts",
                     lambda: basic_counts("basic_counts", dr_dirs["drmemtrace"]))
        shutil.rmtree(dr_out, ignore_errors=True)

    have_vg = shutil.which("valgrind") is not None
    step("native", "native", native)
    step("discard", "dep record --discard", discard)
    step("skip", "dep record --discard --skip-instrs past the end", skip)
    step("record", "dep record -o P", record)
    if "record_s" in result:
        step("recover_null", "dep recover P --format null", recover_null)
        step("recover_null_1", "dep recover P --format null --jobs 1",
             lambda: timed("recover_null_1", [DEP, "recover", profile, "--format", "null",
                                              "--jobs", "1"]))
        if args.no_outputs:
            skipped["outputs"] = "--no-outputs (" + ", ".join(OUTPUT_COLUMNS) + ")"
        step("edges", "dep edges P -o /dev/null",
             lambda: timed("edges", [DEP, "edges", profile, "-o", os.devnull]))
        step("edges_1", "dep edges P -o /dev/null --jobs 1",
             lambda: timed("edges_1", [DEP, "edges", profile, "-o", os.devnull, "--jobs", "1"]))
        if analyses:
            # Each as a ratio to recover_null_s of this run (the step prints it so).
            step("races", "dep races P -o /dev/null",
                 lambda: timed("races", [DEP, "races", profile, "-o", os.devnull]),
                 base=ANALYSIS_BASE)
            step("wet_deps", "dep wet P --count",
                 lambda: timed("wet_deps", [DEP, "wet", profile, "--count"]),
                 base=ANALYSIS_BASE)
            step("wet", "dep wet P -o /dev/null",
                 lambda: timed("wet", [DEP, "wet", profile, "-o", os.devnull]),
                 base=ANALYSIS_BASE)

        dcfg_files = (profile + ".dcfg.json", profile + ".trace.json")

        def rm_dcfg():
            for f in dcfg_files:
                if os.path.exists(f):
                    os.remove(f)

        def dcfg():
            d, t = dcfg_files
            timed("dcfg", [DEP, "dcfg", profile, "-o", d, "--trace", t])
            sizes["dcfg_bytes"] = os.path.getsize(d)
            sizes["dcfg_trace_bytes"] = os.path.getsize(t)

        def dcfg_check():
            """dep dcfg --check on the two files dcfg wrote: best of --repeat, and the
            largest peak RSS of its runs."""
            best = None
            for _ in range(max(1, args.repeat)):
                wall, c, rss, err = run_peak([DEP, "dcfg", "--check"] + list(dcfg_files))
                if rss is not None:
                    peak["dcfg_check"] = max(peak.get("dcfg_check", 0), rss)
                if best is None or wall < best[0]:
                    best = (wall, c, err)
            result["dcfg_check_s"], cpu["dcfg_check"] = best[0], best[1]
            m = re.search(r"dcfg check passed: .*", best[2])
            if m:
                result["dcfg_check_summary"] = m[0]
            if "dcfg_check" in peak:
                log(f"    peak RSS {peak['dcfg_check'] / 1024:.1f} MiB")
            else:
                notes.append(f"dcfg_check: no peak RSS ({GNU_TIME} missing or said none)")
        try:    # the files stay until dcfg_check ran
            step("dcfg", "dep dcfg P -o D --trace T", dcfg)
            # (With --no-outputs dcfg did not run: no failure to note.)
            if analyses and not args.no_outputs:
                if "dcfg_s" in result:
                    step("dcfg_check", "dep dcfg --check D T", dcfg_check, base=ANALYSIS_BASE)
                else:
                    skipped["dcfg_check"] = "no DCFG files (dep dcfg failed)"
        finally:
            rm_dcfg()

        def callgrind():
            out = profile + ".callgrind"
            try:
                err = timed("callgrind", [DEP, "callgrind", profile, "-o", out])
                # The symbolizer's share of the command's CPU (issue 27: at most 10%).
                m = re.search(r"naming code took ([0-9.]+) s of CPU", err or "")
                if m and cpu.get("callgrind"):
                    result["callgrind_names_s"] = float(m[1])
                    notes.append(f"callgrind: naming code {float(m[1]):.2f} s of "
                                 f"{cpu['callgrind']:.2f} s CPU "
                                 f"({100 * float(m[1]) / cpu['callgrind']:.1f}%)")
                else:
                    notes.append("callgrind: no 'naming code took' line on stderr")
            finally:
                if os.path.exists(out):
                    os.remove(out)
        step("callgrind", "dep callgrind P -o F", callgrind)
        step("recover_text", "dep recover P --format text -o /dev/null",
             lambda: timed("recover_text", [DEP, "recover", profile, "--format", "text",
                                            "-o", os.devnull]))

        def champsim():
            # Every thread's records, each thread's run to /dev/null (the command writes one
            # file per thread otherwise); the times add up.
            # The thread count from dump's header (dep stats would compress every stream
            # to count it: 140 s on gzip's profile, against 4 s).
            dump = subprocess.run([DEP, "dump", "--max", "0", profile], check=True,
                                  capture_output=True, text=True).stdout
            m = re.search(r"^threads \((\d+)\)", dump, re.M)
            if not m:
                raise RuntimeError("dep dump printed no thread count")
            total = 0.0
            for t in range(int(m.group(1))):
                timed("champsim", [DEP, "export", "champsim", profile, "--thread", str(t),
                                   "-o", os.devnull])
                total += result["champsim_s"]
            result["champsim_s"] = total
        step("champsim", "dep export champsim P --thread T -o /dev/null", champsim)

        def umt():
            # The execution table (tens of bytes per instruction: hundreds of GB for the
            # main size) goes to /dev/null through links, as text does; the tables are
            # written.
            out = profile + ".umt"
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            for f in ("exec.vtable", "exec.offsets", "exec.prev_next.column"):
                os.symlink(os.devnull, os.path.join(out, f))
            try:
                timed("umt", [DEP, "export", "umt", profile, "-o", out])
            finally:
                shutil.rmtree(out, ignore_errors=True)
        step("umt", "dep export umt P -o D (execution files to /dev/null)", umt)

        def index():
            # Appends to the profile: each run needs one without an index (the suite's
            # own profile is written once), so a copy per run.
            copy = profile + ".indexed"

            def fresh():
                shutil.copyfile(profile, copy)
            try:
                timed("index", [DEP, "index", copy], before=fresh)
                shutil.move(copy, profile)
            finally:
                if os.path.exists(copy):
                    os.remove(copy)

        def seek():
            st = subprocess.run([DEP, "stats", profile, "--json", "--no-compress"], check=True,
                                capture_output=True, text=True).stdout
            per = {}
            for e in json.loads(st)["index"] or []:
                per[e["thread"]] = per.get(e["thread"], 0) + e["instructions"]
            t, n = max(per.items(), key=lambda kv: kv[1])
            lo, hi = n * 45 // 100, n * 55 // 100
            err = timed("seek", [DEP, "recover", profile, "--format", "null", "--thread", str(t),
                                 "--from-instr", str(lo), "--to-instr", str(hi)])
            m = re.search(r"are in (\d+) of (\d+) chunks; (\d+) chunk reads", err or "")
            if m:
                notes.append(f"seek: thread {t} instructions {lo}..{hi} of {n}: in {m[1]} of "
                             f"{m[2]} chunks, {m[3]} chunk reads")
        if analyses:
            step("index", "dep index P", index, base=ANALYSIS_BASE)
            if "index_s" in result:
                step("seek", "dep recover P --format null (middle tenth, indexed)", seek,
                     base=ANALYSIS_BASE)
    else:
        skipped["recover_null"] = "no profile (dep record failed)"
        if analyses:
            skipped["analyses"] = "no profile (dep record failed)"
    remove_profile(profile)
    step("truth", "dep record --truth --discard", truth)
    if have_vg:
        step("valgrind_none", "valgrind --tool=none", valgrind_none)
    else:
        skipped["valgrind_none"] = "valgrind not installed"
    if peer:
        peer_main()

    if sargv:
        log(f"  -- small size: {' '.join(sargv)}")
        step("native_small", "native (small)", native_small, base="native_small_s")
        step("record_small", "dep record -o P; dep stats P --json (small)", record_small,
             base="native_small_s")
        if "record_small_s" in result:
            step("recover_binary_small", "dep recover P --format binary -o FILE (small)",
                 recover_binary_small, base="native_small_s")
        else:
            skipped["recover_binary_small"] = "no small profile (dep record failed)"
        remove_profile(small_profile)
        step("truth_small", "dep record --truth -o P2 (small)", truth_small,
             base="native_small_s")
        if peer:
            step("drmemtrace_small", "drrun -t drmemtrace -offline -outdir D (small)",
                 lambda: drmemtrace("drmemtrace_small", dr_small_out, sargv,
                                    (result.get("stats") or {}).get("refs", 0)),
                 base="native_small_s")
            if dr_dirs.get("drmemtrace_small"):
                step("raw2trace_small", "drraw2trace -indir D (small)",
                     lambda: raw2trace("raw2trace_small", dr_dirs["drmemtrace_small"]),
                     base="native_small_s")
                if "raw2trace_small_s" in result:
                    step("basic_counts_small", "drcachesim basic_counts (small)",
                         lambda: basic_counts("basic_counts_small",
                                              dr_dirs["drmemtrace_small"]))
            else:
                skipped["raw2trace_small"] = "no drmemtrace output (drmemtrace failed)"
            shutil.rmtree(dr_small_out, ignore_errors=True)

    if args.no_lackey:
        skipped["lackey"] = "--no-lackey"
    elif not have_vg:
        skipped["lackey"] = "valgrind not installed"
    elif not spec.get("tiny_argv"):
        skipped["lackey"] = spec.get("lackey_skip", "no tiny input")
        log(f"  lackey skipped: {skipped['lackey']}")
    else:
        log(f"  -- tiny size: {' '.join(spec['tiny_argv'])}")
        step("lackey", "valgrind --tool=lackey --trace-mem=yes", lackey, base="native_tiny_s")


def finish_ratios(result):
    ratios = {}
    for key, _, tkey, base in COLUMNS:
        t, b = result.get(tkey), result.get(base)
        ratios[key] = t / b if (t and b) else None
    result["ratios"] = ratios
    b = result.get(ANALYSIS_BASE)
    result["analysis_ratios"] = {key: (result[tkey] / b if result.get(tkey) and b else None)
                                 for key, _, tkey in ANALYSES}
    result["bytes_per_ref"] = bytes_per_ref(result)


def bytes_per_ref(result):
    """Bytes on disk per memory reference, dep's profiles beside drmemtrace's files.

    dep: its profile over its recovered references (recover null at the main size, dep
    stats at the small size). drmemtrace: its raw (-offline) and converted (drraw2trace)
    files over its own loads + stores (drcachesim basic_counts), or over dep's count of
    the same run where basic_counts did not run (no drraw2trace at that size); `*_den`
    says which."""
    sz = result.get("sizes", {})
    rec = result.get("recovered") or {}
    dep_main = rec["reads"] + rec["writes"] if rec else None
    dep_small = (result.get("stats") or {}).get("refs")
    out = {"dep_refs": dep_main, "dep_refs_small": dep_small,
           "dr_refs": (result.get("basic_counts") or {}).get("refs"),
           "dr_refs_small": (result.get("basic_counts_small") or {}).get("refs")}

    def per(n, d):
        return n / d if n and d else None
    out["dep"] = per(sz.get("profile_bytes"), dep_main)
    out["dep_small"] = per(sz.get("small_profile_bytes"), dep_small)
    for suffix, dep_refs in (("", dep_main), ("_small", dep_small)):
        dr = out["dr_refs" + suffix]
        den, src = (dr, "basic_counts") if dr else (dep_refs, "dep")
        raw = sz.get(f"drmemtrace{suffix}_raw_bytes")
        trace = sz.get(f"raw2trace{suffix}_trace_bytes")
        out["drmemtrace_raw" + suffix] = per(raw, den)
        out["drmemtrace_trace" + suffix] = per(trace, den)
        out["dr_den" + suffix] = src if (raw or trace) and den else None
    return out


# ---------------------------------------------------------------------------------------
# Machine description

def machine_info(pyexe):
    info = {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
            "kernel": platform.release(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    info["mem_total_kb"] = int(line.split()[1])
    except OSError:
        pass

    def first_line(argv):
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=30)
            return p.stdout.decode("utf-8", "replace").strip().splitlines()[0]
        except Exception:
            return None

    info["dep_version"] = first_line([DEP, "--version"])
    info["dep_path"] = DEP
    info["suite_commit"] = first_line(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    # The suite's checkout built the default binary; a --dep binary's commit is unknown.
    info["dep_commit"] = info["suite_commit"] if DEP == DEP_DEFAULT else None
    info["valgrind"] = first_line(["valgrind", "--version"])
    info["gzip"] = first_line(["gzip", "--version"])
    info["xz"] = first_line(["xz", "--version"])
    info["gcc"] = first_line(["gcc", "--version"])
    info["python"] = first_line([pyexe, "--version"])
    info["python_executable"] = pyexe
    info["loadavg_start"] = os.getloadavg()
    return info


# ---------------------------------------------------------------------------------------
# Tables

def fmt_ratio(x, width=8):
    if x is None:
        return "-".rjust(width)
    if x >= 100:
        return f"{x:.0f}x".rjust(width)
    return f"{x:.1f}x".rjust(width)


def fmt_pct(x, width=8):
    return ("-" if x is None else f"{100 * x:.2f}%").rjust(width)


# What each tool records, printed under the drmemtrace tables (and in benches/README.md):
# checked against DynamoRIO 05e3165's clients/drcachesim/tracer (tracer.cpp, instru_offline.cpp,
# raw2trace.cpp) and its drcachesim documentation.
PEER_NOTE = [
    "  What the two record, so that like is compared with like:",
    "  - drmemtrace -offline writes one raw file per thread (lz4): an 8-byte entry per executed "
    "block (module offset and",
    "    instruction count) and per memory address, except addresses drraw2trace can recompute "
    "(a base register unchanged",
    "    since an earlier address in the block, rip-relative and absolute operands), plus "
    "timestamp+cpu markers at each",
    "    buffer flush (the only order between threads) and syscall/signal markers. drraw2trace "
    "then decodes the original",
    "    binaries into the final trace (zip): one record per instruction fetch (PC) and per load "
    "or store. A rep string is",
    "    expanded (drutil) into a loop, one load/store per iteration: one fetch for the first "
    "iteration, 'non-fetched'",
    "    instruction records for the others; gathers and scatters are expanded (drx) into one "
    "reference per element;",
    "    prefetches are counted apart from loads (not in its B/ref).",
    "  - dep writes per thread (zstd chunks) a 2-byte block tag per executed block (DEP_c) and "
    "the register values that",
    "    form addresses when they changed (DEP_m; a rep string: its pointer after it; a gather: "
    "its index vector and mask),",
    "    with the executed code and the order between threads' synchronizing events, and "
    "recovers every reference offline",
    "    (rec null, recbin/s) without the binaries. It too counts each rep-string iteration and "
    "each active gather element",
    "    as a reference; prefetch, lea and nop are not references.",
]


def peer_tables(results, names, peer, w0):
    """dep's --discard, record, recovery and bytes per reference beside drmemtrace's."""
    title = "dep beside DynamoRIO drmemtrace (issue 24)"
    if not peer.get("measured"):
        return [f"{title}: skipped ({peer.get('skipped')})"]
    lines = []
    gm = results["__geomean__"]
    have_main_r2t = any((results[n].get("ratios") or {}).get("raw2trace") for n in names)
    main = [("discard", "dep disc"), ("dr_null", "dr null"), ("skip", "dep skip"),
            ("drm_skip", "drm skip"), ("record", "dep rec"),
            ("drmemtrace", "drmemtr"), ("recover_null", "rec null")]
    if have_main_r2t:
        main.append(("raw2trace", "raw2tr"))
    small = [("record_small", "dep rec/s"), ("drmemtrace_small", "drmemt/s"),
             ("recover_binary_small", "recbin/s"), ("raw2trace_small", "raw2tr/s")]
    version = " ".join((peer.get("version") or "").split()[:2])[:22]   # DynamoRIO <commit>
    lines.append(f"{title}: slowdown, wall-clock time / native time at the same size "
                 f"({version or peer.get('prefix')})")
    hdr = ("program".ljust(w0) + "native s".rjust(9) + "".join(h.rjust(10) for _, h in main)
           + " |" + "native/s".rjust(9) + "".join(h.rjust(10) for _, h in small))
    lines.append(hdr)
    lines.append("-" * len(hdr))

    def row(label, nat, nat_s, ratios):
        return (label.ljust(w0) + (f"{nat:.3f}" if nat else "").rjust(9)
                + "".join(fmt_ratio(ratios.get(k), 10) for k, _ in main) + " |"
                + (f"{nat_s:.3f}" if nat_s else "").rjust(9)
                + "".join(fmt_ratio(ratios.get(k), 10) for k, _ in small))
    for n in names:
        r = results[n]
        lines.append(row(n, r.get("native_s") or None, r.get("native_small_s") or None,
                         r.get("ratios") or {}))
    lines.append("-" * len(hdr))
    lines.append(row("geomean", None, None, gm))
    lines.append("  dep disc = dep record --discard; dr null = drrun -- prog (DynamoRIO, no "
                 "client); dep rec = dep record -o P;")
    lines.append("  dep skip = dep record --discard --skip-instrs 10^18, drm skip = drmemtrace "
                 "-trace_after_instrs 10^18 (each one's untraced phase: counting only);")
    lines.append("  drmemtr = drrun -t drmemtrace -offline -outdir D -- prog; rec null = dep "
                 "recover P --format null"
                 + ("; raw2tr = drraw2trace -indir D" if have_main_r2t else "") + ";")
    lines.append("  /s: at the small size: dep rec/s, drmemt/s; recbin/s = dep recover --format "
                 "binary -o F; raw2tr/s = drraw2trace -indir D")
    lines.append("  (its own time over the program's native time, as for dep's recovery; run "
                 "once, not best of N).")
    if not have_main_r2t:
        lines.append("  drraw2trace runs at the small size only: it takes 100-1000x native (~20 "
                     "min for gzip -c of 20 MiB); --raw2trace-main")
        lines.append("  adds it and basic_counts at the main size.")
    lines.append("")

    # Bytes on disk per memory reference.
    b = {n: results[n].get("bytes_per_ref") or {} for n in names}
    sz = {n: results[n].get("sizes") or {} for n in names}
    gb = results.get("__geomean_bytes_per_ref__") or {}
    starred = []

    def bpr(x, den=None):
        if x is None:
            return "-"
        if den == "dep":
            starred.append(1)
            return f"{x:.3f}*"
        return f"{x:.3f}"

    def cnt(x):
        return "-" if not x else f"{x / 1e6:.3f}M"
    cols = [("program", w0), ("refs", 11), ("dep", 10), ("B/ref", 7), ("dr raw", 10),
            ("B/ref", 8)]
    if have_main_r2t:
        cols += [("dr refs", 11), ("dr trace", 10), ("B/ref", 8)]
    cols += [(" |", 2), ("refs/s", 11), ("dr refs/s", 11), ("dep/s", 10), ("B/ref", 7),
             ("dr raw/s", 10), ("B/ref", 8), ("trace/s", 10), ("B/ref", 8)]
    hdr = "".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(cols))
    lines.append("Bytes on disk per memory reference: dep's zstd profile over its recovered "
                 "references; drmemtrace's raw files")
    lines.append("(dr raw) and drraw2trace's trace (trace) over its loads+stores from "
                 "drcachesim basic_counts (dr refs)")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for n in names:
        x, s = b[n], sz[n]
        cells = [n, cnt(x.get("dep_refs")), human_bytes(s.get("profile_bytes")),
                 bpr(x.get("dep")), human_bytes(s.get("drmemtrace_raw_bytes")),
                 bpr(x.get("drmemtrace_raw"), x.get("dr_den"))]
        if have_main_r2t:
            cells += [cnt(x.get("dr_refs")), human_bytes(s.get("raw2trace_trace_bytes")),
                      bpr(x.get("drmemtrace_trace"), x.get("dr_den"))]
        cells += [" |", cnt(x.get("dep_refs_small")), cnt(x.get("dr_refs_small")),
                  human_bytes(s.get("small_profile_bytes")), bpr(x.get("dep_small")),
                  human_bytes(s.get("drmemtrace_small_raw_bytes")),
                  bpr(x.get("drmemtrace_raw_small"), x.get("dr_den_small")),
                  human_bytes(s.get("raw2trace_small_trace_bytes")),
                  bpr(x.get("drmemtrace_trace_small"), x.get("dr_den_small"))]
        lines.append("".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, (_, w)) in enumerate(zip(cells, cols))))
    lines.append("-" * len(hdr))
    def gden(suffix):    # starred when any program's figure is
        return "dep" if any(b[n].get("dr_den" + suffix) == "dep" for n in names) else None
    g = ["geomean", "", "", bpr(gb.get("dep")), "", bpr(gb.get("drmemtrace_raw"), gden(""))]
    if have_main_r2t:
        g += ["", "", bpr(gb.get("drmemtrace_trace"), gden(""))]
    g += [" |", "", "", "", bpr(gb.get("dep_small")), "",
          bpr(gb.get("drmemtrace_raw_small"), gden("_small")), "",
          bpr(gb.get("drmemtrace_trace_small"), gden("_small"))]
    lines.append("".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, (_, w)) in enumerate(zip(g, cols))))
    lines.append("  refs: dep's references (main size: recover null; /s: dep stats of the small "
                 "profile); dr refs: basic_counts' loads+stores.")
    if starred:
        lines.append("  *: drmemtrace's bytes over dep's reference count of the same program and "
                     "size (basic_counts needs drraw2trace's trace,")
        lines.append("     which runs at the small size only unless --raw2trace-main).")
    lines.extend(PEER_NOTE)
    return lines


def analysis_table(results, names, w0):
    """dep's analyses of the main-size profile over `dep recover P --format null` of the same
    profile in the same run, with recover null's own seconds and slowdowns for reference."""
    cols = [("program", w0), ("rec null s", 11), ("rec null", 9), ("rec 1cpu", 9)]
    cols += [(h, 9) for _, h, _ in ANALYSES] + [("chk MiB", 9)]
    lines = ["Analyses, as a ratio to recover --format null on the same profile (main size)"]
    hdr = "".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(cols))
    lines.append(hdr)
    lines.append("-" * len(hdr))

    def row(label, secs, ratios, ar, kib):
        cells = [label, "" if secs is None else f"{secs:.3f}",
                 fmt_ratio(ratios.get("recover_null"), 0),
                 fmt_ratio(ratios.get("recover_null_1"), 0)]
        cells += [fmt_ratio(ar.get(k), 0) for k, _, _ in ANALYSES]
        cells.append("" if kib is None else ("-" if not kib else f"{kib / 1024:.1f}"))
        return "".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, (_, w)) in enumerate(zip(cells, cols)))
    for n in names:
        r = results[n]
        label = n if r.get("analyses") else n + " (-)"
        lines.append(row(label, r.get("recover_null_s"), r.get("ratios") or {},
                         r.get("analysis_ratios") or {},
                         (r.get("peak_rss_kib") or {}).get("dcfg_check", 0)))
    lines.append("-" * len(hdr))
    ag = results.get("__analysis_geomean__") or {}
    lines.append(row("geomean", None, {k: ag.get(k + "_x_native") for k in
                                       ("recover_null", "recover_null_1")}, ag, None))
    lines.append("  rec null s = dep recover P --format null, seconds; rec null, rec 1cpu (the "
                 "same with --jobs 1): x native, for reference;")
    lines.append("  then x rec null: races = dep races P -o /dev/null; wet deps = dep wet P "
                 "--count (dependences and summary, no trace);")
    lines.append("  wet = dep wet P -o /dev/null; callgrnd = dep callgrind P -o F; dcfg+tr = "
                 "dep dcfg P -o D --trace T;")
    lines.append("  dcfg chk = dep dcfg --check D T on dcfg's two files; index = dep index P; "
                 "seek 10% = dep recover P --format null")
    lines.append("  of the middle tenth of the longest thread, indexed; chk MiB = dcfg chk's "
                 "peak resident set (GNU time %M).")
    lines.append("  geomean: over the programs the analyses ran on.")
    if any(not results[n].get("analyses") for n in names):
        lines.append("  (-): races, wet and dcfg --check not run on this program (--analyses "
                     "default runs them on " + ", ".join(ANALYSIS_PROGRAMS) + "; all: every "
                     "program)")
    return lines


def tables(results, names, paper, quick, peer=None):
    lines = []
    w0 = max(14, max(len(n) for n in names) + 1)
    # the peer's columns: peer_tables; the analyses': analysis_table
    dep_cols = [c for c in COLUMNS if c[0] not in PEER_COLUMNS + ANALYSIS_COLUMNS]
    lines.append("Slowdown: wall-clock time / native time at the same size (main size; "
                 "/s: small size; /t: tiny size)")
    hdr = ("program".ljust(w0) + "native s".rjust(9)
           + "".join(h.rjust(9) for _, h, _, _ in dep_cols))
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for n in names:
        r = results[n]
        nat = r.get("native_s")
        row = n.ljust(w0) + (f"{nat:.3f}" if nat else "-").rjust(9)
        row += "".join(fmt_ratio(r.get("ratios", {}).get(k), 9) for k, _, _, _ in dep_cols)
        lines.append(row)
    lines.append("-" * len(hdr))
    gm = results["__geomean__"]
    lines.append("geomean".ljust(w0) + "".rjust(9)
                 + "".join(fmt_ratio(gm.get(k), 9) for k, _, _, _ in dep_cols))
    pap = {"discard": paper["table1_dep_slowdown_mean"],
           "record": paper["collection_slowdown"],
           "truth": paper["table1_bbpc_memaddr_slowdown_mean"],
           "recover_null": paper["recovery_slowdown"], "recover_null_1": paper["recovery_slowdown"]}
    lines.append("paper".ljust(w0) + "".rjust(9)
                 + "".join((fmt_ratio(pap[k], 9) if k in pap else "".rjust(9))
                           for k, _, _, _ in dep_cols))
    lines.append("  columns: discard = dep record --discard; skip all = dep record --discard "
                 "--skip-instrs 10^18 (only counting);")
    lines.append("  record = dep record -o P (zstd, on disk); truth = dep record --truth --discard;")
    lines.append("  vg none = valgrind --tool=none; rec null = dep recover P --format null (all "
                 "cores, profile in the page cache); rec 1cpu = the same with --jobs 1;")
    lines.append("  record/s, truth/s (dep record --truth -o P2),")
    lines.append("  recbin/s (dep recover --format binary -o FILE) at the small size; "
                 "lackey/t = valgrind --tool=lackey --trace-mem=yes, tiny size")
    lines.append(f"  paper: discard <- Table 1 DEP mean {paper['table1_dep_slowdown_mean']:.2f}x "
                 f"(geomean {paper['table1_dep_slowdown_geomean']:.2f}x; the analyzer only "
                 f"counted); record <- 'less than 5x'; truth <- Table 1 BB_pc+Mem_addr mean "
                 f"{paper['table1_bbpc_memaddr_slowdown_mean']:.2f}x;")
    lines.append("  rec null <- section 7.3 recovery 21x (scanning a full trace 7.5x); "
                 "eWPP 23x")
    lines.append("")
    lines.extend(peer_tables(results, names, peer or {}, w0))
    lines.append("")
    lines.extend(analysis_table(results, names, w0))
    lines.append("")
    t2m = results["__table2_mean__"]
    t2mm = results["__table2_main_mean__"]
    pa = paper["table2_average"]

    def mb(x):
        return "-" if x is None else f"{x / 1e6:.0f}"

    def table(title, cols, rows, notes):
        """cols: [(header, width)]; rows: [[cell text]]; a None row draws a rule."""
        lines.append(title)
        hdr = "".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(cols))
        lines.append(hdr)
        lines.append("-" * len(hdr))
        for row in rows:
            if row is None:
                lines.append("-" * len(hdr))
            else:
                lines.append("".join(c.ljust(w) if i == 0 else c.rjust(w)
                                     for i, (c, (_, w)) in enumerate(zip(row, cols))))
        lines.extend(notes)

    # Table 2 proper: `dep stats --json` on the small-size profile.
    cols = [("program", w0), ("BB_pc MB", 9), ("DEP_c", 9), ("/4B", 9), ("CF_bit", 9),
            ("/4B", 9), ("Mem_addr MB", 12), ("DEP_m", 9), ("/4B", 9), ("DEP_c zst", 11),
            ("CF_bit zst", 11), ("DEP_m zst", 11)]
    ks = [("dep_c_to_bb_pc", "raw"), ("dep_c_to_bb_pc", "vs_4byte"),
          ("cf_bit_to_bb_pc", "raw"), ("cf_bit_to_bb_pc", "vs_4byte"), None,
          ("dep_m_to_mem_addr", "raw"), ("dep_m_to_mem_addr", "vs_4byte"),
          ("dep_c_to_bb_pc", "compressed"), ("cf_bit_to_bb_pc", "compressed"),
          ("dep_m_to_mem_addr", "compressed")]
    rows = []
    for n in names:
        r = results[n]
        t2, sz = r.get("table2"), r.get("sizes", {})
        if not t2:
            rows.append([n, "(no dep stats)"] + [""] * (len(cols) - 2))
            continue
        cells = []
        for k in ks:
            cells.append(mb(sz.get("small_mem_addr_raw")) if k is None
                         else fmt_pct((t2.get(k[0]) or {}).get(k[1]), 0))
        rows.append([n, mb(sz.get("small_bb_pc_raw"))] + cells)
    rows.append(None)
    rows.append(["mean", ""] + [("" if k is None else fmt_pct((t2m.get(k[0]) or {}).get(k[1]), 0))
                                for k in ks])
    rows.append(["paper", "", fmt_pct(pa["dep_c_to_bb_pc"], 0), "",
                 fmt_pct(pa["cf_bit_to_bb_pc"], 0), "", "", fmt_pct(pa["dep_m_to_mem_addr"], 0)]
                + [""] * 4)
    table("Table 2 (`dep stats --json` of the small-size profile): uncompressed stream sizes "
          "and ratios", cols, rows,
          ["  DEP_c, CF_bit: % of BB_pc; DEP_m: % of Mem_addr. Plain: against dep's 8-byte "
           "x86-64 records (as dep stats reports);",
           "  /4B: against the paper's 4-byte records (BB_pc = 4 x blocks, Mem_addr = 4 x "
           "references); zst: both sides zstd-compressed (dep's level)."])
    lines.append("")

    # Main size: the profile on disk, DEP_c/BB_pc and DEP_m/Mem_addr from dep's counters.
    cols = [("program", w0), ("BB_pc MB", 10), ("DEP_c MB", 10), ("DEP_c", 9), ("/4B", 9),
            ("Mem_addr MB", 12), ("DEP_m MB", 10), ("DEP_m", 9), ("/4B", 9),
            ("profile", 11), ("prof/Mem", 9), ("truth raw", 11)]
    rows = []
    for n in names:
        r = results[n]
        tm, sz = r.get("table2_main") or {}, r.get("sizes", {})
        c, m_ = tm.get("dep_c_to_bb_pc") or {}, tm.get("dep_m_to_mem_addr") or {}
        prof, mem = sz.get("profile_bytes"), sz.get("mem_addr_raw")
        rows.append([n, mb(sz.get("bb_pc_raw")), mb(sz.get("dep_c_raw")),
                     fmt_pct(c.get("raw"), 0), fmt_pct(c.get("vs_4byte"), 0),
                     mb(mem), mb(sz.get("dep_m_raw")), fmt_pct(m_.get("raw"), 0),
                     fmt_pct(m_.get("vs_4byte"), 0), human_bytes(prof),
                     fmt_pct(prof / mem if prof and mem else None, 0),
                     human_bytes(sz.get("truth_raw"))])
    rows.append(None)
    rows.append(["mean", "", "",
                 fmt_pct((t2mm.get("dep_c_to_bb_pc") or {}).get("raw"), 0),
                 fmt_pct((t2mm.get("dep_c_to_bb_pc") or {}).get("vs_4byte"), 0), "", "",
                 fmt_pct((t2mm.get("dep_m_to_mem_addr") or {}).get("raw"), 0),
                 fmt_pct((t2mm.get("dep_m_to_mem_addr") or {}).get("vs_4byte"), 0),
                 "", "", ""])
    rows.append(["paper", "", "", fmt_pct(pa["dep_c_to_bb_pc"], 0), "", "", "",
                 fmt_pct(pa["dep_m_to_mem_addr"], 0), "", "", "", ""])
    table("Main size: stream sizes from dep's counters (BB_pc, Mem_addr: 8 bytes per block "
          "and reference counted by recover null;", cols, rows,
          ["  DEP_c, DEP_m: the --discard run's totals), the zstd profile on disk (prof/Mem: "
           "its size against raw Mem_addr)",
           "  and the raw truth stream of --truth --discard ({pc, addr, size, type} per "
           "reference)."])
    if quick:
        lines.append("  --quick: reduced sizes, not comparable with the paper")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# SVG charts (hand-made)

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#1f3f6e", "#8c564b", "#17becf", "#bcbd22",
           "#7f7f7f", "#2ca02c", "#9467bd", "#d62728", "#000000"]


def _x(s):
    return _xml_escape(str(s), {'"': "&quot;"})


def svg_grouped_bars(path, title, groups, series, values, *, log_scale, y_label,
                     ref_lines=(), value_fmt=None, subtitle=None, width=None, height=470,
                     y_max=None):
    """groups: x categories; series: [(key, label)]; values[group][key] -> float|None.
    ref_lines: [(y, label, colour)]. Returns the SVG text (and writes it if path)."""
    ng, ns = len(groups), len(series)
    left, top = 70, 58 if subtitle else 40
    right = 190 if ref_lines else 20
    legend_rows = 1
    bottom = 70
    group_w = max(14 * ns + 18, 70)
    width = width or max(900, left + right + ng * group_w)
    legend_item_w = max(120, int(6.4 * max(len(lab) for _, lab in series)) + 30)
    per_row = max(1, (width - left - right) // legend_item_w)
    legend_rows = (ns + per_row - 1) // per_row
    top += 18 * legend_rows
    plot_w = width - left - right
    plot_h = height - top - bottom
    group_w = plot_w / ng
    bar_w = min(22.0, (group_w - 12) / ns)
    vals = [v for g in groups for k, _ in series
            for v in [values.get(g, {}).get(k)] if isinstance(v, (int, float)) and v > 0]
    refs = [y for y, _, _ in ref_lines]
    if log_scale:
        lo_v = min(vals + refs + [1.0]) if vals or refs else 1.0
        hi_v = max(vals + refs + [10.0]) if vals or refs else 10.0
        lo = 10 ** math.floor(math.log10(lo_v))
        hi = 10 ** math.ceil(math.log10(hi_v * 1.05))

        def ypos(v):
            v = max(v, lo)
            return top + plot_h * (1 - (math.log10(v) - math.log10(lo))
                                   / (math.log10(hi) - math.log10(lo)))
        ticks = []
        d = lo
        while d <= hi * 1.0001:
            ticks.append((d, True))
            for m in (2, 5):
                if d * m < hi:
                    ticks.append((d * m, False))
            d *= 10
    else:
        lo = 0.0
        hi = y_max or max(vals + refs + [0.1]) * 1.15
        step = 10 ** math.floor(math.log10(hi / 4))
        for mult in (1, 2, 2.5, 5, 10):
            if hi / (step * mult) <= 8:
                step *= mult
                break
        hi = math.ceil(hi / step) * step

        def ypos(v):
            return top + plot_h * (1 - (v - lo) / (hi - lo))
        ticks = [(i * step, True) for i in range(int(round(hi / step)) + 1)]

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
           f'viewBox="0 0 {width:.0f} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
           f'<rect x="0" y="0" width="{width:.0f}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.1f}" y="22" text-anchor="middle" font-size="16" '
           f'font-weight="bold">{_x(title)}</text>']
    if subtitle:
        out.append(f'<text x="{width / 2:.1f}" y="40" text-anchor="middle" font-size="11" '
                   f'fill="#444">{_x(subtitle)}</text>')
    # legend
    ly0 = (58 if subtitle else 40) + 4
    for i, (k, label) in enumerate(series):
        row, col = divmod(i, per_row)
        lx = left + col * legend_item_w
        ly = ly0 + row * 18
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" '
                   f'fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(f'<text x="{lx + 17}" y="{ly + 10}" font-size="11">{_x(label)}</text>')
    # grid and y axis
    for v, major in ticks:
        y = ypos(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w:.1f}" y2="{y:.1f}" '
                   f'stroke="{"#bbb" if major else "#e4e4e4"}" stroke-width="1"/>')
        if major or log_scale:
            if log_scale:
                lab = f"{v:g}" if v < 1e4 else f"1e{round(math.log10(v))}"
            else:
                lab = f"{100 * v:.0f}%" if value_fmt == "pct" else f"{v:g}"
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" '
                       f'font-size="{11 if major else 9}" '
                       f'fill="{"#000" if major else "#777"}">{_x(lab)}</text>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#000"/>')
    out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w:.1f}" '
               f'y2="{top + plot_h}" stroke="#000"/>')
    out.append(f'<text x="16" y="{top + plot_h / 2:.1f}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 16 {top + plot_h / 2:.1f})">{_x(y_label)}</text>')
    # bars
    base_y = ypos(lo) if not log_scale else top + plot_h
    for gi, g in enumerate(groups):
        gx = left + gi * group_w + (group_w - bar_w * ns) / 2
        if gi and groups[gi - 1] != g and g in ("geomean", "mean"):
            sx = left + gi * group_w
            out.append(f'<line x1="{sx:.1f}" y1="{top}" x2="{sx:.1f}" y2="{top + plot_h}" '
                       f'stroke="#999" stroke-dasharray="3,3"/>')
        for si, (k, label) in enumerate(series):
            v = values.get(g, {}).get(k)
            x = gx + si * bar_w
            if not isinstance(v, (int, float)) or v <= 0:
                out.append(f'<text x="{x + bar_w / 2:.1f}" y="{base_y - 3:.1f}" '
                           f'text-anchor="middle" font-size="8" fill="#999">n/a</text>')
                continue
            y = ypos(v)
            h = max(base_y - y, 0.5)
            txt = f"{100 * v:.1f}%" if value_fmt == "pct" else (
                f"{v:.0f}" if v >= 100 else f"{v:.1f}")
            out.append(f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{h:.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                       f'<title>{_x(g)}: {_x(label)} = {_x(txt)}</title></rect>')
            tx, ty = x + bar_w / 2 + 3, y - 3
            out.append(f'<text x="{tx:.1f}" y="{ty:.1f}" font-size="8" fill="#333" '
                       f'transform="rotate(-90 {tx:.1f} {ty:.1f})">{_x(txt)}</text>')
        cx = left + gi * group_w + group_w / 2
        out.append(f'<text x="{cx:.1f}" y="{top + plot_h + 16}" text-anchor="middle" '
                   f'font-size="11" font-weight="{"bold" if g in ("geomean", "mean") else "normal"}"'
                   f'>{_x(g)}</text>')
    # reference lines, labelled in the right margin (labels pushed apart to stay legible)
    shown = sorted(((ypos(v), label, colour) for v, label, colour in ref_lines
                    if lo < v <= hi), key=lambda t: t[0])
    label_y = []
    for y, _, _ in shown:
        label_y.append(max(y + 4, label_y[-1] + 12) if label_y else y + 4)
    for (y, label, colour), ly in zip(shown, label_y):
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w:.1f}" y2="{y:.1f}" '
                   f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="7,4"/>')
        out.append(f'<line x1="{left + plot_w:.1f}" y1="{y:.1f}" x2="{left + plot_w + 6:.1f}" '
                   f'y2="{ly - 4:.1f}" stroke="{colour}" stroke-width="1"/>')
        out.append(f'<text x="{left + plot_w + 8:.1f}" y="{ly:.1f}" font-size="10" '
                   f'fill="{colour}">{_x(label)}</text>')
    out.append("</svg>")
    svg = "\n".join(out) + "\n"
    if path:
        with open(path, "w") as f:
            f.write(svg)
    return svg


def write_svgs(outdir, results, names, paper, quick):
    groups = names + ["geomean"]
    values = {n: results[n].get("ratios", {}) for n in names}
    # every dep column; the peer's and the analyses' only when measured (else all n/a)
    series = [(k, LEGEND[k]) for k, _, _, _ in COLUMNS
              if k not in PEER_COLUMNS + ANALYSIS_COLUMNS
              or any(values[n].get(k) for n in names)]
    col = {k: PALETTE[i % len(PALETTE)] for i, (k, _) in enumerate(series)}
    values["geomean"] = results["__geomean__"]
    sub = ("wall-clock time / native time at the same input size" +
           ("; --quick (reduced sizes, startup-dominated)" if quick else ""))
    svg_grouped_bars(os.path.join(outdir, "slowdowns.svg"), "dep: slowdown against native",
                     groups, series, values, log_scale=True, y_label="slowdown (x, log scale)",
                     subtitle=sub,
                     ref_lines=[(paper["collection_slowdown"], "paper: collection <5x",
                                 col["record"]),
                                (paper["table1_bbpc_memaddr_slowdown_mean"],
                                 f"paper: BB_pc+Mem_addr "
                                 f"{paper['table1_bbpc_memaddr_slowdown_mean']:.1f}x",
                                 col["truth"]),
                                (paper["recovery_slowdown"], "paper: recovery 21x",
                                 col["recover_null"])])

    # sizes.svg: two panels (raw against dep's 8-byte records, and against 4-byte records)
    groups2 = names + ["mean"]
    series2 = [(k, h) for k, h, _, _ in T2]
    pa = paper["table2_average"]
    refs = [(pa[k], f"paper {h} {100 * pa[k]:.2f}%", PALETTE[i]) for i, (k, h) in
            enumerate(series2)]
    panels = []
    for kind, title in (("raw", "against dep's records (8-byte BB_pc, Mem_addr)"),
                        ("vs_4byte", "against the paper's 4-byte BB_pc, Mem_addr")):
        vals = {n: {k: (results[n].get("table2") or {}).get(k, {}).get(kind) for k, _ in series2}
                for n in names}
        vals["mean"] = {k: (results["__table2_mean__"].get(k) or {}).get(kind)
                        for k, _ in series2}
        allv = [v for g in vals.values() for v in g.values() if v] + list(pa.values())
        panels.append(svg_grouped_bars(None, f"Table 2 ratios {title}", groups2, series2,
                                       vals, log_scale=False, y_label="fraction of baseline",
                                       ref_lines=refs, value_fmt="pct",
                                       y_max=max(allv) * 1.12, height=430,
                                       subtitle="uncompressed stream sizes (dep stats of the "
                                                "small-size profile); dashed: the paper's "
                                                "SPECint2000 averages"))
    # stack the two panels vertically in one SVG
    w = max(int(re.search(r'width="(\d+)"', p)[1]) for p in panels)
    hs = [int(re.search(r'height="(\d+)"', p)[1]) for p in panels]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{sum(hs)}" '
             f'viewBox="0 0 {w} {sum(hs)}">']
    y = 0
    for p, h in zip(panels, hs):
        inner = p.replace('<svg xmlns="http://www.w3.org/2000/svg"', f'<svg y="{y}"', 1)
        parts.append(inner)
        y += h
    parts.append("</svg>")
    with open(os.path.join(outdir, "sizes.svg"), "w") as f:
        f.write("\n".join(parts) + "\n")


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes everywhere (a smoke test of a few minutes)")
    ap.add_argument("--out", default=os.path.join(REPO, "target", "bench-results"),
                    help="output directory (default target/bench-results)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="best of N runs for each measurement (default 1; the native runs "
                         "take the best of at least 2 (main), 3 (small) and 5 (tiny))")
    ap.add_argument("--programs", default=None,
                    help="comma-separated subset of: "
                         + ",".join(C_PROGRAMS + ["gzip", "python3", "xz"]))
    ap.add_argument("--analyses", choices=("default", "all", "none"), default="default",
                    help="which programs' main-size profiles dep races, wet --count, wet and "
                         "dcfg --check run on: default " + ",".join(ANALYSIS_PROGRAMS)
                         + " (on the C programs they would make a full run much longer)")
    ap.add_argument("--dep", default=None,
                    help="the dep binary to measure (default $DEP_BENCH_DEP, else "
                         "target/release/dep, built only if that is missing)")
    ap.add_argument("--lackey-small", action="store_true",
                    help="run lackey at the small size instead of the tiny one (~0.1 s "
                         "natively, 2-3 minutes per program)")
    ap.add_argument("--no-lackey", action="store_true", help="skip valgrind lackey")
    ap.add_argument("--no-outputs", action="store_true",
                    help="skip the output columns of each main-size profile (edges, dcfg, "
                         "callgrind, text, champsim, umt: most of a full run's time); "
                         "the paper's tables and the peer columns are still measured")
    ap.add_argument("--min-free-gb", type=float, default=None,
                    help="skip recording when less than this is free (default 10, quick 1)")
    ap.add_argument("--no-peer", action="store_true",
                    help="skip DynamoRIO's drmemtrace (the peer columns)")
    ap.add_argument("--peer-src", default=PEER_SRC,
                    help="directory holding dynamorio-src.tar.zst and build-drmemtrace.sh "
                         f"(default {PEER_SRC})")
    ap.add_argument("--peer-prefix", default=None,
                    help="use this build-drmemtrace.sh install instead of building one into "
                         "~/.cache/dep-bench/drmemtrace-<sha256 of the tarball>")
    ap.add_argument("--raw2trace-main", action="store_true",
                    help="also run drraw2trace and basic_counts at the main size (~40 "
                         "minutes for gzip alone; by default they run at the small size)")
    args = ap.parse_args()
    args.min_free = int((args.min_free_gb if args.min_free_gb is not None
                         else (1 if args.quick else 10)) * 1e9)
    global DEP
    if args.dep:
        DEP = args.dep
    DEP = os.path.abspath(DEP)

    t_start = time.perf_counter()
    outdir = os.path.abspath(args.out)
    inputs = os.path.join(outdir, "inputs")
    workdir = os.path.join(outdir, "work")
    os.makedirs(inputs, exist_ok=True)
    os.makedirs(workdir, exist_ok=True)
    for stale in glob.glob(os.path.join(workdir, "*")):   # profiles of an interrupted run
        if os.path.isfile(stale):
            os.remove(stale)
        elif stale.endswith(".drmemtrace"):               # and its drmemtrace output
            shutil.rmtree(stale, ignore_errors=True)

    ensure_dep()
    log(f"dep: {DEP}")
    build_programs()
    args.peer, peer_skip = ensure_peer(args)
    if peer_skip:
        log(f"drmemtrace: skipped, {peer_skip}; the peer columns stay empty")
    pyexe = real_python()
    log(f"python interpreter: {pyexe}")

    gzb = GZIP_BYTES_QUICK if args.quick else GZIP_BYTES
    t0 = time.perf_counter()
    gz_in = {}
    for tier, nbytes in gzb.items():
        gz_in[tier] = os.path.join(inputs, f"text-{nbytes >> 10}KiB.txt")
        make_text(gz_in[tier], nbytes)
    xzb = XZ_BYTES_QUICK if args.quick else XZ_BYTES
    xz_in = {}
    for tier, nbytes in xzb.items():
        xz_in[tier] = os.path.join(inputs, f"text-{nbytes >> 10}KiB.txt")
        make_text(xz_in[tier], nbytes)
    log(f"gzip and xz inputs ready in {time.perf_counter() - t0:.1f} s: gzip "
        + ", ".join(f"{t} {human_bytes(b)}" for t, b in gzb.items()) + "; xz "
        + ", ".join(f"{t} {human_bytes(b)}" for t, b in xzb.items()))
    py_script = os.path.join(inputs, "workload.py")
    with open(py_script, "w") as f:
        f.write(PY_WORKLOAD)

    specs = {}
    for p in C_PROGRAMS:
        exe = os.path.join(PROGRAMS_BIN, p)
        if args.quick:
            main_size, small, tiny = QUICK_MAIN_SIZE[p], QUICK_TINY_SIZE[p], QUICK_TINY_SIZE[p]
        else:
            main_size, small, tiny = None, SMALL_SIZE[p], TINY_SIZE[p]
        if args.lackey_small:
            tiny = small
        specs[p] = {"argv": [exe] + ([str(main_size)] if main_size else []),
                    "size": main_size if main_size else "default",
                    "small_argv": [exe, str(small)], "tiny_argv": [exe, str(tiny)]}
    specs["gzip"] = {"argv": ["gzip", "-c", gz_in["main"]], "size": f"{gzb['main']} bytes",
                     "small_argv": ["gzip", "-c", gz_in["small"]],
                     "tiny_argv": ["gzip", "-c", gz_in["small" if args.lackey_small
                                                       else "tiny"]]}
    pyn = PY_N_QUICK if args.quick else PY_N
    specs["python3"] = {"argv": [pyexe, py_script, str(pyn["main"])], "size": pyn["main"],
                        "small_argv": [pyexe, py_script, str(pyn["small"])],
                        "tiny_argv": None, "lackey_skip": PY_LACKEY_SKIP}
    # 1 MiB blocks: at the default level a block is 24 MiB, so a 3 MiB input would keep
    # one worker busy and the other idle; two compressing workers race or not.
    xz = ["xz", f"-T{XZ_THREADS}", "--block-size=1MiB", "-c"]
    specs["xz"] = {"argv": xz + [xz_in["main"]], "size": f"{xzb['main']} bytes",
                   "small_argv": xz + [xz_in["small"]],
                   "tiny_argv": xz + [xz_in["small" if args.lackey_small else "tiny"]]}
    if shutil.which("xz") is None:
        specs["xz"]["missing"] = "xz not installed (which xz)"
    for n, sp in specs.items():
        sp["analyses"] = (args.analyses == "all"
                          or (args.analyses == "default" and n in ANALYSIS_PROGRAMS))
    sizes_doc = {n: {"main": s["argv"][1:], "small": s["small_argv"][1:],
                     "tiny": (s["tiny_argv"] or [None])[1:]} for n, s in specs.items()}
    names = list(specs)
    if args.programs:
        want = [s.strip() for s in args.programs.split(",") if s.strip()]
        bad = [w for w in want if w not in specs]
        if bad:
            sys.exit(f"suite.py: unknown program(s) {', '.join(bad)}; choose from "
                     + ", ".join(specs))
        names = [n for n in names if n in want]

    paper = _paper()
    doc = {
        "version": 1,
        "machine": machine_info(pyexe),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "repeat": args.repeat,
        "command": " ".join(["python3", "benches/suite.py"] + sys.argv[1:]),
        "programs": {},
        "geomean": {},
        "table2_mean": {},
        "table2_main_mean": {},
        "sizes": sizes_doc,
        "columns": {k: {"header": h, "time": t, "native": b, "command": LEGEND[k]}
                    for k, h, t, b in COLUMNS},
        # The analyses table: each program's "analysis_ratios" divide these times by its
        # recover_null_s; "analysis_geomean" their geometric means over the programs the
        # analyses ran on, with recover_null(_1)_x_native, recover null's slowdowns.
        "analyses": {"selection": args.analyses,
                     "programs": [n for n in names
                                  if specs[n]["analyses"] and not specs[n].get("missing")],
                     "base": ANALYSIS_BASE,
                     "columns": {k: {"header": h, "time": t, "command": LEGEND[k]}
                                 for k, h, t in ANALYSES}},
        "analysis_geomean": {},
        "paper": paper,
        "peer": ({"tool": "DynamoRIO drmemtrace", "measured": True,
                  "raw2trace_main": args.raw2trace_main, **args.peer} if args.peer
                 else {"tool": "DynamoRIO drmemtrace", "measured": False,
                       "skipped": peer_skip}),
    }
    json_path = os.path.join(outdir, "results.json")

    def save():
        tmp = json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=False)
            f.write("\n")
        os.replace(tmp, json_path)

    for n in names:
        log(f"\n== {n}: {' '.join(specs[n]['argv'])}")
        res = {"size": specs[n]["size"]}
        doc["programs"][n] = res
        try:
            if specs[n].get("missing"):
                res["skipped"] = {"program": specs[n]["missing"]}
                log(f"  skipped: {specs[n]['missing']}")
            else:
                measure(n, specs[n], args, workdir, res, save)
        except Exception as e:
            res.setdefault("errors", {})["suite"] = f"{type(e).__name__}: {e}"
            log(f"  ERROR {type(e).__name__}: {e}")
        finally:
            for suffix in (".dep", ".small.dep", ".truth.dep"):
                remove_profile(os.path.join(workdir, n + suffix))
            for suffix in (".dep.dcfg.json", ".dep.trace.json"):
                if os.path.exists(os.path.join(workdir, n + suffix)):
                    os.remove(os.path.join(workdir, n + suffix))
            for suffix in (".drmemtrace", ".small.drmemtrace"):
                shutil.rmtree(os.path.join(workdir, n + suffix), ignore_errors=True)
        finish_ratios(res)
        for k in ("errors", "skipped", "peak_rss_kib"):
            if not res.get(k):
                res.pop(k, None)
        save()

    doc["geomean"] = {k: geomean([doc["programs"][n]["ratios"].get(k) for n in names])
                      for k, _, _, _ in COLUMNS}
    # Over the programs the analyses ran on (callgrind and dcfg run on every program).
    an = [doc["programs"][n] for n in names if doc["programs"][n].get("analyses")]
    doc["analysis_geomean"] = {k: geomean([r["analysis_ratios"].get(k) for r in an])
                               for k, _, _ in ANALYSES}
    for k in ("recover_null", "recover_null_1"):
        doc["analysis_geomean"][k + "_x_native"] = geomean([r["ratios"].get(k) for r in an])
    doc["geomean_bytes_per_ref"] = {
        k: geomean([doc["programs"][n]["bytes_per_ref"].get(k) for n in names])
        for k in ("dep", "drmemtrace_raw", "drmemtrace_trace", "dep_small",
                  "drmemtrace_raw_small", "drmemtrace_trace_small")}
    t2mean = {}
    for k, _, _, _ in T2:
        t2mean[k] = {kind: mean([((doc["programs"][n].get("table2") or {}).get(k) or {}).get(kind)
                                 for n in names])
                     for kind in ("raw", "vs_4byte", "compressed")}
    doc["table2_mean"] = t2mean
    doc["table2_main_mean"] = {
        k: {kind: mean([((doc["programs"][n].get("table2_main") or {}).get(k) or {}).get(kind)
                        for n in names]) for kind in ("raw", "vs_4byte")}
        for k in ("dep_c_to_bb_pc", "dep_m_to_mem_addr")}
    doc["machine"]["loadavg_end"] = os.getloadavg()
    doc["wall_s"] = time.perf_counter() - t_start
    save()

    view = dict(doc["programs"])
    view["__geomean__"] = doc["geomean"]
    view["__analysis_geomean__"] = doc["analysis_geomean"]
    view["__table2_mean__"] = t2mean
    view["__table2_main_mean__"] = doc["table2_main_mean"]
    view["__geomean_bytes_per_ref__"] = doc["geomean_bytes_per_ref"]
    text = tables(view, names, paper, args.quick, doc["peer"])
    try:
        write_svgs(outdir, view, names, paper, args.quick)
    except Exception as e:
        log(f"writing the SVGs failed: {type(e).__name__}: {e}")
        doc.setdefault("errors", {})["svg"] = str(e)
        save()

    problems = []
    for n in names:
        for k, v in doc["programs"][n].get("errors", {}).items():
            problems.append(f"  {n}: {k} FAILED: {v.splitlines()[0]}")
        for k, v in doc["programs"][n].get("skipped", {}).items():
            problems.append(f"  {n}: {k} skipped: {v}")
        for v in doc["programs"][n].get("notes", []):
            problems.append(f"  {n}: note: {v}")
    m = doc["machine"]
    head = (f"dep benchmark suite{' (--quick)' if args.quick else ''}: {m.get('cpu_model')}, "
            f"{m['nproc']} CPUs, kernel {m['kernel']}, {doc['date']}; "
            f"best of {args.repeat} (native best of {max(2, args.repeat)})")

    def size_arg(n, arg):    # a file's size, or the program's size argument
        return human_bytes(os.path.getsize(arg)) if n in FILE_PROGRAMS else arg
    sz = "  sizes: main = " + ("the README's small sizes" if args.quick else "default") + \
        "; small = " + ", ".join(
            f"{n} {size_arg(n, s['small'][-1])}" for n, s in sizes_doc.items()) + \
        "; tiny (lackey) = " + ", ".join(
            f"{n} {size_arg(n, s['tiny'][-1])}" for n, s in sizes_doc.items() if s["tiny"])
    head += "\n" + sz
    report = [head, "", text, ""]
    if problems:
        report += ["Failures, skips and notes:"] + problems + [""]
    report.append(f"total wall time {doc['wall_s'] / 60:.1f} min; results in {outdir}: "
                  "results.json, slowdowns.svg, sizes.svg, table.txt")
    report = "\n".join(report)
    with open(os.path.join(outdir, "table.txt"), "w") as f:
        f.write(report + "\n")
    log("\n" + report)
    try:
        os.rmdir(workdir)
    except OSError:
        pass


if __name__ == "__main__":
    main()
