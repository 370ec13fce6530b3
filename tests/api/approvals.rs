//! Human in the loop: server tools that wait for a person's approval.
//!
//! The contract (issue 5, protocol digest §7): an approval-requiring call is streamed but not
//! run; a 1.0 client gets an `interrupt` outcome and answers with `resume`, a 0.x client gets a
//! `request_approval` client tool call and answers with a tool message. An approved call runs
//! once and answers the *original* call id; a declined one never runs and the model is told.
//! Ids are HMAC-signed, so unknown, forged, swapped, foreign-thread or duplicated answers end the
//! run with `RUN_ERROR` and a specific code, and approvals survive a restart with the same key.
//!
//! Whether a tool really ran is observed on a tiny HTTP service the `http` tools post to: it
//! records every call's arguments. Every upstream request is checked never to carry an
//! unanswered tool call or any part of the approval protocol.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agui_host::agent::SYNTHETIC_MISSING_RESULT;
use agui_host::settings::{
    ApprovalPolicySetting, FixedApproval, Settings, ToolKindSettings, ToolSettings,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// What the model is told (and the client shown) for a declined call, as configured here.
const REJECTED: &str = "The person declined this action (approval test), so it was not done.";

/// The arguments the model writes for the sensitive call in most tests.
pub(crate) const TRANSFER_ARGS: &str = r#"{"amount":250,"to":"bob"}"#;

// ---- The tool service ------------------------------------------------------------------------

/// Calls received by the tool service: (tool name from the path, JSON arguments, the
/// `Idempotency-Key` and `X-Tool-Call-Id` headers).
type Calls = Arc<Mutex<Vec<(String, Value, [String; 2])>>>;

/// A tiny HTTP service standing in for the tools' backends: every `POST /<tool>` is recorded
/// and answered `{"status":"done","tool":"<tool>"}`, or with a fixed reply.
#[derive(Debug, Clone)]
pub(crate) struct ToolService {
    base: String,
    calls: Calls,
}

/// What the tool service answers: `None` for the default `{"status":"done","tool":"<tool>"}`.
type FixedReply = Option<Value>;

async fn record_call(
    State((calls, reply)): State<(Calls, FixedReply)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::Json<Value> {
    let tool = uri.path().trim_start_matches('/').to_string();
    let arguments: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let ids = [header("idempotency-key"), header("x-tool-call-id")];
    calls.lock().unwrap().push((tool.clone(), arguments, ids));
    axum::Json(reply.unwrap_or_else(|| service_result(&tool)))
}

impl ToolService {
    pub(crate) async fn start() -> ToolService {
        Self::serve(None).await
    }

    /// A service whose every tool answers `reply`, such as a backend's own
    /// `{"approved": true}` that looks like an approval answer.
    pub(crate) async fn answering(reply: Value) -> ToolService {
        Self::serve(Some(reply)).await
    }

    async fn serve(reply: FixedReply) -> ToolService {
        let calls: Calls = Arc::default();
        let router = axum::Router::new()
            .fallback(record_call)
            .with_state((calls.clone(), reply));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        ToolService {
            base: format!("http://{address}"),
            calls,
        }
    }

    fn url(&self, tool: &str) -> String {
        format!("{}/{tool}", self.base)
    }

    /// The arguments of every call of `tool` received so far.
    pub(crate) fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _, _)| name == tool)
            .map(|(_, arguments, _)| arguments.clone())
            .collect()
    }

    /// The `[Idempotency-Key, X-Tool-Call-Id]` headers of every call of `tool` so far.
    fn call_ids_of(&self, tool: &str) -> Vec<[String; 2]> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _, _)| name == tool)
            .map(|(_, _, ids)| ids.clone())
            .collect()
    }

    pub(crate) fn total(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

/// What a tool's result is when the service ran it.
fn service_result(tool: &str) -> Value {
    json!({"status": "done", "tool": tool})
}

// ---- Tools and agent settings ----------------------------------------------------------------

pub(crate) fn always() -> ApprovalPolicySetting {
    ApprovalPolicySetting::Fixed(FixedApproval::Always)
}

fn transfer_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
        "required": ["amount"],
    })
}

/// An `http` server tool posting to the tool service.
pub(crate) fn http_tool(
    service: &ToolService,
    name: &str,
    parameters: Value,
    approval: ApprovalPolicySetting,
    allow_edit: bool,
) -> ToolSettings {
    ToolSettings {
        name: name.into(),
        description: format!("The {name} server tool."),
        parameters: Some(parameters),
        approval,
        allow_edit,
        approval_message: None,
        background: false,
        kind: ToolKindSettings::Http {
            url: service.url(name),
            headers_from_env: Default::default(),
            timeout_secs: 5,
            envelope: false,
        },
    }
}

/// `transfer_money`, always approved first.
/// `cancel_subscription`: always needs approval, takes a `plan`, allows no edits.
fn cancel_tool(service: &ToolService) -> ToolSettings {
    http_tool(
        service,
        "cancel_subscription",
        json!({"type": "object", "properties": {"plan": {"type": "string"}}}),
        always(),
        false,
    )
}

pub(crate) fn transfer_tool(service: &ToolService, allow_edit: bool) -> ToolSettings {
    http_tool(
        service,
        "transfer_money",
        transfer_parameters(),
        always(),
        allow_edit,
    )
}

/// Gives the default agent exactly `tools` and the test's rejected message.
/// The app with the transfer tool (no edits) and no thread store: each run knows only the
/// history the client sends, as with a server that remembers nothing.
pub(crate) async fn spawn_transfer_app_without_store(service: &ToolService) -> TestApp {
    let tools = vec![transfer_tool(service, false)];
    spawn_app(|settings| {
        with_tools(settings, tools);
        settings.threads.store = agui_host::settings::ThreadStoreKind::Off;
    })
    .await
}

