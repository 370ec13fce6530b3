//! The predictive-state mapper fed scripted tool calls: deltas while arguments stream, the
//! snapshot that makes the final values authoritative, restores, confirmation, and parallel calls.

use serde_json::json;

use super::*;
use crate::agent::mapper::testing::{collect, request, ScriptedAgent};
use crate::protocol::Custom;

fn start(id: &str, name: &str) -> AgentUpdate {
    EventBody::tool_call_start(id, name, None).into()
}

fn args(id: &str, delta: &str) -> AgentUpdate {
    EventBody::tool_call_args(id, delta).into()
}

fn end(id: &str) -> AgentUpdate {
    EventBody::tool_call_end(id).into()
}

fn result(id: &str) -> AgentUpdate {
    EventBody::tool_call_result(format!("msg_{id}"), id, "ok".to_owned()).into()
}

/// A whole call: start, the arguments in fragments of `size` bytes (ASCII), end.
fn call(id: &str, name: &str, arguments: &str, size: usize) -> Vec<AgentUpdate> {
    let mut updates = vec![start(id, name)];
    updates.extend(
        arguments
            .as_bytes()
            .chunks(size)
            .map(|c| args(id, std::str::from_utf8(c).unwrap())),
    );
    updates.push(end(id));
    updates
}

fn rules(entries: &[(&str, &str, &str)]) -> PredictiveStateRules {
    PredictiveStateRules {
        rules: entries
            .iter()
            .map(|(key, tool, argument)| PredictStateRule {
                state_key: key.to_string(),
                tool: tool.to_string(),
                argument: Argument::from_setting(argument),
            })
            .collect(),
        coalescing: Coalescing {
            min_growth_bytes: 8,
            ..Coalescing::default()
        },
        emit_predict_state_event: false,
    }
}

async fn run(
    rules: PredictiveStateRules,
    script: Vec<AgentUpdate>,
    request: RunRequest,
) -> Vec<AgentUpdate> {
    let inner = ScriptedAgent::new(script);
    let agent = PredictiveStateDeltas::new(Arc::new(inner.clone()), rules, ToolRegistry::default());
    let updates = collect(agent.run(request).unwrap()).await;
    assert_eq!(
        inner.last_request().messages.len(),
        1,
        "the request reaches the inner agent as is"
    );
    updates.into_iter().map(|u| u.expect("no error")).collect()
}

fn kind(update: &AgentUpdate) -> &'static str {
    match update {
        AgentUpdate::Event(body) => body.type_name(),
        _ => "OTHER",
    }
}

/// The client's state after every state event, applied the way the reference client does;
/// panics on a patch the client would drop.
fn client_state(initial: Value, updates: &[AgentUpdate]) -> Value {
    let mut state = initial;
    for update in updates {
        match update {
            AgentUpdate::Event(EventBody::StateSnapshot(s)) => state = s.snapshot.clone(),
            AgentUpdate::Event(EventBody::StateDelta(d)) => {
                json_patch::patch(&mut state, &d.delta)
                    .unwrap_or_else(|e| panic!("{e}: {:?} on {state}", d.delta));
            }
            _ => {}
        }
    }
    state
}

fn snapshots(updates: &[AgentUpdate]) -> Vec<(usize, Value)> {
    updates
        .iter()
        .enumerate()
        .filter_map(|(i, u)| match u {
            AgentUpdate::Event(EventBody::StateSnapshot(s)) => Some((i, s.snapshot.clone())),
            _ => None,
        })
        .collect()
}

const RECIPE: &str = r#"{"recipe": {"title": "Lemon pasta with black pepper", "servings": 4, "ingredients": [{"name": "spaghetti", "amount": "400 g"}, {"name": "lemon \"Amalfi\"", "amount": "2"}]}}"#;

#[tokio::test]
async fn a_server_tool_streams_deltas_and_no_snapshot_repeats_them() {
    let mut script = call("c1", "update_recipe", RECIPE, 5);
    script.push(result("c1"));
    let initial = json!({"other": 1});
    let out = run(
        rules(&[("recipe", "update_recipe", "recipe")]),
        script.clone(),
        request(Some(initial.clone())),
    )
    .await;

    // The inner updates all pass, unchanged and in order.
    let passed: Vec<&AgentUpdate> = out
        .iter()
        .filter(|u| !matches!(kind(u), "STATE_DELTA" | "STATE_SNAPSHOT"))
        .collect();
    assert_eq!(passed, script.iter().collect::<Vec<_>>());
    // Several deltas, each right after an argument fragment.
    let deltas: Vec<usize> = (0..out.len())
        .filter(|&i| kind(&out[i]) == "STATE_DELTA")
        .collect();
    assert!(deltas.len() >= 5, "{} deltas", deltas.len());
    assert!(deltas
        .iter()
        .all(|&i| kind(&out[i - 1]) == "TOOL_CALL_ARGS"));
    // The deltas got the client to the final values: no snapshot repeats the state.
    let arguments: Value = serde_json::from_str(RECIPE).unwrap();
    let expected = json!({"other": 1, "recipe": arguments["recipe"]});
    assert_eq!(snapshots(&out), vec![]);
    assert_eq!(kind(&out[out.len() - 1]), "TOOL_CALL_RESULT");
    assert_eq!(client_state(initial, &out), expected);
}

