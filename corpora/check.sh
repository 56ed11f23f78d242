#!/bin/sh
# Determinism check: runs each corpus program twice (plus once under valgrind --tool=none if VALGRIND=1)
# and verifies identical stdout+stderr and the expected exit status.  Usage: check.sh [build-dir]
OUT=${1:-$(dirname "$0")/build}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

expected_status() {
    case "$1" in
        exit_code) echo 3 ;;
        execmissing|attach) echo 5 ;;
        *) echo 0 ;;
    esac
}

run() { # run <name> <tag> [wrapper...]
    name=$1 tag=$2
    shift 2
    "$@" "$OUT/$name" >"$TMP/$name.$tag.out" 2>&1 </dev/null
    echo $? >"$TMP/$name.$tag.rc"
}

for prog in attach hello libcalls exit_code threads signal_loop longtrace siglongjmp repstring avx exceptions forkexec jit syscalls stack sigblock vfork clone execmissing fdexhaust many_threads vdso; do
    if [ ! -x "$OUT/$prog" ]; then echo "MISSING $prog"; fail=1; continue; fi
    want=$(expected_status "$prog")
    run "$prog" 1
    run "$prog" 2
    status="ok"
    cmp -s "$TMP/$prog.1.out" "$TMP/$prog.2.out" || status="OUTPUT DIFFERS between runs"
    [ "$(cat "$TMP/$prog.1.rc")" = "$(cat "$TMP/$prog.2.rc")" ] || status="STATUS DIFFERS between runs"
    [ "$(cat "$TMP/$prog.1.rc")" = "$want" ] || status="status $(cat "$TMP/$prog.1.rc"), expected $want"
    if [ "$VALGRIND" = 1 ]; then
        run "$prog" vg valgrind -q --tool=none
        cmp -s "$TMP/$prog.1.out" "$TMP/$prog.vg.out" || status="$status; valgrind OUTPUT DIFFERS"
        [ "$(cat "$TMP/$prog.vg.rc")" = "$want" ] || status="$status; valgrind status $(cat "$TMP/$prog.vg.rc")"
    fi
    printf '%-12s exit=%s  %s\n' "$prog" "$(cat "$TMP/$prog.1.rc")" "$status"
    if [ "$status" != ok ]; then
        fail=1
        diff "$TMP/$prog.1.out" "$TMP/$prog.2.out" | head -20
        [ "$VALGRIND" = 1 ] && diff "$TMP/$prog.1.out" "$TMP/$prog.vg.out" | head -20
    fi
done
exit $fail
