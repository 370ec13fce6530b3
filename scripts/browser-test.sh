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
# /usr/bin/chromium (or CHROMIUM_BIN) is missing it is installed from Debian's packages, with an
# emoji font for the recipe's icons, which needs root. Playwright's own browser download is
# never used.
set -euo pipefail
cd "$(dirname "$0")/.."

export CHROMIUM_BIN="${CHROMIUM_BIN:-/usr/bin/chromium}"
if [[ ! -x "$CHROMIUM_BIN" ]]; then
  echo "==> apt-get install chromium fonts-noto-color-emoji"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-color-emoji >/dev/null
fi
# (The Debian launcher script warns about /dev/shm on some machines; only the version matters.)
"$CHROMIUM_BIN" --version 2>/dev/null

source scripts/agui-host-bin.sh

# npm ci starts from an empty node_modules every time, a minute for CopilotKit's 800 MB; skip
# it while node_modules was installed from this very lock file.
example=examples/copilotkit
stamp="$example/node_modules/.installed-from-lock"
if [[ -f "$stamp" ]] && cmp -s "$stamp" "$example/package-lock.json"; then
  echo "==> npm ci (examples/copilotkit): node_modules matches package-lock.json, skipped"
else
  echo "==> npm ci (examples/copilotkit)"
  npm ci --prefix "$example" --no-audit --no-fund --prefer-offline --loglevel=error
  cp "$example/package-lock.json" "$stamp"
fi

echo "==> vite build"
npm run --prefix "$example" --silent build -- --logLevel warn

echo "==> node --test examples/copilotkit/test"
(cd "$example" && node --test --test-reporter=spec test/)
echo "==> screenshots in $example/${ARTIFACTS_DIR:-artifacts}/"
