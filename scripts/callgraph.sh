#!/usr/bin/env bash
# Draws a profile's call graph: dep callgrind, then gprof2dot and Graphviz's dot.
#   scripts/callgraph.sh PROFILE OUT.svg|OUT.png [gprof2dot options, e.g. -n 1 -e 0.5]
# Nodes are functions (self and inclusive instructions, as callgrind counts them), edges
# calls with their counts; functions under 0.5% of the total are left out by default.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 PROFILE OUT.svg|OUT.png [gprof2dot options]" >&2
  exit 2
fi
profile=$1 out=$2
shift 2
case "$out" in
  *.svg) fmt=svg ;;
  *.png) fmt=png ;;
  *) echo "$0: $out: the output must end in .svg or .png" >&2; exit 2 ;;
esac
for tool in gprof2dot dot; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (bash scripts/setup.sh installs it)" >&2; exit 1; }
done
dep=${DEP:-$(command -v dep || echo "$(dirname "$0")/../target/release/dep")}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dep" callgrind "$profile" -o "$tmp/callgrind.out"
gprof2dot -f callgrind --strip "$@" -o "$tmp/graph.dot" "$tmp/callgrind.out"
dot -T"$fmt" -o "$out" "$tmp/graph.dot"
echo "$out"