pub(crate) fn with_tools(settings: &mut Settings, tools: Vec<ToolSettings>) {
    let name = settings.default_agent.clone();
    let agent = settings.agents.get_mut(&name).expect("the default agent");
    agent.tools = tools;
    agent.approval.rejected_message = REJECTED.into();
}

// ---- Inputs ----------------------------------------------------------------------------------

/// A 1.0 resume run (`r2`) on thread `t1`.
pub(crate) fn resume_input(messages: Vec<Value>, resume: Value) -> Value {
    let mut body = input(messages);
    body["runId"] = json!("r2");
    body["resume"] = resume;
    body
}

pub(crate) fn resolved(interrupt_id: &str, payload: Value) -> Value {
    json!({"interruptId": interrupt_id, "status": "resolved", "payload": payload})
}

pub(crate) fn cancelled(interrupt_id: &str) -> Value {
    json!({"interruptId": interrupt_id, "status": "cancelled"})
}

/// The history a client holds after a run: `before`, then what the run streamed, the way the
/// reference reducer files it: text and tool calls under their assistant message (the text's
/// message id, the calls' `parentMessageId`), a tool message per `TOOL_CALL_RESULT`. Interrupt
/// answers are *not* added: that is the client's choice, made by each test.
pub(crate) fn client_history(before: &[Value], events: &[Value]) -> Vec<Value> {
    fn assistant_at(messages: &mut Vec<Value>, id: &str) -> usize {
        if let Some(at) = messages.iter().position(|m| m["id"] == id) {
            return at;
        }
        messages.push(json!({"id": id, "role": "assistant"}));
        messages.len() - 1
    }
    let mut messages = before.to_vec();
    let arguments = tool_args(events);
    for event in events {
        match event["type"].as_str().unwrap_or("") {
            "TEXT_MESSAGE_START" => {
                let at = assistant_at(&mut messages, event["messageId"].as_str().unwrap());
                messages[at]["content"] = json!("");
            }
            "TEXT_MESSAGE_CONTENT" => {
                let at = assistant_at(&mut messages, event["messageId"].as_str().unwrap());
                let text = format!(
                    "{}{}",
                    messages[at]["content"].as_str().unwrap_or(""),
                    event["delta"].as_str().unwrap()
                );
                messages[at]["content"] = json!(text);
            }
            "TOOL_CALL_START" => {
                let parent = event["parentMessageId"]
                    .as_str()
                    .expect("tool calls name their assistant message");
                let at = assistant_at(&mut messages, parent);
                let id = event["toolCallId"].as_str().unwrap();
                let call = json!({
                    "id": id,
                    "type": "function",
                    "function": {
                        "name": event["toolCallName"],
                        "arguments": arguments.get(id).cloned().unwrap_or_default(),
                    },
                });
                match messages[at]["toolCalls"].as_array_mut() {
                    Some(calls) => calls.push(call),
                    None => messages[at]["toolCalls"] = json!([call]),
                }
            }
            "TOOL_CALL_RESULT" => messages.push(json!({
                "id": event["messageId"],
                "role": "tool",
                "toolCallId": event["toolCallId"],
                "content": event["content"],
            })),
            _ => {}
        }
    }
    messages
}

// ---- Reading runs ----------------------------------------------------------------------------

/// The id of the `request_approval` call a run asked a 0.x client with.
#[track_caller]
pub(crate) fn approval_call_id(events: &[Value]) -> String {
    of_type(events, "TOOL_CALL_START")
        .into_iter()
        .find(|e| e["toolCallName"] == "request_approval")
        .and_then(|e| e["toolCallId"].as_str())
        .expect("a request_approval call")
        .to_owned()
}

/// The interrupts the run ended with (fails unless the outcome is `interrupt`).
#[track_caller]
pub(crate) fn interrupts(events: &[Value]) -> Vec<Value> {
    let finished = last(events);
    assert_eq!(finished["type"], "RUN_FINISHED", "{:?}", types(events));
    assert_eq!(
        finished["outcome"]["type"], "interrupt",
        "the run must end with an interrupt outcome: {finished}"
    );
    finished["outcome"]["interrupts"]
        .as_array()
        .expect("interrupts")
        .clone()
}

/// The id of the interrupt about `tool_call_id`.
#[track_caller]
pub(crate) fn interrupt_id(events: &[Value], tool_call_id: &str) -> String {
    let all = interrupts(events);
    let found: Vec<&Value> = all
        .iter()
        .filter(|i| i["toolCallId"] == tool_call_id)
        .collect();
    assert_eq!(found.len(), 1, "one interrupt for {tool_call_id}: {all:?}");
    found[0]["id"].as_str().expect("interrupt id").to_string()
}

/// Checks a run that succeeded to the end.
#[track_caller]
pub(crate) fn assert_success(events: &[Value]) {
    let finished = last(events);
    assert_eq!(finished["type"], "RUN_FINISHED", "{:?}", types(events));
    assert_eq!(
        finished["outcome"],
        json!({"type": "success"}),
        "{finished}"
    );
}

/// Checks a run refused with `RUN_ERROR` `code` before anything happened: no tool call, no
/// tool result, no text (and, by `assert_well_formed`, nothing after the `RUN_ERROR`).
#[track_caller]
pub(crate) fn assert_refused(events: &[Value], code: &str) {
    assert_well_formed(events);
    let error = last(events);
    assert_eq!(error["type"], "RUN_ERROR", "{:?}", types(events));
    assert_eq!(error["code"], code, "{error}");
    for ty in [
        "TOOL_CALL_START",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "RUN_FINISHED",
    ] {
        assert!(
            of_type(events, ty).is_empty(),
            "no {ty} in a refused run: {:?}",
            types(events)
        );
    }
}

