//! MCP tools against real MCP servers: the MCP project's reference server
//! (`@modelcontextprotocol/server-everything`, pinned in `tests/mcp/package.json` and installed
//! with `npm ci` on first use) over stdio and streamable HTTP, and the in-repo `rmcp` server
//! (`examples/mcp_test_server.rs`) for slow tools, cancellation, structured content and tool
//! list changes. The model is the fake upstream.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use agui_host::settings::{
    ApprovalPolicySetting, FixedApproval, McpServerSettings, McpToolSettings, McpTransportSettings,
    ResultStateKind, Settings, ToolStateRule, ToolStateSource,
};
use agui_host::tools::mcp::McpServers;
use serde_json::{json, Value};

use crate::approvals::{client_history, interrupt_id, resolved, resume_input};
use crate::fake_llm::{chunks, FakeLlm, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

// ---- Servers ---------------------------------------------------------------------------------

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The reference server's entry point, installed by `npm ci` once per test process.
fn everything_js() -> PathBuf {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let folder = repo().join("tests/mcp");
            let entry =
                folder.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
            if !entry.exists() {
                let status = std::process::Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund"])
                    .current_dir(&folder)
                    .status()
                    .expect("npm runs (node and npm are needed for the MCP tests)");
                assert!(status.success(), "npm ci in tests/mcp failed");
            }
            entry
        })
        .clone()
}

/// The in-repo rmcp server, built (or found fresh: cargo checks) on first use, so a run filtered
/// to one test binary never meets a server older than its tests.
pub(crate) fn test_server_exe() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let deps = std::env::current_exe().expect("test exe");
            let profile = deps
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>");
            let exe = profile.join("examples/mcp_test_server");
            let status = std::process::Command::new(env!("CARGO"))
                .args(["build", "--example", "mcp_test_server"])
                .current_dir(repo())
                .status()
                .expect("cargo builds the test server");
            assert!(status.success());
            exe
        })
        .clone()
}

fn stdio(name: &str, command: &str, args: &[&str]) -> McpServerSettings {
    McpServerSettings {
        name: name.into(),
        transport: McpTransportSettings::Stdio {
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Default::default(),
            cwd: None,
        },
        include: Vec::new(),
        exclude: Vec::new(),
        optional: false,
        connect_timeout_secs: 30,
        tools: Default::default(),
    }
}

pub(crate) fn everything() -> McpServerSettings {
    let js = everything_js();
    stdio("everything", "node", &[js.to_str().unwrap(), "stdio"])
}

pub(crate) fn test_server() -> McpServerSettings {
    let exe = test_server_exe();
    stdio("test", exe.to_str().unwrap(), &["stdio"])
}

pub(crate) fn http(name: &str, url: &str) -> McpServerSettings {
    McpServerSettings {
        transport: McpTransportSettings::Http {
            url: url.into(),
            headers_from_env: Default::default(),
            identity_headers: Default::default(),
        },
        ..stdio(name, "unused", &[])
    }
}

/// A server process the test started itself, killed when dropped.
pub(crate) struct ChildServer {
    _child: tokio::process::Child,
    pub(crate) url: String,
}