#[tokio::test]
async fn a_client_tool_ends_with_the_deltas_and_no_snapshot() {
    let mut request = request(Some(json!({})));
    request.tools = vec![serde_json::from_value(json!({"name": "write_document"})).unwrap()];
    let out = run(
        rules(&[("document", "write_document", "document")]),
        call(
            "c1",
            "write_document",
            r#"{"document": "A long document, written slowly."}"#,
            3,
        ),
        request,
    )
    .await;
    assert_eq!(kind(&out[out.len() - 1]), "TOOL_CALL_END");
    assert_eq!(snapshots(&out), vec![]);
    assert!(out.iter().any(|u| kind(u) == "STATE_DELTA"));
    assert_eq!(
        client_state(json!({}), &out),
        json!({"document": "A long document, written slowly."})
    );
}

#[tokio::test]
async fn invalid_arguments_restore_the_state_from_before_the_call() {
    let initial = json!({"recipe": {"title": "Old"}, "other": true});
    let mut script = call(
        "c1",
        "update_recipe",
        r#"{"recipe": {"title": "New title here", "x": tru"#,
        4,
    );
    script.push(result("c1"));
    let out = run(
        rules(&[("recipe", "update_recipe", "recipe")]),
        script,
        request(Some(initial.clone())),
    )
    .await;
    assert!(
        out.iter().any(|u| kind(u) == "STATE_DELTA"),
        "it streamed first"
    );
    let snapshots = snapshots(&out);
    assert_eq!(snapshots.len(), 1);
    assert_eq!(
        kind(&out[snapshots[0].0 - 1]),
        "TOOL_CALL_END",
        "restored at once"
    );
    assert_eq!(snapshots[0].1, initial);
    assert_eq!(client_state(initial.clone(), &out), initial);
}

