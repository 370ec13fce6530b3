//! Confirmation of predicted state: a predictive tool that needs approval streams its
//! prediction, then asks; a confirmation commits the prediction with a snapshot, a rejection
//! puts the state from before the prediction back with a snapshot. Nothing is stored between
//! the two runs: the values to restore travel, signed, in the approval id.

use agui_host::settings::{
    ApprovalPolicySetting, FixedApproval, PredictStateRule, Settings, ThreadStoreKind,
};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

const NEW_DOCUMENT: &str = r#"{"document": "The new version, written by the model."}"#;

/// An agent whose `write_document` tool streams into `state.document` and needs approval.
fn confirming_writer(settings: &mut Settings, client_tool_name: &str) {
    confirming_writer_saying(settings, client_tool_name, json!("Document saved."));
}

/// `confirming_writer` whose tool answers `result`.
fn confirming_writer_saying(settings: &mut Settings, client_tool_name: &str, result: Value) {
    let agent = settings.agents.get_mut("assistant").unwrap();
    let mut tool = static_tool("write_document", result);
    tool.approval = ApprovalPolicySetting::Fixed(FixedApproval::Always);
    agent.tools.push(tool);
    agent.predict_state.insert(
        "document".into(),
        PredictStateRule {
            tool: "write_document".into(),
            tool_argument: "document".into(),
        },
    );
    agent.approval.client_tool_name = client_tool_name.into();
    agent.approval.state_rejected_message = "Changes discarded.".into();
}

fn with_state(mut body: Value, state: Value) -> Value {
    body["state"] = state;
    body
}

/// The client's state after the run: `initial` with every state event applied in order.
fn client_state(initial: &Value, events: &[Value]) -> Value {
    let mut state = initial.clone();
    for event in events {
        match event["type"].as_str() {
            Some("STATE_SNAPSHOT") => state = event["snapshot"].clone(),
            Some("STATE_DELTA") => {
                let patch: json_patch::Patch =
                    serde_json::from_value(event["delta"].clone()).unwrap();
                json_patch::patch(&mut state, &patch).expect("every delta applies");
            }
            _ => {}
        }
    }
    state
}

fn assistant_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": format!("a-{id}"), "role": "assistant", "toolCalls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]})
}

/// A 1.0 client with the state `before` asks for a rewrite, and the model writes the document.
async fn rewrite(app: &TestApp, before: &Value) -> Vec<Value> {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_w", "write_document", NEW_DOCUMENT)],
        false,
    )));
    let events = app
        .run_events(
            "/",
            &with_state(input(vec![user("Rewrite it.")]), before.clone()),
        )
        .await;
    assert_well_formed(&events);
    events
}

/// Run 1 for a 1.0 client: the prediction streams, then the run asks. Returns the interrupt id
/// and the client's state after the run.
async fn predicted(app: &TestApp, before: &Value) -> (String, Value) {
    let events = rewrite(app, before).await;
    assert!(
        events.iter().any(|e| e["type"] == "STATE_DELTA"),
        "the prediction streams: {:?}",
        types(&events)
    );
    let after = client_state(before, &events);
    assert_eq!(after["document"], "The new version, written by the model.");
    assert_eq!(after["title"], "Notes", "other keys are kept");
    let finished = events.last().unwrap();
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["toolCallId"], "call_w", "{finished}");
    (interrupt["id"].as_str().unwrap().to_owned(), after)
}

fn history() -> Vec<Value> {
    vec![
        user("Rewrite it."),
        assistant_call("call_w", "write_document", NEW_DOCUMENT),
    ]
}

