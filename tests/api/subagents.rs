//! Subagents: a parent agent delegates to other configured agents through a tool named after
//! each. One child (attributed, its answer the parent's result, a follow-up with the history
//! the client keeps), two children in parallel on their own upstreams, a child calling a server
//! tool, a failing child, the fan-out limit, cancellation mid-child, each visibility for both
//! client generations, capabilities, and the settings refused at start-up.

use std::time::Duration;

use agui_host::settings::{AgentSettings, ModelProfile, Settings, ThreadStoreKind};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, FakeLlm, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

fn agent(settings: Value) -> AgentSettings {
    serde_json::from_value(settings).expect("agent settings")
}

/// `planner`, delegating to `flights` and `hotels`, with the test's own `planner` settings.
pub(crate) fn add_planner(settings: &mut Settings, planner: Value) {
    let mut parent = json!({
        "description": "Plans trips",
        "instructions": "You plan trips; delegate to your agents.",
        "subagents": ["flights", "hotels"],
    });
    parent
        .as_object_mut()
        .unwrap()
        .extend(planner.as_object().cloned().unwrap_or_default());
    settings.agents.insert("planner".into(), agent(parent));
}

/// `planner` delegating to `flights` (with a `search_flights` server tool) and `hotels`, each
/// child on the profile of its name when one is configured.
pub(crate) fn travel(settings: &mut Settings, planner: Value) {
    add_planner(settings, planner);
    let flights = json!({
        "description": "Finds flights",
        "instructions": "You find flights.",
        "tools": [{
            "name": "search_flights", "description": "Searches flights.", "kind": "static",
            "parameters": {"type": "object", "properties": {}},
            "result": {"flights": ["AF12"]},
        }],
    });
    settings.agents.insert("flights".into(), agent(flights));
    let hotels = json!({"description": "Finds hotels", "instructions": "You find hotels."});
    settings.agents.insert("hotels".into(), agent(hotels));
}

/// Puts `child` on an upstream of its own.
pub(crate) fn own_upstream(settings: &mut Settings, child: &str, fake: &FakeLlm) {
    let profile = ModelProfile {
        provider: Some(agui_host::settings::LlmProvider::Openai),
        base_url: fake.base_url(),
        api_key: API_KEY.into(),
        model: format!("{child}-model"),
        max_retries: Some(0),
        ..ModelProfile::default()
    };
    settings.models.insert(child.into(), profile);
    settings.agents.get_mut(child).unwrap().profile = Some(child.into());
}

pub(crate) fn task(text: &str) -> String {
    json!({ "task": text }).to_string()
}

/// The `SUBAGENT_STARTED` of the child `name`.
pub(crate) fn started<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "SUBAGENT_STARTED" && e["name"] == name)
        .unwrap_or_else(|| panic!("no SUBAGENT_STARTED for {name}: {events:#?}"))
}

pub(crate) fn position(events: &[Value], predicate: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(predicate)
        .expect("the event is in the stream")
}

