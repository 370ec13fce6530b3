#!/usr/bin/env bash
# End-to-end tests with the real AG-UI clients: HttpAgent from @ag-ui/client 1.0.0 and 0.0.59
# (the version CopilotKit ships) against the agui-host binary, whose model is a fake
# OpenAI-compatible server (tests/e2e/fake-openai.mjs), plus the offline model.
#
#   scripts/e2e.sh                               # builds target/debug/agui-host first
#   AGUI_HOST_BIN=path/to/agui-host scripts/e2e.sh   # tests that binary, builds nothing
#
# Needs cargo, node >= 20 and npm (the npm registry, or a warm npm cache). Exits non-zero when a
# test fails. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/agui-host-bin.sh

echo "==> npm ci (tests/e2e)"
npm ci --prefix tests/e2e --no-audit --no-fund --prefer-offline --loglevel=error

echo "==> node --test tests/e2e"
node --version
node --test --test-reporter=tap tests/e2e/*.test.mjs
