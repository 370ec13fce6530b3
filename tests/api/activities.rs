//! Tool progress as AG-UI activities: a real MCP server's `notifications/progress` reach the
//! client as an `ACTIVITY_SNAPSHOT`, then `ACTIVITY_DELTA`s, and a last delta with the call's
//! status before its `TOOL_CALL_RESULT`, for both client generations; an agent can turn them
//! off.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::mcp::{result_of, spawn_mcp_app, test_server, with_servers};
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// The activity's content after every activity event of the run, as a client applies them.
fn activity_content(events: &[Value], message_id: &str) -> Value {
    let mut content = Value::Null;
    for event in events.iter().filter(|e| e["messageId"] == message_id) {
        match event["type"].as_str() {
            Some("ACTIVITY_SNAPSHOT") => content = event["content"].clone(),
            Some("ACTIVITY_DELTA") => {
                let patch: json_patch::Patch =
                    serde_json::from_value(event["patch"].clone()).expect("a JSON Patch");
                json_patch::patch(&mut content, &patch)
                    .unwrap_or_else(|e| panic!("the delta applies: {e}: {event}"));
            }
            _ => {}
        }
    }
    content
}

async fn slow_call(
    configure: impl FnOnce(&mut agui_host::settings::Settings),
    body: fn(Vec<Value>) -> Value,
) -> Vec<Value> {
    let mcp = spawn_mcp_app(|s| {
        with_servers(s, vec![test_server()]);
        configure(s);
    })
    .await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__slow", r#"{"seconds": 0.6}"#), "Done.");
    let events = app.run_events("/", &body(vec![user("Wait")])).await;
    assert_well_formed(&events);
    assert!(result_of(&events, "call_1").contains("slept"));
    mcp.shut_down().await;
    events
}

#[track_caller]
fn assert_progress_activity(events: &[Value]) {
    let snapshots = of_type(events, "ACTIVITY_SNAPSHOT");
    assert_eq!(snapshots.len(), 1, "{:?}", types(events));
    let snapshot = snapshots[0];
    assert_eq!(snapshot["messageId"], "act_call_1");
    assert_eq!(snapshot["activityType"], "agui-host.tool");
    assert_eq!(snapshot["replace"], true);
    assert_eq!(snapshot["content"]["status"], "running");
    assert_eq!(snapshot["content"]["tool"], "test__slow");
    let deltas = of_type(events, "ACTIVITY_DELTA");
    assert!(!deltas.is_empty(), "{:?}", types(events));
    // Six reports 100 ms apart, coalesced to at most one delta per 100 ms, plus the ending.
    assert!(deltas.len() <= 7, "{} deltas", deltas.len());
    let content = activity_content(events, "act_call_1");
    assert_eq!(
        content,
        json!({"toolCallId": "call_1", "tool": "test__slow", "status": "completed",
               "progress": 6.0, "total": 6.0, "message": "step 6 of 6"}),
        "the last delta carries the last report and the ending"
    );
    let position = |ty: &str| events.iter().rposition(|e| e["type"] == ty).unwrap();
    assert!(
        position("ACTIVITY_DELTA") < position("TOOL_CALL_RESULT"),
        "the activity ends before the call's result: {:?}",
        types(events)
    );
}

#[tokio::test]
async fn progress_reaches_a_1_0_client_as_an_activity_ended_before_the_result() {
    let events = slow_call(|_| {}, input).await;
    assert_progress_activity(&events);
}

#[tokio::test]
async fn progress_reaches_a_0x_client_as_an_activity_too() {
    let events = slow_call(|_| {}, input_0x).await;
    assert_0x_compatible(&events);
    assert_progress_activity(&events);
}

#[tokio::test]
async fn an_agent_can_turn_activities_off() {
    let events = slow_call(
        |s| {
            let name = s.default_agent.clone();
            s.agents.get_mut(&name).unwrap().tool_activities = false;
        },
        input,
    )
    .await;
    assert!(of_type(&events, "ACTIVITY_SNAPSHOT").is_empty());
    assert!(of_type(&events, "ACTIVITY_DELTA").is_empty());
}

async fn thread(app: &TestApp) -> Value {
    app.get("/assistant/threads/t1").await.json().await.unwrap()
}