/// The `TOOL_CALL_RESULT`s of a run, by tool call id, in order.
pub(crate) fn results(events: &[Value]) -> Vec<(String, String)> {
    of_type(events, "TOOL_CALL_RESULT")
        .into_iter()
        .map(|e| {
            (
                e["toolCallId"].as_str().unwrap().to_string(),
                e["content"].as_str().expect("text content").to_string(),
            )
        })
        .collect()
}

/// The content of the single `TOOL_CALL_RESULT` for `tool_call_id`.
#[track_caller]
pub(crate) fn result_for(events: &[Value], tool_call_id: &str) -> String {
    let found: Vec<String> = results(events)
        .into_iter()
        .filter(|(id, _)| id == tool_call_id)
        .map(|(_, content)| content)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one TOOL_CALL_RESULT for {tool_call_id}: {:?}",
        types(events)
    );
    found[0].clone()
}

#[track_caller]
fn assert_service_result(content: &str, tool: &str) {
    let value: Value = serde_json::from_str(content)
        .unwrap_or_else(|e| panic!("the result is the service's JSON ({e}): {content}"));
    assert_eq!(value, service_result(tool));
}

pub(crate) fn the_text(events: &[Value]) -> String {
    texts(events)
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join("|")
}

// ---- Reading upstream requests ---------------------------------------------------------------

/// Rule 11: the provider never sees an unanswered tool call, nor any part of the approval
/// protocol. In every upstream request, each assistant tool call is answered by a tool message
/// with its id before the next non-tool message; every tool message answers a call of the
/// assistant turn it follows; no call, answer or tool is the approval tool.
#[track_caller]
pub(crate) fn assert_provider_saw_clean_histories(app: &TestApp) {
    for (n, body) in app.upstream_bodies().iter().enumerate() {
        let messages = body["messages"].as_array().expect("upstream messages");
        let mut open: Vec<String> = Vec::new();
        let mut turn_calls: Vec<String> = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            if message["role"] == "tool" {
                let id = message["tool_call_id"].as_str().unwrap_or("");
                assert!(
                    turn_calls.iter().any(|c| c == id),
                    "request #{n}, message #{i}: a tool message for `{id}`, which the turn \
                     before it did not call: {body}"
                );
                assert!(
                    !id.starts_with("apr_"),
                    "request #{n}: an approval answer reached the provider: {body}"
                );
                open.retain(|c| c != id);
                continue;
            }
            assert!(
                open.is_empty(),
                "request #{n}, message #{i}: calls {open:?} are unanswered: {body}"
            );
            turn_calls.clear();
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                let id = call["id"].as_str().expect("tool call id").to_string();
                assert_ne!(
                    call["function"]["name"], "request_approval",
                    "request #{n}: the approval call reached the provider: {body}"
                );
                assert!(!id.starts_with("apr_"), "request #{n}: {body}");
                open.push(id.clone());
                turn_calls.push(id);
            }
        }
        assert!(
            open.is_empty(),
            "request #{n}: calls {open:?} are unanswered at the end: {body}"
        );
        assert!(
            !tool_names(body).contains(&"request_approval"),
            "request #{n}: the approval tool was offered to the model: {body}"
        );
    }
}

/// The tool messages that follow the assistant turn calling `tool_call_id`, checked to come
/// right after it; returns the one answering `tool_call_id`.
#[track_caller]
pub(crate) fn upstream_answer<'a>(body: &'a Value, tool_call_id: &str) -> &'a Value {
    let messages = body["messages"].as_array().expect("upstream messages");
    let owner = messages
        .iter()
        .position(|m| {
            m["role"] == "assistant"
                && m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["id"] == tool_call_id)
        })
        .unwrap_or_else(|| panic!("the upstream history holds the call {tool_call_id}: {body}"));
    let answers: Vec<&Value> = messages[owner + 1..]
        .iter()
        .take_while(|m| m["role"] == "tool")
        .filter(|m| m["tool_call_id"] == tool_call_id)
        .collect();
    assert_eq!(
        answers.len(),
        1,
        "the call {tool_call_id} is answered once, right after its turn: {body}"
    );
    let all_for_id = messages
        .iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == tool_call_id)
        .count();
    assert_eq!(all_for_id, 1, "one tool message for {tool_call_id}: {body}");
    answers[0]
}

// ---- Scenario: one approval-requiring call -------------------------------------------------

/// Run 1 of most tests: the model calls `transfer_money` (`call_1`) and the run ends with the
/// call pending. Returns the run's events and the client's history after it.
async fn interrupted_transfer(app: &TestApp, service: &ToolService) -> (Vec<Value>, Vec<Value>) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "transfer_money", TRANSFER_ARGS)],
        false,
    )));
    let question = user("Send 250 to Bob.");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);
    assert_eq!(service.total(), 0, "the tool must not run before approval");
    let history = client_history(&[question], &events);
    (events, history)
}

