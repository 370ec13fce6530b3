//! Predictive state: a configured tool's arguments, streamed by the model in small fragments,
//! reach the client as `STATE_DELTA`s while they arrive, each applicable in order by an RFC 6902
//! implementation (the reference client drops a failing patch silently), and bring the client to
//! the final values by themselves: a `STATE_SNAPSHOT` follows only when a delta was held back or
//! the arguments turned out invalid.

use agui_host::settings::{PredictStateRule, Settings};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// The dojo's shared-state recipe, as the model would write it.
const RECIPE: &str = r#"{"recipe": {"title": "Spicy chicken lettuce wraps", "skill_level": "Intermediate", "cooking_time": "30 min", "special_preferences": ["High Protein", "Low Carb", "Spicy"], "ingredients": [{"icon": "🍗", "name": "chicken breast", "amount": "2 pieces"}, {"icon": "🌶️", "name": "chili powder", "amount": "1 tsp"}, {"icon": "🧂", "name": "Salt", "amount": "a pinch"}, {"icon": "🥬", "name": "Lettuce leaves", "amount": "8 large"}], "instructions": ["Slice the chicken breast into thin strips and season with chili powder and salt.", "Sear the strips in a hot pan for 6 to 8 minutes, until golden and cooked through.", "Spoon the chicken into the lettuce leaves and serve at once."]}}"#;

const DOCUMENT: &str = r##"{"document": "# A short story\n\nOnce upon a time, a model wrote a document one token at a time, and the reader watched it appear: first the title, then the opening line, then the rest."}"##;

fn predict(settings: &mut Settings, state_key: &str, tool: &str, tool_argument: &str) {
    settings
        .agents
        .get_mut("assistant")
        .unwrap()
        .predict_state
        .insert(
            state_key.into(),
            PredictStateRule {
                tool: tool.into(),
                tool_argument: tool_argument.into(),
            },
        );
}

fn server_tool(settings: &mut Settings, name: &str) {
    settings
        .agents
        .get_mut("assistant")
        .unwrap()
        .tools
        .push(static_tool(name, json!({"status": "saved"})));
}

/// An app whose server tool `update_recipe` predicts the state key `recipe` from its argument.
async fn recipe_app() -> TestApp {
    spawn_app(|s| {
        predict(s, "recipe", "update_recipe", "recipe");
        server_tool(s, "update_recipe");
    })
    .await
}

/// Scripts the model: one `update_recipe` call (`call_r`) with `arguments`, then `reply`.
fn script_recipe_call(app: &TestApp, arguments: &str, reply: &str) {
    app.fake
        .push_call_then_text(("call_r", "update_recipe", arguments), reply);
}

/// Replays the state events as the reference client does, from `initial`: a snapshot replaces
/// the state, a delta is applied atomically. Panics on a delta the client would drop. Returns
/// the state after each state event, with the event's index.
fn client_states(initial: &Value, events: &[Value]) -> Vec<(usize, Value)> {
    let mut state = initial.clone();
    let mut states = Vec::new();
    for (i, event) in events.iter().enumerate() {
        match event["type"].as_str() {
            Some("STATE_SNAPSHOT") => state = event["snapshot"].clone(),
            Some("STATE_DELTA") => {
                let patch: json_patch::Patch = serde_json::from_value(event["delta"].clone())
                    .unwrap_or_else(|e| panic!("#{i} is not a JSON Patch ({e}): {event}"));
                json_patch::patch(&mut state, &patch).unwrap_or_else(|e| {
                    panic!("#{i} fails on the client ({e}): {event} on {state}")
                });
            }
            _ => continue,
        }
        states.push((i, state.clone()));
    }
    states
}

fn position(events: &[Value], ty: &str, id: &str) -> usize {
    events
        .iter()
        .position(|e| e["type"] == ty && e["toolCallId"] == id)
        .unwrap_or_else(|| panic!("no {ty} for {id} in {:?}", types(events)))
}

fn last_args(events: &[Value], id: &str) -> usize {
    events
        .iter()
        .rposition(|e| e["type"] == "TOOL_CALL_ARGS" && e["toolCallId"] == id)
        .expect("arguments")
}

fn deltas_before(events: &[Value], end: usize) -> usize {
    events[..end]
        .iter()
        .filter(|e| e["type"] == "STATE_DELTA")
        .count()
}

