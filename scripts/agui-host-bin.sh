# Sourced by the test scripts: sets AGUI_HOST_BIN to the debug binary, built first, unless the
# caller already named a binary. Wherever cargo puts it (CARGO_TARGET_DIR, .cargo/config.toml,
# or ./target). The MCP test server (the CopilotKit example's MCP App) is built beside it.
if [[ -z "${AGUI_HOST_BIN:-}" ]]; then
  echo "==> cargo build (debug)"
  cargo build --locked --bin agui-host --example mcp_test_server
  target_dir="$(cargo metadata --format-version 1 --no-deps --locked \
    | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')"
  export AGUI_HOST_BIN="$target_dir/debug/agui-host"
fi
echo "==> server binary: $AGUI_HOST_BIN"