#[tokio::test]
async fn an_approval_required_call_interrupts_and_runs_once_when_approved() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;

    // Run 1: the call is streamed, not run, and the run ends with an interrupt.
    let (events, history) = interrupted_transfer(&app, &service).await;
    let start = the(&events, "TOOL_CALL_START");
    assert_eq!(start["toolCallId"], "call_1");
    assert_eq!(start["toolCallName"], "transfer_money");
    assert_eq!(tool_args(&events)["call_1"], TRANSFER_ARGS);
    assert_eq!(the(&events, "TOOL_CALL_END")["toolCallId"], "call_1");
    assert!(
        of_type(&events, "TOOL_CALL_RESULT").is_empty(),
        "no result for a call waiting for approval: {:?}",
        types(&events)
    );
    let all = interrupts(&events);
    assert_eq!(all.len(), 1, "{all:?}");
    let interrupt = &all[0];
    let id = interrupt["id"].as_str().expect("interrupt id");
    assert!(id.starts_with("apr_"), "{interrupt}");
    assert_eq!(interrupt["reason"], "tool_call");
    assert_eq!(interrupt["toolCallId"], "call_1");
    assert!(
        interrupt["message"].as_str().is_some_and(|m| !m.is_empty()),
        "a question for the person: {interrupt}"
    );
    let schema = &interrupt["responseSchema"];
    assert_eq!(
        schema["properties"]["approved"]["type"], "boolean",
        "{interrupt}"
    );
    assert!(
        schema["properties"].get("editedArgs").is_none(),
        "the tool does not allow edits: {interrupt}"
    );
    assert_eq!(app.upstream_bodies().len(), 1);

    // Run 2: the client holds the call without a result, and approves.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Done, ", "sent."])));
    let events = app
        .run_events(
            "/",
            &resume_input(history, json!([resolved(id, json!({"approved": true}))])),
        )
        .await;
    assert_well_formed(&events);
    assert!(
        of_type(&events, "TOOL_CALL_START").is_empty(),
        "the approved call is not streamed again: {:?}",
        types(&events)
    );
    assert_service_result(&result_for(&events, "call_1"), "transfer_money");
    assert_eq!(
        service.calls_of("transfer_money"),
        [serde_json::from_str::<Value>(TRANSFER_ARGS).unwrap()],
        "the tool ran exactly once, with the model's arguments"
    );
    assert_eq!(the_text(&events), "Done, sent.");
    assert_success(&events);

    assert_model_heard_the_result_right_after_the_call(&app);
}

/// The model was called again after the tool, with the call as the model wrote it and its
/// result right after it, and nothing else.
fn assert_model_heard_the_result_right_after_the_call(app: &TestApp) {
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2, "the model is called again after the tool");
    assert_eq!(app.fake.unused_replies(), 0);
    let messages = bodies[1]["messages"].as_array().unwrap();
    let owner = messages
        .iter()
        .position(|m| m["tool_calls"][0]["id"] == "call_1")
        .expect("the assistant call upstream");
    assert_eq!(
        messages[owner]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .map(|a| serde_json::from_str::<Value>(a).unwrap()),
        Some(serde_json::from_str::<Value>(TRANSFER_ARGS).unwrap())
    );
    assert_eq!(
        messages[owner + 1]["role"],
        "tool",
        "the result follows the call immediately: {}",
        bodies[1]
    );
    assert_eq!(messages[owner + 1]["tool_call_id"], "call_1");
    assert_service_result(&content_text(&messages[owner + 1]), "transfer_money");
    assert_eq!(messages.len(), owner + 2, "{}", bodies[1]);
    assert_provider_saw_clean_histories(app);
}

#[tokio::test]
async fn copilotkits_echo_of_the_answer_is_not_taken_for_the_tool_result() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (events, mut history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");

    // CopilotKit also appends the answer as a tool message for the call.
    history.push(tool_result("call_1", r#"{"approved":true}"#));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let events = app
        .run_events(
            "/",
            &resume_input(history, json!([resolved(&id, json!({"approved": true}))])),
        )
        .await;
    assert_well_formed(&events);
    assert!(of_type(&events, "TOOL_CALL_START").is_empty());
    assert_service_result(&result_for(&events, "call_1"), "transfer_money");
    assert_eq!(service.calls_of("transfer_money").len(), 1, "ran once");
    assert_eq!(the_text(&events), "Sent.");
    assert_success(&events);

    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    let answer = upstream_answer(&bodies[1], "call_1");
    assert_service_result(&content_text(answer), "transfer_money");
    assert!(
        !bodies[1].to_string().contains(r#"{\"approved\":true}"#),
        "the echo reached the provider: {}",
        bodies[1]
    );
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn an_approval_may_edit_the_arguments_only_where_the_tool_allows_it() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, true), cancel_tool(&service)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;

    // An editable tool: the schema offers `editedArgs`, and the edited arguments are used.
    let (events, history) = interrupted_transfer(&app, &service).await;
    let interrupt = &interrupts(&events)[0];
    assert_eq!(
        interrupt["responseSchema"]["properties"]["editedArgs"]["type"], "object",
        "an editable tool offers editedArgs: {interrupt}"
    );
    let id = interrupt_id(&events, "call_1");
    let edited = json!({"amount": 100, "to": "carol"});
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Sent 100 to Carol."])));
    let events = app
        .run_events(
            "/",
            &resume_input(
                history.clone(),
                json!([resolved(
                    &id,
                    json!({"approved": true, "editedArgs": edited})
                )]),
            ),
        )
        .await;
    assert_well_formed(&events);
    assert!(of_type(&events, "TOOL_CALL_START").is_empty());
    assert_service_result(&result_for(&events, "call_1"), "transfer_money");
    assert_eq!(
        service.calls_of("transfer_money"),
        [edited],
        "the tool got the edited arguments"
    );
    assert_success(&events);

    edited_arguments_are_refused_for_a_tool_without_allow_edit(&app, &service).await;

    // Edited arguments that break the tool's parameters never reach the tool either (whether
    // the run is refused or the model is told the call failed).
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Could not send."])));
    let events = app
        .run_events(
            "/",
            &resume_input(
                history,
                json!([resolved(
                    &id,
                    json!({"approved": true, "editedArgs": {"amount": "lots"}})
                )]),
            ),
        )
        .await;
    assert_well_formed(&events);
    assert_eq!(
        service.calls_of("transfer_money").len(),
        1,
        "edited arguments failing the parameters must not run the tool: {:?}",
        types(&events)
    );
    assert_provider_saw_clean_histories(&app);
}

/// A tool without allow_edit: editedArgs is refused and nothing runs.
async fn edited_arguments_are_refused_for_a_tool_without_allow_edit(
    app: &TestApp,
    service: &ToolService,
) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_2", "cancel_subscription", r#"{"plan":"pro"}"#)],
        false,
    )));
    let question = user("Cancel my plan.");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);
    let cancel_id = interrupt_id(&events, "call_2");
    assert!(
        interrupts(&events)[0]["responseSchema"]["properties"]
            .get("editedArgs")
            .is_none(),
        "{:?}",
        interrupts(&events)
    );
    let upstream_before = app.upstream_bodies().len();
    let events = app
        .run_events(
            "/",
            &resume_input(
                client_history(&[question], &events),
                json!([resolved(
                    &cancel_id,
                    json!({"approved": true, "editedArgs": {"plan": "free"}})
                )]),
            ),
        )
        .await;
    assert_refused(&events, "invalid_resume_payload");
    assert!(service.calls_of("cancel_subscription").is_empty());
    assert_eq!(app.upstream_bodies().len(), upstream_before);
}