/// The messages a 1.0 client holds after a run: the input's, then what the run's events build,
/// each with its `subagentRunId` (a simplified `defaultApplyEvents`).
pub(crate) fn client_history(sent: &[Value], events: &[Value]) -> Vec<Value> {
    let mut messages: Vec<Value> = sent.to_vec();
    let find = |messages: &mut Vec<Value>, id: &str| messages.iter().position(|m| m["id"] == id);
    for event in events {
        let owner = event.get("subagentRunId").cloned();
        let tag = |mut message: Value| {
            if let Some(owner) = &owner {
                message["subagentRunId"] = owner.clone();
            }
            message
        };
        match event["type"].as_str().unwrap() {
            "TEXT_MESSAGE_START" => {
                let id = event["messageId"].as_str().unwrap();
                if find(&mut messages, id).is_none() {
                    messages.push(tag(json!({"id": id, "role": "assistant", "content": ""})));
                }
            }
            "TEXT_MESSAGE_CONTENT" => {
                let at = find(&mut messages, event["messageId"].as_str().unwrap()).unwrap();
                let text = messages[at]["content"].as_str().unwrap_or("").to_owned();
                messages[at]["content"] = json!(text + event["delta"].as_str().unwrap());
            }
            "TOOL_CALL_START" => {
                let parent = event["parentMessageId"].as_str().unwrap();
                let at = match find(&mut messages, parent) {
                    Some(at) => at,
                    None => {
                        messages.push(tag(json!({"id": parent, "role": "assistant"})));
                        messages.len() - 1
                    }
                };
                let call = json!({"id": event["toolCallId"], "type": "function",
                    "function": {"name": event["toolCallName"], "arguments": ""}});
                match messages[at]["toolCalls"].as_array_mut() {
                    Some(calls) => calls.push(call),
                    None => messages[at]["toolCalls"] = json!([call]),
                }
            }
            "TOOL_CALL_ARGS" => {
                for message in &mut messages {
                    for call in message["toolCalls"].as_array_mut().into_iter().flatten() {
                        if call["id"] == event["toolCallId"] {
                            let args = call["function"]["arguments"].as_str().unwrap().to_owned();
                            call["function"]["arguments"] =
                                json!(args + event["delta"].as_str().unwrap());
                        }
                    }
                }
            }
            "TOOL_CALL_RESULT" => messages.push(tag(json!({
                "id": event["messageId"], "role": "tool",
                "toolCallId": event["toolCallId"], "content": event["content"],
            }))),
            _ => {}
        }
    }
    messages
}

