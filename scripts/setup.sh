#!/usr/bin/env bash
# Installs what building and testing dep needs (DynamoRIO is built from source by the
# dynamorio-sys crate, which runs cmake and bindgen). Idempotent; says what it installs.
set -euo pipefail

# bindgen (clang-sys) loads libclang.so, libclang-N.so or libclang.so.N: the files of the
# libclang-dev / libclangN packages. libclang-cpp.so.N (which images often ship) is a different
# library that bindgen cannot use, so it must not count.
have_libclang() {
  local f
  for f in /usr/lib/llvm-*/lib/libclang.so /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
    /usr/lib/x86_64-linux-gnu/libclang.so /usr/lib/x86_64-linux-gnu/libclang-[0-9]*.so* \
    /usr/lib/x86_64-linux-gnu/libclang.so.[0-9]*; do
    [ -e "$f" ] && return 0
  done
  return 1
}

need=()
command -v cmake >/dev/null || need+=(cmake)
have_libclang || need+=(libclang-dev)
command -v gcc >/dev/null || need+=(gcc)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v valgrind >/dev/null || need+=(valgrind)
command -v python3 >/dev/null || need+=(python3)
command -v xz >/dev/null || need+=(xz-utils)  # tests read ChampSim traces as ChampSim does
command -v node >/dev/null || need+=(nodejs)  # a JIT runtime the collector tests record
command -v javac >/dev/null || need+=(default-jdk-headless)  # ... and another, with threads
command -v gdb >/dev/null || need+=(gdb)      # the symbolizer's tests ask gdb and addr2line
command -v dwz >/dev/null || need+=(dwz)      # ... and read a debug file dwz split
command -v dot >/dev/null || need+=(graphviz) # scripts/callgraph.sh draws call graphs
# KCachegrind, on a virtual display: the tests open every corpus profile in it.
command -v kcachegrind >/dev/null || need+=(kcachegrind)
command -v xvfb-run >/dev/null || need+=(xvfb)
command -v dbus-run-session >/dev/null || need+=(dbus)
# libc's separate debug file: the tests name libc's local functions as Valgrind does.
dpkg-query -W -f='${Status}' libc6-dbg 2>/dev/null | grep -q 'ok installed' || need+=(libc6-dbg)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "setup: build dependencies present (cmake, libclang, gcc, g++, make, valgrind, python3, xz, gdb, dwz, graphviz, kcachegrind, xvfb, libc6-dbg)"
fi
# A PyPI package through pip, unless python3 imports it already or its command is on PATH.
pip_install() {
  local pkg=$1
  python3 -c "import $pkg" 2>/dev/null && return 0
  command -v "$pkg" >/dev/null && return 0
  echo "setup: installing $pkg (pip)"
  command -v pip3 >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq python3-pip >/dev/null; }
  python3 -m pip install -q "$pkg" 2>/dev/null || python3 -m pip install -q --break-system-packages "$pkg"
}
# gprof2dot: one of the Callgrind readers the tests run dep's profiles through.
pip_install gprof2dot
# duckdb: the Parquet export's test and examples/find_race.py query traces with it.
pip_install duckdb
command -v cargo >/dev/null || {
  echo "setup: cargo not found; install Rust (rustup) first" >&2
  exit 1
}