#[tokio::test]
async fn a_declined_or_cancelled_call_never_runs_and_the_model_is_told() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");

    for (what, answer) in [
        ("rejected", resolved(&id, json!({"approved": false}))),
        ("cancelled", cancelled(&id)),
    ] {
        app.fake
            .push(Reply::Sse(chunks::text_reply(&["OK, nothing was sent."])));
        let events = app
            .run_events("/", &resume_input(history.clone(), json!([answer])))
            .await;
        assert_well_formed(&events);
        assert!(
            of_type(&events, "TOOL_CALL_START").is_empty(),
            "{what}: {:?}",
            types(&events)
        );
        assert_eq!(result_for(&events, "call_1"), REJECTED, "{what}");
        assert_eq!(service.total(), 0, "{what}: the tool never runs");
        assert_eq!(the_text(&events), "OK, nothing was sent.", "{what}");
        assert_success(&events);
        let bodies = app.upstream_bodies();
        let answer = upstream_answer(bodies.last().unwrap(), "call_1");
        assert_eq!(
            content_text(answer),
            REJECTED,
            "{what}: the model is told the user declined"
        );
    }
    assert_eq!(app.upstream_bodies().len(), 3);
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn two_approvals_in_one_batch_give_two_interrupts_and_need_both_answers() {
    let service = ToolService::start().await;
    let tools = vec![
        transfer_tool(&service, false),
        cancel_tool(&service),
        http_tool(
            &service,
            "check_balance",
            json!({"type": "object", "properties": {"account": {"type": "string"}}}),
            ApprovalPolicySetting::Fixed(FixedApproval::Never),
            false,
        ),
    ];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_t", "transfer_money", TRANSFER_ARGS),
            ("call_s", "cancel_subscription", r#"{"plan":"pro"}"#),
            ("call_b", "check_balance", r#"{"account":"main"}"#),
        ],
        true,
    )));
    let question = user("Pay Bob, cancel my plan, and show my balance.");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);

    // Run 1: all three streamed; the free tool ran; two interrupts.
    assert_eq!(of_type(&events, "TOOL_CALL_START").len(), 3);
    let all = interrupts(&events);
    assert_eq!(all.len(), 2, "{all:?}");
    let id_t = interrupt_id(&events, "call_t");
    let id_s = interrupt_id(&events, "call_s");
    assert_ne!(id_t, id_s);
    let run1_results = results(&events);
    assert_eq!(run1_results.len(), 1, "{run1_results:?}");
    assert_eq!(run1_results[0].0, "call_b");
    assert_service_result(&run1_results[0].1, "check_balance");
    assert_eq!(
        service.calls_of("check_balance"),
        [json!({"account": "main"})]
    );
    assert!(service.calls_of("transfer_money").is_empty());
    assert!(service.calls_of("cancel_subscription").is_empty());
    assert_eq!(app.upstream_bodies().len(), 1);
    let history = client_history(&[question], &events);

    // Answering only one of them is refused.
    let events = app
        .run_events(
            "/",
            &resume_input(
                history.clone(),
                json!([resolved(&id_t, json!({"approved": true}))]),
            ),
        )
        .await;
    assert_refused(&events, "interrupt_unanswered");
    assert_eq!(service.total(), 1, "nothing more ran");
    assert_eq!(app.upstream_bodies().len(), 1);

    // Answering both: one approved, one rejected.
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "Paid Bob; your plan stays.",
    ])));
    let events = app
        .run_events(
            "/",
            &resume_input(
                history,
                json!([
                    resolved(&id_t, json!({"approved": true})),
                    resolved(&id_s, json!({"approved": false})),
                ]),
            ),
        )
        .await;
    assert_paid_and_kept_the_plan(&app, &service, &events);
}

