#!/usr/bin/env bash
# Installs what the tests need, builds everything (the DynamoRIO client must exist before
# the end-to-end tests run) and runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --workspace
cargo test --release --workspace 2>&1
