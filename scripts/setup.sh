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
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "setup: build dependencies present (cmake, libclang, gcc, g++, make, valgrind, python3)"
fi
# gprof2dot (PyPI): one of the Callgrind readers the tests run dep's profiles through.
if ! python3 -c 'import gprof2dot' 2>/dev/null && ! command -v gprof2dot >/dev/null; then
  echo "setup: installing gprof2dot (pip)"
  command -v pip3 >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq python3-pip >/dev/null; }
  python3 -m pip install -q gprof2dot 2>/dev/null || python3 -m pip install -q --break-system-packages gprof2dot
fi
command -v cargo >/dev/null || {
  echo "setup: cargo not found; install Rust (rustup) first" >&2
  exit 1
}
