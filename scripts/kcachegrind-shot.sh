#!/usr/bin/env bash
# A screenshot of KCachegrind showing a profile, as a user would see it: dep callgrind, then
# KCachegrind on a virtual display (Xvfb), the bottom pane on its call graph.
#   scripts/kcachegrind-shot.sh PROFILE|CALLGRIND_FILE OUT.png [FUNCTION]
# Needs kcachegrind, xvfb, x11-apps (xwd), imagemagick and xdotool:
#   apt-get install kcachegrind xvfb x11-apps imagemagick xdotool dbus-x11
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 PROFILE|CALLGRIND_FILE OUT.png [FUNCTION]" >&2
  exit 2
fi
input=$1 out=$2 function=${3:-main}
for tool in kcachegrind Xvfb xwd convert xdotool dbus-run-session; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (see the comment at the top)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
if head -c 64 "$input" | grep -q '^# callgrind format'; then
  cp "$input" "$tmp/callgrind.out"
else
  dep=${DEP:-$(command -v dep || echo "$(dirname "$0")/../target/release/dep")}
  "$dep" callgrind "$input" -o "$tmp/callgrind.out"
fi
# A display of its own, and a configuration that skips the tip of the day.
display=:$((90 + RANDOM % 100))
Xvfb "$display" -screen 0 1600x1000x24 >/dev/null 2>&1 &
export DISPLAY=$display XDG_CONFIG_HOME=$tmp/config XDG_RUNTIME_DIR=$tmp/run
mkdir -p "$XDG_CONFIG_HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
printf '[TipOfDay]\nRunOnStart=false\n' >"$XDG_CONFIG_HOME/kcachegrindrc"
sleep 2
dbus-run-session -- kcachegrind --qwindowgeometry 1600x1000+0+0 "$tmp/callgrind.out" >"$tmp/kc.log" 2>&1 &
for _ in $(seq 60); do
  xdotool search --name 'callgrind.out' >/dev/null 2>&1 && break
  sleep 0.5
done
sleep 4
# The function (the first of the flat profile's search for it), then the call graph tab.
xdotool mousemove 140 89 click 1 type --delay 20 "$function"
xdotool key Return
sleep 1
xdotool mousemove 520 956 click 1
sleep 4
xwd -root -silent | convert xwd:- png:"$out"
echo "$out"
