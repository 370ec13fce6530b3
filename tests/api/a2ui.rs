//! A2UI: the `a2ui` tool kind's fixed surface; `generate_a2ui`, offered when CopilotKit's A2UI
//! middleware asks for it, streaming its inner `render_a2ui` call, checking the surface
//! against the client's catalog, retrying with the problems, and ending with the recovery
//! result when no attempt is valid; the run after it, with the history the client keeps; and
//! a user action, appended by the middleware as a synthetic call, passing the history check.

use agui_host::settings::{Settings, ToolKindSettings, ToolSettings};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

const CATALOG_ID: &str = "https://example.test/hotels_catalog.json";

/// The catalog entry CopilotKit's A2UI middleware puts in the run's context.
fn catalog_context() -> Value {
    json!({
        "description": "A2UI Component Schema — available components for generating UI surfaces. Use these component names and properties when creating A2UI operations.",
        "value": json!({
            "catalogId": CATALOG_ID,
            "components": {
                "Column": {"properties": {"children": {}}},
                "HotelCard": {"required": ["name"], "properties": {"name": {}, "price": {}}}
            }
        }).to_string(),
    })
}

/// The middleware's `render_a2ui`, which it adds to the client tools.
fn render_tool() -> Value {
    json!({
        "name": "render_a2ui",
        "description": "Render a dynamic A2UI v0.9 surface.",
        "parameters": {"type": "object", "properties": {"surfaceId": {"type": "string"}}},
    })
}

/// A run's input as CopilotKit sends it with its `a2ui` option on.
fn asking(mut body: Value) -> Value {
    body["forwardedProps"] = json!({"injectA2UITool": true});
    body["context"] = json!([catalog_context()]);
    body["tools"] = json!([render_tool()]);
    body
}

fn valid_surface() -> Value {
    json!({
        "surfaceId": "hotel-comparison",
        "components": [
            {"id": "root", "component": "Column", "children": {"componentId": "card", "path": "/hotels"}},
            {"id": "card", "component": "HotelCard", "name": {"path": "name"}}
        ],
        "data": {"hotels": [{"name": "The Ritz"}, {"name": "Holiday Inn"}]}
    })
}

/// A tree whose root names a template it never defines.
fn broken_surface() -> Value {
    json!({
        "surfaceId": "hotel-comparison",
        "components": [
            {"id": "root", "component": "Column", "children": {"componentId": "card", "path": "/hotels"}}
        ],
        "data": {"hotels": [{"name": "The Ritz"}]}
    })
}

fn generate_call(id: &str) -> Reply {
    Reply::Sse(chunks::tool_calls(
        &[(
            id,
            "generate_a2ui",
            r#"{"intent":"create","description":"three hotels"}"#,
        )],
        false,
    ))
}

fn render_reply(arguments: &Value) -> Reply {
    Reply::Sse(chunks::tool_calls(
        &[("call_inner", "render_a2ui", &arguments.to_string())],
        false,
    ))
}

fn result_of<'a>(events: &'a [Value], call: &str) -> &'a str {
    events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call)
        .and_then(|e| e["content"].as_str())
        .unwrap_or_else(|| panic!("no result for `{call}`: {events:?}"))
}