#[tokio::test]
async fn one_child_runs_attributed_and_its_answer_is_the_parents_result() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Paris to Rome on Friday"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "AF12 ",
        "leaves at 9:00.",
    ])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Take AF12 at 9:00."])));

    let sent = vec![user("Get me to Rome on Friday")];
    let events = app.run_events("/planner", &input(sent.clone())).await;
    assert_well_formed(&events);

    let start = started(&events, "flights");
    let id = start["subagentRunId"].as_str().unwrap();
    assert_eq!(start["parentToolCallId"], "call_1");
    assert_eq!(start["description"], "Finds flights");
    let call = the(&events, "TOOL_CALL_START");
    assert_eq!(start["parentMessageId"], call["parentMessageId"]);
    // Everything between the child's start and end is the child's.
    let from = position(&events, |e| e["type"] == "SUBAGENT_STARTED");
    let to = position(&events, |e| e["type"] == "SUBAGENT_FINISHED");
    assert!(to > from + 3, "the child streamed its text");
    for event in &events[from + 1..to] {
        assert_eq!(event["subagentRunId"], id, "{event}");
    }
    assert_eq!(events[to]["outcome"], json!({"type": "success"}));
    let result = position(&events, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert!(result > to, "the child ends before the parent's result");
    assert_eq!(events[result]["content"], "AF12 leaves at 9:00.");
    assert!(events[result].get("subagentRunId").is_none());

    // The parent, the child, the parent again.
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 3);
    let child = &bodies[1]["messages"];
    assert_eq!(child[0]["role"], "system");
    assert!(child[0]["content"]
        .as_str()
        .unwrap()
        .contains("You find flights."));
    assert_eq!(child[1]["content"], "Paris to Rome on Friday");
    assert_eq!(
        child.as_array().unwrap().len(),
        2,
        "the child sees only its task"
    );
    let parent = bodies[2]["messages"].as_array().unwrap();
    let last = parent.last().unwrap();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["content"], "AF12 leaves at 9:00.");
    assert_tool_calls_answered(&bodies[2]);

    // The client's next run carries what it holds, the child's messages included: accepted
    // against the thread's record, and the parent's model sees none of the child's messages.
    let mut history = client_history(&sent, &events);
    assert!(history.iter().any(|m| m["subagentRunId"] == id));
    // The thread's record keeps the attribution the client holds.
    let thread: Value = app.get("/planner/threads/t1").await.json().await.unwrap();
    let owners = |messages: &[Value]| -> Vec<Value> {
        messages
            .iter()
            .map(|m| m["subagentRunId"].clone())
            .collect()
    };
    assert_eq!(
        owners(thread["messages"].as_array().unwrap()),
        owners(&history)
    );
    history.push(user("And a hotel?"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sure."])));
    let events = app.run_events("/planner", &next).await;
    assert_well_formed(&events);
    assert_eq!(last_type(&events), "RUN_FINISHED", "{events:#?}");
    let body = app.upstream_bodies().pop().unwrap();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        roles(&body),
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
    assert!(
        !messages
            .iter()
            .any(|m| m["content"].as_str() == Some("AF12 leaves at 9:00.")
                && m["role"] == "assistant")
    );
}

fn last_type(events: &[Value]) -> &str {
    last(events)["type"].as_str().unwrap()
}

#[tokio::test]
async fn two_children_run_in_parallel_each_event_attributed_to_its_child() {
    let flights = FakeLlm::start().await;
    let hotels = FakeLlm::start().await;
    let app = spawn_app(|s| {
        travel(s, json!({}));
        own_upstream(s, "flights", &flights);
        own_upstream(s, "hotels", &hotels);
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_f", "flights", &task("a flight to Rome")),
            ("call_h", "hotels", &task("a hotel in Rome")),
        ],
        false,
    )));
    let slow = Duration::from_millis(20);
    let flight_words: Vec<String> = (0..8).map(|i| format!("flight{i} ")).collect();
    let hotel_words: Vec<String> = (0..8).map(|i| format!("hotel{i} ")).collect();
    let flight_parts: Vec<&str> = flight_words.iter().map(String::as_str).collect();
    let hotel_parts: Vec<&str> = hotel_words.iter().map(String::as_str).collect();
    flights.push(Reply::SlowSse(chunks::text_reply(&flight_parts), slow));
    hotels.push(Reply::SlowSse(chunks::text_reply(&hotel_parts), slow));
    app.fake.push(Reply::Sse(chunks::text_reply(&["All set."])));

    let events = app
        .run_events("/planner", &input(vec![user("Plan Rome")]))
        .await;
    assert_well_formed(&events);
    let flights_id = started(&events, "flights")["subagentRunId"].clone();
    let hotels_id = started(&events, "hotels")["subagentRunId"].clone();
    assert_ne!(flights_id, hotels_id);
    for event in &events {
        if let Some(delta) = event["delta"].as_str() {
            if delta.starts_with("flight") {
                assert_eq!(event["subagentRunId"], flights_id, "{event}");
            } else if delta.starts_with("hotel") {
                assert_eq!(event["subagentRunId"], hotels_id, "{event}");
            }
        }
    }
    // They ran at once: the second started before the first finished.
    let second_start = position(&events, |e| {
        e["type"] == "SUBAGENT_STARTED" && e["name"] == "hotels"
    });
    let first_end = position(&events, |e| e["type"] == "SUBAGENT_FINISHED");
    assert!(
        second_start < first_end,
        "the children ran one after the other"
    );
    for (call, id) in [("call_f", &flights_id), ("call_h", &hotels_id)] {
        let end = position(&events, |e| {
            e["type"] == "SUBAGENT_FINISHED" && e["subagentRunId"] == *id
        });
        let result = position(&events, |e| {
            e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call
        });
        assert!(end < result, "{call}: the child ends before its result");
    }
    assert_eq!(flights.bodies().len(), 1);
    assert_eq!(hotels.bodies().len(), 1);
    let parent = app.upstream_bodies();
    assert_eq!(parent.len(), 2);
    assert_tool_calls_answered(&parent[1]);
}

