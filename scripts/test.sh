#!/usr/bin/env bash
# The whole test suite: the Rust unit and API tests, the compose file as a fresh clone has it
# (scripts/compose-check.sh), the end-to-end tests that drive the server
# with the real AG-UI clients (see scripts/e2e.sh; needs node >= 20 and npm), then the browser
# test of the CopilotKit example (see scripts/browser-test.sh; needs Chromium, which it installs
# from Debian's packages when missing; about 20 s once installed). SKIP_BROWSER_TEST=1 skips
# the browser test. The thread-store tests start a real redis-server and a real PostgreSQL,
# installed from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v "${REDIS_SERVER_BIN:-redis-server}" >/dev/null 2>&1; then
  echo "==> apt-get install redis-server (the thread-store tests start one)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
if [ -z "${PG_BIN_DIR:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "==> apt-get install postgresql (the Postgres thread-store tests start one)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

echo "==> MCP test servers (npm ci in tests/mcp)"
(cd tests/mcp && npm ci --no-audit --no-fund --silent)

echo "==> cargo test"
cargo test --locked

echo "==> no MCP server outlived the tests"
# The MCP tests start servers from tests/mcp and examples/mcp_test_server; none may be left.
if pgrep -af 'tests/mcp/node_modules|examples/mcp_test_server' | grep -v pgrep; then
  echo "MCP server processes outlived the test suite (listed above)" >&2
  exit 1
fi

echo "==> docker-compose.yml on a fresh clone"
scripts/compose-check.sh

scripts/e2e.sh

if [[ -n "${SKIP_BROWSER_TEST:-}" ]]; then
  echo "==> browser test: skipped (SKIP_BROWSER_TEST is set)"
else
  scripts/browser-test.sh
fi
