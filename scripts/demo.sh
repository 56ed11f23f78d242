#!/usr/bin/env bash
# Sets everything up, installs dep on the PATH, then records a small bundled program and
# recovers its memory trace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install.sh # builds, then installs dep into /usr/local (or ~/.local)
make -s -C corpora OUT="$PWD/target/corpora"
dep=$(command -v dep || echo "$HOME/.local/bin/dep")
out=target/demo
mkdir -p "$out"
echo "== dep record -o $out/hello.dep --truth -- target/corpora/hello"
"$dep" record -o "$out/hello.dep" --truth -- target/corpora/hello
echo "== dep dump: the per-thread streams and their sizes"
"$dep" dump --max 0 "$out/hello.dep" | sed -n '/^threads/,/^$/p'
echo "== dep stats"
"$dep" stats "$out/hello.dep"
echo "== dep recover --format text (first lines)"
"$dep" recover "$out/hello.dep" --format text -o "$out/hello.refs"
head -5 "$out/hello.refs"
"$dep" recover "$out/hello.dep" --truth --format text -o "$out/hello.truth"
if cmp -s "$out/hello.refs" "$out/hello.truth"; then
  echo "== recovered trace equals the observed one: $(wc -l < "$out/hello.refs") references"
else
  echo "== recovered trace DIFFERS from the observed one" >&2
  exit 1
fi