#[tokio::test]
async fn a_child_calls_its_own_server_tool_without_clashing_with_the_parents_call_ids() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    // The parent's and the child's models both name their call `call_1`.
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("to Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "search_flights", "{}")],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Found AF12."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["AF12 it is."])));

    let events = app
        .run_events("/planner", &input(vec![user("Rome?")]))
        .await;
    assert_well_formed(&events);
    let id = started(&events, "flights")["subagentRunId"].clone();
    let child_call = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START" && e["toolCallName"] == "search_flights")
        .expect("the child's call is streamed");
    assert_eq!(child_call["subagentRunId"], id);
    let child_call_id = child_call["toolCallId"].as_str().unwrap();
    assert_ne!(child_call_id, "call_1");
    let child_result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == child_call_id)
        .expect("the child's tool result is streamed");
    assert_eq!(child_result["subagentRunId"], id);
    assert_eq!(
        child_result["content"],
        json!({"flights": ["AF12"]}).to_string()
    );
    let parent_result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1")
        .unwrap();
    assert_eq!(parent_result["content"], "Found AF12.");
    // The child's second model call had its tool's result.
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 4);
    assert_eq!(roles(&bodies[2]), ["system", "user", "assistant", "tool"]);
}

#[tokio::test]
async fn a_failing_child_ends_with_subagent_error_and_the_parent_goes_on() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("to Rome"))],
        false,
    )));
    app.fake.push(Reply::Status(
        500,
        "{\"error\":{\"message\":\"boom\"}}".into(),
    ));
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "Flights are down, sorry.",
    ])));

    let events = app
        .run_events("/planner", &input(vec![user("Rome?")]))
        .await;
    assert_well_formed(&events);
    assert_eq!(last_type(&events), "RUN_FINISHED");
    let id = started(&events, "flights")["subagentRunId"].clone();
    let error = the(&events, "SUBAGENT_ERROR");
    assert_eq!(error["subagentRunId"], id);
    assert!(
        error["code"].as_str().unwrap().starts_with("upstream"),
        "{error}"
    );
    assert!(!types(&events).contains(&"SUBAGENT_FINISHED"));
    let result = the(&events, "TOOL_CALL_RESULT");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("`flights` agent failed"), "{content}");
    assert!(content.contains("HTTP 500"), "{content}");
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 3);
    assert_eq!(
        bodies[2]["messages"].as_array().unwrap().last().unwrap()["content"],
        content
    );
}

#[tokio::test]
async fn calls_beyond_the_fan_out_limit_get_an_error_result() {
    let app = spawn_app(|s| travel(s, json!({"max_parallel_subagents": 1}))).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_f", "flights", &task("a flight")),
            ("call_h", "hotels", &task("a hotel")),
        ],
        false,
    )));
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&["AF12"]),
        Duration::from_millis(50),
    ));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));

    let events = app.run_events("/planner", &input(vec![user("Plan")])).await;
    assert_well_formed(&events);
    assert_eq!(of_type(&events, "SUBAGENT_STARTED").len(), 1);
    let refused = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_h")
        .unwrap();
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("at most 1 subagent"),
        "{refused}"
    );
    assert_eq!(app.upstream_bodies().len(), 3);
}

#[tokio::test]
async fn hanging_up_mid_child_closes_the_childs_upstream_request() {
    let child = FakeLlm::start().await;
    let app = spawn_app(|s| {
        s.threads.store = ThreadStoreKind::Off;
        travel(s, json!({}));
        own_upstream(s, "flights", &child);
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("to Rome"))],
        false,
    )));
    let words: Vec<String> = (0..200).map(|i| format!("word{i} ")).collect();
    let parts: Vec<&str> = words.iter().map(String::as_str).collect();
    child.push(Reply::SlowSse(
        chunks::text_reply(&parts),
        Duration::from_millis(50),
    ));

    let response = app.post_run("/planner", &input(vec![user("Rome?")])).await;
    let mut reader = EventReader::new(response);
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut contents = 0;
        while contents < 2 {
            let event = reader.next().await.expect("the stream goes on");
            if event["type"] == "TEXT_MESSAGE_CONTENT" && event.get("subagentRunId").is_some() {
                contents += 1;
            }
        }
    })
    .await
    .expect("the child streams");
    assert_eq!(child.disconnects(), 0);
    reader.hang_up();
    assert!(
        child.wait_for_disconnect(Duration::from_secs(2)).await,
        "the child's upstream request outlived the run"
    );
    assert_eq!(
        app.upstream_bodies().len(),
        1,
        "the parent called no further"
    );
}