/// The reference server over streamable HTTP, on a port picked free.
async fn everything_over_http() -> ChildServer {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let child = tokio::process::Command::new("node")
        .arg(everything_js())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ChildServer {
        _child: child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

/// The in-repo server over streamable HTTP (it prints its URL first).
pub(crate) async fn test_server_over_http() -> ChildServer {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(test_server_exe())
        .arg("http")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the test server starts");
    let stdout = child.stdout.take().unwrap();
    let url = tokio::io::BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .unwrap()
        .expect("the URL line");
    ChildServer { _child: child, url }
}

// ---- App -------------------------------------------------------------------------------------

pub(crate) struct McpApp {
    pub(crate) app: TestApp,
    mcp: McpServers,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The app with the default agent's MCP servers set by `configure`.
pub(crate) async fn spawn_mcp_app(configure: impl FnOnce(&mut Settings)) -> McpApp {
    let fake = FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    configure(&mut settings);
    let app = agui_host::app::App::build(settings)
        .await
        .expect("the app builds");
    let mcp = app.mcp_servers().clone();
    let address = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    McpApp {
        app: TestApp {
            address,
            fake,
            client: reqwest::Client::new(),
        },
        mcp,
        stop: Some(stop),
        task,
    }
}

impl McpApp {
    pub(crate) async fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

pub(crate) fn assistant_of(settings: &mut Settings) -> &mut agui_host::settings::AgentSettings {
    let name = settings.default_agent.clone();
    settings.agents.get_mut(&name).unwrap()
}

pub(crate) fn with_servers(settings: &mut Settings, servers: Vec<McpServerSettings>) {
    assistant_of(settings).mcp_servers = servers;
}

/// The tool message the model got for `tool_call_id` in request `n`.
pub(crate) fn tool_message(app: &TestApp, n: usize, tool_call_id: &str) -> String {
    let body = &app.upstream_bodies()[n];
    let message = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == tool_call_id)
        .unwrap_or_else(|| panic!("a tool message for {tool_call_id}: {body}"));
    content_text(message)
}

pub(crate) fn result_of(events: &[Value], tool_call_id: &str) -> String {
    of_type(events, "TOOL_CALL_RESULT")
        .into_iter()
        .find(|e| e["toolCallId"] == tool_call_id)
        .unwrap_or_else(|| panic!("a result for {tool_call_id}: {:?}", types(events)))["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn pid_alive(pid: u32) -> bool {
    // A zombie has exited: only a live process counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            state != Some("Z")
        })
        .unwrap_or(false)
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .nth(1);
        if parent == Some(&pid.to_string()) {
            children.push(child);
        }
    }
    children
}

/// Kills `pid` at once (SIGKILL), as a crash would.
fn kill_hard(pid: u32) {
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -9 {pid}");
}

/// `/ready`'s body once it answers `status` (a reconnection waits for its backoff).
async fn ready_once_it_answers(app: &TestApp, status: u16) -> Value {
    for _ in 0..200 {
        let response = app.get("/ready").await;
        if response.status() == status {
            return response.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("/ready never answered {status}");
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..200 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

// ---- The reference server over stdio -------------------------------------------------------

#[tokio::test]
async fn a_stdio_servers_tools_are_listed_with_their_prefix_called_and_answered() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![everything()])).await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "everything__get-sum", r#"{"a": 2, "b": 40}"#),
        "The sum is 42.",
    );
    let events = app.run_events("/", &input(vec![user("2 + 40?")])).await;
    assert_well_formed(&events);

    let listed = tool_names(&app.upstream_bodies()[0]).join(",");
    for tool in [
        "everything__echo",
        "everything__get-sum",
        "everything__get-structured-content",
    ] {
        assert!(listed.split(',').any(|t| t == tool), "{tool} in {listed}");
    }
    let result = result_of(&events, "call_1");
    assert!(result.contains("42"), "{result}");
    assert_eq!(
        tool_message(app, 1, "call_1"),
        result,
        "the model gets the same result"
    );
    assert_eq!(texts(&events).last().unwrap().1, "The sum is 42.");
    mcp.shut_down().await;
}

#[tokio::test]
async fn include_and_exclude_choose_the_tools_the_model_sees() {
    let mcp = spawn_mcp_app(|s| {
        let mut server = everything();
        server.include = vec!["echo".into(), "get-sum".into(), "get-env".into()];
        server.exclude = vec!["get-env".into()];
        with_servers(s, vec![server]);
    })
    .await;
    mcp.app.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    mcp.app.run_events("/", &input(vec![user("Hi")])).await;
    let names: Vec<String> = tool_names(&mcp.app.upstream_bodies()[0])
        .into_iter()
        .filter(|n| n.starts_with("everything__"))
        .map(str::to_owned)
        .collect();
    assert_eq!(names, ["everything__echo", "everything__get-sum"]);
    mcp.shut_down().await;
}

