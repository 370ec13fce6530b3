//! MCP Apps hosted by the server, against the in-repo rmcp server's weather app
//! (`examples/mcp_test_server.rs`): the `mcp-apps` activity after a UI tool's result for both
//! client generations, tool visibility in what the model is offered, and the app's own
//! requests (`forwardedProps.__proxiedMCPRequest`) answered from the allow-list without a model
//! call, a thread lease, a save or a history check.

use agui_host::settings::{ApprovalPolicySetting, FixedApproval, McpToolSettings};
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
/// The thread's next turn: `history` sent as run `r2` in `shape` (`input` or `input_0x`), the
/// model answering `reply`; it must finish. Its events.
async fn next_turn(
    app: &TestApp,
    shape: fn(Vec<Value>) -> Value,
    history: Vec<Value>,
    reply: &str,
) -> Vec<Value> {
    app.fake.push(crate::fake_llm::Reply::Sse(
        crate::fake_llm::chunks::text_reply(&[reply]),
    ));
    let mut body = shape(history);
    body["runId"] = json!("r2");
    let events = app.run_events("/", &body).await;
    assert_eq!(
        last(&events)["type"],
        "RUN_FINISHED",
        "{:?}",
        types(&events)
    );
    events
}

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

// ---- The app's requests ----------------------------------------------------------------------

/// The server id of the weather app, as the activity names it.
async fn server_hash(app: &TestApp) -> String {
    let events = weather_run(app, input, "r1").await;
    app_activity(&events)["content"]["serverHash"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A run on thread `t1` carrying an app's request, as CopilotKit's renderer sends it: the
/// agent's messages as the client holds them, and the request in `forwardedProps`.
fn proxied(body: fn(Vec<Value>) -> Value, run_id: &str, request: Value) -> Value {
    let mut run = body(vec![user("Something the client holds")]);
    run["runId"] = json!(run_id);
    run["forwardedProps"] = json!({"__proxiedMCPRequest": request});
    run
}

/// The request's events: exactly `RUN_STARTED` then `RUN_FINISHED`; its result.
#[track_caller]
fn answer_of(events: &[Value]) -> Value {
    assert_eq!(types(events), ["RUN_STARTED", "RUN_FINISHED"], "{events:?}");
    assert_well_formed(events);
    events[1]["result"].clone()
}

#[tokio::test]
async fn an_apps_resources_read_of_its_ui_resource_is_answered_without_the_model() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    let hash = server_hash(app).await;
    let model_calls = app.upstream_bodies().len();
    let before = thread(app).await;
    let request = json!({"serverHash": hash, "serverId": hash, "method": "resources/read",
                         "params": {"uri": APP_URI}});
    let events = app
        .run_events("/", &proxied(input, "p1", request.clone()))
        .await;
    let result = answer_of(&events);
    let resource = &result["contents"][0];
    assert_eq!(resource["uri"], APP_URI);
    assert_eq!(resource["mimeType"], "text/html;profile=mcp-app");
    assert!(resource["text"].as_str().unwrap().contains("ui/initialize"));
    assert_eq!(events[0]["threadId"], "t1");
    assert_eq!(events[0]["protocolVersion"], "1.0");
    assert_eq!(events[1]["outcome"]["type"], "success");

    // A 0.x client (CopilotKit) gets the shapes it accepts.
    let events = app.run_events("/", &proxied(input_0x, "p2", request)).await;
    assert_0x_compatible(&events);
    assert_eq!(answer_of(&events)["contents"][0]["uri"], APP_URI);
    assert!(events[0].get("protocolVersion").is_none());
    assert!(events[1].get("outcome").is_none());

    assert_eq!(app.upstream_bodies().len(), model_calls, "no model call");
    assert_eq!(thread(app).await, before, "the thread is untouched");
    mcp.shut_down().await;
}

#[tokio::test]
async fn an_apps_tool_call_is_answered_and_leaves_the_thread_untouched_and_free() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    let hash = server_hash(app).await;
    let model_calls = app.upstream_bodies().len();
    let before = thread(app).await;
    let request = json!({"serverHash": hash, "method": "tools/call",
                         "params": {"name": "weather_refresh", "arguments": {"city": "Lyon"}}});
    let events = app.run_events("/", &proxied(input, "p1", request)).await;
    let result = answer_of(&events);
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "Still sunny in Lyon, 21 °C"}])
    );
    assert_eq!(result["structuredContent"]["city"], "Lyon");
    assert_ne!(result["isError"], true);
    // A model-visible tool with a UI may be called by its app too.
    let request = json!({"serverHash": hash, "method": "tools/call",
                         "params": {"name": "weather", "arguments": {"city": "Nice"}}});
    let events = app.run_events("/", &proxied(input, "p2", request)).await;
    assert_eq!(answer_of(&events)["structuredContent"]["city"], "Nice");
    // And ping.
    let request = json!({"serverHash": hash, "method": "ping"});
    let events = app.run_events("/", &proxied(input, "p3", request)).await;
    assert_eq!(answer_of(&events), json!({}));

    assert_eq!(app.upstream_bodies().len(), model_calls, "no model call");
    let after = thread(app).await;
    assert_eq!(after, before, "no new message, no new run");

    // The lease is free: a normal turn right after runs.
    let mut history: Vec<Value> = after["messages"].as_array().unwrap().clone();
    history.push(user("Thanks"));
    let events = next_turn(app, input, history, "You're welcome.").await;
    assert_well_formed(&events);
    mcp.shut_down().await;
}