#[tokio::test]
async fn a_rejected_prediction_is_undone_with_a_snapshot_of_the_state_before_it() {
    let app = spawn_app(|settings| confirming_writer(settings, "request_approval")).await;
    let before = json!({"title": "Notes", "document": "The old version."});
    let (id, predicted_state) = predicted(&app, &before).await;

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Kept the old one."])));
    let mut body = with_state(input(history()), predicted_state);
    body["resume"] =
        json!([{"interruptId": id, "status": "resolved", "payload": {"approved": false}}]);
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(events[1]["type"], "STATE_SNAPSHOT", "{:?}", types(&events));
    assert_eq!(
        events[1]["snapshot"], before,
        "the state from before the prediction"
    );
    assert_eq!(client_state(&json!({}), &events), before);
    assert!(
        events.iter().any(|e| e["delta"] == "Changes discarded."),
        "the configured rejection message: {:?}",
        types(&events)
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert_ne!(result["content"], "Document saved.", "the tool never ran");
}

#[tokio::test]
async fn a_confirmed_prediction_is_committed_and_the_tool_runs() {
    let app = spawn_app(|settings| confirming_writer(settings, "request_approval")).await;
    let before = json!({"title": "Notes", "document": "The old version."});
    let (id, predicted_state) = predicted(&app, &before).await;

    app.fake.push(Reply::Sse(chunks::text_reply(&["Saved."])));
    let mut body = with_state(input(history()), predicted_state.clone());
    body["resume"] =
        json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]);
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(events[1]["type"], "STATE_SNAPSHOT");
    assert_eq!(
        events[1]["snapshot"], predicted_state,
        "the prediction is committed"
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    assert_eq!(result["toolCallId"], "call_w");
    assert_eq!(result["content"], "Document saved.");
}

#[tokio::test]
async fn a_tampered_restore_in_the_id_is_refused() {
    let app = spawn_app(|settings| confirming_writer(settings, "request_approval")).await;
    let before = json!({"title": "Notes", "document": "The old version."});
    let (id, predicted_state) = predicted(&app, &before).await;
    // Keep the tag, change what would be restored (it is the end of the id).
    let at = id.len() - 4;
    let swapped = if &id[at..at + 1] == "A" { "B" } else { "A" };
    let forged = format!("{}{swapped}{}", &id[..at], &id[at + 1..]);
    let mut body = with_state(input(history()), predicted_state);
    body["resume"] =
        json!([{"interruptId": forged, "status": "resolved", "payload": {"approved": false}}]);
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(events.last().unwrap()["code"], "interrupt_unknown");
    assert!(!events.iter().any(|e| e["type"] == "STATE_SNAPSHOT"));
}

/// The history a 0.x page sends after answering the `confirm_changes` call `confirm_id` with
/// `{"accepted": false}`: the call filed under the assistant message, then its answer.
fn declined_through_confirm_changes(confirm_id: &str) -> Vec<Value> {
    answered_through_confirm_changes(confirm_id, false)
}

/// The same with `{"accepted": accepted}`.
fn answered_through_confirm_changes(confirm_id: &str, accepted: bool) -> Vec<Value> {
    let mut messages = history();
    messages[1]["toolCalls"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": confirm_id, "type": "function", "function": {"name": "confirm_changes", "arguments": "{}"}}));
    let answer = json!({"accepted": accepted}).to_string();
    messages.push(
        json!({"id": "t-confirm", "role": "tool", "toolCallId": confirm_id, "content": answer}),
    );
    messages
}

/// The id of the `confirm_changes` call a 0.x run asked with.
#[track_caller]
fn confirm_changes_id(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START" && e["toolCallName"] == "confirm_changes")
        .and_then(|e| e["toolCallId"].as_str())
        .unwrap_or_else(|| panic!("a confirm_changes call: {:?}", types(events)))
        .to_owned()
}

/// A 0.x client (no `protocolVersion`) asks for a rewrite: the model writes the document, and
/// the run asks through `confirm_changes`. Returns the app, the state before and the events.
async fn first_0x_run_asks_to_confirm() -> (TestApp, Value, Vec<Value>) {
    first_0x_run_asking(json!("Document saved."), ThreadStoreKind::Memory).await
}

/// `first_0x_run_asks_to_confirm` with a tool answering `result` and the thread kept in `store`.
async fn first_0x_run_asking(
    result: Value,
    store: ThreadStoreKind,
) -> (TestApp, Value, Vec<Value>) {
    let app = spawn_app(|settings| {
        confirming_writer_saying(settings, "confirm_changes", result);
        settings.threads.store = store;
    })
    .await;
    let before = json!({"title": "Notes", "document": "The old version."});
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_w", "write_document", NEW_DOCUMENT)],
        false,
    )));
    let mut first = with_state(input(vec![user("Rewrite it.")]), before.clone());
    first.as_object_mut().unwrap().remove("protocolVersion");
    let events = app.run_events("/", &first).await;
    (app, before, events)
}