#[tokio::test]
async fn an_is_error_result_reaches_the_model_as_a_tool_error() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![everything()])).await;
    let app = &mcp.app;
    // The tool refuses an ftp URL with a message of its own, in a result with isError (a
    // JSON-RPC error would reach the model worded as a refusal of the call instead).
    app.fake.push_call_then_text(
        (
            "call_1",
            "everything__gzip-file-as-resource",
            r#"{"name": "x.gz", "data": "ftp://127.0.0.1/x", "outputType": "resource"}"#,
        ),
        "That failed.",
    );
    let events = app.run_events("/", &input(vec![user("Zip it")])).await;
    assert_well_formed(&events);
    let content = result_of(&events, "call_1");
    let result: Value = serde_json::from_str(&content).unwrap();
    assert_eq!(
        result,
        json!({"error": "Error processing file ftp://127.0.0.1/x: Unsupported URL protocol for \
            ftp://127.0.0.1/x. Only http, https, and data URLs are supported."}),
        "the server's own text, nothing else"
    );
    assert_eq!(
        tool_message(app, 1, "call_1"),
        content,
        "the model reads it"
    );
    assert_eq!(
        last(&events)["type"],
        "RUN_FINISHED",
        "a tool error ends nothing"
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_stdio_server_gets_its_mapped_variables_and_no_other_variable_of_the_service() {
    // Cargo sets CARGO_MANIFEST_DIR for this process: mapped under another name it must
    // arrive; under its own name it must not (nor anything else off the allow-list).
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it for tests");
    let mcp = spawn_mcp_app(|s| {
        let mut server = everything();
        if let McpTransportSettings::Stdio { env, .. } = &mut server.transport {
            env.insert("MCP_PROBE".into(), "CARGO_MANIFEST_DIR".into());
        }
        with_servers(s, vec![server]);
    })
    .await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "everything__get-env", "{}"), "Seen.");
    let events = app.run_events("/", &input(vec![user("Env?")])).await;
    assert_well_formed(&events);
    let seen: Value = serde_json::from_str(&result_of(&events, "call_1")).unwrap();
    assert_eq!(seen["MCP_PROBE"], manifest_dir.as_str(), "{seen}");
    assert_eq!(
        seen["PATH"],
        std::env::var("PATH").unwrap().as_str(),
        "inherited"
    );
    let allowed = [
        "MCP_PROBE",
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "TMPDIR",
        "TERM",
    ];
    let unexpected: Vec<&String> = seen
        .as_object()
        .unwrap()
        .keys()
        .filter(|name| !allowed.contains(&name.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "not configured: {unexpected:?}");
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_mapped_variable_that_is_not_set_stops_the_start_naming_it() {
    let fake = FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    let mut server = test_server();
    if let McpTransportSettings::Stdio { env, .. } = &mut server.transport {
        env.insert("TOKEN".into(), "AGUI_MCP_TEST_SURELY_UNSET".into());
    }
    with_servers(&mut settings, vec![server]);
    let error = agui_host::app::App::build(settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`test`")
            && error.contains("`env.TOKEN`")
            && error.contains("`AGUI_MCP_TEST_SURELY_UNSET`, which is not set"),
        "{error}"
    );
}

#[tokio::test]
async fn a_call_that_outlives_the_tool_timeout_is_a_tool_error() {
    let mcp = spawn_mcp_app(|s| {
        assistant_of(s).tool_timeout_secs = 1;
        with_servers(s, vec![everything()]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        (
            "call_1",
            "everything__trigger-long-running-operation",
            r#"{"duration": 20, "steps": 4}"#,
        ),
        "It took too long.",
    );
    let started = std::time::Instant::now();
    let events = app.run_events("/", &input(vec![user("Go")])).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the timeout applies"
    );
    assert_well_formed(&events);
    let result = result_of(&events, "call_1");
    assert!(result.contains("timed out"), "{result}");
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_server_killed_mid_call_is_a_tool_error_then_restarted_for_the_next_run() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![everything()])).await;
    let app = &mcp.app;
    let pid = mcp.mcp.child_pids()[0];
    app.fake.push_call_then_text(
        (
            "call_1",
            "everything__trigger-long-running-operation",
            r#"{"duration": 10, "steps": 10}"#,
        ),
        "The server failed.",
    );
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        kill_hard(pid);
    });
    let events = app.run_events("/", &input(vec![user("Go")])).await;
    killer.await.unwrap();
    assert_well_formed(&events);
    let result: Value = serde_json::from_str(&result_of(&events, "call_1")).unwrap();
    assert!(
        result["error"].as_str().unwrap().contains("went away"),
        "{result}"
    );
    assert_eq!(last(&events)["type"], "RUN_FINISHED");

    // Restarted with backoff; /ready says so once it is back.
    let servers = mcp.mcp.clone();
    wait_until("the server is restarted", || {
        servers.down().0.is_empty() && servers.child_pids().first().is_some_and(|p| *p != pid)
    })
    .await;
    assert_eq!(app.get("/ready").await.status(), 200);
    app.fake.push_call_then_text(
        ("call_2", "everything__echo", r#"{"message": "again"}"#),
        "Back.",
    );
    let events = app.run_events("/", &input(vec![user("Echo")])).await;
    assert_well_formed(&events);
    assert!(result_of(&events, "call_2").contains("again"));
    mcp.shut_down().await;
}