fn tool_names(upstream: &Value) -> Vec<&str> {
    upstream["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

async fn run(app: &TestApp, body: &Value) -> Vec<Value> {
    let events = app.run_events("/", body).await;
    assert_well_formed(&events);
    if body.get("protocolVersion").is_none() {
        assert_0x_compatible(&events);
    }
    assert_eq!(
        last(&events)["type"],
        "RUN_FINISHED",
        "{:?}",
        types(&events)
    );
    events
}

/// The history as the client keeps it after a run: the thread's messages without activities.
async fn client_history(app: &TestApp) -> Vec<Value> {
    let thread: Value = app.get("/assistant/threads/t1").await.json().await.unwrap();
    thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "activity")
        .cloned()
        .collect()
}

/// The inner calls of a stream: each `render_a2ui` call's id, parent message, arguments and
/// result.
fn inner_calls(events: &[Value]) -> Vec<(String, Value, String, Value)> {
    of_type(events, "TOOL_CALL_START")
        .into_iter()
        .filter(|start| start["toolCallName"] == "render_a2ui")
        .map(|start| {
            let id = start["toolCallId"].as_str().unwrap().to_owned();
            let arguments: String = of_type(events, "TOOL_CALL_ARGS")
                .into_iter()
                .filter(|a| a["toolCallId"] == id.as_str())
                .map(|a| a["delta"].as_str().unwrap())
                .collect();
            let result: Value = serde_json::from_str(result_of(events, &id)).unwrap();
            (id, start["parentMessageId"].clone(), arguments, result)
        })
        .collect()
}

async fn a_generated_surface_and_the_run_after_it(body_of: fn(Vec<Value>) -> Value) {
    let app = spawn_app(|_| {}).await;
    app.fake.push(generate_call("call_gen"));
    app.fake.push(render_reply(&valid_surface()));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Here are three hotels."])));
    let events = run(&app, &asking(body_of(vec![user("Compare hotels")]))).await;

    // The run's model is offered the generator, not the middleware's render tool.
    let bodies = app.fake.bodies();
    assert_eq!(bodies.len(), 3);
    assert_eq!(tool_names(&bodies[0]), ["get_weather", "generate_a2ui"]);
    // The inner call is forced to render, with the catalog the client registered.
    assert_eq!(tool_names(&bodies[1]), ["render_a2ui"]);
    assert_eq!(
        bodies[1]["tool_choice"],
        json!({"type": "function", "function": {"name": "render_a2ui"}})
    );
    let system = bodies[1]["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("HotelCard"), "{system}");
    assert!(
        bodies[1]["messages"].to_string().contains("three hotels"),
        "the model's description reaches the inner call"
    );

    // The inner call streams under the outer call's message, and is answered.
    let outer = of_type(&events, "TOOL_CALL_START")
        .into_iter()
        .find(|s| s["toolCallName"] == "generate_a2ui")
        .expect("the generator's call");
    let inner = inner_calls(&events);
    assert_eq!(inner.len(), 1, "{:?}", types(&events));
    let (inner_id, parent, arguments, status) = &inner[0];
    assert!(inner_id.starts_with("a2ui_render_"), "{inner_id}");
    assert_eq!(parent, &outer["parentMessageId"]);
    assert_eq!(
        serde_json::from_str::<Value>(arguments).unwrap(),
        valid_surface()
    );
    assert_eq!(status["status"], "rendered");
    let position = |ty: &str, id: &str| {
        events
            .iter()
            .position(|e| e["type"] == ty && e["toolCallId"] == id)
            .unwrap()
    };
    assert!(position("TOOL_CALL_END", "call_gen") < position("TOOL_CALL_START", inner_id));
    assert!(position("TOOL_CALL_RESULT", inner_id) < position("TOOL_CALL_RESULT", "call_gen"));

    // The outer call's result is the surface, named with the client's catalog.
    let envelope: Value = serde_json::from_str(result_of(&events, "call_gen")).unwrap();
    let surface = valid_surface();
    assert_eq!(
        envelope,
        json!({"a2ui_operations": [
            {"version": "v0.9", "createSurface": {"surfaceId": "hotel-comparison", "catalogId": CATALOG_ID}},
            {"version": "v0.9", "updateComponents": {"surfaceId": "hotel-comparison", "components": surface["components"]}},
            {"version": "v0.9", "updateDataModel": {"surfaceId": "hotel-comparison", "path": "/", "value": surface["data"]}}
        ]})
    );
    // The run's model sees the surface, not the inner call.
    assert!(!bodies[2]["messages"].to_string().contains("a2ui_render_"));
    assert_tool_calls_answered(&bodies[2]);

    // The next run, with the history the client keeps (the inner call and its result in it).
    let mut history = client_history(&app).await;
    assert!(
        history
            .iter()
            .any(|m| m.to_string().contains(inner_id.as_str())),
        "the thread keeps the inner call"
    );
    history.push(user("Thanks"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["You're welcome."])));
    let mut body = asking(body_of(history));
    body["runId"] = json!("r2");
    run(&app, &body).await;
    let upstream = app.fake.bodies().last().unwrap().clone();
    assert_tool_calls_answered(&upstream);
    let seen = upstream["messages"].to_string();
    assert!(!seen.contains("a2ui_render_"), "{seen}");
    assert!(
        seen.contains("a2ui_operations"),
        "the surface stays in the history"
    );
    assert_eq!(app.fake.unused_replies(), 0);
}

#[tokio::test]
async fn a_generated_surface_streams_its_inner_call_and_the_next_run_goes_on_for_a_1_0_client() {
    a_generated_surface_and_the_run_after_it(input).await;
}

#[tokio::test]
async fn a_generated_surface_streams_its_inner_call_and_the_next_run_goes_on_for_a_0x_client() {
    a_generated_surface_and_the_run_after_it(input_0x).await;
}

#[tokio::test]
async fn an_invalid_surface_is_retried_with_its_problems_and_never_the_result() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(generate_call("call_gen"));
    app.fake.push(render_reply(&broken_surface()));
    app.fake.push(render_reply(&valid_surface()));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    let events = run(&app, &asking(input(vec![user("Compare hotels")]))).await;

    let inner = inner_calls(&events);
    assert_eq!(inner.len(), 2);
    assert_eq!(inner[0].3["status"], "invalid");
    assert_eq!(inner[0].3["errors"][0]["code"], "unresolved_child");
    assert_eq!(inner[1].3["status"], "rendered");
    assert_ne!(inner[0].0, inner[1].0, "each attempt is a call of its own");
    // The retry is told what was wrong.
    let retry = &app.fake.bodies()[2];
    let system = retry["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("unresolved_child"), "{system}");
    assert!(system.contains("Previous attempt was invalid"), "{system}");
    assert!(system.contains("'card'"), "{system}");
    let envelope: Value = serde_json::from_str(result_of(&events, "call_gen")).unwrap();
    assert_eq!(
        envelope["a2ui_operations"][1]["updateComponents"]["components"],
        valid_surface()["components"]
    );
}

#[tokio::test]
async fn when_no_attempt_is_valid_the_result_is_the_recovery_failure_and_the_run_goes_on() {
    let app = spawn_app(|s| {
        s.agents.get_mut("assistant").unwrap().a2ui.max_attempts = 2;
    })
    .await;
    app.fake.push(generate_call("call_gen"));
    app.fake.push(render_reply(&broken_surface()));
    // The second attempt answers in text, calling nothing.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["I cannot."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "Sorry, that did not work.",
    ])));
    let events = run(&app, &asking(input(vec![user("Compare broken hotels")]))).await;

    let failure: Value = serde_json::from_str(result_of(&events, "call_gen")).unwrap();
    assert_eq!(failure["code"], "a2ui_recovery_exhausted");
    assert_eq!(
        failure["error"],
        "Failed to generate valid A2UI after 2 attempt(s)"
    );
    let attempts = failure["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["errors"][0]["code"], "unresolved_child");
    assert_eq!(attempts[1]["errors"][0]["code"], "empty_components");
    assert!(!result_of(&events, "call_gen").contains("a2ui_operations"));
    // The one inner call that streamed is closed and answered; the run's model goes on.
    assert_eq!(inner_calls(&events).len(), 1);
    assert_eq!(
        texts(&events).last().unwrap().1,
        "Sorry, that did not work."
    );
    assert_eq!(app.fake.unused_replies(), 0);
}

