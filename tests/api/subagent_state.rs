//! Subagent state: each child's state is one key of its parent's (`subagent_state`, by default
//! the child's name). A child with a state tool writes its key, attributed for a 1.0 client and
//! unattributed for a 0.x one or when hidden; a child's predictive state streams under its
//! key; two children in parallel each write their own; the next run gives a child its key back;
//! the parent's own writes keep the children's keys; a child that asks a person writes its key
//! again after the answer resumes it; and bad keys are refused at start-up.
//! Every state event must apply, in order, on top of the client's state.

use agui_host::settings::{AgentSettings, Settings};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, FakeLlm, Reply};
use crate::helpers::*;
use crate::subagents::{own_upstream, task};
use crate::verify::{assert_0x_compatible, assert_well_formed};

fn agent(settings: Value) -> AgentSettings {
    serde_json::from_value(settings).expect("agent settings")
}

/// A state tool writing its `plan` argument to the child's `plan` key.
fn save_plan() -> Value {
    json!({
        "name": "save_plan", "description": "Saves the plan.", "kind": "state",
        "key": "plan", "argument": "plan", "confirmation": "Plan saved.",
        "parameters": {"type": "object", "properties": {"plan": {"type": "string"}},
            "required": ["plan"]},
    })
}

/// `planner` delegating to `flights` and `hotels`, each with a `save_plan` state tool, plus
/// `planner` settings of the test's.
fn travel(settings: &mut Settings, planner: Value) {
    crate::subagents::add_planner(settings, planner);
    for child in ["flights", "hotels"] {
        let settings_of_child = json!({
            "description": format!("Finds {child}"),
            "instructions": format!("You find {child}."),
            "tools": [save_plan()],
        });
        settings
            .agents
            .insert(child.into(), agent(settings_of_child));
    }
}

fn plan(text: &str) -> String {
    json!({ "plan": text }).to_string()
}

fn with_state(mut body: Value, state: Value) -> Value {
    body["state"] = state;
    body
}

/// The state a client holds after `events`, from `initial`: a snapshot replaces it, a delta
/// applies atomically; a delta the client would drop fails the test.
#[track_caller]
fn client_state(initial: &Value, events: &[Value]) -> Value {
    let mut state = initial.clone();
    for event in events {
        match event["type"].as_str() {
            Some("STATE_SNAPSHOT") => state = event["snapshot"].clone(),
            Some("STATE_DELTA") => {
                let patch: json_patch::Patch =
                    serde_json::from_value(event["delta"].clone()).expect("an RFC 6902 patch");
                json_patch::patch(&mut state, &patch)
                    .unwrap_or_else(|e| panic!("the delta applies: {e}: {event}"));
            }
            _ => {}
        }
    }
    state
}

fn state_events(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "STATE_DELTA" || e["type"] == "STATE_SNAPSHOT")
        .collect()
}

/// The `subagentRunId` of the child `name`.
fn run_id_of(events: &[Value], name: &str) -> Value {
    events
        .iter()
        .find(|e| e["type"] == "SUBAGENT_STARTED" && e["name"] == name)
        .unwrap_or_else(|| panic!("no SUBAGENT_STARTED for {name}: {events:#?}"))["subagentRunId"]
        .clone()
}

/// The paths of a delta's operations.
fn paths(event: &Value) -> Vec<&str> {
    event["delta"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect()
}

/// Scripts one upstream for: the parent calls `flights`, which saves `plan_text`, answers,
/// and the parent answers.
fn script_one_child(app: &TestApp, plan_text: &str) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Paris to Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "save_plan", &plan(plan_text))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Saved."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
}

#[tokio::test]
async fn a_childs_state_tool_writes_its_key_attributed_for_a_1_0_client() {
    let app = spawn_app(|s| travel(s, json!({"subagent_state": {"flights": "flight_plan"}}))).await;
    script_one_child(&app, "AF12");
    let initial = json!({"keep": 1});
    let body = with_state(input(vec![user("Rome?")]), initial.clone());
    let events = app.run_events("/planner", &body).await;
    assert_well_formed(&events);

    let id = run_id_of(&events, "flights");
    let states = state_events(&events);
    assert!(!states.is_empty(), "the child's write reached the client");
    for event in &states {
        assert_eq!(event["type"], "STATE_DELTA", "never a snapshot: {event}");
        assert_eq!(event["subagentRunId"], id, "{event}");
        assert!(paths(event).iter().all(|p| p.starts_with("/flight_plan")));
    }
    // The first adds the key whole: the client may not have it yet.
    assert_eq!(
        states[0]["delta"],
        json!([{"op": "add", "path": "/flight_plan", "value": {"plan": "AF12"}}])
    );
    let expected = json!({"keep": 1, "flight_plan": {"plan": "AF12"}});
    assert_eq!(client_state(&initial, &events), expected);

    // The thread's record holds the same state.
    let thread: Value = app
        .get("/planner/threads/t1")
        .await
        .json()
        .await
        .expect("a thread record");
    assert_eq!(thread["state"], expected, "{thread}");
}