/// The run that answered both approvals: the transfer ran once, the cancellation never, the
/// free call was not answered again, and the model heard all three results.
fn assert_paid_and_kept_the_plan(app: &TestApp, service: &ToolService, events: &[Value]) {
    assert_well_formed(events);
    assert!(of_type(events, "TOOL_CALL_START").is_empty());
    assert_service_result(&result_for(events, "call_t"), "transfer_money");
    assert_eq!(result_for(events, "call_s"), REJECTED);
    assert!(
        !results(events).iter().any(|(id, _)| id == "call_b"),
        "the free call was answered in run 1: {:?}",
        results(events)
    );
    assert_eq!(service.calls_of("transfer_money").len(), 1);
    assert!(service.calls_of("cancel_subscription").is_empty());
    assert_eq!(
        service.calls_of("check_balance").len(),
        1,
        "the free tool does not run again"
    );
    assert_eq!(the_text(events), "Paid Bob; your plan stays.");
    assert_success(events);

    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    assert_service_result(
        &content_text(upstream_answer(&bodies[1], "call_t")),
        "transfer_money",
    );
    assert_eq!(
        content_text(upstream_answer(&bodies[1], "call_s")),
        REJECTED
    );
    assert_service_result(
        &content_text(upstream_answer(&bodies[1], "call_b")),
        "check_balance",
    );
    assert_provider_saw_clean_histories(app);
}

/// Changes one character of an id's tag (the id ends with it when it carries no restore data),
/// keeping the spelling canonical.
fn forge(id: &str) -> String {
    let at = id.len() - 5;
    let swapped = if &id[at..at + 1] == "A" { "B" } else { "A" };
    format!("{}{swapped}{}", &id[..at], &id[at + 1..])
}

#[tokio::test]
async fn unknown_forged_swapped_foreign_and_duplicated_answers_are_refused() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let approve = |interrupt: &str| resolved(interrupt, json!({"approved": true}));

    let mut swapped_history = history.clone();
    let assistant = swapped_history
        .iter_mut()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assistant["toolCalls"][0]["function"]["arguments"] =
        json!(r#"{"amount":99999,"to":"mallory"}"#);
    let mut other_thread = resume_input(history.clone(), json!([approve(&id)]));
    other_thread["threadId"] = json!("t-other");

    let cases = [
        (
            "unknown id",
            resume_input(history.clone(), json!([approve("apr_0_deadbeef")])),
            "interrupt_unknown",
        ),
        (
            "forged id",
            resume_input(history.clone(), json!([approve(&forge(&id))])),
            "interrupt_unknown",
        ),
        (
            "swapped arguments",
            resume_input(swapped_history, json!([approve(&id)])),
            "interrupt_unknown",
        ),
        ("another thread", other_thread, "interrupt_unknown"),
        (
            "the same interrupt twice",
            resume_input(history.clone(), json!([approve(&id), approve(&id)])),
            "interrupt_answered_twice",
        ),
    ];
    for (what, body, code) in cases {
        let events = app.run_events("/", &body).await;
        assert_well_formed(&events);
        let error = last(&events);
        assert_eq!(error["type"], "RUN_ERROR", "{what}: {:?}", types(&events));
        assert_eq!(error["code"], code, "{what}: {error}");
        assert_refused(&events, code);
        assert_eq!(service.total(), 0, "{what}: the tool must not run");
        assert_eq!(
            app.upstream_bodies().len(),
            1,
            "{what}: the model is not called"
        );
    }

    // The genuine answer still works after all that.
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let events = app
        .run_events("/", &resume_input(history, json!([approve(&id)])))
        .await;
    assert_well_formed(&events);
    assert_service_result(&result_for(&events, "call_1"), "transfer_money");
    assert_eq!(service.total(), 1);
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn an_expired_interrupt_is_refused() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        let name = settings.default_agent.clone();
        settings.agents.get_mut(&name).unwrap().approval.ttl_secs = 1;
    })
    .await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let interrupt = &interrupts(&events)[0];
    assert!(
        interrupt["expiresAt"].is_string(),
        "an expiring interrupt says when: {interrupt}"
    );
    let id = interrupt_id(&events, "call_1");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let events = app
        .run_events(
            "/",
            &resume_input(history, json!([resolved(&id, json!({"approved": true}))])),
        )
        .await;
    assert_refused(&events, "interrupt_expired");
    assert_eq!(service.total(), 0);
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn a_pending_approval_must_be_answered_unless_the_user_moved_on() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (_, history) = interrupted_transfer(&app, &service).await;

    // The last turn waits for approval and the input carries no resume.
    let mut body = input(history.clone());
    body["runId"] = json!("r2");
    let events = app.run_events("/", &body).await;
    assert_refused(&events, "interrupt_unanswered");
    assert_eq!(service.total(), 0);
    assert_eq!(app.upstream_bodies().len(), 1);

    // The user typed instead of answering: the run goes on, the call never runs.
    let mut moved_on = history;
    moved_on.push(user("Never mind. What can you do?"));
    let mut body = input(moved_on);
    body["runId"] = json!("r3");
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["I can send money."])));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_success(&events);
    assert_eq!(the_text(&events), "I can send money.");
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(service.total(), 0, "a call nobody approved never runs");
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        content_text(upstream_answer(&bodies[1], "call_1")),
        SYNTHETIC_MISSING_RESULT,
        "the provider sees a synthetic result for the abandoned call"
    );
    assert_provider_saw_clean_histories(&app);
}

// ---- Restart --------------------------------------------------------------------------------

/// A secret of 40 characters.
const APPROVAL_KEY: &str = "approval-key-for-the-restart-test-123456";

