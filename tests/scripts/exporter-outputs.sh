#!/usr/bin/env bash
# Checksums of every output `dep` produces from recorded profiles, to prove that a refactor
# leaves each exporter's output byte for byte as it was.
#
#   tests/scripts/exporter-outputs.sh DEP OUTFILE PROFILE...
#
# Runs the `dep` binary DEP on each PROFILE (a forked child's or exec'd image's profile,
# PROFILE.1, ..., is read by `dcfg` through its parent; pass it as a PROFILE of its own too to
# check the other commands on it) and writes OUTFILE, sorted (LC_ALL=C), one line per output:
#
#   <profile-basename> <command words> <file> <bytes> <sha256>
#   <profile-basename> <command words> <exit> <status>
#
# <command words> are dep's arguments without the profile; <file> is `<stdout>`, `<stderr>`
# or a file the command wrote, relative to its output directory `out/` (the words name it
# as `out/...`). A command that fails is recorded with its status and whatever it wrote.
# Typical use: run it with the old and the new binary on the same profiles and `diff` the
# two OUTFILEs (or `cmp`).
#
# Covered: recover --format text|blocks|binary|null|parquet, each also with --truth; stats
# (plain, --json, --no-compress, both); edges (plain, --json, --truth, both); dcfg (the DCFG
# alone, DCFG with --trace) and dcfg --check on that pair (plain and --blocks); wet
# (comprehensive with --ports and --summary; --history with its default N); callgrind
# (plain, --dump-instr, --separate-threads, both); races (--summary, --json, --potential,
# --json --potential, --region R, --json --region R; R is $DEP_RACE_REGION, default
# `account`, the variable of corpora/races.c's `overflow` mode: on a profile without it the
# command fails at once, and that is recorded); dump (plain, --disasm, --all); export umt and
# export champsim (not built: recorded as failing).
# Left out: record (not an exporter); -j/--jobs (default kept: output does not depend on
# it); wet --spill-mb (a memory budget, same output); races/edges -o FILE (the same
# writer as stdout); dcfg's and wet's variants that only drop a file (--trace, --ports).
#
# Each command runs in a fresh directory holding a symlink named like the profile (so the
# path dep prints, e.g. `dump`'s `profile hello.dep`, depends on neither the profile's nor
# the temporary directory's location) and writes into out/ there; stdout is streamed
# into a hash (the comprehensive WET trace too, with `-o /dev/stdout`: it is 45 GB on a
# gzip profile), written files are hashed and deleted before the next command.
# TMPDIR chooses where the temporary directory goes.
#
# Normalised (the only varying fields found; two runs are otherwise identical): in stderr,
# the wall-clock figures of `wet --summary` ("72.9 s (2.3 M instances/s; dependences 30.5 s,
# writing 41.4 s)") and of `races --summary` ("10.66 s analysis, 10.66 s in all") become `T`.
# The outputs depend on the files the profile's modules were loaded from (symbols, DWARF,
# code decoded from the file): leave those unchanged between the runs to compare.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 DEP OUTFILE PROFILE..." >&2
    exit 2
