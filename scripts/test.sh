#!/usr/bin/env bash
# Installs what the tests need and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --release --workspace 2>&1