/// A running app that the test can stop.
#[derive(Debug)]
struct StoppableApp {
    app: TestApp,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Like `spawn_app`, but the server stops when told.
async fn spawn_stoppable(configure: impl FnOnce(&mut Settings)) -> StoppableApp {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (app, task) = spawn_app_until(configure, async move {
        let _ = stopped.await;
    })
    .await;
    StoppableApp { app, stop, task }
}

impl StoppableApp {
    /// Stops the server and waits until it no longer accepts connections.
    async fn stop(self) {
        let address = self.app.address.clone();
        drop(self.app);
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the app stops")
            .expect("the app task")
            .expect("the app ends cleanly");
        let refused = reqwest::Client::new()
            .post(format!("{address}/"))
            .body("{}")
            .send()
            .await;
        assert!(refused.is_err(), "the stopped app still answers");
    }
}

#[tokio::test]
async fn an_approval_survives_a_restart_with_the_same_key_only() {
    assert_eq!(APPROVAL_KEY.len(), 40);
    let service = ToolService::start().await;
    let configure = |key: &'static str| {
        let tools = vec![transfer_tool(&service, false)];
        move |settings: &mut Settings| {
            with_tools(settings, tools);
            settings.security.approval_key = key.into();
        }
    };

    let a = spawn_stoppable(configure(APPROVAL_KEY)).await;
    let (events, history) = interrupted_transfer(&a.app, &service).await;
    let id = interrupt_id(&events, "call_1");
    assert_provider_saw_clean_histories(&a.app);
    a.stop().await;
    let resume = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));

    // Another process with a different key cannot vouch for the id.
    let c = spawn_stoppable(configure("a-different-key-of-forty-characters-0000")).await;
    let events = c.app.run_events("/", &resume).await;
    assert_refused(&events, "interrupt_unknown");
    assert_eq!(service.total(), 0);
    assert!(c.app.upstream_bodies().is_empty());
    c.stop().await;

    // A new process with the same key takes the approval.
    let b = spawn_stoppable(configure(APPROVAL_KEY)).await;
    b.app
        .fake
        .push(Reply::Sse(chunks::text_reply(&["Sent after the restart."])));
    let events = b.app.run_events("/", &resume).await;
    assert_well_formed(&events);
    assert!(of_type(&events, "TOOL_CALL_START").is_empty());
    assert_service_result(&result_for(&events, "call_1"), "transfer_money");
    assert_eq!(
        service.calls_of("transfer_money"),
        [serde_json::from_str::<Value>(TRANSFER_ARGS).unwrap()]
    );
    assert_eq!(the_text(&events), "Sent after the restart.");
    assert_success(&events);
    assert_provider_saw_clean_histories(&b.app);
    b.stop().await;
}

// ---- Conditional policy ---------------------------------------------------------------------

#[tokio::test]
async fn a_conditional_policy_asks_only_when_the_arguments_match() {
    let service = ToolService::start().await;
    let mut tool = http_tool(
        &service,
        "transfer_money",
        transfer_parameters(),
        ApprovalPolicySetting::When {
            when: json!({"properties": {"amount": {"exclusiveMinimum": 100}}, "required": ["amount"]}),
        },
        false,
    );
    tool.approval_message = Some("Transfer {arguments}?".into());
    let app = spawn_app(|settings| with_tools(settings, vec![tool])).await;

    // 50: runs at once.
    app.fake.push_call_then_text(
        (
            "call_small",
            "transfer_money",
            r#"{"amount":50,"to":"bob"}"#,
        ),
        "Sent 50.",
    );
    let events = app
        .run_events("/", &input(vec![user("Send 50 to Bob.")]))
        .await;
    assert_well_formed(&events);
    assert_service_result(&result_for(&events, "call_small"), "transfer_money");
    assert_eq!(
        service.calls_of("transfer_money"),
        [json!({"amount": 50, "to": "bob"})]
    );
    assert_eq!(the_text(&events), "Sent 50.");
    assert_success(&events);

    // 500: interrupts, with the configured question.
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_big", "transfer_money", r#"{"to":"bob","amount":500}"#)],
        false,
    )));
    let mut body = input(vec![user("Send 500 to Bob.")]);
    body["threadId"] = json!("t2");
    body["runId"] = json!("r2");
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    let all = interrupts(&events);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["toolCallId"], "call_big");
    assert_eq!(
        all[0]["message"], r#"Transfer {"amount":500,"to":"bob"}?"#,
        "{}",
        all[0]
    );
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(service.total(), 1, "the big transfer waits");
    assert_provider_saw_clean_histories(&app);
}

// ---- 0.x clients: the request_approval client tool ------------------------------------------