#[tokio::test]
async fn a_0x_client_confirms_through_confirm_changes_as_copilotkit_pages_expect() {
    let (app, before, events) = first_0x_run_asks_to_confirm().await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let confirm_id = confirm_changes_id(&events);
    let predicted_state = client_state(&before, &events);

    // The page answers the confirm_changes call with {"accepted": false}.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Discarded."])));
    let messages = declined_through_confirm_changes(&confirm_id);
    let mut second = with_state(input(messages), predicted_state);
    second.as_object_mut().unwrap().remove("protocolVersion");
    let events = app.run_events("/", &second).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(events[1]["type"], "STATE_SNAPSHOT");
    assert_eq!(events[1]["snapshot"], before);
    let upstream = app.fake.requests();
    let last = serde_json::to_string(&upstream.last().unwrap().body).unwrap();
    assert!(
        !last.contains("confirm_changes"),
        "the provider never sees the confirmation call"
    );
}

/// Runs after an answered confirmation: the client edits its state, sends two more messages
/// and then the answer again; the state it edited is never overwritten by the old restore.
async fn later_runs_keep_edits(
    app: &TestApp,
    mut messages: Vec<Value>,
    replay: Option<Value>,
    legacy: bool,
) {
    let edited = json!({"title": "Notes", "document": "My own edit, made after the answer."});
    let body_of = |messages: Vec<Value>| {
        let mut body = with_state(input(messages), edited.clone());
        if legacy {
            body.as_object_mut().unwrap().remove("protocolVersion");
        }
        body
    };
    for text in ["Thanks.", "And now?"] {
        messages.push(user(text));
        app.fake.push(Reply::Sse(chunks::text_reply(&["Fine."])));
        let events = app.run_events("/", &body_of(messages.clone())).await;
        assert_well_formed(&events);
        assert_eq!(client_state(&edited, &events), edited, "{events:?}");
        assert!(
            !events.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"),
            "{:?}",
            types(&events)
        );
        messages.push(json!({"id": format!("a-{text}"), "role": "assistant", "content": "Fine."}));
    }
    if let Some(resume) = replay {
        let mut body = body_of(messages);
        body["resume"] = resume;
        app.fake.push(Reply::Sse(chunks::text_reply(&["Fine."])));
        let events = app.run_events("/", &body).await;
        assert_well_formed(&events);
        assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
        assert_eq!(client_state(&edited, &events), edited, "{events:?}");
        assert!(
            !events.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"),
            "a replayed answer repeats no result: {:?}",
            types(&events)
        );
    }
}

/// The `TOOL_CALL_RESULT` of `call_w` in a run, as the tool message a client keeps.
fn kept_result(events: &[Value]) -> Value {
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_w")
        .unwrap_or_else(|| panic!("a result for call_w: {:?}", types(events)));
    json!({"id": result["messageId"], "role": "tool", "toolCallId": "call_w", "content": result["content"]})
}