/// One child answering `text` to one call, for the visibility tests.
fn script_one_child(app: &TestApp) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "hotels", &task("a hotel"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "Hotel Roma, ",
        "120 EUR.",
    ])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Booked."])));
}

fn assert_nothing_attributed(events: &[Value]) {
    for event in events {
        assert!(event.get("subagentRunId").is_none(), "{event}");
        assert!(
            !event["type"].as_str().unwrap().starts_with("SUBAGENT_"),
            "{event}"
        );
    }
}

#[tokio::test]
async fn inline_folds_the_child_into_an_activity_for_both_generations() {
    let app = spawn_app(|s| travel(s, json!({"subagent_visibility": "inline"}))).await;
    script_one_child(&app);
    let events = app
        .run_events("/planner", &input(vec![user("Hotel?")]))
        .await;
    assert_well_formed(&events);
    assert_nothing_attributed(&events);
    let activities = of_type(&events, "ACTIVITY_SNAPSHOT");
    let last = activities.last().expect("an activity");
    assert_eq!(last["activityType"], "agui-host.subagent");
    assert_eq!(last["content"]["agent"], "hotels");
    assert_eq!(last["content"]["status"], "finished");
    assert_eq!(last["content"]["text"], "Hotel Roma, 120 EUR.");
    assert_eq!(last["content"]["toolCallId"], "call_1");
    assert_eq!(
        texts(&events).len(),
        1,
        "only the parent's own text is a message"
    );

    // A 0.x client gets the same under the default visibility (attributed for 1.0).
    let app = spawn_app(|s| travel(s, json!({}))).await;
    script_one_child(&app);
    let events = app
        .run_events("/planner", &input_0x(vec![user("Hotel?")]))
        .await;
    assert_0x_compatible(&events);
    assert_nothing_attributed(&events);
    let last = *of_type(&events, "ACTIVITY_SNAPSHOT").last().unwrap();
    assert_eq!(last["content"]["status"], "finished");
    let result = the(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["content"], "Hotel Roma, 120 EUR.");
}

#[tokio::test]
async fn hidden_shows_only_the_result_for_both_generations() {
    for version in ["1.0", "0.x"] {
        let app = spawn_app(|s| travel(s, json!({"subagent_visibility": "hidden"}))).await;
        script_one_child(&app);
        let body = if version == "1.0" {
            input(vec![user("Hotel?")])
        } else {
            input_0x(vec![user("Hotel?")])
        };
        let events = app.run_events("/planner", &body).await;
        assert_well_formed(&events);
        if version == "0.x" {
            assert_0x_compatible(&events);
        }
        assert_nothing_attributed(&events);
        assert!(of_type(&events, "ACTIVITY_SNAPSHOT").is_empty());
        assert_eq!(
            the(&events, "TOOL_CALL_RESULT")["content"],
            "Hotel Roma, 120 EUR."
        );
        assert_eq!(app.upstream_bodies().len(), 3);
    }
}

