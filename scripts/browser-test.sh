#!/usr/bin/env bash
# The browser test of the CopilotKit example (examples/copilotkit/): Debian's Chromium, driven by
# playwright-core, types a request into the CopilotKit page, sees the recipe fill in through
# predictive state, and answers the approval card both ways. Screenshots land in
# examples/copilotkit/artifacts/ (ARTIFACTS_DIR, relative to the example).
#
#   scripts/browser-test.sh                                  # builds target/debug/agui-host first
#   AGUI_HOST_BIN=path/to/agui-host scripts/browser-test.sh  # tests that binary, builds nothing
#
# Needs cargo, node >= 20, npm (the npm registry, or a warm npm cache) and Chromium: when
# /usr/bin/chromium (or CHROMIUM_BIN) is missing it is installed from Debian's packages, which
# needs root. Playwright's own browser download is never used.
set -euo pipefail
cd "$(dirname "$0")/.."

export CHROMIUM_BIN="${CHROMIUM_BIN:-/usr/bin/chromium}"
if [[ ! -x "$CHROMIUM_BIN" ]]; then
  echo "==> apt-get install chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
"$CHROMIUM_BIN" --version

if [[ -z "${AGUI_HOST_BIN:-}" ]]; then
  echo "==> cargo build (debug)"
  cargo build --locked --bin agui-host
  target_dir="$(cargo metadata --format-version 1 --no-deps --locked \
    | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')"
  export AGUI_HOST_BIN="$target_dir/debug/agui-host"
fi
echo "==> server binary: $AGUI_HOST_BIN"

echo "==> npm ci (examples/copilotkit)"
npm ci --prefix examples/copilotkit --no-audit --no-fund --prefer-offline --loglevel=error

echo "==> vite build"
npm run --prefix examples/copilotkit --silent build -- --logLevel warn

echo "==> node --test examples/copilotkit/test"
(cd examples/copilotkit && node --test --test-reporter=spec test/)
echo "==> screenshots in examples/copilotkit/${ARTIFACTS_DIR:-artifacts}/"