#[tokio::test]
async fn ready_is_503_naming_a_required_server_while_it_is_down_then_200_once_it_is_back() {
    // The server starts only while a gate file is in its working directory: without the gate
    // every restart fails, so it stays down until the gate is back.
    let folder = std::env::temp_dir().join(format!("agui-host-mcp-gate-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let gate = folder.join("gate");
    std::fs::write(&gate, "").unwrap();
    let script = format!(
        "test -e gate && exec '{}' stdio",
        test_server_exe().display()
    );
    let mut gated = stdio("test", "sh", &["-c", &script]);
    if let McpTransportSettings::Stdio { cwd, .. } = &mut gated.transport {
        *cwd = Some(folder.clone());
    }
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![gated])).await;
    let app = &mcp.app;
    assert_eq!(app.get("/ready").await.status(), 200);

    let pid = mcp.mcp.child_pids()[0];
    std::fs::remove_file(&gate).unwrap();
    kill_hard(pid);
    let down = ready_once_it_answers(app, 503).await;
    assert_eq!(down["reason"], "mcp_server_down", "{down}");
    assert_eq!(down["mcp_down"], json!(["assistant/test"]), "{down}");

    std::fs::write(&gate, "").unwrap();
    let ready = ready_once_it_answers(app, 200).await;
    assert_eq!(ready["checks"]["mcp"], "ok", "{ready}");
    assert!(mcp.mcp.child_pids().first().is_some_and(|p| *p != pid));
    app.fake
        .push_call_then_text(("call_1", "test__ping", "{}"), "Back.");
    let events = app.run_events("/", &input(vec![user("Ping")])).await;
    assert_eq!(result_of(&events, "call_1"), "pong", "usable again");
    mcp.shut_down().await;
    std::fs::remove_dir_all(&folder).unwrap();
}

#[tokio::test]
async fn an_mcp_tool_that_needs_approval_interrupts_and_runs_once_when_approved() {
    let mcp = spawn_mcp_app(|s| {
        let mut server = everything();
        server.tools.insert(
            "echo".into(),
            McpToolSettings {
                approval: ApprovalPolicySetting::Fixed(FixedApproval::Always),
                ..Default::default()
            },
        );
        with_servers(s, vec![server]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[(
            "call_1",
            "everything__echo",
            r#"{"message": "approved text"}"#,
        )],
        false,
    )));
    let question = user("Echo it");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);
    assert!(
        of_type(&events, "TOOL_CALL_RESULT").is_empty(),
        "not run before approval"
    );
    let id = interrupt_id(&events, "call_1");
    let history = client_history(&[question], &events);

    app.fake.push(Reply::Sse(chunks::text_reply(&["Echoed."])));
    let resume = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));
    let events = app.run_events("/", &resume).await;
    assert_well_formed(&events);
    let results = of_type(&events, "TOOL_CALL_RESULT");
    assert_eq!(results.len(), 1, "{:?}", types(&events));
    assert!(result_of(&events, "call_1").contains("approved text"));
    assert!(tool_message(app, 1, "call_1").contains("approved text"));

    // The client keeps the result: the same resume again is a replay and runs nothing.
    let history = client_history(&resume["messages"].as_array().unwrap().clone(), &events);
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Nothing to do."])));
    let replay = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));
    let response = app.post_run("/", &replay).await;
    let text = response.text().await.unwrap();
    assert_eq!(
        parse_sse(&text)
            .iter()
            .filter(|e| e["type"] == "TOOL_CALL_RESULT")
            .count(),
        0,
        "{text}"
    );
    mcp.shut_down().await;
}