#[tokio::test]
async fn an_update_edits_the_surface_shown_earlier_in_place() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(generate_call("call_gen"));
    app.fake.push(render_reply(&valid_surface()));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Here."])));
    run(&app, &asking(input(vec![user("Compare hotels")]))).await;

    let mut history = client_history(&app).await;
    history.push(user("Add a third hotel"));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[(
            "call_upd",
            "generate_a2ui",
            r#"{"intent":"update","target_surface_id":"hotel-comparison","changes":"add Boutique Loft"}"#,
        )],
        false,
    )));
    let mut updated = valid_surface();
    updated["data"]["hotels"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "Boutique Loft"}));
    app.fake.push(render_reply(&updated));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Added."])));
    let mut body = asking(input(history));
    body["runId"] = json!("r2");
    let events = run(&app, &body).await;

    let inner_request = &app.fake.bodies()[4];
    let system = inner_request["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("Editing surface 'hotel-comparison'"),
        "{system}"
    );
    assert!(
        system.contains("Holiday Inn"),
        "the surface as it stands: {system}"
    );
    let envelope: Value = serde_json::from_str(result_of(&events, "call_upd")).unwrap();
    let operations = envelope["a2ui_operations"].as_array().unwrap();
    // In place: no second createSurface.
    assert!(operations
        .iter()
        .all(|op| op.get("createSurface").is_none()));
    assert_eq!(
        operations[1]["updateDataModel"]["value"]["hotels"][2]["name"],
        "Boutique Loft"
    );
}

