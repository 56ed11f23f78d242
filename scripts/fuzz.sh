#!/usr/bin/env bash
# The short fuzz run: builds every cargo-fuzz target in fuzz/ (nightly) and runs each for
# SECONDS (default 60), with a 2 GiB memory limit and a 10 s timeout per input, so
# unbounded memory and hangs count as findings. New inputs go to fuzz/work/TARGET (the
# committed seeds in fuzz/corpus/TARGET are read only); a crash is saved in
# fuzz/artifacts/TARGET. Exits non-zero when any target found something.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -u
secs=${1:-60}
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/../fuzz" || exit 1
export CARGO_TARGET_DIR="$PWD/target"
flags="-O --debug-assertions"
cargo +nightly fuzz build $flags || exit 1
targets=${*:-$(cargo +nightly fuzz list)}
failed=""
for t in $targets; do
    mkdir -p "work/$t" "corpus/$t"
    echo "== $t: $secs s"
    cargo +nightly fuzz run $flags "$t" "work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 |
        grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|==[0-9]+==|SUMMARY|.*panicked at|.*Test unit written)'
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed="$failed $t"
done
if [ -n "$failed" ]; then
    echo "fuzz: findings in:$failed (see fuzz/artifacts/)"
    exit 1
fi
echo "fuzz: no findings"