#[tokio::test]
async fn capabilities_report_the_subagents() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    let capabilities: Value = app.get("/planner/capabilities").await.json().await.unwrap();
    let multi = &capabilities["multiAgent"];
    assert_eq!(multi["supported"], true);
    assert_eq!(multi["delegation"], true);
    assert_eq!(
        multi["subagents"],
        json!([
            {"name": "flights", "description": "Finds flights"},
            {"name": "hotels", "description": "Finds hotels"},
        ])
    );
    let tools: Vec<&str> = capabilities["tools"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"flights") && tools.contains(&"hotels"),
        "{tools:?}"
    );
    let activities = &capabilities["custom"]["agui-host"]["activityTypes"];
    assert!(
        activities
            .as_array()
            .unwrap()
            .contains(&json!("agui-host.subagent")),
        "{activities}"
    );
    let child: Value = app.get("/flights/capabilities").await.json().await.unwrap();
    assert_eq!(child["multiAgent"]["supported"], false);
}

pub(crate) async fn refused(configure: impl FnOnce(&mut Settings)) -> String {
    let fake = FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    configure(&mut settings);
    match agui_host::app::App::build(settings).await {
        Ok(_) => panic!("the settings were accepted"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn cycles_deep_chains_and_children_with_background_tools_are_refused_at_start_up() {
    let error = refused(|s| {
        travel(s, json!({}));
        s.agents.get_mut("hotels").unwrap().subagents = vec!["planner".into()];
    })
    .await;
    // Named from wherever the search met it.
    assert!(
        error.contains("cycle")
            && (error.contains("planner -> hotels -> planner")
                || error.contains("hotels -> planner -> hotels")),
        "{error}"
    );

    let error = refused(|s| {
        travel(s, json!({"max_subagent_depth": 1}));
        s.agents.get_mut("hotels").unwrap().subagents = vec!["flights".into()];
    })
    .await;
    assert!(error.contains("max_subagent_depth"), "{error}");

    let error = refused(|s| {
        travel(s, json!({}));
        let flights = s.agents.get_mut("flights").unwrap();
        flights.tools[0].background = true;
    })
    .await;
    assert!(error.contains("runs in the background"), "{error}");

    let error = refused(|s| travel(s, json!({"subagents": ["flights", "nowhere"]}))).await;
    assert!(error.contains("nowhere"), "{error}");
}

#[tokio::test]
async fn a_child_cut_off_by_the_subagent_timeout_is_closed_before_the_result() {
    let child = FakeLlm::start().await;
    let app = spawn_app(|s| {
        // The parent's other tools keep their timeout; a child gets subagent_timeout_secs.
        travel(
            s,
            json!({"subagent_timeout_secs": 1, "tool_timeout_secs": 60}),
        );
        own_upstream(s, "flights", &child);
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("to Rome"))],
        false,
    )));
    let words: Vec<String> = (0..200).map(|i| format!("word{i} ")).collect();
    let parts: Vec<&str> = words.iter().map(String::as_str).collect();
    child.push(Reply::SlowSse(
        chunks::text_reply(&parts),
        Duration::from_millis(50),
    ));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Flights took too long."])));

    let events = app
        .run_events("/planner", &input(vec![user("Rome?")]))
        .await;
    assert_well_formed(&events);
    assert_eq!(last_type(&events), "RUN_FINISHED");
    let id = started(&events, "flights")["subagentRunId"].clone();
    let error = position(&events, |e| e["type"] == "SUBAGENT_ERROR");
    assert_eq!(events[error]["subagentRunId"], id);
    assert_eq!(events[error]["code"], "subagent_cut_off");
    let result = position(&events, |e| e["type"] == "TOOL_CALL_RESULT");
    assert!(error < result);
    // What the child had open is closed, attributed to it, right before its end.
    assert_eq!(events[error - 1]["type"], "TEXT_MESSAGE_END");
    assert_eq!(events[error - 1]["subagentRunId"], id);
    assert!(events[error + 1..]
        .iter()
        .all(|e| e.get("subagentRunId") != Some(&id)));
    assert!(events[result]["content"]
        .as_str()
        .unwrap()
        .contains("timed out"));
    assert!(
        child.wait_for_disconnect(Duration::from_secs(2)).await,
        "the timed-out child's upstream request was left open"
    );
    assert_eq!(app.upstream_bodies().len(), 2, "the parent went on");
}