#[tokio::test]
async fn the_generator_is_offered_only_when_asked_or_configured() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    let mut plain = input(vec![user("Hello")]);
    plain["tools"] = json!([render_tool()]);
    run(&app, &plain).await;
    // Not asked: the render tool stays the client's, and there is no generator.
    assert_eq!(
        tool_names(&app.fake.bodies()[0]),
        ["get_weather", "render_a2ui"]
    );

    let never = spawn_app(|s| {
        s.agents.get_mut("assistant").unwrap().a2ui.generate =
            agui_host::settings::A2uiGenerate::Never;
    })
    .await;
    never.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    run(&never, &asking(input(vec![user("Hello")]))).await;
    assert_eq!(
        tool_names(&never.fake.bodies()[0]),
        ["get_weather", "render_a2ui"]
    );

    let always = spawn_app(|s| {
        s.agents.get_mut("assistant").unwrap().a2ui.generate =
            agui_host::settings::A2uiGenerate::Always;
    })
    .await;
    always.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    run(&always, &input(vec![user("Hello")])).await;
    assert_eq!(
        tool_names(&always.fake.bodies()[0]),
        ["get_weather", "generate_a2ui"]
    );
}

fn flight_tool() -> ToolSettings {
    ToolSettings {
        name: "search_flights".into(),
        description: "Shows flights as cards.".into(),
        parameters: Some(json!({
            "type": "object",
            "properties": {"flights": {"type": "array", "items": {"type": "object"}}},
            "required": ["flights"]
        })),
        approval: Default::default(),
        allow_edit: false,
        approval_message: None,
        background: false,
        kind: ToolKindSettings::A2ui {
            surface_id: "flight-search-results".into(),
            catalog_id: Some("https://example.test/fixed_catalog.json".into()),
            components: json!([
                {"id": "root", "component": "Row", "children": {"componentId": "card", "path": "/flights"}},
                {"id": "card", "component": "FlightCard", "flightNumber": {"path": "flightNumber"}}
            ]),
        },
    }
}

fn with_flight_tool(settings: &mut Settings) {
    settings
        .agents
        .get_mut("assistant")
        .unwrap()
        .tools
        .push(flight_tool());
}

async fn a_fixed_surface_then_a_user_action(body_of: fn(Vec<Value>) -> Value) {
    let app = spawn_app(with_flight_tool).await;
    let flights = r#"{"flights":[{"flightNumber":"UA 123"},{"flightNumber":"DL 456"}]}"#;
    app.fake
        .push_call_then_text(("call_f", "search_flights", flights), "Here are flights.");
    let events = run(&app, &body_of(vec![user("Flights to JFK")])).await;
    let envelope: Value = serde_json::from_str(result_of(&events, "call_f")).unwrap();
    let operations = envelope["a2ui_operations"].as_array().unwrap();
    assert_eq!(
        operations[0]["createSurface"],
        json!({"surfaceId": "flight-search-results", "catalogId": "https://example.test/fixed_catalog.json"})
    );
    assert_eq!(
        operations[2]["updateDataModel"]["value"],
        serde_json::from_str::<Value>(flights).unwrap()
    );

    // The user presses a card's button: the middleware appends a synthetic `log_a2ui_event`
    // call and its result to the history the client keeps. Not a server tool: the history
    // check lets it through, and the model reads it.
    let mut history = client_history(&app).await;
    let action = json!({"name": "book", "surfaceId": "flight-search-results",
                        "sourceComponentId": "card", "context": {"flightNumber": "UA 123"}});
    history.push(assistant_calls(&[(
        "call_action",
        "log_a2ui_event",
        &action.to_string(),
    )]));
    history.push(tool_result(
        "call_action",
        r#"User performed action "book" on surface "flight-search-results" (component: card). Context: {"flightNumber":"UA 123"}"#,
    ));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Booking UA 123."])));
    let mut body = body_of(history);
    body["runId"] = json!("r2");
    run(&app, &body).await;
    let upstream = app.fake.bodies().last().unwrap().clone();
    assert_tool_calls_answered(&upstream);
    assert!(upstream["messages"]
        .to_string()
        .contains("User performed action"));
}

#[tokio::test]
async fn a_fixed_surface_and_a_user_action_on_it_for_a_1_0_client() {
    a_fixed_surface_then_a_user_action(input).await;
}

#[tokio::test]
async fn a_fixed_surface_and_a_user_action_on_it_for_a_0x_client() {
    a_fixed_surface_then_a_user_action(input_0x).await;
}