// ---- The reference server over streamable HTTP ---------------------------------------------

#[tokio::test]
async fn an_http_servers_tools_are_listed_and_called() {
    let server = everything_over_http().await;
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![http("web", &server.url)])).await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "web__echo", r#"{"message": "over http"}"#),
        "Done.",
    );
    let events = app.run_events("/", &input(vec![user("Echo")])).await;
    assert_well_formed(&events);
    assert!(tool_names(&app.upstream_bodies()[0]).contains(&"web__get-sum"));
    assert!(result_of(&events, "call_1").contains("over http"));
    assert!(tool_message(app, 1, "call_1").contains("over http"));
    let ready: Value = app.get("/ready").await.json().await.unwrap();
    assert_eq!(ready["checks"]["mcp"], "ok", "{ready}");
    mcp.shut_down().await;
}

// ---- Start-up ------------------------------------------------------------------------------

#[tokio::test]
async fn a_required_server_that_cannot_start_stops_the_start_and_an_optional_one_is_reported() {
    let fake = FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    with_servers(
        &mut settings,
        vec![stdio("broken", "/nonexistent/mcp-server", &[])],
    );
    let error = agui_host::app::App::build(settings.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("broken") && error.contains("cannot start"),
        "{error}"
    );

    let mut optional = stdio("broken", "/nonexistent/mcp-server", &[]);
    optional.optional = true;
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![optional])).await;
    let ready: Value = mcp.app.get("/ready").await.json().await.unwrap();
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(
        ready["checks"]["mcp"]["optional_down"],
        json!(["assistant/broken"]),
        "{ready}"
    );
    mcp.shut_down().await;
}

// ---- The in-repo server: what the reference server cannot show -----------------------------