#[tokio::test]
async fn a_0x_client_approves_through_a_request_approval_tool_call() {
    let service = ToolService::start().await;
    // Run 2 is answered twice on one history, accepted then declined. A thread store would
    // keep the first answer's result (tests/api/threads.rs); this test is about the answers.
    let app = spawn_transfer_app_without_store(&service).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "transfer_money", TRANSFER_ARGS)],
        false,
    )));
    let question = user("Send 250 to Bob.");
    let events = app.run_events("/", &input_0x(vec![question.clone()])).await;
    // Run 1: the call, then the approval request as a client tool call.
    let approval_id = assert_asks_through_request_approval(&events);
    assert_eq!(service.total(), 0);

    let history = client_history(&[question], &events);
    let assistant = history.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        assistant["toolCalls"].as_array().map(Vec::len),
        Some(2),
        "the client files both calls under one message: {assistant}"
    );

    // Run 2: CopilotKit answers `{"accepted": true}`.
    let mut accepted = history.clone();
    accepted.push(tool_result(&approval_id, r#"{"accepted":true}"#));
    let mut body = input_0x(accepted);
    body["runId"] = json!("r2");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let events = app.run_events("/", &body).await;
    assert_accepted_call_ran(&app, &service, &events, &approval_id);

    // Run 2 again, declined with `{"approved": false}`.
    let mut declined = history;
    declined.push(tool_result(&approval_id, r#"{"approved":false}"#));
    let mut body = input_0x(declined);
    body["runId"] = json!("r3");
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Not sent."])));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert!(of_type(&events, "TOOL_CALL_START").is_empty());
    assert_eq!(result_for(&events, "call_1"), REJECTED);
    assert_eq!(service.total(), 1, "a declined call does not run");
    let bodies = app.upstream_bodies();
    assert_eq!(
        content_text(upstream_answer(&bodies[2], "call_1")),
        REJECTED
    );
    let raw = bodies[2].to_string();
    assert!(
        !raw.contains("request_approval") && !raw.contains(&approval_id),
        "{raw}"
    );
    assert_provider_saw_clean_histories(&app);
}

/// A 0.x run that stops for approval: `call_1`, then a `request_approval` client call that
/// carries it, and no outcome. Returns the approval's id.
fn assert_asks_through_request_approval(events: &[Value]) -> String {
    assert_well_formed(events);
    assert_0x_compatible(events);
    let starts = of_type(events, "TOOL_CALL_START");
    assert_eq!(starts.len(), 2, "{:?}", types(events));
    assert_eq!(starts[0]["toolCallId"], "call_1");
    assert_eq!(starts[0]["toolCallName"], "transfer_money");
    assert_eq!(starts[1]["toolCallName"], "request_approval");
    let approval_id = starts[1]["toolCallId"].as_str().unwrap().to_string();
    assert!(approval_id.starts_with("apr_"), "{approval_id}");
    let position = |ty: &str, id: &str| {
        events
            .iter()
            .position(|e| e["type"] == ty && e["toolCallId"] == id)
            .unwrap_or_else(|| panic!("{ty} {id}: {:?}", types(events)))
    };
    assert!(position("TOOL_CALL_END", "call_1") < position("TOOL_CALL_START", &approval_id));
    assert!(position("TOOL_CALL_END", &approval_id) > position("TOOL_CALL_START", &approval_id));
    let request: Value = serde_json::from_str(&tool_args(events)[&approval_id])
        .expect("the approval request's arguments are JSON");
    assert_eq!(request["toolCallId"], "call_1", "{request}");
    assert_eq!(request["toolName"], "transfer_money", "{request}");
    assert_eq!(
        request["arguments"],
        serde_json::from_str::<Value>(TRANSFER_ARGS).unwrap(),
        "{request}"
    );
    assert!(
        request["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{request}"
    );
    assert_eq!(request["allowEdit"], false, "{request}");
    let finished = last(events);
    assert_eq!(finished["type"], "RUN_FINISHED");
    assert!(
        finished.get("outcome").is_none(),
        "0.x clients get no outcome: {finished}"
    );
    assert!(of_type(events, "TOOL_CALL_RESULT").is_empty());
    approval_id
}

/// The run after the approval was accepted: `call_1` ran once, its result reached the model,
/// and nothing of the approval protocol did.
fn assert_accepted_call_ran(
    app: &TestApp,
    service: &ToolService,
    events: &[Value],
    approval_id: &str,
) {
    assert_well_formed(events);
    assert_0x_compatible(events);
    assert!(of_type(events, "TOOL_CALL_START").is_empty());
    let run2_results = results(events);
    assert_eq!(run2_results.len(), 1, "{run2_results:?}");
    assert_eq!(run2_results[0].0, "call_1");
    assert_service_result(&run2_results[0].1, "transfer_money");
    assert_eq!(
        service.calls_of("transfer_money"),
        [serde_json::from_str::<Value>(TRANSFER_ARGS).unwrap()]
    );
    assert_eq!(the_text(events), "Sent.");
    assert!(last(events).get("outcome").is_none());
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    assert_service_result(
        &content_text(upstream_answer(&bodies[1], "call_1")),
        "transfer_money",
    );
    let raw = bodies[1].to_string();
    assert!(
        !raw.contains("request_approval") && !raw.contains(approval_id),
        "the approval protocol reached the provider: {raw}"
    );
}

#[tokio::test]
async fn a_client_tool_named_like_the_approval_tool_is_not_offered_to_the_model() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    for mut body in [input_0x(vec![user("Hello")]), input(vec![user("Hello")])] {
        body["tools"] = json!([
            client_tool("request_approval"),
            client_tool("change_background")
        ]);
        app.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
        let events = app.run_events("/", &body).await;
        assert_well_formed(&events);
        assert_eq!(last(&events)["type"], "RUN_FINISHED");
        let bodies = app.upstream_bodies();
        let names = tool_names(bodies.last().unwrap());
        assert!(names.contains(&"change_background"), "{names:?}");
        assert!(names.contains(&"transfer_money"), "{names:?}");
        assert!(!names.contains(&"request_approval"), "{names:?}");
    }
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn replaying_a_carried_out_resume_changes_nothing() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let resume = json!([resolved(&id, json!({"approved": true}))]);

    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let approved = app
        .run_events("/", &resume_input(history.clone(), resume.clone()))
        .await;
    assert_well_formed(&approved);
    assert_eq!(service.calls_of("transfer_money").len(), 1);

    // The client kept the result, then sends the same resume again (a retry, a double click):
    // the call already has its result, so the tool does not run a second time.
    let replay_history = client_history(&history, &approved);
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Already sent."])));
    let replayed = app
        .run_events("/", &resume_input(replay_history, resume))
        .await;
    assert_well_formed(&replayed);
    assert_success(&replayed);
    assert!(
        of_type(&replayed, "TOOL_CALL_RESULT").is_empty(),
        "{:?}",
        types(&replayed)
    );
    assert_eq!(
        service.calls_of("transfer_money").len(),
        1,
        "a replayed resume must not run the tool again"
    );
    assert_provider_saw_clean_histories(&app);
}

mod exactly_once;
mod ids;
mod ledger;