/// The activity is kept in the thread's record, next to its call, and stays there over the
/// runs that follow although a 1.0 client never sends it back; those runs continue the
/// thread (no fork) whether or not they name their parent run.
#[tokio::test]
async fn the_activity_is_kept_in_the_thread_over_the_runs_that_follow() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__slow", r#"{"seconds": 0.3}"#), "Done.");
    let question = user("Wait");
    let run1 = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&run1);
    let recorded = thread(app).await;
    let activities = |thread: &Value| -> Vec<Value> {
        thread["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "activity")
            .cloned()
            .collect()
    };
    let kept = activities(&recorded);
    assert_eq!(kept.len(), 1, "{recorded}");
    assert_eq!(kept[0]["id"], "act_call_1");
    assert_eq!(kept[0]["activityType"], "agui-host.tool");
    assert_eq!(kept[0]["content"]["status"], "completed");
    assert_eq!(kept[0]["content"]["progress"], 3.0);
    let roles: Vec<&str> = recorded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "activity", "tool", "assistant"]
    );

    // Two more runs with the history as a 1.0 client keeps it: no activity messages.
    let mut history: Vec<Value> = recorded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "activity")
        .cloned()
        .collect();
    for (n, parent) in [(2, Some("r1")), (3, None)] {
        history.push(user(&format!("And now {n}?")));
        app.fake.push(crate::fake_llm::Reply::Sse(
            crate::fake_llm::chunks::text_reply(&["Fine."]),
        ));
        let mut body = input(history.clone());
        body["runId"] = json!(format!("r{n}"));
        if let Some(parent) = parent {
            body["parentRunId"] = json!(parent);
        }
        let events = app.run_events("/", &body).await;
        assert_well_formed(&events);
        assert_eq!(
            last(&events)["type"],
            "RUN_FINISHED",
            "{:?}",
            types(&events)
        );
        let after = thread(app).await;
        assert_eq!(activities(&after), kept, "run {n}: {after}");
        let runs: Vec<&str> = after["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = (1..=n).map(|i| format!("r{i}")).collect();
        assert_eq!(
            runs, expected,
            "run {n} continues the thread, no fork: {after}"
        );
        history = after["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "activity")
            .cloned()
            .collect();
    }
    mcp.shut_down().await;
}

/// An `http` tool whose service answers `application/x-ndjson`: `lines` one after another,
/// `pause` apart.
async fn ndjson_service(lines: Vec<Value>, pause: std::time::Duration) -> String {
    use axum::body::Body;
    use axum::response::Response;
    use futures_util::StreamExt;
    let lines = std::sync::Arc::new(lines);
    let router = axum::Router::new().route(
        "/tool",
        axum::routing::post(move || {
            let lines = lines.clone();
            async move {
                let chunks = futures_util::stream::iter(lines.iter().cloned().collect::<Vec<_>>())
                    .then(move |line| async move {
                        tokio::time::sleep(pause).await;
                        Ok::<_, std::io::Error>(format!("{line}\n"))
                    });
                Response::builder()
                    .header("content-type", "application/x-ndjson")
                    .body(Body::from_stream(chunks))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}/tool")
}

async fn http_progress_run(lines: Vec<Value>) -> Vec<Value> {
    use agui_host::settings::{ToolKindSettings, ToolSettings};
    let url = ndjson_service(lines, std::time::Duration::from_millis(150)).await;
    let app = spawn_app(|s| {
        s.agents
            .get_mut("assistant")
            .unwrap()
            .tools
            .push(ToolSettings {
                name: "report".into(),
                description: "Builds the report.".into(),
                parameters: Some(json!({"type": "object"})),
                approval: Default::default(),
                allow_edit: false,
                approval_message: None,
                background: false,
                kind: ToolKindSettings::Http {
                    url,
                    headers_from_env: Default::default(),
                    timeout_secs: 10,
                    envelope: false,
                },
            });
    })
    .await;
    app.fake
        .push_call_then_text(("call_1", "report", "{}"), "Done.");
    let events = app.run_events("/", &input(vec![user("The report?")])).await;
    assert_well_formed(&events);
    events
}

/// A service's progress lines reach the client as the call's activity, ended as completed
/// before the result, which is the stream's last line.
#[tokio::test]
async fn an_http_tools_streamed_progress_is_an_activity_and_its_last_line_the_result() {
    let events = http_progress_run(vec![
        json!({"progress": 1, "total": 3, "message": "fetching"}),
        json!({"progress": 2, "total": 3}),
        json!({"progress": 3, "total": 3, "message": "writing"}),
        json!({"pages": 12}),
    ])
    .await;
    assert_eq!(
        activity_content(&events, "act_call_1"),
        json!({"toolCallId": "call_1", "tool": "report", "status": "completed",
               "progress": 3.0, "total": 3.0, "message": "writing"})
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("a result");
    assert_eq!(result["content"], r#"{"pages":12}"#);
    let position = |ty: &str| events.iter().rposition(|e| e["type"] == ty).unwrap();
    assert!(position("ACTIVITY_DELTA") < position("TOOL_CALL_RESULT"));
}

/// A line that is no progress report before the answer fails the call, and the activity says
/// so.
#[tokio::test]
async fn an_http_tools_stream_with_a_line_that_is_no_report_fails_the_call() {
    let events = http_progress_run(vec![
        json!({"progress": 1, "total": 2}),
        json!({"note": "not a report"}),
        json!({"pages": 12}),
    ])
    .await;
    assert_eq!(activity_content(&events, "act_call_1")["status"], "failed");
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("a result");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("not a progress report"), "{content}");
}
