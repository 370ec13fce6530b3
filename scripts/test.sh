#!/usr/bin/env bash
# The whole test suite: the Rust unit and API tests, then the end-to-end tests that drive the
# server with the real AG-UI clients (see scripts/e2e.sh; needs node >= 20 and npm).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo test"
cargo test --locked

scripts/e2e.sh