fi
DEP=$1
OUTFILE=$2
shift 2
case $DEP in /*) ;; *) DEP=$PWD/$DEP ;; esac
[ -x "$DEP" ] || { echo "$0: $DEP is not an executable" >&2; exit 2; }
REGION=${DEP_RACE_REGION:-account}

# The interpreter itself, not a wrapper such as pyenv's shim (which costs 0.2 s a call).
PYTHON=$(python3 -c 'import sys; print(sys.executable)') || { echo "$0: needs python3 (for hashing)" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/exporter-outputs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
W=$TMP/w          # where each command runs: the profile's symlinks and out/
LINES=$TMP/lines  # the unsorted result
: >"$LINES"

# `<bytes> <sha256>` of stdin; with DIR, `<path> <bytes> <sha256>` of each file under DIR.
# (Python's hashlib, not sha256sum: coreutils 9.1's sha256sum runs at a fifth of its speed
# here, and the biggest outputs are tens of GB.)
HASH_PY='
import hashlib, os, sys
def digest(f):
    h, n, b = hashlib.sha256(), 0, bytearray(1 << 20)
    m = memoryview(b)
    while True:
        k = f.readinto(b)
        if not k:
            return n, h.hexdigest()
        h.update(m[:k])
        n += k
if len(sys.argv) < 2:
    print(*digest(sys.stdin.buffer.raw))
else:
    top = sys.argv[1]
    for d, _, files in os.walk(top):
        for name in files:
            path = os.path.join(d, name)
            with open(path, "rb", buffering=0) as f:
                print(os.path.relpath(path, top), *digest(f))
'
digest() { "$PYTHON" -c "$HASH_PY" "$@"; }

# Times measured by the commands themselves, and nothing else, become T.
normalise_stderr() {
    sed -E \
        -e 's/ MiB, [0-9.]+ s \([^ ]+ M instances\/s; dependences [0-9.]+ s, writing [0-9.]+ s\)$/ MiB, T/' \
        -e 's/; [0-9.]+ s analysis, [0-9.]+ s in all$/; T/'
}

base= # the current profile's basename

# run ARG...: runs `dep ARG...` in a fresh $W/out, `@` standing for the profile; records
# stdout, stderr, every file under out/ and the exit status.
run() {
    local args=() words=() a
    for a in "$@"; do
        if [ "$a" = @ ]; then args+=("$base"); else args+=("$a"); words+=("$a"); fi
    done
    local label="$base ${words[*]}"
    rm -rf "$W/out"
    mkdir "$W/out"
    local t0=$EPOCHREALTIME
    set +e
    (cd "$W" && exec "$DEP" "${args[@]}" </dev/null 2>"$TMP/stderr") | digest >"$TMP/stdout.sum"
    local st=("${PIPESTATUS[@]}")
    set -e
    [ "${st[1]}" = 0 ] || { echo "$0: hashing the output of $label failed" >&2; exit 1; }
    {
        echo "$label <stdout> $(cat "$TMP/stdout.sum")"
        normalise_stderr <"$TMP/stderr" >"$TMP/stderr.n"
        echo "$label <stderr> $(wc -c <"$TMP/stderr.n") $(sha256sum <"$TMP/stderr.n" | cut -d' ' -f1)"
        echo "$label <exit> ${st[0]}"
        if [ -n "$(ls -A "$W/out")" ]; then digest "$W/out" | sed "s|^|$label |"; fi
    } >>"$LINES"
    [ -n "${keep_out:-}" ] || rm -rf "$W/out"
    printf '%8.1f s  exit %3d  %s\n' "$(awk "BEGIN{print $EPOCHREALTIME - $t0}")" "${st[0]}" "$label" >&2
}

# The DCFG and its trace, then dcfg --check (plain and --blocks) on that pair.
dcfg_and_check() {
    keep_out=1 run dcfg @ -o out/dcfg.json --trace out/trace.json
    # The pair is still in out/: move it aside so the checks' own out/ is empty.
    rm -rf "$W/pair"
    mv "$W/out" "$W/pair"
    run dcfg --check pair/dcfg.json pair/trace.json
    run dcfg --check pair/dcfg.json pair/trace.json --blocks
    rm -rf "$W/pair"
}

declare -A seen=()
start=$EPOCHREALTIME
for profile in "$@"; do
    case $profile in /*) ;; *) profile=$PWD/$profile ;; esac
    [ -f "$profile" ] || { echo "$0: no profile $profile" >&2; exit 2; }
    base=$(basename -- "$profile")
    [ -z "${seen[$base]:-}" ] || { echo "$0: two profiles named $base" >&2; exit 2; }
    seen[$base]=1
    rm -rf "$W"
    mkdir "$W"
    ln -s "$profile" "$W/$base"
    n=1
    while [ -e "$profile.$n" ]; do
        ln -s "$profile.$n" "$W/$base.$n"
        n=$((n + 1))
    done

    for truth in "" --truth; do
        for format in text blocks binary null; do
            run recover @ $truth --format $format
        done
        run recover @ $truth --format parquet -o out/parquet
    done
    run stats @
    run stats @ --json
    run stats @ --no-compress
    run stats @ --json --no-compress
    run edges @
    run edges @ --json
    run edges @ --truth
    run edges @ --json --truth
    run dcfg @ -o out/dcfg.json
    dcfg_and_check
    run wet @ -o /dev/stdout --ports out/ports --summary
    run wet @ -o out/history --history
    run callgrind @ -o out/callgrind.out
    run callgrind @ -o out/callgrind.out --dump-instr
    run callgrind @ -o out/callgrind.out --separate-threads
    run callgrind @ -o out/callgrind.out --separate-threads --dump-instr
    run races @ --summary
    run races @ --json
    run races @ --potential
    run races @ --json --potential
    run races @ --region "$REGION"
    run races @ --json --region "$REGION"
    run dump @
    run dump @ --disasm
    run dump @ --all
    run export umt @ -o out/umt
    run export champsim @ -o out/champsim
    rm -rf "$W"
done

LC_ALL=C sort "$LINES" >"$OUTFILE"
printf '%s: %d lines in %s, %.0f s\n' "$0" "$(wc -l <"$OUTFILE")" "$OUTFILE" "$(awk "BEGIN{print $EPOCHREALTIME - $start}")" >&2
