//! The overhead of an MCP tool call over a `static` tool: the same trivial call (`ping`,
//! answering `pong`) through the in-repo rmcp server over stdio and over streamable HTTP, next
//! to a `static` tool answering the same text. Every call goes through the registry's argument
//! check and the tool's `call`, as a run's server tool call does.
//!
//! `cargo bench --bench mcp` (builds `examples/mcp_test_server` in release mode when missing).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agui_host::settings::{McpServerSettings, McpTransportSettings, Settings};
use agui_host::tools::mcp::McpServers;
use agui_host::tools::{RegisteredTool, StaticResultTool, Tool, ToolContext};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

fn test_server_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let server = profile.join("examples/mcp_test_server");
    if !server.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "--example", "mcp_test_server"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success());
    }
    server
}

fn server(name: &str, transport: McpTransportSettings) -> McpServerSettings {
    McpServerSettings {
        name: name.into(),
        transport,
        include: vec!["ping".into()],
        exclude: Vec::new(),
        optional: false,
        connect_timeout_secs: 30,
        tools: Default::default(),
    }
}

fn context() -> ToolContext {
    ToolContext {
        scope: "s".into(),
        agent: "a".into(),
        thread_id: "t".into(),
        run_id: "r".into(),
        tool_call_id: "c".into(),
        message_id: None,
        state: None,
        progress: None,
        events: None,
        input: None,
    }
}

async fn call(tool: &RegisteredTool) -> Value {
    let arguments = json!({});
    tool.validate(&arguments).unwrap();
    tool.tool.call(arguments, context()).await.unwrap().content
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let exe = test_server_exe();
    let mut http_child = std::process::Command::new(&exe)
        .arg("http")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let url = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(http_child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().to_owned()
    };
    let mut settings = Settings::embedded_default().unwrap();
    let agent = settings.default_agent.clone();
    settings.agents.get_mut(&agent).unwrap().mcp_servers = vec![
        server(
            "stdio",
            McpTransportSettings::Stdio {
                command: exe.to_string_lossy().into_owned(),
                args: vec!["stdio".into()],
                env: Default::default(),
                cwd: None,
            },
        ),
        server(
            "http",
            McpTransportSettings::Http {
                url,
                headers_from_env: Default::default(),
                identity_headers: Default::default(),
            },
        ),
    ];
    let servers = runtime.block_on(McpServers::start(&settings)).unwrap();
    let tool = |name: &str| {
        servers
            .sources_for(&agent)
            .iter()
            .find_map(|source| source.current_tools().get(name).cloned())
            .unwrap()
    };
    let stdio = tool("stdio__ping");
    let http = tool("http__ping");
    let fixed: Arc<dyn Tool> = Arc::new(StaticResultTool::new(
        "ping",
        "Answers pong",
        json!({"type": "object", "properties": {}}),
        json!("pong"),
        None,
    ));
    let fixed = RegisteredTool::new(fixed).unwrap();
    assert_eq!(runtime.block_on(call(&stdio)), json!("pong"));
    assert_eq!(runtime.block_on(call(&http)), json!("pong"));

    let mut group = c.benchmark_group("tool_call");
    group.bench_function("static", |b| b.to_async(&runtime).iter(|| call(&fixed)));
    group.bench_function("mcp_stdio", |b| b.to_async(&runtime).iter(|| call(&stdio)));
    group.bench_function("mcp_http", |b| b.to_async(&runtime).iter(|| call(&http)));
    group.finish();

    runtime.block_on(servers.shutdown());
    let _ = http_child.kill();
    let _ = http_child.wait();
}

criterion_group!(benches, bench);
criterion_main!(benches);