#[tokio::test]
async fn a_0x_client_gets_the_childs_state_unattributed() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    script_one_child(&app, "AF12");
    let initial = json!({});
    let body = with_state(input_0x(vec![user("Rome?")]), initial.clone());
    let events = app.run_events("/planner", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert!(events.iter().all(|e| e.get("subagentRunId").is_none()));
    assert!(!state_events(&events).is_empty());
    // The key is the child's name by default.
    assert_eq!(
        client_state(&initial, &events),
        json!({"flights": {"plan": "AF12"}})
    );
}

#[tokio::test]
async fn hidden_still_passes_the_childs_state_unattributed() {
    let app = spawn_app(|s| travel(s, json!({"subagent_visibility": "hidden"}))).await;
    script_one_child(&app, "AF12");
    let events = app
        .run_events("/planner", &input(vec![user("Rome?")]))
        .await;
    assert_well_formed(&events);
    assert!(events.iter().all(|e| e.get("subagentRunId").is_none()));
    assert_eq!(
        client_state(&json!({}), &events),
        json!({"flights": {"plan": "AF12"}})
    );
}

#[tokio::test]
async fn a_childs_predictive_state_streams_under_its_key() {
    const PLAN: &str = "Paris to Rome on Friday: AF12 at 9:00, seat 12A, one bag.";
    let app = spawn_app(|s| {
        travel(s, json!({}));
        let flights = s.agents.get_mut("flights").unwrap();
        flights.tools = vec![static_tool("write_plan", json!({"status": "written"}))];
        flights.predict_state.insert(
            "draft".into(),
            agui_host::settings::PredictStateRule {
                tool: "write_plan".into(),
                tool_argument: "plan".into(),
            },
        );
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Paris to Rome"))],
        false,
    )));
    app.fake
        .push_call_then_text(("call_w", "write_plan", &plan(PLAN)), "Written.");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));

    let initial = json!({"keep": true});
    let body = with_state(input(vec![user("Rome?")]), initial.clone());
    let events = app.run_events("/planner", &body).await;
    assert_well_formed(&events);

    let id = run_id_of(&events, "flights");
    let states = state_events(&events);
    assert!(
        states.len() >= 2,
        "the plan streamed in more than one delta: {states:#?}"
    );
    // Streamed while the child's model wrote the call: before the call's end.
    let end = events
        .iter()
        .position(|e| e["type"] == "TOOL_CALL_END" && e["subagentRunId"] == id)
        .expect("the child's call ends");
    let first = events
        .iter()
        .position(|e| e["type"] == "STATE_DELTA")
        .unwrap();
    assert!(first < end, "predicted before the arguments were complete");
    for event in &states {
        assert_eq!(event["subagentRunId"], id, "{event}");
        assert!(paths(event).iter().all(|p| p.starts_with("/flights")));
    }
    assert_eq!(
        client_state(&initial, &events),
        json!({"keep": true, "flights": {"draft": PLAN}})
    );
}