#[tokio::test]
async fn a_rejected_prediction_is_restored_once_and_later_edits_survive_for_a_1_0_client() {
    let app = spawn_app(|settings| confirming_writer(settings, "request_approval")).await;
    let before = json!({"title": "Notes", "document": "The old version."});
    let (id, predicted_state) = predicted(&app, &before).await;
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Kept the old one."])));
    let resume = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": false}}]);
    let mut body = with_state(input(history()), predicted_state);
    body["resume"] = resume.clone();
    let events = app.run_events("/", &body).await;
    assert_eq!(client_state(&json!({}), &events), before, "restored once");
    let mut messages = history();
    messages.push(kept_result(&events));
    later_runs_keep_edits(&app, messages, Some(resume), false).await;
}

#[tokio::test]
async fn a_rejected_prediction_is_restored_once_and_later_edits_survive_for_a_0x_client() {
    let (app, before, events) = first_0x_run_asks_to_confirm().await;
    let confirm_id = confirm_changes_id(&events);
    let predicted_state = client_state(&before, &events);

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Discarded."])));
    let mut messages = declined_through_confirm_changes(&confirm_id);
    let mut second = with_state(input(messages.clone()), predicted_state);
    second.as_object_mut().unwrap().remove("protocolVersion");
    let events = app.run_events("/", &second).await;
    assert_eq!(client_state(&json!({}), &events), before, "restored once");
    messages.push(kept_result(&events));
    later_runs_keep_edits(&app, messages, None, true).await;
}

#[tokio::test]
async fn a_confirmed_prediction_is_committed_once_and_later_edits_survive() {
    let app = spawn_app(|settings| confirming_writer(settings, "request_approval")).await;
    let before = json!({"title": "Notes", "document": "The old version."});
    let (id, predicted_state) = predicted(&app, &before).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Saved."])));
    let resume = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]);
    let mut body = with_state(input(history()), predicted_state);
    body["resume"] = resume.clone();
    let events = app.run_events("/", &body).await;
    let mut messages = history();
    messages.push(kept_result(&events));
    assert_eq!(messages.last().unwrap()["content"], "Document saved.");
    later_runs_keep_edits(&app, messages, Some(resume), false).await;
}

/// A 0.x page confirms through `confirm_changes` (`{"accepted": true}`): the prediction is
/// committed and the tool runs once, and later runs (which send the answer again, kept in the
/// history) leave the state the page edits since alone. The tool's own result reads like the
/// answer, which must not hide that it ran, with or without a thread store.
#[tokio::test]
async fn a_confirmed_prediction_is_committed_once_and_later_edits_survive_for_a_0x_client() {
    let saved = json!({"accepted": true, "document": "saved"});
    for store in [ThreadStoreKind::Off, ThreadStoreKind::Memory] {
        let (app, before, events) = first_0x_run_asking(saved.clone(), store).await;
        let confirm_id = confirm_changes_id(&events);
        let predicted_state = client_state(&before, &events);
        assert_ne!(predicted_state, before, "the prediction streamed");

        app.fake.push(Reply::Sse(chunks::text_reply(&["Saved."])));
        let mut messages = answered_through_confirm_changes(&confirm_id, true);
        let mut second = with_state(input(messages.clone()), predicted_state.clone());
        second.as_object_mut().unwrap().remove("protocolVersion");
        let events = app.run_events("/", &second).await;
        assert_well_formed(&events);
        assert_0x_compatible(&events);
        assert_eq!(
            client_state(&json!({}), &events),
            predicted_state,
            "committed"
        );
        let kept = kept_result(&events);
        assert_eq!(kept["content"], saved.to_string(), "the tool ran");
        messages.push(kept);
        later_runs_keep_edits(&app, messages, None, true).await;
    }
}