/// Asks the in-repo server, in a new run, how many `slow` calls it saw cancelled, until it
/// says `expected` (the notification travels on its own).
async fn assert_cancelled_calls(app: &TestApp, expected: &str) {
    for attempt in 0.. {
        app.fake
            .push_call_then_text(("count", "test__cancelled_calls", "{}"), "Counted.");
        // A thread and run of its own: the run that hung up may still be ending on its thread.
        let mut body = input(vec![user("Count")]);
        body["threadId"] = json!(format!("count-{attempt}"));
        body["runId"] = json!(format!("count-{attempt}"));
        let events = app.run_events("/", &body).await;
        let count = result_of(&events, "count");
        if count == expected {
            return;
        }
        assert!(
            attempt < 20,
            "the server saw {count} cancellations, not {expected}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_timed_out_call_is_cancelled_on_the_server() {
    let mcp = spawn_mcp_app(|s| {
        assistant_of(s).tool_timeout_secs = 1;
        with_servers(s, vec![test_server()]);
    })
    .await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__slow", r#"{"seconds": 30}"#), "Too slow.");
    let events = app.run_events("/", &input(vec![user("Wait")])).await;
    assert!(result_of(&events, "call_1").contains("timed out"));
    assert_cancelled_calls(app, "1").await;
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_call_of_a_run_whose_client_hangs_up_is_cancelled_on_the_server() {
    // A run set to end with its connection (with a thread store, runs otherwise go on for the
    // reconnect grace period; see the resumable-run tests).
    let mcp = spawn_mcp_app(|s| {
        s.runs.on_disconnect = agui_host::settings::OnDisconnect::Cancel;
        with_servers(s, vec![test_server()]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "test__slow", r#"{"seconds": 30}"#)],
        false,
    )));
    let mut reader = EventReader::new(app.post_run("/", &input(vec![user("Wait")])).await);
    while let Some(event) = reader.next().await {
        if event["type"] == "TOOL_CALL_END" {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // the call is running
    reader.hang_up();
    assert_cancelled_calls(app, "1").await;
    mcp.shut_down().await;
}

#[tokio::test]
async fn structured_content_becomes_the_state_through_a_result_rule() {
    let mcp = spawn_mcp_app(|s| {
        let agent = assistant_of(s);
        agent.state.from_tools.push(ToolStateRule {
            tool: "test__plan".into(),
            source: ToolStateSource::Result {
                kind: ResultStateKind::Snapshot,
            },
        });
        with_servers(s, vec![test_server()]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        (
            "call_1",
            "test__plan",
            r#"{"title": "Trip", "steps": ["pack", "go"]}"#,
        ),
        "Planned.",
    );
    let events = app.run_events("/", &input(vec![user("Plan")])).await;
    assert_well_formed(&events);
    let snapshot = &of_type(&events, "STATE_SNAPSHOT")
        .last()
        .expect("a snapshot")["snapshot"];
    assert_eq!(snapshot["plan"]["title"], "Trip");
    assert_eq!(
        snapshot["plan"]["steps"][1],
        json!({"description": "go", "done": false})
    );
    let sent: Value = serde_json::from_str(&tool_message(app, 1, "call_1")).unwrap();
    assert_eq!(
        sent["plan"]["steps"][0]["description"], "pack",
        "the model gets the JSON"
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn progress_notifications_become_status_updates() {
    let mcp = spawn_mcp_app(|s| {
        assistant_of(s).status.enabled = true;
        with_servers(s, vec![test_server()]);
    })
    .await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__slow", r#"{"seconds": 0.5}"#), "Done.");
    let events = app.run_events("/", &input(vec![user("Wait")])).await;
    assert_well_formed(&events);
    let messages: Vec<String> = of_type(&events, "STATE_DELTA")
        .iter()
        .filter_map(|e| {
            e["delta"][0]["value"]["message"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("step ") && m.ends_with("%)")),
        "{messages:?}"
    );
    assert!(result_of(&events, "call_1").contains("slept"));
    mcp.shut_down().await;
}

#[tokio::test]
async fn the_calls_of_one_model_turn_run_side_by_side() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_1", "test__slow", r#"{"seconds": 1.5}"#),
            ("call_2", "test__slow", r#"{"seconds": 1.5}"#),
        ],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Both done."])));
    let started = std::time::Instant::now();
    let events = app.run_events("/", &input(vec![user("Wait twice")])).await;
    let took = started.elapsed();
    assert_well_formed(&events);
    for call in ["call_1", "call_2"] {
        assert_eq!(result_of(&events, call), "slept 1.5 s");
    }
    // One after the other they take at least 3 s; side by side about 1.5 s.
    assert!(took < Duration::from_millis(2700), "took {took:?}");
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_changed_tool_list_is_picked_up_without_a_restart() {
    let server = test_server_over_http().await;
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![http("test", &server.url)])).await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "test__add_tool", r#"{"name": "fresh"}"#),
        "Added.",
    );
    let events = app.run_events("/", &input(vec![user("Add")])).await;
    assert!(result_of(&events, "call_1").contains("added fresh"));
    assert!(!tool_names(&app.upstream_bodies()[0]).contains(&"test__fresh"));

    for attempt in 0.. {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        app.run_events("/", &input(vec![user("Tools?")])).await;
        let bodies = app.upstream_bodies();
        if tool_names(bodies.last().unwrap()).contains(&"test__fresh") {
            break;
        }
        assert!(attempt < 20, "the new tool never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.fake
        .push_call_then_text(("call_2", "test__fresh", "{}"), "Called.");
    let events = app.run_events("/", &input(vec![user("Call it")])).await;
    assert_eq!(result_of(&events, "call_2"), "fresh was called");
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_server_that_never_answers_a_relisting_keeps_its_tools_and_does_not_hold_shutdown() {
    let mut server = test_server();
    server.connect_timeout_secs = 1;
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![server])).await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__stall_listing", "{}"), "Stalled.");
    let events = app.run_events("/", &input(vec![user("Stall")])).await;
    assert_eq!(result_of(&events, "call_1"), "listing stalled");

    // The re-listing the server announced never answers: after connect_timeout_secs the
    // previous tools stay, and they still work.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    app.fake
        .push_call_then_text(("call_2", "test__ping", "{}"), "Pinged.");
    let events = app.run_events("/", &input(vec![user("Ping")])).await;
    assert_eq!(result_of(&events, "call_2"), "pong");

    // Another announcement leaves a listing pending at shutdown, which must not wait for it.
    app.fake
        .push_call_then_text(("call_3", "test__stall_listing", "{}"), "Stalled.");
    app.run_events("/", &input(vec![user("Stall again")])).await;
    tokio::time::timeout(Duration::from_secs(10), mcp.shut_down())
        .await
        .expect("shutdown waited for a tools/list that never answers");
}

// ---- No orphans ----------------------------------------------------------------------------

#[tokio::test]
async fn a_graceful_shutdown_leaves_no_mcp_process_behind() {
    // Through a shell that forks: the server is a grandchild, as with `npx`.
    let js = everything_js();
    let script = format!("node '{}' stdio; true", js.display());
    let mcp = spawn_mcp_app(|s| {
        with_servers(
            s,
            vec![stdio("everything", "sh", &["-c", &script]), test_server()],
        );
    })
    .await;
    let mut pids = mcp.mcp.child_pids();
    assert_eq!(pids.len(), 2);
    let grandchildren = children_of(pids[0]);
    assert!(
        !grandchildren.is_empty(),
        "the shell runs node as its child"
    );
    pids.extend(grandchildren);
    assert!(pids.iter().all(|p| pid_alive(*p)));

    mcp.shut_down().await;
    wait_until("every MCP process has exited", || {
        pids.iter().all(|p| !pid_alive(*p))
    })
    .await;
}

// ---- The shipped example -------------------------------------------------------------------

#[test]
fn the_mcp_example_pins_the_tested_reference_server() {
    let path = repo().join("config/examples/mcp.toml");
    let settings = Settings::load(Some(&path)).expect("the MCP example loads");
    let agent = &settings.agents[&settings.default_agent];
    let McpTransportSettings::Stdio { args, .. } = &agent.mcp_servers[0].transport else {
        panic!("the reference server runs over stdio");
    };
    let package: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tests/mcp/package.json")).unwrap(),
    )
    .unwrap();
    let tested = package["dependencies"]["@modelcontextprotocol/server-everything"]
        .as_str()
        .unwrap();
    assert!(
        args.iter()
            .any(|a| *a == format!("@modelcontextprotocol/server-everything@{tested}")),
        "{args:?} runs the version the tests use ({tested})"
    );
    // Every package npx fetches names its version: an unpinned one changes under the user.
    for server in &agent.mcp_servers {
        let McpTransportSettings::Stdio { command, args, .. } = &server.transport else {
            continue;
        };
        if command != "npx" {
            continue;
        }
        let package = args.iter().find(|a| !a.starts_with('-')).unwrap();
        assert!(
            package
                .rsplit_once('@')
                .is_some_and(|(name, version)| !name.is_empty() && !version.is_empty()),
            "{package} is pinned"
        );
    }
    let approvals = agui_host::app::approval_policies(agent).unwrap();
    assert!(approvals.requires_approval("files__write_file", &json!({})));
    assert!(!approvals.requires_approval("everything__echo", &json!({})));
}

// ---- Per-run identity ----------------------------------------------------------------------

#[tokio::test]
async fn identity_headers_tell_an_http_server_which_thread_and_run_a_call_is_for() {
    let server = test_server_over_http().await;
    let mcp = spawn_mcp_app(|s| {
        let mut with_identity = http("test", &server.url);
        if let McpTransportSettings::Http {
            identity_headers, ..
        } = &mut with_identity.transport
        {
            identity_headers.insert("x-agui-thread".into(), "{thread_id}".into());
            identity_headers.insert("x-agui-run".into(), "{agent}/{run_id}".into());
        }
        let mut without = http("plain", &server.url);
        without.include = vec!["whoami".into()];
        with_servers(s, vec![with_identity, without]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_1", "test__whoami", "{}"),
            ("call_2", "plain__whoami", "{}"),
        ],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Known."])));
    let body = input(vec![user("Who am I?")]);
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    let seen: Value = serde_json::from_str(&result_of(&events, "call_1")).unwrap();
    assert_eq!(seen["x-agui-thread"], body["threadId"], "{seen}");
    assert_eq!(
        seen["x-agui-run"],
        format!("assistant/{}", body["runId"].as_str().unwrap()),
        "{seen}"
    );
    let plain: Value = serde_json::from_str(&result_of(&events, "call_2")).unwrap();
    assert_eq!(
        plain,
        json!({}),
        "opt-in: nothing is sent unless configured"
    );
    mcp.shut_down().await;
}
