#!/usr/bin/env bash
# Installs dep into PREFIX (default /usr/local, or ~/.local where /usr/local is not writable):
#   PREFIX/bin/dep
#   PREFIX/lib/dep/libdep_client.so          the DynamoRIO client
#   PREFIX/lib/dep/dep-attach                 the injector behind dep record --attach
#   PREFIX/lib/dep/dynamorio/                 DynamoRIO's libraries (lib64/release, ext/lib64/release)
# dep finds lib/dep relative to its own executable, so the install keeps working when the
# checkout is cleaned or moved, and the whole PREFIX can be moved. Builds first unless
# DEP_NO_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-}
if [ -z "$prefix" ]; then
  if [ -w /usr/local/bin ] && [ -w /usr/local/lib ]; then prefix=/usr/local; else prefix=$HOME/.local; fi
fi
if [ "${DEP_NO_BUILD:-0}" != 1 ]; then
  cargo build --release --workspace
fi
rel=target/release
for f in "$rel/dep" "$rel/libdep_client.so" "$rel/dep-attach"; do
  [ -f "$f" ] || { echo "install: $f is missing: build with cargo build --release --workspace" >&2; exit 1; }
done
# The DynamoRIO tree dep itself would use from the build: the newest one.
dr_so=$(ls -dt "$rel"/build/dynamorio-sys-*/out/build/lib64/release/libdynamorio.so 2>/dev/null | head -n 1)
[ -n "$dr_so" ] || { echo "install: no DynamoRIO build under $rel/build: build with cargo build --release --workspace" >&2; exit 1; }
tree=${dr_so%/lib64/release/libdynamorio.so}

lib="$prefix/lib/dep"
mkdir -p "$prefix/bin" "$lib"
stage=$(mktemp -d "$lib/.dynamorio.XXXXXX")
mkdir -p "$stage/lib64/release" "$stage/ext/lib64/release" "$stage/cmake"
cp "$tree"/lib64/release/*.so "$stage/lib64/release/"
cp "$tree"/ext/lib64/release/*.so "$stage/ext/lib64/release/"
cp "$tree"/cmake/DynamoRIOConfigVersion.cmake "$stage/cmake/"
rm -rf "$lib/dynamorio"
mv "$stage" "$lib/dynamorio"
chmod 755 "$lib/dynamorio"
install -m 755 "$rel/libdep_client.so" "$lib/libdep_client.so"
install -m 755 "$rel/dep-attach" "$lib/dep-attach"
install -m 755 "$rel/dep" "$prefix/bin/dep"
echo "install: dep in $prefix/bin, DynamoRIO and the client in $lib"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "install: add $prefix/bin to PATH (export PATH=\"$prefix/bin:\$PATH\")" ;;
esac
"$prefix/bin/dep" --version