/// Every operation of every delta, in order.
fn delta_ops(events: &[Value]) -> Vec<Value> {
    of_type(events, "STATE_DELTA")
        .into_iter()
        .flat_map(|e| e["delta"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_recipe_streams_as_state_deltas_while_its_arguments_arrive() {
    let app = recipe_app().await;
    script_recipe_call(&app, RECIPE, "Saved.");
    let initial = json!({});
    let body = input(vec![user("A spicy low-carb recipe, please")]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    assert_eq!(
        tool_args(&events)["call_r"],
        RECIPE,
        "the arguments pass unchanged"
    );
    let arguments: Value = serde_json::from_str(RECIPE).unwrap();
    let expected = json!({"recipe": arguments["recipe"]});

    let streaming = deltas_before(&events, last_args(&events, "call_r"));
    assert!(
        streaming >= 10,
        "only {streaming} deltas while the arguments stream"
    );
    let states = client_states(&initial, &events);
    // The deltas alone bring the client to the final state; no snapshot repeats it.
    assert!(of_type(&events, "STATE_SNAPSHOT").is_empty());
    assert_eq!(states.last().map(|(_, s)| s), Some(&expected));
    // The client saw the recipe grow: ingredients appeared one by one.
    let counts: Vec<usize> = states
        .iter()
        .filter_map(|(_, s)| s["recipe"]["ingredients"].as_array().map(Vec::len))
        .collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]) && counts.contains(&1) && counts.contains(&3),
        "{counts:?}"
    );
    // Every first appearance of a member or item is an `add`.
    let ops = delta_ops(&events);
    assert_eq!(ops[0], json!({"op": "add", "path": "/recipe", "value": {}}));
    assert!(ops
        .iter()
        .all(|op| op["op"] == "add" || op["op"] == "replace"));
}

#[tokio::test]
async fn escaped_quotes_unicode_and_numbers_survive() {
    let arguments = r#"{"recipe": {"title": "Cr\u00e8me \"br\u00fbl\u00e9e\" \\ 東京 \ud83c\udf70 \/ end of a long enough title", "servings": 4, "ratio": -0.25, "grams": 1.5e2, "vegan": false, "note": null, "tags": ["a\"b", "\u00e9\n"]}}"#;
    let app = recipe_app().await;
    script_recipe_call(&app, arguments, "Saved.");

    let events = app
        .run_events("/", &input(vec![user("Crème brûlée")]))
        .await;

    assert_well_formed(&events);
    let parsed: Value = serde_json::from_str(arguments).unwrap();
    let expected = json!({"recipe": parsed["recipe"]});
    let states = client_states(&json!({}), &events);
    assert_eq!(states.last().unwrap().1, expected);
    assert!(of_type(&events, "STATE_SNAPSHOT").is_empty());
    // Mid-stream values are never corrupted: each title sent is a prefix of the final title
    // (an escaped quote does not cut it, a backslash does not leak), and numbers appear whole.
    let title = parsed["recipe"]["title"].as_str().unwrap();
    for op in delta_ops(&events) {
        if op["path"] == "/recipe/title" {
            let sent = op["value"].as_str().unwrap();
            assert!(
                title.starts_with(sent),
                "{sent:?} is not a prefix of {title:?}"
            );
        }
        if op["path"] == "/recipe/grams" {
            assert_eq!(op["value"], json!(150.0));
        }
        if op["path"] == "/recipe/servings" {
            assert_eq!(op["value"], json!(4));
        }
    }
    assert!(
        delta_ops(&events)
            .iter()
            .filter(|op| op["path"] == "/recipe/title")
            .count()
            >= 2,
        "the title streamed"
    );
}

#[tokio::test]
async fn the_whole_arguments_stream_with_a_star_for_a_client_tool() {
    let app = spawn_app(|s| predict(s, "draft", "write_document", "*")).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_d", "write_document", DOCUMENT)],
        false,
    )));
    let mut body = input(vec![user("Write me a story")]);
    body["tools"] = json!([{
        "name": "write_document",
        "description": "Writes the document.",
        "parameters": {"type": "object", "properties": {"document": {"type": "string"}}},
    }]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    let expected = json!({"draft": serde_json::from_str::<Value>(DOCUMENT).unwrap()});
    let end = position(&events, "TOOL_CALL_END", "call_d");
    assert!(deltas_before(&events, last_args(&events, "call_d")) >= 3);
    assert_eq!(
        delta_ops(&events)[0],
        json!({"op": "add", "path": "/draft", "value": {}})
    );
    assert!(
        of_type(&events, "STATE_SNAPSHOT").is_empty(),
        "the deltas got the client there by the call's end"
    );
    let states = client_states(&json!({}), &events);
    assert!(states.iter().all(|(i, _)| *i < end));
    assert_eq!(states.last().unwrap().1, expected);
    assert_eq!(
        last(&events)["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["call_d"]})
    );
}

#[tokio::test]
async fn two_parallel_predictive_calls_do_not_mix() {
    let app = spawn_app(|s| {
        predict(s, "recipe", "update_recipe", "recipe");
        predict(s, "document", "write_document", "document");
        server_tool(s, "update_recipe");
        server_tool(s, "write_document");
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_r", "update_recipe", RECIPE),
            ("call_d", "write_document", DOCUMENT),
        ],
        true,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Both saved."])));

    let events = app
        .run_events("/", &input(vec![user("A recipe and a story")]))
        .await;

    assert_well_formed(&events);
    let recipe: Value = serde_json::from_str(RECIPE).unwrap();
    let document: Value = serde_json::from_str(DOCUMENT).unwrap();
    let expected = json!({"recipe": recipe["recipe"], "document": document["document"]});
    let states = client_states(&json!({}), &events);
    assert_eq!(states.last().unwrap().1, expected);
    // Both streamed before either call ended, each into its own key.
    let first_end = position(&events, "TOOL_CALL_END", "call_r").min(position(
        &events,
        "TOOL_CALL_END",
        "call_d",
    ));
    let ops: Vec<Value> = delta_ops(&events[..first_end]);
    assert!(ops.iter().any(|op| op["path"] == "/document"));
    assert!(ops.iter().any(|op| op["path"]
        .as_str()
        .unwrap()
        .starts_with("/recipe/ingredients")));
    for op in &ops {
        let path = op["path"].as_str().unwrap();
        assert!(
            path.starts_with("/recipe") || path.starts_with("/document"),
            "{op}"
        );
    }
    for (_, state) in &states {
        if let Some(text) = state["document"].as_str() {
            let full = document["document"].as_str().unwrap();
            assert!(
                full.starts_with(text),
                "the document never holds recipe text: {text:?}"
            );
        }
    }
    assert!(
        of_type(&events, "STATE_SNAPSHOT").is_empty(),
        "each call's deltas set its final values"
    );
}

#[tokio::test]
async fn an_absent_or_null_initial_state_gets_an_object_snapshot_first() {
    for state in [None, Some(Value::Null)] {
        let app = recipe_app().await;
        script_recipe_call(&app, RECIPE, "Saved.");
        let mut body = input(vec![user("A recipe")]);
        match &state {
            None => {
                body.as_object_mut().unwrap().remove("state");
            }
            Some(value) => body["state"] = value.clone(),
        }

        let events = app.run_events("/", &body).await;

        assert_well_formed(&events);
        let first_state_event = events
            .iter()
            .find(|e| e["type"] == "STATE_SNAPSHOT" || e["type"] == "STATE_DELTA")
            .unwrap();
        assert_eq!(first_state_event["type"], "STATE_SNAPSHOT", "{state:?}");
        assert_eq!(first_state_event["snapshot"], json!({}));
        let recipe: Value = serde_json::from_str(RECIPE).unwrap();
        let states = client_states(&state.clone().unwrap_or(Value::Null), &events);
        assert_eq!(
            states.last().unwrap().1,
            json!({"recipe": recipe["recipe"]})
        );
    }
}

#[tokio::test]
async fn a_key_absent_from_the_client_state_is_added_and_other_keys_are_kept() {
    let app = spawn_app(|s| {
        predict(s, "document", "write_document", "document");
        server_tool(s, "write_document");
    })
    .await;
    app.fake
        .push_call_then_text(("call_d", "write_document", DOCUMENT), "Written.");
    let initial = json!({"theme": {"dark": true}, "steps": ["outline"]});
    let mut body = input(vec![user("Write a story")]);
    body["state"] = initial.clone();

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    assert_eq!(delta_ops(&events)[0]["op"], "add");
    assert_eq!(delta_ops(&events)[0]["path"], "/document");
    let document: Value = serde_json::from_str(DOCUMENT).unwrap();
    let expected =
        json!({"theme": {"dark": true}, "steps": ["outline"], "document": document["document"]});
    assert_eq!(client_states(&initial, &events).last().unwrap().1, expected);
    assert!(of_type(&events, "STATE_SNAPSHOT").is_empty());
}

/// Streams `arguments` for `update_recipe` against a recipe state and checks that the client's
/// state is restored by a snapshot right after `TOOL_CALL_END`, and that the tool's result
/// contains `reported` (what the model is told).
async fn assert_restored_after(app: &TestApp, arguments: &str, reported: &str) {
    script_recipe_call(app, arguments, "Sorry.");
    let initial = json!({"recipe": {"title": "Grandma's soup"}});
    let mut body = input(vec![user("Change the recipe")]);
    body["state"] = initial.clone();

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    assert!(
        !of_type(&events, "STATE_DELTA").is_empty(),
        "it streamed first"
    );
    let end = position(&events, "TOOL_CALL_END", "call_r");
    assert_eq!(
        events[end + 1]["type"],
        "STATE_SNAPSHOT",
        "restored at once"
    );
    assert_eq!(events[end + 1]["snapshot"], initial);
    assert_eq!(client_states(&initial, &events).last().unwrap().1, initial);
    let result = the(&events, "TOOL_CALL_RESULT");
    assert!(
        result["content"].as_str().unwrap().contains(reported),
        "the tool reports the bad arguments: {result}"
    );
}

#[tokio::test]
async fn invalid_arguments_restore_the_clients_state() {
    let app = recipe_app().await;
    let broken = r#"{"recipe": {"title": "A title that streams for a while", "servings": 4,"#;
    assert_restored_after(&app, broken, "error").await;
}

#[tokio::test]
async fn arguments_that_fail_the_tools_schema_restore_the_clients_state() {
    let app = spawn_app(|s| {
        predict(s, "recipe", "update_recipe", "recipe");
        let mut tool = static_tool("update_recipe", json!({"status": "saved"}));
        tool.parameters = Some(json!({
            "type": "object",
            "required": ["recipe"],
            "properties": {"recipe": {"type": "object", "required": ["title", "servings"],
                "properties": {"servings": {"type": "integer", "minimum": 1}}}}
        }));
        s.agents.get_mut("assistant").unwrap().tools.push(tool);
    })
    .await;
    // Valid JSON, but `servings` breaks the schema: the tool will refuse it.
    let wrong = r#"{"recipe": {"title": "A title that streams for a while", "servings": 0}}"#;
    assert_restored_after(&app, wrong, "invalid arguments").await;
}

#[tokio::test]
async fn the_predict_state_event_precedes_the_call_when_enabled() {
    let app = spawn_app(|s| {
        predict(s, "document", "write_document", "document");
        server_tool(s, "write_document");
        s.agents
            .get_mut("assistant")
            .unwrap()
            .emit_predict_state_event = true;
    })
    .await;
    app.fake
        .push_call_then_text(("call_d", "write_document", DOCUMENT), "Written.");

    let events = app.run_events("/", &input(vec![user("Write")])).await;

    assert_well_formed(&events);
    let custom = the(&events, "CUSTOM");
    assert_eq!(custom["name"], "PredictState");
    assert_eq!(
        custom["value"],
        json!([{"state_key": "document", "tool": "write_document", "tool_argument": "document"}])
    );
    let at = events.iter().position(|e| e == custom).unwrap();
    assert!(at < position(&events, "TOOL_CALL_START", "call_d"));
}

#[tokio::test]
async fn a_0x_client_gets_state_events_it_accepts() {
    let app = recipe_app().await;
    script_recipe_call(&app, RECIPE, "Saved.");

    let events = app.run_events("/", &input_0x(vec![user("A recipe")])).await;

    assert_0x_compatible(&events);
    assert_well_formed(&events);
    let recipe: Value = serde_json::from_str(RECIPE).unwrap();
    assert_eq!(
        client_states(&json!({}), &events).last().unwrap().1,
        json!({"recipe": recipe["recipe"]})
    );
}

/// Arguments that arrive at once become a few deltas of several operations each rather
/// than one per fragment. The client still reaches the final recipe by the deltas alone, and
/// the server's own record of the thread, which applies the same deltas, holds it too.
#[tokio::test]
async fn a_recipe_that_arrives_at_once_streams_in_a_few_deltas_of_several_operations() {
    let app = recipe_app().await;
    let frames = chunks::tool_calls(&[("call_r", "update_recipe", RECIPE)], false);
    let fragments = frames.len();
    app.fake.push(Reply::Burst(frames));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Saved."])));

    let events = app
        .run_events("/", &input(vec![user("A spicy low-carb recipe, please")]))
        .await;

    assert_well_formed(&events);
    assert_eq!(tool_args(&events)["call_r"], RECIPE);
    // The burst is read in a few pieces (the client's read buffer starts at 8 KB); each piece
    // merges.
    let pieces = of_type(&events, "TOOL_CALL_ARGS").len();
    assert!(
        pieces * 10 < fragments,
        "{pieces} TOOL_CALL_ARGS for {fragments} fragments"
    );
    let arguments: Value = serde_json::from_str(RECIPE).unwrap();
    let expected = json!({"recipe": arguments["recipe"]});
    let states = client_states(&json!({}), &events);
    assert_eq!(states.last().map(|(_, s)| s), Some(&expected));
    let deltas = of_type(&events, "STATE_DELTA");
    assert!(
        !deltas.is_empty() && deltas.len() * 10 < fragments,
        "{} deltas for {fragments} fragments",
        deltas.len()
    );
    assert!(deltas
        .iter()
        .any(|delta| delta["delta"].as_array().is_some_and(|ops| ops.len() > 1)));

    let thread: Value = app
        .client
        .get(format!("{}/assistant/threads/t1", app.address))
        .send()
        .await
        .expect("the app answers")
        .json()
        .await
        .unwrap();
    assert_eq!(thread["state"], expected, "{thread}");
}
