//! MCP tasks (SEP-2663) against the in-repo `rmcp` server, which makes a task of a
//! `long_report` call for a client that declares the extension: the call follows the task to
//! its result with its status messages as progress, a call abandoned first cancels the task on
//! the server, and a background tool that is a task delivers on the thread's next run.

use std::time::Duration;

use agui_host::settings::McpToolSettings;
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::mcp::{assistant_of, spawn_mcp_app, test_server, with_servers};
use crate::verify::{assert_0x_compatible, assert_well_formed};

fn result_of(events: &[Value], call: &str) -> String {
    events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call)
        .and_then(|e| e["content"].as_str())
        .unwrap_or_else(|| panic!("no result for `{call}`: {events:?}"))
        .to_owned()
}

#[tokio::test]
async fn the_client_declares_tasks_and_a_call_made_a_task_is_followed_to_its_result() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_c", "test__client_capabilities", "{}"),
        "Capabilities.",
    );
    let events = app
        .run_events("/", &input(vec![user("Capabilities?")]))
        .await;
    let declared: Value = serde_json::from_str(&result_of(&events, "call_c")).unwrap();
    assert_eq!(
        declared["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "{declared}"
    );

    for (n, body_of) in [(1, input as fn(Vec<Value>) -> Value), (2, input_0x)] {
        let call = format!("call_{n}");
        app.fake.push_call_then_text(
            (&call, "test__long_report", r#"{"seconds": 0.5}"#),
            "The report is ready.",
        );
        let mut body = body_of(vec![user("Build the report")]);
        body["threadId"] = json!(format!("t{n}"));
        let events = app.run_events("/", &body).await;
        assert_well_formed(&events);
        if n == 2 {
            assert_0x_compatible(&events);
        }
        assert_eq!(
            result_of(&events, &call),
            "The report is ready after 0.5 s",
            "{:?}",
            types(&events)
        );
        // The task's status messages reach the client as the call's progress.
        let snapshot = of_type(&events, "ACTIVITY_SNAPSHOT")
            .into_iter()
            .find(|e| e["activityType"] == "agui-host.tool")
            .unwrap_or_else(|| panic!("a progress activity: {:?}", types(&events)));
        assert!(
            snapshot["content"]["message"]
                .as_str()
                .unwrap()
                .starts_with("step "),
            "{snapshot}"
        );
        assert_eq!(last(&events)["type"], "RUN_FINISHED");
    }
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_call_abandoned_before_its_task_ends_cancels_the_task_on_the_server() {
    let mcp = spawn_mcp_app(|s| {
        assistant_of(s).tool_timeout_secs = 1;
        with_servers(s, vec![test_server()]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "test__long_report", r#"{"seconds": 20}"#),
        "It took too long.",
    );
    let started = std::time::Instant::now();
    let events = app.run_events("/", &input(vec![user("Build it")])).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(result_of(&events, "call_1").contains("timed out"));

    // The server heard the cancel and stopped the task.
    let mut cancelled = String::new();
    for attempt in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        app.fake.push_call_then_text(
            (
                &format!("call_count_{attempt}"),
                "test__cancelled_tasks",
                "{}",
            ),
            "Counted.",
        );
        let mut body = input(vec![user("How many?")]);
        body["threadId"] = json!(format!("count-{attempt}"));
        let events = app.run_events("/", &body).await;
        cancelled = result_of(&events, &format!("call_count_{attempt}"));
        if cancelled == "1" {
            break;
        }
    }
    assert_eq!(cancelled, "1", "the task was cancelled on the server");
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_background_tool_the_server_runs_as_a_task_delivers_on_the_next_run() {
    let mcp = spawn_mcp_app(|s| {
        let mut server = test_server();
        server.tools.insert(
            "long_report".into(),
            McpToolSettings {
                background: true,
                ..Default::default()
            },
        );
        with_servers(s, vec![server]);
    })
    .await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "test__long_report", r#"{"seconds": 0.5}"#),
        "Started.",
    );
    let events = app.run_events("/", &input(vec![user("Build it")])).await;
    assert_well_formed(&events);
    let handle: Value = serde_json::from_str(&result_of(&events, "call_1")).unwrap();
    assert_eq!(handle["status"], "started");

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let thread: Value = app.get("/assistant/threads/t1").await.json().await.unwrap();
    let mut history: Vec<Value> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "activity")
        .cloned()
        .collect();
    history.push(user("Ready?"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Yes."])));
    let mut body = input(history);
    body["runId"] = json!("r2");
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    let start = the(&events, "TOOL_CALL_START");
    assert_eq!(start["toolCallName"], "background_result");
    let delivered: Value =
        serde_json::from_str(&result_of(&events, start["toolCallId"].as_str().unwrap())).unwrap();
    assert_eq!(delivered["status"], "completed", "{delivered}");
    assert_eq!(delivered["result"], "The report is ready after 0.5 s");
    mcp.shut_down().await;
}