#[tokio::test]
async fn a_fixed_surface_that_is_not_a_valid_tree_is_refused_at_start_up() {
    let mut tool = flight_tool();
    tool.kind = ToolKindSettings::A2ui {
        surface_id: "s".into(),
        catalog_id: None,
        components: json!([{"id": "main", "component": "Row"}]),
    };
    let fake = crate::fake_llm::FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    settings
        .agents
        .get_mut("assistant")
        .unwrap()
        .tools
        .push(tool);
    let error = match agui_host::app::App::build(settings).await {
        Ok(_) => panic!("a tool with no root starts"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("No component has id 'root'"), "{error}");

    // Nor may a configured tool take the generator's name while it is offered.
    let mut settings = test_settings(&fake);
    let mut clash = flight_tool();
    clash.name = "generate_a2ui".into();
    settings
        .agents
        .get_mut("assistant")
        .unwrap()
        .tools
        .push(clash);
    let error = match agui_host::app::App::build(settings).await {
        Ok(_) => panic!("a tool named generate_a2ui starts"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("generate_a2ui"), "{error}");
}

#[tokio::test]
async fn an_inner_call_that_stalls_is_closed_when_the_generators_time_is_up() {
    let app = spawn_app(|s| {
        s.agents.get_mut("assistant").unwrap().a2ui.timeout_secs = 1;
    })
    .await;
    app.fake.push(generate_call("call_gen"));
    let mut partial = chunks::tool_calls(
        &[("call_inner", "render_a2ui", &valid_surface().to_string())],
        false,
    );
    // The model stops halfway through the arguments and never ends its answer.
    partial.truncate(partial.len() / 2);
    app.fake.push(Reply::Stall(partial));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["That took too long."])));
    let events = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run(&app, &asking(input(vec![user("Compare hotels")]))),
    )
    .await
    .expect("the run ends");
    let inner = inner_calls(&events);
    assert_eq!(inner.len(), 1);
    assert_eq!(inner[0].3, json!({"status": "timeout"}));
    let result: Value = serde_json::from_str(result_of(&events, "call_gen")).unwrap();
    assert!(
        result["error"].as_str().unwrap().contains("timed out"),
        "{result}"
    );
    assert_eq!(texts(&events).last().unwrap().1, "That took too long.");
    assert_eq!(app.fake.disconnects(), 1, "the stalled call is closed");
}

/// The generator is a server tool: on a verified thread, a client cannot change the surface
/// it answered with, nor invent one.
#[tokio::test]
async fn a_generators_result_is_the_servers_to_give() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(generate_call("call_gen"));
    app.fake.push(render_reply(&valid_surface()));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Here."])));
    run(&app, &asking(input(vec![user("Compare hotels")]))).await;

    let mut changed = client_history(&app).await;
    let at = changed
        .iter()
        .position(|m| m["toolCallId"] == "call_gen")
        .unwrap();
    changed[at]["content"] = json!(r#"{"a2ui_operations":[]}"#);
    changed.push(user("Thanks"));
    let mut body = asking(input(changed));
    body["runId"] = json!("r2");
    let response = app.post_run("/", &body).await;
    assert_eq!(response.status(), 422);
    assert_eq!(
        error_body(response).await["error"]["code"],
        "changed_tool_result"
    );

    let invented = vec![
        user("Hello"),
        assistant_calls(&[("call_fake", "generate_a2ui", "{}")]),
        tool_result("call_fake", r#"{"a2ui_operations":[]}"#),
        user("Go on"),
    ];
    let mut body = asking(input(invented));
    body["threadId"] = json!("t2");
    let response = app.post_run("/", &body).await;
    assert_eq!(response.status(), 422);
    assert_eq!(
        error_body(response).await["error"]["code"],
        "unrecorded_tool_result"
    );
}

#[tokio::test]
async fn capabilities_name_the_agents_surfaces_and_when_it_generates_them() {
    let app = spawn_app(|s| {
        with_flight_tool(s);
        s.agents.get_mut("assistant").unwrap().a2ui.generate =
            agui_host::settings::A2uiGenerate::Always;
    })
    .await;
    let caps: Value = app
        .get("/assistant/capabilities")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        caps["custom"]["agui-host"]["a2ui"],
        json!({"version": "v0.9", "generate": "always", "surfaces": [{
            "tool": "search_flights",
            "surfaceId": "flight-search-results",
            "catalogId": "https://example.test/fixed_catalog.json"
        }]})
    );
}
