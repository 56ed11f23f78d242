#!/usr/bin/env bash
# Installs what the tests need, builds everything (the DynamoRIO client must exist before
# the end-to-end tests run) and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Every unsafe block has its SAFETY comment and every unsafe fn its contract, per file.
bash scripts/unsafe-audit.sh >/dev/null || { bash scripts/unsafe-audit.sh | grep MISMATCH; echo "unsafe-audit: mismatch"; exit 1; }
cargo build --release --workspace
log=$(mktemp)
status=0
cargo test --release --workspace --lib --bins --tests --no-fail-fast 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: .* ([0-9]+) passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
rm -f "$log"
if grep -qw avx512vl /proc/cpuinfo && grep -qw avx512f /proc/cpuinfo; then
  echo "avx512: this CPU has AVX-512F/VL: corpora/avx512 ran its AVX-512 forms under dep record"
else
  echo "avx512: this CPU lacks AVX-512F/VL: corpora/avx512 ran only its scalar half; avx512_forms_encode checked the instrumentation"
fi
echo "tests: $passed passed, $failed failed"
exit $status