/// An app's request while a turn streams on the same thread is answered: it takes no lease.
#[tokio::test]
async fn an_apps_request_is_answered_while_a_turn_holds_the_thread() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    let hash = server_hash(app).await;
    app.fake
        .push_call_then_text(("call_2", "test__slow", r#"{"seconds": 1.5}"#), "Done.");
    let mut history: Vec<Value> = thread(app).await["messages"].as_array().unwrap().clone();
    history.push(user("Wait a bit"));
    let mut body = input(history);
    body["runId"] = json!("r2");
    let mut turn = EventReader::new(app.post_run("/", &body).await);
    // The turn has started (and holds the thread) once its first event is out.
    assert_eq!(turn.next().await.unwrap()["type"], "RUN_STARTED");
    let request = json!({"serverHash": hash, "method": "ping"});
    let response = app.post_run("/", &proxied(input, "p1", request)).await;
    assert_eq!(response.status(), 200);
    let events = parse_sse(&response.text().await.unwrap());
    assert_eq!(answer_of(&events), json!({}));
    let mut last_type = String::new();
    while let Some(event) = turn.next().await {
        last_type = event["type"].as_str().unwrap().to_owned();
    }
    assert_eq!(last_type, "RUN_FINISHED", "the turn ends as usual");
    mcp.shut_down().await;
}

/// A call that needs a person's approval cannot be approved from an app: refused, with a tool
/// error the app can show, and the tool does not run.
#[tokio::test]
async fn an_apps_call_of_a_tool_that_needs_approval_is_refused_with_a_tool_error() {
    let mcp = weather_app(|s| {
        let name = s.default_agent.clone();
        let server = &mut s.agents.get_mut(&name).unwrap().mcp_servers[0];
        server.tools.insert(
            "weather_refresh".into(),
            McpToolSettings {
                approval: ApprovalPolicySetting::Fixed(FixedApproval::Always),
                ..Default::default()
            },
        );
    })
    .await;
    let app = &mcp.app;
    let hash = server_hash(app).await;
    let before = thread(app).await;
    let request = json!({"serverHash": hash, "method": "tools/call",
                         "params": {"name": "weather_refresh", "arguments": {"city": "Lyon"}}});
    let events = app.run_events("/", &proxied(input, "p1", request)).await;
    let result = answer_of(&events);
    assert_eq!(result["isError"], true, "{result}");
    let message = result["error"].as_str().unwrap();
    assert!(message.contains("needs a person's approval"), "{message}");
    assert_eq!(result["content"][0]["text"], message);
    assert!(
        result.get("structuredContent").is_none(),
        "not run: {result}"
    );
    assert_eq!(thread(app).await, before);
    mcp.shut_down().await;
}

#[tokio::test]
async fn requests_outside_the_allow_list_are_refused() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    let hash = server_hash(app).await;
    let model_calls = app.upstream_bodies().len();
    let before = thread(app).await;
    let ask = |n: usize, request: Value| {
        let body = proxied(input, &format!("p{n}"), request);
        async move { answer_of(&app.run_events("/", &body).await) }
    };

    // A tool only the model may call, one that failed closed, one the server lacks.
    for (n, tool) in ["weather_admin", "weather_future", "nope"]
        .iter()
        .enumerate()
    {
        let result = ask(
            n,
            json!({"serverHash": hash, "method": "tools/call", "params": {"name": tool}}),
        )
        .await;
        assert_eq!(result["isError"], true, "{tool}: {result}");
        assert!(result["error"].is_string(), "{tool}: {result}");
    }
    let result = ask(
        3,
        json!({"serverHash": hash, "method": "tools/call", "params": {"name": "weather_admin"}}),
    )
    .await;
    assert!(
        result["error"].as_str().unwrap().contains("model only"),
        "{result}"
    );
    // A resource that is not ui://.
    let result = ask(
        4,
        json!({"serverHash": hash, "method": "resources/read", "params": {"uri": "notes://secret.txt"}}),
    )
    .await;
    assert_eq!(
        result,
        json!({"error": "an app may read only ui:// resources of its own server"})
    );
    // An unknown server, by hash and by id.
    let result = ask(5, json!({"serverHash": "mcp_0000", "method": "ping"})).await;
    assert_eq!(result, json!({"error": "Unknown server: mcp_0000"}));
    let result = ask(
        6,
        json!({"serverHash": "x", "serverId": "other", "method": "ping"}),
    )
    .await;
    assert_eq!(result, json!({"error": "Unknown server: other"}));
    // Another method.
    let result = ask(7, json!({"serverHash": hash, "method": "prompts/list"})).await;
    assert_eq!(
        result,
        json!({"error": "MCP method not allowed for an app: prompts/list"})
    );
    // A malformed request is refused as one, not run as a turn.
    let result = ask(8, json!({"serverHash": hash})).await;
    assert!(
        result["error"].as_str().unwrap().contains("method"),
        "{result}"
    );

    assert_eq!(app.upstream_bodies().len(), model_calls, "no model call");
    assert_eq!(thread(app).await, before, "the thread is untouched");
    mcp.shut_down().await;
}

