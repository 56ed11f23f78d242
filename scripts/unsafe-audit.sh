#!/usr/bin/env bash
# Per crate and file: occurrences of `unsafe` in code (comments stripped) against
# `SAFETY:` comments plus `# Safety` doc sections; exits non-zero on any mismatch,
# so every unsafe block has its SAFETY comment and every unsafe fn its contract.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
for dir in src tests benches examples profile recover dcfg-out collector collector/client; do
    [ -d "$dir" ] || continue
    skip=(); [ "$dir" = collector ] && skip=(-not -path 'collector/client/*')
    tu=0 ts=0
    while IFS= read -r f; do
        u=$(sed 's://.*$::' "$f" | grep -ow unsafe | wc -l || true)
        s=$(grep -oE 'SAFETY:|# Safety' "$f" | wc -l || true)
        tu=$((tu + u)) ts=$((ts + s))
        mark=""
        if [ "$u" -ne "$s" ]; then mark="  MISMATCH"; bad=1; fi
        [ "$u" -eq 0 ] && [ "$s" -eq 0 ] || printf '  %-45s unsafe %3d  safety %3d%s\n' "$f" "$u" "$s" "$mark"
    done < <(find "$dir" -name '*.rs' -not -path '*/target/*' "${skip[@]}" | sort)
    printf '%-47s unsafe %3d  safety %3d\n' "$dir" "$tu" "$ts"
done
exit $bad
