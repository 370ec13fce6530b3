//! MCP Apps hosted by the server, against the in-repo rmcp server's weather app
//! (`examples/mcp_test_server.rs`): the `mcp-apps` activity after a UI tool's result for both
//! client generations, tool visibility in what the model is offered, and the activity kept in
//! the thread's record.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::mcp::{result_of, spawn_mcp_app, test_server, with_servers, McpApp};
use crate::verify::{assert_0x_compatible, assert_well_formed};

const APP_URI: &str = "ui://weather/app.html";

async fn weather_app(configure: impl FnOnce(&mut agui_host::settings::Settings)) -> McpApp {
    spawn_mcp_app(|s| {
        with_servers(s, vec![test_server()]);
        configure(s);
    })
    .await
}

/// Runs a turn that calls `test__weather` for Paris on thread `t1`, run `run_id`.
async fn weather_run(app: &TestApp, body: fn(Vec<Value>) -> Value, run_id: &str) -> Vec<Value> {
    app.fake.push_call_then_text(
        ("call_1", "test__weather", r#"{"city": "Paris"}"#),
        "Here it is.",
    );
    let mut request = body(vec![user("Weather in Paris?")]);
    request["runId"] = json!(run_id);
    let events = app.run_events("/", &request).await;
    assert_well_formed(&events);
    events
}

fn app_activity(events: &[Value]) -> &Value {
    let snapshots: Vec<&Value> = of_type(events, "ACTIVITY_SNAPSHOT")
        .into_iter()
        .filter(|e| e["activityType"] == "mcp-apps")
        .collect();
    assert_eq!(snapshots.len(), 1, "{:?}", types(events));
    snapshots[0]
}

#[track_caller]
fn assert_app_activity(events: &[Value]) {
    let activity = app_activity(events);
    assert_eq!(activity["messageId"], "app_call_1");
    assert_eq!(activity["replace"], true);
    let content = &activity["content"];
    assert_eq!(content["resourceUri"], APP_URI);
    assert_eq!(content["toolInput"], json!({"city": "Paris"}));
    assert_eq!(content["toolCallId"], "call_1");
    // The full CallToolResult, as the renderer hands it to the app.
    assert_eq!(
        content["result"]["content"],
        json!([{"type": "text", "text": "Sunny in Paris, 21 °C"}])
    );
    assert_eq!(
        content["result"]["structuredContent"],
        json!({"city": "Paris", "temperature": 21, "sky": "sunny"})
    );
    let id = content["serverHash"].as_str().expect("a server hash");
    assert_eq!(content["serverId"], id);
    assert!(id.starts_with("mcp_") && id.len() == 36, "{id}");
    assert!(!id.contains("test") && !id.contains('/'), "opaque: {id}");
    // Right after the call's result.
    let result_at = events
        .iter()
        .position(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1")
        .unwrap();
    assert_eq!(events[result_at + 1]["type"], "ACTIVITY_SNAPSHOT");
    assert_eq!(
        result_of(events, "call_1"),
        "{\"city\":\"Paris\",\"sky\":\"sunny\",\"temperature\":21}"
    );
}

/// The client declares the UI extension, so servers may give their tools an app.
#[tokio::test]
async fn the_client_declares_the_ui_extension() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__client_capabilities", "{}"), "Done.");
    let events = app.run_events("/", &input(vec![user("Caps")])).await;
    let declared: Value = serde_json::from_str(&result_of(&events, "call_1")).unwrap();
    assert_eq!(
        declared["extensions"]["io.modelcontextprotocol/ui"],
        json!({"mimeTypes": ["text/html;profile=mcp-app"]}),
        "{declared}"
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_ui_tools_result_is_followed_by_the_mcp_apps_activity_for_a_1_0_client() {
    let mcp = weather_app(|_| {}).await;
    let events = weather_run(&mcp.app, input, "r1").await;
    assert_app_activity(&events);
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_0x_client_gets_the_same_activity() {
    let mcp = weather_app(|_| {}).await;
    let events = weather_run(&mcp.app, input_0x, "r1").await;
    assert_0x_compatible(&events);
    assert_app_activity(&events);
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_resource_named_by_the_legacy_key_gets_the_activity_too() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__weather_legacy", "{}"), "Done.");
    let events = app.run_events("/", &input(vec![user("Old card")])).await;
    assert_well_formed(&events);
    let activity = app_activity(&events);
    assert_eq!(
        activity["content"]["resourceUri"],
        "ui://weather/legacy.html"
    );
    assert_eq!(activity["content"]["toolInput"], json!({}));
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_tool_without_a_ui_resource_has_no_app_activity() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    app.fake
        .push_call_then_text(("call_1", "test__ping", "{}"), "Done.");
    let events = app.run_events("/", &input(vec![user("Ping")])).await;
    assert!(of_type(&events, "ACTIVITY_SNAPSHOT").is_empty());
    mcp.shut_down().await;
}

/// The model is offered the tools visible to it: not the app-only one, and not the one whose
/// visibility holds a value no client knows (which fails closed). A model that calls the
/// app-only tool anyway gets an unknown-tool result.
#[tokio::test]
async fn the_model_is_offered_only_the_tools_visible_to_it() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "test__weather_refresh", r#"{"city": "Paris"}"#),
        "Done.",
    );
    let events = app.run_events("/", &input(vec![user("Refresh")])).await;
    assert_well_formed(&events);
    let bodies = app.upstream_bodies();
    let offered = tool_names(&bodies[0]);
    for visible in [
        "test__weather",
        "test__weather_legacy",
        "test__weather_admin",
    ] {
        assert!(offered.contains(&visible), "{visible} in {offered:?}");
    }
    for hidden in ["test__weather_refresh", "test__weather_future"] {
        assert!(!offered.contains(&hidden), "{hidden} not in {offered:?}");
    }
    assert!(
        result_of(&events, "call_1").contains("no tool named `test__weather_refresh`"),
        "{}",
        result_of(&events, "call_1")
    );
    mcp.shut_down().await;
}

async fn thread(app: &TestApp) -> Value {
    app.get("/assistant/threads/t1").await.json().await.unwrap()
}

/// The activity is kept in the thread's record next to its call, and stays there over the
/// next run although a 1.0 client does not send it back.
#[tokio::test]
async fn the_app_activity_is_kept_in_the_thread_over_the_next_run() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    weather_run(app, input, "r1").await;
    let activities = |thread: &Value| -> Vec<Value> {
        thread["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "activity")
            .cloned()
            .collect()
    };
    let recorded = thread(app).await;
    let kept = activities(&recorded);
    assert_eq!(kept.len(), 1, "{recorded}");
    assert_eq!(kept[0]["id"], "app_call_1");
    assert_eq!(kept[0]["activityType"], "mcp-apps");
    assert_eq!(kept[0]["content"]["resourceUri"], APP_URI);

    let mut history: Vec<Value> = recorded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "activity")
        .cloned()
        .collect();
    history.push(user("And tomorrow?"));
    app.fake.push(crate::fake_llm::Reply::Sse(
        crate::fake_llm::chunks::text_reply(&["Sunny too."]),
    ));
    let mut body = input(history);
    body["runId"] = json!("r2");
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(
        last(&events)["type"],
        "RUN_FINISHED",
        "{:?}",
        types(&events)
    );
    assert_eq!(activities(&thread(app).await), kept);
    mcp.shut_down().await;
}