#[tokio::test]
async fn a_state_that_is_not_an_object_is_replaced_by_an_object_first() {
    for state in [
        None,
        Some(json!(null)),
        Some(json!([1, 2])),
        Some(json!("text")),
    ] {
        let out = run(
            rules(&[("doc", "write", "*")]),
            call("c1", "write", r#"{"a": [1, 2]}"#, 2),
            request(state.clone()),
        )
        .await;
        assert_eq!(kind(&out[0]), "STATE_SNAPSHOT", "{state:?}");
        assert_eq!(snapshots(&out)[0].1, json!({}));
        assert_eq!(kind(&out[1]), "TOOL_CALL_START");
        assert_eq!(
            client_state(state.unwrap_or(Value::Null), &out),
            json!({"doc": {"a": [1, 2]}})
        );
    }
}

#[tokio::test]
async fn a_snapshot_passing_through_becomes_the_baseline() {
    let mut script = vec![EventBody::state_snapshot(json!({"steps": ["one"]})).into()];
    script.extend(call(
        "c1",
        "write",
        r#"{"body": "some words to stream here"}"#,
        4,
    ));
    script.push(result("c1"));
    let out = run(rules(&[("body", "write", "body")]), script, request(None)).await;
    let snapshots = snapshots(&out);
    assert_eq!(
        snapshots.len(),
        1,
        "no extra snapshot: the inner one synced the client, the deltas did the rest"
    );
    assert_eq!(
        client_state(Value::Null, &out),
        json!({"steps": ["one"], "body": "some words to stream here"})
    );
}

#[tokio::test]
async fn a_call_whose_key_is_changed_underneath_stops_streaming_and_still_settles() {
    let arguments = r#"{"recipe": {"title": "A title", "steps": ["one", "two", "three"]}}"#;
    let mut script = call("c1", "update_recipe", arguments, 4);
    // Halfway, a layer below removes the key the call is streaming into.
    script.insert(
        8,
        EventBody::state_delta(
            serde_json::from_value(json!([{"op": "remove", "path": "/recipe"}])).unwrap(),
        )
        .into(),
    );
    script.push(result("c1"));
    let out = run(
        rules(&[("recipe", "update_recipe", "recipe")]),
        script,
        request(Some(json!({}))),
    )
    .await;
    // Every delta sent still applies, and the snapshot restores the final value.
    let final_state = client_state(json!({}), &out);
    let parsed: Value = serde_json::from_str(arguments).unwrap();
    assert_eq!(final_state, json!({"recipe": parsed["recipe"]}));
    let removed_at = out
        .iter()
        .position(|u| matches!(u, AgentUpdate::Event(EventBody::StateDelta(d)) if serde_json::to_string(d).unwrap().contains("remove")))
        .unwrap();
    let after: Vec<&str> = out[removed_at + 1..].iter().map(kind).collect();
    assert!(!after.contains(&"STATE_DELTA"), "{after:?}");
}

#[tokio::test]
async fn parallel_calls_do_not_mix_and_a_key_streams_from_one_call_at_a_time() {
    // Two calls of one tool writing the same key, and a call of another tool, interleaved.
    let a = call(
        "a",
        "update_recipe",
        r#"{"recipe": {"title": "First recipe title"}}"#,
        3,
    );
    let b = call(
        "b",
        "update_recipe",
        r#"{"recipe": {"title": "Second one", "n": [1]}}"#,
        3,
    );
    let c = call("c", "write", r#"{"body": "a body that streams along"}"#, 3);
    let mut script = Vec::new();
    for i in 0..a.len().max(b.len()).max(c.len()) {
        script.extend(
            [a.get(i), b.get(i), c.get(i)]
                .into_iter()
                .flatten()
                .cloned(),
        );
    }
    script.extend([result("a"), result("b"), result("c")]);
    let out = run(
        rules(&[
            ("recipe", "update_recipe", "recipe"),
            ("body", "write", "body"),
        ]),
        script,
        request(Some(json!({}))),
    )
    .await;
    // Only the second call needs a snapshot: its recipe never streamed. The first call and
    // the body streamed all the way, so their deltas already set the final values.
    let snapshots = snapshots(&out);
    assert_eq!(snapshots.len(), 1);
    assert_eq!(
        snapshots[0].1["recipe"],
        json!({"title": "Second one", "n": [1]})
    );
    // Every delta applies in order, and only the first call's recipe streamed.
    assert_eq!(
        client_state(json!({}), &out),
        json!({"recipe": {"title": "Second one", "n": [1]}, "body": "a body that streams along"})
    );
    let streamed_second = out.iter().any(|u| match u {
        AgentUpdate::Event(EventBody::StateDelta(d)) => {
            serde_json::to_string(&d.delta).unwrap().contains("Second")
        }
        _ => false,
    });
    assert!(!streamed_second);
}

#[tokio::test]
async fn the_predict_state_event_goes_before_the_first_call_of_its_tool_when_enabled() {
    let mut enabled = rules(&[("document", "write", "document"), ("all", "write", "*")]);
    enabled.emit_predict_state_event = true;
    let mut script = call("c1", "write", r#"{"document": "x"}"#, 4);
    script.extend(call("c2", "write", r#"{"document": "y"}"#, 4));
    let out = run(enabled, script.clone(), request(Some(json!({})))).await;
    let customs: Vec<(usize, &Custom)> = out
        .iter()
        .enumerate()
        .filter_map(|(i, u)| match u {
            AgentUpdate::Event(EventBody::Custom(c)) => Some((i, c)),
            _ => None,
        })
        .collect();
    assert_eq!(customs.len(), 1, "once per tool and run");
    assert_eq!(customs[0].1.name, "PredictState");
    let mut value = customs[0].1.value.as_array().unwrap().clone();
    value.sort_by_key(|v| v["state_key"].to_string());
    assert_eq!(
        value,
        vec![
            json!({"state_key": "all", "tool": "write"}),
            json!({"state_key": "document", "tool": "write", "tool_argument": "document"}),
        ]
    );
    assert_eq!(kind(&out[customs[0].0 + 1]), "TOOL_CALL_START");

    let out = run(
        rules(&[("document", "write", "document")]),
        script,
        request(Some(json!({}))),
    )
    .await;
    assert!(out.iter().all(|u| kind(u) != "CUSTOM"), "off by default");
}

#[tokio::test]
async fn other_tools_and_updates_pass_through_untouched() {
    let mut script = call("c1", "get_weather", r#"{"location": "Lyon"}"#, 3);
    script.push(result("c1"));
    script.push(AgentUpdate::Usage(Default::default()));
    let out = run(
        rules(&[("doc", "write", "*")]),
        script.clone(),
        request(None),
    )
    .await;
    assert_eq!(out, script);
}

#[tokio::test]
async fn a_subagents_call_of_a_tool_of_the_same_name_predicts_nothing() {
    let mut script = call("sa_1.c1", "write", r#"{"document": "from the child"}"#, 4);
    for update in &mut script {
        if let AgentUpdate::Event(body) = update {
            body.attribute_to("sa_1");
        }
    }
    script.push(result("sa_1.c1"));
    let updates = run(
        rules(&[("document", "write", "document")]),
        script,
        request(Some(json!({}))),
    )
    .await;
    assert!(
        updates
            .iter()
            .all(|u| !matches!(kind(u), "STATE_DELTA" | "STATE_SNAPSHOT")),
        "{updates:?}"
    );
}