#[tokio::test]
async fn an_id_stays_under_its_documented_size_with_a_256_kb_state() {
    use agui_host::agent::approval_id::MAX_APPROVAL_ID_LEN;
    let app = spawn_app(|settings| confirming_writer(settings, "request_approval")).await;
    // Just under the default state limit (256 KiB), nearly all of it the predicted key.
    let old_document = "Old paragraph. ".repeat(255 * 1024 / 15);
    let before = json!({"title": "Notes", "document": old_document});
    let events = rewrite(&app, &before).await;
    let interrupt = &events.last().unwrap()["outcome"]["interrupts"][0];
    let id = interrupt["id"].as_str().expect("an interrupt");
    assert!(
        id.len() <= MAX_APPROVAL_ID_LEN && MAX_APPROVAL_ID_LEN < 12 * 1024,
        "an id of {} bytes",
        id.len()
    );
    // Too large to carry, so the prediction was withdrawn before asking...
    let asked_state = client_state(&before, &events);
    assert_eq!(
        asked_state, before,
        "the old document is back while the person decides"
    );

    // ...and a rejection has nothing to undo, a confirmation runs the tool.
    for (approved, result) in [(false, "declined"), (true, "Document saved.")] {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        let mut body = with_state(input(history()), asked_state.clone());
        body["resume"] =
            json!([{"interruptId": id, "status": "resolved", "payload": {"approved": approved}}]);
        let events = app.run_events("/", &body).await;
        assert_well_formed(&events);
        assert_eq!(client_state(&asked_state, &events), before);
        let content = kept_result(&events)["content"].as_str().unwrap().to_owned();
        assert_eq!(
            content == "Document saved.",
            result == "Document saved.",
            "{content}"
        );
    }
}

/// A 0.x client sends the confirmation call back in every later request, where ids are
/// bounded (`max_id_bytes`, 256): an id carrying a real document's old text would not fit, so
/// its data rides in the call's arguments, covered by the same tag. Rejecting restores the old
/// document, and an edited argument is refused.
#[tokio::test]
async fn a_0x_client_confirms_a_long_document_whose_restore_does_not_fit_an_id() {
    let app = spawn_app(|settings| {
        confirming_writer_saying(settings, "confirm_changes", json!("Document saved."));
    })
    .await;
    let before =
        json!({"title": "Notes", "document": "The old version, a real page long. ".repeat(40)});
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_w", "write_document", NEW_DOCUMENT)],
        false,
    )));
    let mut first = with_state(input(vec![user("Rewrite it.")]), before.clone());
    first.as_object_mut().unwrap().remove("protocolVersion");
    let events = app.run_events("/", &first).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let confirm_id = confirm_changes_id(&events);
    assert!(confirm_id.len() <= 256, "{} bytes", confirm_id.len());
    let arguments = tool_args(&events)[&confirm_id].clone();
    assert!(arguments.contains("\"carried\""), "{arguments}");
    let predicted_state = client_state(&before, &events);

    // The history as the client keeps it: the call with the arguments it streamed.
    let answer = |arguments: &str| {
        let mut messages = history();
        messages[1]["toolCalls"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "id": confirm_id, "type": "function",
                "function": {"name": "confirm_changes", "arguments": arguments}
            }));
        messages.push(
            json!({"id": "t-confirm", "role": "tool", "toolCallId": confirm_id,
            "content": json!({"accepted": false}).to_string()}),
        );
        let mut body = with_state(input(messages), predicted_state.clone());
        body.as_object_mut().unwrap().remove("protocolVersion");
        body
    };
    let mut edited: Value = serde_json::from_str(&arguments).unwrap();
    let carried = edited["carried"].as_str().unwrap().to_owned();
    edited["carried"] = json!(format!("{}A", &carried[..carried.len() - 1]));
    let mut forged = answer(&edited.to_string());
    forged["runId"] = json!("forged");
    let refused = app.run_events("/", &forged).await;
    assert_eq!(
        last(&refused)["code"],
        "interrupt_unknown",
        "{:?}",
        last(&refused)
    );

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Discarded."])));
    let events = app.run_events("/", &answer(&arguments)).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(events[1]["type"], "STATE_SNAPSHOT", "{:?}", types(&events));
    assert_eq!(events[1]["snapshot"], before, "the old document is back");
}
