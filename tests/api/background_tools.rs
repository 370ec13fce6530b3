//! Background tools: a `background = true` tool's call is answered at once with a task handle
//! while the tool still runs, the run ends normally, and the task's result reaches the model
//! and the client on the thread's next run, once; a failing task, the per-thread limit, and
//! the settings refused at start-up. Both client generations.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agui_host::settings::{Settings, ToolKindSettings, ToolSettings};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// A slow service behind an `http` tool: it answers each call once `release` is notified,
/// with `{"pages": 12}` or, when `fails`, a 500.
struct SlowService {
    url: String,
    release: Arc<Notify>,
    received: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
}

impl SlowService {
    async fn start(fails: bool) -> SlowService {
        let release = Arc::new(Notify::new());
        let received = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let (r, rec, ans) = (release.clone(), received.clone(), answered.clone());
        let router = axum::Router::new().route(
            "/tool",
            axum::routing::post(move || {
                let (release, received, answered) = (r.clone(), rec.clone(), ans.clone());
                async move {
                    received.fetch_add(1, Ordering::SeqCst);
                    release.notified().await;
                    answered.fetch_add(1, Ordering::SeqCst);
                    if fails {
                        (
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            "{}".to_owned(),
                        )
                    } else {
                        (axum::http::StatusCode::OK, json!({"pages": 12}).to_string())
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        SlowService {
            url: format!("http://{address}/tool"),
            release,
            received,
            answered,
        }
    }

    async fn wait(counter: &AtomicUsize, n: usize) {
        for _ in 0..200 {
            if counter.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the service did not get {n} calls");
    }

    /// Lets every waiting call answer, and waits until the task has had time to take it in.
    async fn release_all(&self) {
        self.release_until(self.received.load(Ordering::SeqCst))
            .await;
    }

    /// Lets waiting calls answer until `answered` calls have, then gives the task time to
    /// take its answer in. A call whose task was dropped never answers: count without it.
    async fn release_until(&self, answered: usize) {
        while self.answered.load(Ordering::SeqCst) < answered {
            self.release.notify_waiters();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn background_tool(url: &str) -> ToolSettings {
    ToolSettings {
        name: "report".into(),
        description: "Builds the report; takes a while.".into(),
        parameters: Some(json!({"type": "object"})),
        approval: Default::default(),
        allow_edit: false,
        approval_message: None,
        background: true,
        kind: ToolKindSettings::Http {
            url: url.to_owned(),
            headers_from_env: Default::default(),
            timeout_secs: 10,
            envelope: false,
        },
    }
}

fn with_background_tool(settings: &mut Settings, url: &str) {
    settings
        .agents
        .get_mut("assistant")
        .unwrap()
        .tools
        .push(background_tool(url));
}

async fn thread(app: &TestApp) -> Value {
    app.get("/assistant/threads/t1").await.json().await.unwrap()
}

/// The history as a 1.0 client keeps it: the thread's messages without activities.
fn client_history(thread: &Value) -> Vec<Value> {
    thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "activity")
        .cloned()
        .collect()
}

fn activity<'a>(thread: &'a Value, id: &str) -> &'a Value {
    thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no activity `{id}`: {thread}"))
}

fn result_of<'a>(events: &'a [Value], call: &str) -> &'a str {
    events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call)
        .and_then(|e| e["content"].as_str())
        .unwrap_or_else(|| panic!("no result for `{call}`: {events:?}"))
}

/// Tool messages of an upstream request whose content mentions `needle`.
fn tool_messages_with<'a>(body: &'a Value, needle: &str) -> Vec<&'a Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool" && m["content"].as_str().unwrap_or("").contains(needle))
        .collect()
}

async fn run(
    app: &TestApp,
    body_of: fn(Vec<Value>) -> Value,
    n: u32,
    history: Vec<Value>,
) -> Vec<Value> {
    let mut body = body_of(history);
    body["runId"] = json!(format!("r{n}"));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    if body.get("protocolVersion").is_none() {
        assert_0x_compatible(&events);
    }
    assert_eq!(
        last(&events)["type"],
        "RUN_FINISHED",
        "run {n}: {:?}",
        types(&events)
    );
    events
}

/// The whole life of a task over four runs, for one client generation: started and answered
/// with a handle while the tool still runs; nothing delivered while it runs; its result on
/// the next run after it ended; never again after that.
async fn a_task_over_four_runs(body_of: fn(Vec<Value>) -> Value) {
    let service = SlowService::start(false).await;
    let app = spawn_app(|s| with_background_tool(s, &service.url)).await;

    // Run 1: the call is answered at once with a handle, and the run finishes while the
    // service still holds the call.
    app.fake
        .push_call_then_text(("call_1", "report", "{}"), "The report is being built.");
    let run1 = tokio::time::timeout(
        Duration::from_secs(5),
        run(&app, body_of, 1, vec![user("Build the report")]),
    )
    .await
    .expect("the run does not wait for the tool");
    SlowService::wait(&service.received, 1).await;
    assert_eq!(
        service.answered.load(Ordering::SeqCst),
        0,
        "the tool is still running"
    );
    let handle: Value = serde_json::from_str(result_of(&run1, "call_1")).unwrap();
    assert_eq!(handle["status"], "started", "{handle}");
    let task = handle["task"].as_str().expect("a task id").to_owned();
    let snapshot = the(&run1, "ACTIVITY_SNAPSHOT");
    assert_eq!(snapshot["messageId"], "bg_call_1");
    assert_eq!(snapshot["activityType"], "agui-host.background");
    assert_eq!(
        snapshot["content"],
        json!({"toolCallId": "call_1", "tool": "report", "task": task, "status": "running"})
    );
    let bodies = app.fake.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(tool_messages_with(&bodies[1], "started").len(), 1);

    // Run 2, while the tool still runs: nothing to deliver.
    let mut history = client_history(&thread(&app).await);
    history.push(user("Done yet?"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Not yet."])));
    let run2 = run(&app, body_of, 2, history).await;
    assert!(
        of_type(&run2, "TOOL_CALL_START").is_empty(),
        "{:?}",
        types(&run2)
    );

    // Run 3, after it ended: the result comes before the model call, as a new call of its own.
    service.release_all().await;
    let mut history = client_history(&thread(&app).await);
    history.push(user("And now?"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It has 12 pages."])));
    let run3 = run(&app, body_of, 3, history).await;
    let start = the(&run3, "TOOL_CALL_START");
    assert_eq!(start["toolCallName"], "background_result");
    let delivered_id = start["toolCallId"].as_str().unwrap().to_owned();
    let delivered: Value = serde_json::from_str(result_of(&run3, &delivered_id)).unwrap();
    assert_eq!(
        delivered,
        json!({"task": task, "tool": "report", "toolCallId": "call_1", "status": "completed",
               "result": {"pages": 12}})
    );
    let snapshot = the(&run3, "ACTIVITY_SNAPSHOT");
    assert_eq!(snapshot["messageId"], "bg_call_1");
    assert_eq!(snapshot["replace"], true);
    assert_eq!(snapshot["content"]["status"], "completed");
    assert_eq!(snapshot["content"]["result"], json!({"pages": 12}));
    let upstream = app.fake.bodies().last().unwrap().clone();
    assert_tool_calls_answered(&upstream);
    assert_eq!(
        tool_messages_with(&upstream, "\"pages\":12").len(),
        1,
        "{upstream}"
    );
    let recorded = thread(&app).await;
    assert_eq!(
        activity(&recorded, "bg_call_1")["content"]["status"],
        "completed"
    );

    // Run 4: the result stays in the history the client sends back, and is not delivered
    // again.
    let mut history = client_history(&recorded);
    history.push(user("Thanks"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["You're welcome."])));
    let run4 = run(&app, body_of, 4, history).await;
    assert!(
        of_type(&run4, "TOOL_CALL_START").is_empty(),
        "{:?}",
        types(&run4)
    );
    assert!(of_type(&run4, "ACTIVITY_SNAPSHOT").is_empty());
    let upstream = app.fake.bodies().last().unwrap().clone();
    assert_tool_calls_answered(&upstream);
    assert_eq!(
        tool_messages_with(&upstream, "\"pages\":12").len(),
        1,
        "{upstream}"
    );
    let recorded = thread(&app).await;
    assert_eq!(
        activity(&recorded, "bg_call_1")["content"]["status"],
        "completed"
    );
    assert_eq!(
        service.received.load(Ordering::SeqCst),
        1,
        "the tool ran once"
    );
}

#[tokio::test]
async fn a_background_tools_result_reaches_the_next_run_once_for_a_1_0_client() {
    a_task_over_four_runs(input).await;
}

#[tokio::test]
async fn a_background_tools_result_reaches_the_next_run_once_for_a_0x_client() {
    a_task_over_four_runs(input_0x).await;
}

/// A task that fails reaches the next run as a failed result the model reads, and its
/// activity says so.
#[tokio::test]
async fn a_failing_background_tool_is_reported_as_failed_on_the_next_run() {
    let service = SlowService::start(true).await;
    let app = spawn_app(|s| with_background_tool(s, &service.url)).await;
    app.fake
        .push_call_then_text(("call_1", "report", "{}"), "Started.");
    run(&app, input, 1, vec![user("Build the report")]).await;
    SlowService::wait(&service.received, 1).await;
    service.release_all().await;

    let mut history = client_history(&thread(&app).await);
    history.push(user("And now?"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It failed."])));
    let events = run(&app, input, 2, history).await;
    let start = the(&events, "TOOL_CALL_START");
    let delivered: Value =
        serde_json::from_str(result_of(&events, start["toolCallId"].as_str().unwrap())).unwrap();
    assert_eq!(delivered["status"], "failed", "{delivered}");
    assert!(
        delivered["error"].as_str().unwrap().contains("500"),
        "{delivered}"
    );
    let snapshot = the(&events, "ACTIVITY_SNAPSHOT");
    assert_eq!(snapshot["content"]["status"], "failed");
    assert!(snapshot["content"]["error"].is_string());
    let upstream = app.fake.bodies().last().unwrap().clone();
    assert_eq!(
        tool_messages_with(&upstream, "\"failed\"").len(),
        1,
        "{upstream}"
    );
}

/// A task past `background_timeout_secs` fails with a timeout, which the next run reads.
#[tokio::test]
async fn a_task_past_its_run_time_fails_with_a_timeout() {
    let service = SlowService::start(false).await;
    let app = spawn_app(|s| {
        with_background_tool(s, &service.url);
        s.agents
            .get_mut("assistant")
            .unwrap()
            .background_timeout_secs = 1;
    })
    .await;
    app.fake
        .push_call_then_text(("call_1", "report", "{}"), "Started.");
    run(&app, input, 1, vec![user("Build the report")]).await;
    SlowService::wait(&service.received, 1).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;

    let mut history = client_history(&thread(&app).await);
    history.push(user("And now?"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It took too long."])));
    let events = run(&app, input, 2, history).await;
    let start = the(&events, "TOOL_CALL_START");
    let delivered: Value =
        serde_json::from_str(result_of(&events, start["toolCallId"].as_str().unwrap())).unwrap();
    assert_eq!(delivered["status"], "failed", "{delivered}");
    assert!(
        delivered["error"].as_str().unwrap().contains("timed out"),
        "{delivered}"
    );
    // The task's request was dropped with the task: the service never answered it.
    assert_eq!(service.answered.load(Ordering::SeqCst), 0);
}

/// Over the thread's limit, a call starts nothing and its result is an error the model reads;
/// the call within the limit runs.
#[tokio::test]
async fn a_call_over_the_threads_limit_gets_an_error_result() {
    let service = SlowService::start(false).await;
    let app = spawn_app(|s| {
        with_background_tool(s, &service.url);
        s.agents
            .get_mut("assistant")
            .unwrap()
            .max_background_tasks_per_thread = 1;
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "report", "{}"), ("call_2", "report", "{}")],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["One of them started."])));
    let events = run(&app, input, 1, vec![user("Two reports")]).await;
    let first: Value = serde_json::from_str(result_of(&events, "call_1")).unwrap();
    assert_eq!(first["status"], "started");
    let second: Value = serde_json::from_str(result_of(&events, "call_2")).unwrap();
    assert!(
        second["error"]
            .as_str()
            .unwrap()
            .contains("1 background tasks"),
        "{second}"
    );
    let snapshots = of_type(&events, "ACTIVITY_SNAPSHOT");
    assert_eq!(snapshots.len(), 1, "only the started call has an activity");
    SlowService::wait(&service.received, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        service.received.load(Ordering::SeqCst),
        1,
        "the refused call never ran"
    );
    service.release_all().await;
}

/// A process that does not hold a started task (a restart, another replica) tells the model
/// the task was lost, once; the call is not run again.
#[tokio::test]
async fn a_task_another_process_started_is_reported_lost_once() {
    let service = SlowService::start(false).await;
    let first = spawn_app(|s| with_background_tool(s, &service.url)).await;
    first
        .fake
        .push_call_then_text(("call_1", "report", "{}"), "Started.");
    run(&first, input, 1, vec![user("Build the report")]).await;
    let mut history = client_history(&thread(&first).await);

    // The same conversation reaches a process that never saw the task.
    let second = spawn_app(|s| {
        with_background_tool(s, &service.url);
        s.threads.history = agui_host::threads::HistoryPolicy::TrustClient;
    })
    .await;
    history.push(user("Done?"));
    second
        .fake
        .push(Reply::Sse(chunks::text_reply(&["It was lost."])));
    let events = run(&second, input, 2, history).await;
    let start = the(&events, "TOOL_CALL_START");
    assert_eq!(start["toolCallName"], "background_result");
    let delivered: Value =
        serde_json::from_str(result_of(&events, start["toolCallId"].as_str().unwrap())).unwrap();
    assert_eq!(delivered["status"], "lost", "{delivered}");
    assert_eq!(delivered["toolCallId"], "call_1");
    assert_eq!(
        the(&events, "ACTIVITY_SNAPSHOT")["content"]["status"],
        "lost"
    );

    let mut history = client_history(&thread(&second).await);
    history.push(user("Ok"));
    second.fake.push(Reply::Sse(chunks::text_reply(&["Fine."])));
    let events = run(&second, input, 3, history).await;
    assert!(
        of_type(&events, "TOOL_CALL_START").is_empty(),
        "{:?}",
        types(&events)
    );
    let upstream = second.fake.bodies().last().unwrap().clone();
    assert_tool_calls_answered(&upstream);
    assert_eq!(
        tool_messages_with(&upstream, "\"lost\"").len(),
        1,
        "{upstream}"
    );
    assert_eq!(service.received.load(Ordering::SeqCst), 1, "not run again");
    service.release_all().await;
}

/// The model cancels a running task with `cancel_background_task`: the service's request is
/// dropped, the slot is free again, and no later run delivers the task, neither its result nor
/// a `lost` report.
#[tokio::test]
async fn a_cancelled_task_is_stopped_and_never_delivered() {
    let service = SlowService::start(false).await;
    let app = spawn_app(|s| {
        with_background_tool(s, &service.url);
        s.agents
            .get_mut("assistant")
            .unwrap()
            .max_background_tasks_per_thread = 1;
    })
    .await;
    app.fake
        .push_call_then_text(("call_1", "report", "{}"), "Started.");
    let run1 = run(&app, input, 1, vec![user("Build the report")]).await;
    let handle: Value = serde_json::from_str(result_of(&run1, "call_1")).unwrap();
    let task = handle["task"].as_str().unwrap().to_owned();
    SlowService::wait(&service.received, 1).await;
    let offered = &app.fake.bodies()[0]["tools"];
    assert!(
        offered
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "cancel_background_task"),
        "{offered}"
    );

    // Run 2: the model cancels it.
    let mut history = client_history(&thread(&app).await);
    history.push(user("Never mind, cancel it"));
    let arguments = json!({"task": task}).to_string();
    app.fake.push_call_then_text(
        ("call_2", "cancel_background_task", &arguments),
        "Cancelled.",
    );
    let run2 = run(&app, input, 2, history).await;
    let cancelled: Value = serde_json::from_str(result_of(&run2, "call_2")).unwrap();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(
        cancelled_again(&app, &task).await["status"],
        "unknown",
        "a task is cancelled once"
    );

    // Run 3: a new call fits the thread's one slot; nothing of the first task is delivered.
    let mut history = client_history(&thread(&app).await);
    history.push(user("Build another report"));
    app.fake
        .push_call_then_text(("call_3", "report", "{}"), "Started again.");
    let run3 = run(&app, input, 3, history).await;
    let handle: Value = serde_json::from_str(result_of(&run3, "call_3")).unwrap();
    assert_eq!(handle["status"], "started", "{handle}");
    assert!(
        of_type(&run3, "TOOL_CALL_START")
            .iter()
            .all(|e| e["toolCallName"] != "background_result"),
        "{:?}",
        types(&run3)
    );
    SlowService::wait(&service.received, 2).await;
    // Only the second call is still waiting: the cancelled one's request was dropped.
    service.release_until(1).await;

    // Run 4: the second task's result, and only it.
    let mut history = client_history(&thread(&app).await);
    history.push(user("And now?"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    let run4 = run(&app, input, 4, history).await;
    let deliveries: Vec<Value> = of_type(&run4, "TOOL_CALL_START")
        .into_iter()
        .map(|start| {
            serde_json::from_str(result_of(&run4, start["toolCallId"].as_str().unwrap())).unwrap()
        })
        .collect();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0]["toolCallId"], "call_3");
    assert_eq!(deliveries[0]["status"], "completed");
    assert_eq!(
        service.answered.load(Ordering::SeqCst),
        1,
        "the cancelled call's request was dropped"
    );
}

/// What cancelling `task` again answers, as a run of the model's would see it.
async fn cancelled_again(app: &TestApp, task: &str) -> Value {
    let mut history = client_history(&thread(app).await);
    history.push(user("Cancel it again"));
    let arguments = json!({"task": task}).to_string();
    app.fake
        .push_call_then_text(("call_again", "cancel_background_task", &arguments), "Ok.");
    let events = run(app, input, 99, history).await;
    serde_json::from_str(result_of(&events, "call_again")).unwrap()
}

/// A task already settled in the history (reported `lost` by a replica that did not hold it)
/// and then finished by the process that ran it is not delivered a second time.
#[tokio::test]
async fn a_task_reported_lost_elsewhere_is_not_delivered_again_when_it_ends() {
    let service = SlowService::start(false).await;
    // Each replica keeps its own memory store here, so each takes the client's history as it
    // comes; over a shared store they would verify it against one record.
    let trusting = |s: &mut Settings| {
        with_background_tool(s, &service.url);
        s.threads.history = agui_host::threads::HistoryPolicy::TrustClient;
    };
    let first = spawn_app(trusting).await;
    first
        .fake
        .push_call_then_text(("call_1", "report", "{}"), "Started.");
    run(&first, input, 1, vec![user("Build the report")]).await;
    SlowService::wait(&service.received, 1).await;
    let mut history = client_history(&thread(&first).await);

    // Run 2 on a replica that never saw the task: reported lost.
    let second = spawn_app(trusting).await;
    history.push(user("Done?"));
    second
        .fake
        .push(Reply::Sse(chunks::text_reply(&["It was lost."])));
    run(&second, input, 2, history).await;
    let mut history = client_history(&thread(&second).await);

    // The first replica's task ends; run 3 comes back to it with the history that says lost.
    service.release_all().await;
    history.push(user("Try again?"));
    first.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
    let events = run(&first, input, 3, history).await;
    assert!(
        of_type(&events, "TOOL_CALL_START").is_empty(),
        "delivered twice: {:?}",
        types(&events)
    );
    let upstream = first.fake.bodies().last().unwrap().clone();
    assert_tool_calls_answered(&upstream);
    assert!(tool_messages_with(&upstream, "\"pages\":12").is_empty());
}

/// The capabilities name the background activity type beside tool progress.
#[tokio::test]
async fn capabilities_name_the_background_activity_type() {
    let app = spawn_app(|s| with_background_tool(s, "http://127.0.0.1:9/tool")).await;
    let capabilities: Value = app
        .get("/assistant/capabilities")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        capabilities["custom"]["agui-host"]["activityTypes"],
        json!(["agui-host.tool", "agui-host.background"]),
        "{capabilities}"
    );
}

/// A background tool that would need the run it was called in is refused at start-up.
#[tokio::test]
async fn background_tools_that_cannot_run_unattended_are_refused_at_start_up() {
    let fake = crate::fake_llm::FakeLlm::start().await;
    let mut with_approval = background_tool("http://127.0.0.1:9/tool");
    with_approval.approval = serde_json::from_value(json!("always")).unwrap();
    let mut input_tool = background_tool("http://127.0.0.1:9/tool");
    input_tool.kind = ToolKindSettings::Input {
        response_schema: json!({"type": "object"}),
        message: None,
        cancelled_result: None,
    };
    for (tool, expected) in [(with_approval, "approval"), (input_tool, "`input` tool")] {
        let mut settings = test_settings(&fake);
        settings
            .agents
            .get_mut("assistant")
            .unwrap()
            .tools
            .push(tool);
        let error = match agui_host::app::App::build(settings).await {
            Ok(_) => panic!("a background tool with {expected} starts"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains("background"), "{error}");
        assert!(error.contains(expected), "{error}");
    }

    // The names of the server's own calls for background tasks are taken.
    for reserved in ["background_result", "cancel_background_task"] {
        let mut settings = test_settings(&fake);
        let mut clash = background_tool("http://127.0.0.1:9/tool");
        clash.name = reserved.into();
        clash.background = false;
        let tools = &mut settings.agents.get_mut("assistant").unwrap().tools;
        tools.push(background_tool("http://127.0.0.1:9/tool"));
        tools.push(clash);
        let error = match agui_host::app::App::build(settings).await {
            Ok(_) => panic!("a tool named `{reserved}` starts"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains(reserved), "{error}");
    }
}

/// An MCP server's tool runs in the background too (`background = true` in its per-tool
/// settings): the real server's long operation goes on after the run that called it ended, and
/// its result reaches the thread's next run.
#[tokio::test]
async fn an_mcp_tool_runs_in_the_background_and_its_result_reaches_the_next_run() {
    use agui_host::settings::McpToolSettings;
    let mcp = crate::mcp::spawn_mcp_app(|s| {
        let mut server = crate::mcp::everything();
        server.tools.insert(
            "trigger-long-running-operation".into(),
            McpToolSettings {
                background: true,
                ..Default::default()
            },
        );
        crate::mcp::with_servers(s, vec![server]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        (
            "call_1",
            "everything__trigger-long-running-operation",
            r#"{"duration": 2, "steps": 2}"#,
        ),
        "Started.",
    );
    let started = std::time::Instant::now();
    let run1 = run(app, input, 1, vec![user("Run the long operation")]).await;
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the run does not wait for the operation"
    );
    let handle: Value = serde_json::from_str(result_of(&run1, "call_1")).unwrap();
    assert_eq!(handle["status"], "started", "{handle}");
    assert_eq!(
        the(&run1, "ACTIVITY_SNAPSHOT")["activityType"],
        "agui-host.background"
    );

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut history = client_history(&thread(app).await);
    history.push(user("Done?"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It finished."])));
    let run2 = run(app, input, 2, history).await;
    let start = the(&run2, "TOOL_CALL_START");
    assert_eq!(start["toolCallName"], "background_result");
    let delivered: Value =
        serde_json::from_str(result_of(&run2, start["toolCallId"].as_str().unwrap())).unwrap();
    assert_eq!(delivered["status"], "completed", "{delivered}");
    assert_eq!(
        delivered["tool"],
        "everything__trigger-long-running-operation"
    );
    assert!(
        delivered["result"].to_string().contains("completed"),
        "the server's own answer: {delivered}"
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn an_mcp_background_tool_that_needs_approval_is_refused_at_start_up() {
    use agui_host::settings::{ApprovalPolicySetting, FixedApproval, McpToolSettings};
    let fake = crate::fake_llm::FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    let mut server = crate::mcp::everything();
    server.tools.insert(
        "echo".into(),
        McpToolSettings {
            background: true,
            approval: ApprovalPolicySetting::Fixed(FixedApproval::Always),
            ..Default::default()
        },
    );
    crate::mcp::with_servers(&mut settings, vec![server]);
    let error = match agui_host::app::App::build(settings).await {
        Ok(_) => panic!("an MCP background tool with an approval starts"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("`everything` tool `echo`") && error.contains("approval"),
        "{error}"
    );
}