#[tokio::test]
async fn two_children_in_parallel_each_write_their_own_key() {
    let flights = FakeLlm::start().await;
    let hotels = FakeLlm::start().await;
    let app = spawn_app(|s| {
        travel(s, json!({"subagent_state": {"hotels": "stay"}}));
        own_upstream(s, "flights", &flights);
        own_upstream(s, "hotels", &hotels);
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_1", "flights", &task("Paris to Rome")),
            ("call_2", "hotels", &task("Rome, two nights")),
        ],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    flights.push_call_then_text(("call_1", "save_plan", &plan("AF12")), "Saved.");
    hotels.push_call_then_text(("call_1", "save_plan", &plan("Hotel Roma")), "Saved.");

    let events = app
        .run_events("/planner", &input(vec![user("Rome?")]))
        .await;
    assert_well_formed(&events);
    let flights_id = run_id_of(&events, "flights");
    let hotels_id = run_id_of(&events, "hotels");
    for event in state_events(&events) {
        let key = if event["subagentRunId"] == flights_id {
            "/flights"
        } else {
            assert_eq!(event["subagentRunId"], hotels_id, "{event}");
            "/stay"
        };
        assert!(paths(event).iter().all(|p| p.starts_with(key)), "{event}");
    }
    assert_eq!(
        client_state(&json!({}), &events),
        json!({"flights": {"plan": "AF12"}, "stay": {"plan": "Hotel Roma"}})
    );
}

#[tokio::test]
async fn the_next_run_gives_the_child_its_key_back() {
    let app = spawn_app(|s| travel(s, json!({"subagent_state": {"flights": "flight_plan"}}))).await;
    script_one_child(&app, "AF12 at 9:00");
    let sent = vec![user("Rome?")];
    let first = app.run_events("/planner", &input(sent.clone())).await;
    let state = client_state(&json!({}), &first);

    // The client sends back the state it holds; the child is called again.
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_2", "flights", &task("Is the plan still good?"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["It is."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["All set."])));
    let mut body = with_state(input(vec![user("Check it")]), state.clone());
    body["runId"] = json!("r2");
    let second = app.run_events("/planner", &body).await;
    assert_well_formed(&second);

    let bodies = app.upstream_bodies();
    let child = &bodies[bodies.len() - 2];
    let prompt = content_text(&child["messages"][0]);
    assert!(
        prompt.contains("AF12 at 9:00"),
        "the child's prompt shows its state: {prompt}"
    );
    assert!(
        !prompt.contains("flight_plan"),
        "only its key, not the parent's state: {prompt}"
    );
    assert_eq!(client_state(&state, &second), state);
}

#[tokio::test]
async fn the_parents_own_writes_keep_the_childs_key_and_a_later_call_starts_from_it() {
    let app = spawn_app(|s| {
        let budget = json!({
            "name": "set_budget", "description": "Sets the budget.", "kind": "state",
            "key": "budget", "argument": "amount",
            "parameters": {"type": "object", "properties": {"amount": {"type": "number"}},
                "required": ["amount"]},
        });
        travel(s, json!({"tools": [budget], "status": {"enabled": true}}));
    })
    .await;
    // The parent delegates, writes its own key, then delegates to the same child again.
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Paris to Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "save_plan", &plan("AF12"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Saved."])));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_2", "set_budget", r#"{"amount": 500}"#)],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_3", "flights", &task("Check the plan"))],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It holds."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));

    let initial = json!({});
    let events = app
        .run_events(
            "/planner",
            &with_state(input(vec![user("Rome?")]), initial.clone()),
        )
        .await;
    assert_well_formed(&events);
    let state = client_state(&initial, &events);
    assert_eq!(state["flights"], json!({"plan": "AF12"}), "{state}");
    assert_eq!(state["budget"], json!(500), "{state}");
    assert_eq!(state["status"]["phase"], "completed", "{state}");

    // The second call of the child started from what the first wrote.
    let bodies = app.upstream_bodies();
    let second_child = &bodies[5];
    let prompt = content_text(&second_child["messages"][0]);
    assert!(prompt.contains("AF12"), "{prompt}");

    let thread: Value = app
        .get("/planner/threads/t1")
        .await
        .json()
        .await
        .expect("a thread record");
    assert_eq!(thread["state"], state, "{thread}");
}

#[tokio::test]
async fn state_keys_that_clash_are_refused_at_start_up() {
    let error =
        crate::subagents::refused(|s| travel(s, json!({"subagent_state": {"hotels": "flights"}})))
            .await;
    assert!(
        error.contains("each subagent needs a key of its own"),
        "{error}"
    );

    let error = crate::subagents::refused(|s| {
        travel(s, json!({"status": {"enabled": true, "key": "flights"}}))
    })
    .await;
    assert!(error.contains("its status key"), "{error}");

    let error =
        crate::subagents::refused(|s| travel(s, json!({"subagent_state": {"trains": "t"}}))).await;
    assert!(error.contains("not one of its subagents"), "{error}");
    let error = crate::subagents::refused(|s| {
        travel(s, json!({}));
        s.agents.get_mut("hotels").unwrap().subagent_state =
            [("flights".to_owned(), "f".to_owned())].into();
    })
    .await;
    assert!(
        error.contains("agents.hotels.subagent_state `flights`"),
        "{error}"
    );

    let error = crate::subagents::refused(|s| {
        travel(
            s,
            json!({"state": {"schema": {"type": "object", "additionalProperties": false,
                "properties": {"flights": {"type": "object"}}}}}),
        )
    })
    .await;
    assert!(
        error.contains("`hotels`") && error.contains("additionalProperties"),
        "{error}"
    );
}

#[tokio::test]
async fn capabilities_say_a_parent_whose_child_writes_state_sends_deltas() {
    let app = spawn_app(|s| {
        travel(s, json!({}));
        s.agents.insert(
            "lone".into(),
            agent(json!({"instructions": "Alone.", "subagents": ["quiet"]})),
        );
        s.agents
            .insert("quiet".into(), agent(json!({"instructions": "Quiet."})));
    })
    .await;
    let planner: Value = app.get("/planner/capabilities").await.json().await.unwrap();
    assert_eq!(planner["state"]["deltas"], true, "{planner}");
    let lone: Value = app.get("/lone/capabilities").await.json().await.unwrap();
    assert_eq!(lone["state"]["deltas"], false, "{lone}");
}

#[tokio::test]
async fn a_whole_state_snapshot_of_the_parents_own_keeps_the_childs_key() {
    let app = spawn_app(|s| {
        let reset = json!({
            "name": "reset", "description": "Starts the trip over.", "kind": "static",
            "parameters": {"type": "object", "properties": {}},
            "result": "Reset.", "state": {"snapshot": {"budget": 0}},
        });
        travel(s, json!({"tools": [reset]}));
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Paris to Rome"))],
        false,
    )));
    app.fake
        .push_call_then_text(("call_1", "save_plan", &plan("AF12")), "Saved.");
    app.fake
        .push_call_then_text(("call_2", "reset", "{}"), "Budget reset.");

    let initial = json!({"old": true});
    let body = with_state(input(vec![user("Rome?")]), initial.clone());
    let events = app.run_events("/planner", &body).await;
    assert_well_formed(&events);
    assert_eq!(
        the(&events, "STATE_SNAPSHOT")["snapshot"],
        json!({"budget": 0, "flights": {"plan": "AF12"}})
    );
    assert_eq!(
        client_state(&initial, &events),
        json!({"budget": 0, "flights": {"plan": "AF12"}})
    );
}

#[tokio::test]
async fn a_child_resumed_after_its_approval_starts_from_its_key_and_writes_it() {
    let app = spawn_app(|s| {
        travel(s, json!({}));
        let confirm = json!({
            "name": "confirm_plan", "description": "Confirms the plan.", "kind": "state",
            "key": "confirmed", "argument": "by", "approval": "always",
            "parameters": {"type": "object", "properties": {"by": {"type": "string"}},
                "required": ["by"]},
        });
        let flights = s.agents.get_mut("flights").unwrap();
        flights.tools.push(agent_tool(confirm));
    })
    .await;
    // Run 1: the child saves a draft, then asks before it confirms.
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Plan and confirm Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("c1", "save_plan", &plan("draft"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("c2", "confirm_plan", r#"{"by": "Ada"}"#)],
        false,
    )));
    let sent = vec![user("Rome?")];
    let mut body = input(sent.clone());
    body["runId"] = json!("r1");
    let first = app.run_events("/planner", &body).await;
    assert_well_formed(&first);
    let interrupt = crate::approvals::interrupts(&first)[0].clone();
    let state = client_state(&json!({}), &first);
    assert_eq!(state, json!({"flights": {"plan": "draft"}}));

    // Run 2: approved, with the state the client holds; the child goes on from its key.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Confirmed."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["All set."])));
    let history = crate::subagents::client_history(&sent, &first);
    let mut body = with_state(input(history), state.clone());
    body["runId"] = json!("r2");
    body["resume"] = json!([crate::approvals::resolved(
        interrupt["id"].as_str().unwrap(),
        json!({"approved": true})
    )]);
    let second = app.run_events("/planner", &body).await;
    assert_well_formed(&second);
    crate::approvals::assert_success(&second);
    let id = run_id_of(&second, "flights");
    assert!(state_events(&second)
        .iter()
        .all(|e| e["subagentRunId"] == id));
    assert_eq!(
        client_state(&state, &second),
        json!({"flights": {"plan": "draft", "confirmed": "Ada"}})
    );
}

fn agent_tool(tool: Value) -> agui_host::settings::ToolSettings {
    serde_json::from_value(tool).expect("tool settings")
}