/// The id is the same for another instance with the same configuration (a replica, a
/// restart), so an activity in a thread's record still reaches its server.
#[tokio::test]
async fn the_server_id_is_stable_across_instances_with_the_same_configuration() {
    let first = weather_app(|_| {}).await;
    let hash = server_hash(&first.app).await;
    first.shut_down().await;
    let second = weather_app(|_| {}).await;
    assert_eq!(server_hash(&second.app).await, hash);
    let request =
        json!({"serverHash": hash, "method": "resources/read", "params": {"uri": APP_URI}});
    let events = second
        .app
        .run_events("/", &proxied(input, "p1", request))
        .await;
    assert_eq!(answer_of(&events)["contents"][0]["uri"], APP_URI);
    second.shut_down().await;
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
    let events = next_turn(app, input, history, "Sunny too.").await;
    assert_well_formed(&events);
    assert_eq!(activities(&thread(app).await), kept);
    mcp.shut_down().await;
}

/// An app's request is a request like any other: without the token the service requires, it
/// is refused before anything is answered.
#[tokio::test]
async fn an_apps_request_needs_the_services_token() {
    let mcp = weather_app(|s| s.server.auth.tokens = vec!["app-token".into()]).await;
    let app = &mcp.app;
    let request = json!({"serverHash": "mcp_0000", "method": "ping"});
    let body = proxied(input, "p1", request);
    let response = app.post_run("/", &body).await;
    assert_eq!(response.status(), 401);
    let response = app
        .client
        .post(format!("{}/", app.address))
        .bearer_auth("app-token")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = parse_sse(&response.text().await.unwrap());
    assert_eq!(
        answer_of(&events),
        json!({"error": "Unknown server: mcp_0000"})
    );
    mcp.shut_down().await;
}

/// A 0.x client (CopilotKit) keeps the activity in its messages and sends it back: the next
/// turn runs, the model never sees it, and the record keeps it once.
#[tokio::test]
async fn a_0x_client_that_sends_the_activity_back_goes_on() {
    let mcp = weather_app(|_| {}).await;
    let app = &mcp.app;
    weather_run(app, input_0x, "r1").await;
    let mut history: Vec<Value> = thread(app).await["messages"].as_array().unwrap().clone();
    assert!(history.iter().any(|m| m["role"] == "activity"));
    history.push(user("And tomorrow?"));
    let events = next_turn(app, input_0x, history, "Sunny too.").await;
    assert_0x_compatible(&events);
    let upstream = app.upstream_bodies();
    let roles = roles(upstream.last().unwrap());
    assert!(!roles.contains(&"activity"), "{roles:?}");
    let after = thread(app).await;
    let kept = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["activityType"] == "mcp-apps")
        .count();
    assert_eq!(kept, 1, "{after}");
    mcp.shut_down().await;
}

/// The capabilities name the activity types a renderer may meet on this agent's runs: tool
/// progress, and MCP Apps for an agent with MCP servers; an agent may turn progress off.
#[tokio::test]
async fn capabilities_name_the_activity_types_of_an_agent_with_mcp_servers() {
    let mcp = weather_app(|_| {}).await;
    let capabilities: Value = mcp
        .app
        .get("/assistant/capabilities")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        capabilities["custom"]["agui-host"]["activityTypes"],
        json!(["agui-host.tool", "mcp-apps"]),
        "{capabilities}"
    );
    mcp.shut_down().await;
    let quiet = weather_app(|s| {
        s.agents.get_mut("assistant").unwrap().tool_activities = false;
    })
    .await;
    let capabilities: Value = quiet
        .app
        .get("/assistant/capabilities")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        capabilities["custom"]["agui-host"]["activityTypes"],
        json!(["mcp-apps"])
    );
    quiet.shut_down().await;
}