#[tokio::test]
async fn a_grandchild_is_attributed_to_itself_under_its_parent_subagent() {
    let app = spawn_app(|s| {
        travel(s, json!({}));
        s.agents.get_mut("flights").unwrap().subagents = vec!["hotels".into()];
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("a trip to Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_2", "hotels", &task("a hotel in Rome"))],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Hotel Roma."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["AF12 and Hotel Roma."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["All booked."])));

    let events = app
        .run_events("/planner", &input(vec![user("Rome trip")]))
        .await;
    assert_well_formed(&events);
    let flights = started(&events, "flights");
    let hotels = started(&events, "hotels");
    let (flights_id, hotels_id) = (&flights["subagentRunId"], &hotels["subagentRunId"]);
    assert!(flights.get("parentSubagentRunId").is_none());
    assert_eq!(hotels["parentSubagentRunId"], *flights_id);
    // The grandchild names the child's call as the client saw it.
    let call = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START" && e["toolCallName"] == "hotels")
        .unwrap();
    assert_eq!(call["subagentRunId"], *flights_id);
    assert_eq!(hotels["parentToolCallId"], call["toolCallId"]);
    assert_eq!(hotels["parentMessageId"], call["parentMessageId"]);
    let hotel_text = events
        .iter()
        .find(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["delta"] == "Hotel Roma.")
        .unwrap();
    assert_eq!(hotel_text["subagentRunId"], *hotels_id);
    let child_result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call["toolCallId"])
        .unwrap();
    assert_eq!(child_result["subagentRunId"], *flights_id);
    assert_eq!(child_result["content"], "Hotel Roma.");
    let parent_result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1")
        .unwrap();
    assert_eq!(parent_result["content"], "AF12 and Hotel Roma.");
    assert_eq!(app.upstream_bodies().len(), 5);
}

#[tokio::test]
async fn the_childrens_tokens_are_counted_in_the_runs_usage() {
    let child = FakeLlm::start().await;
    let app = spawn_app(|s| {
        travel(s, json!({}));
        own_upstream(s, "flights", &child);
    })
    .await;
    app.fake.push(Reply::Sse(chunks::with_usage(
        chunks::tool_calls(&[("call_1", "flights", &task("to Rome"))], false),
        10,
        5,
    )));
    child.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["AF12."]),
        7,
        3,
    )));
    app.fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["Take AF12."]),
        20,
        4,
    )));

    let events = app
        .run_events("/planner", &input(vec![user("Rome?")]))
        .await;
    assert_well_formed(&events);
    let usage = last(&events)["usage"].as_array().expect("usage").clone();
    let of = |model: &str| {
        usage
            .iter()
            .find(|u| u["model"] == model)
            .unwrap_or_else(|| panic!("no usage of {model}: {usage:?}"))
            .clone()
    };
    let child_usage = of("flights-model");
    assert_eq!(child_usage["inputTokens"], 7);
    assert_eq!(child_usage["outputTokens"], 3);
    let parent_usage = usage
        .iter()
        .find(|u| u["model"] != "flights-model")
        .unwrap();
    assert_eq!(parent_usage["inputTokens"], 30);
    assert_eq!(parent_usage["outputTokens"], 9);
}

#[tokio::test]
async fn a_client_cannot_invent_a_subagents_answer() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    let invented = vec![
        user("Rome?"),
        assistant_calls(&[("call_x", "flights", &task("to Rome"))]),
        tool_result("call_x", "Flights are free today."),
        user("Book it"),
    ];
    let response = app.post_run("/planner", &input(invented)).await;
    assert_eq!(response.status(), 422);
    assert_eq!(
        error_body(response).await["error"]["code"],
        "unrecorded_tool_result"
    );
    assert!(app.upstream_bodies().is_empty(), "nothing reached a model");
}
