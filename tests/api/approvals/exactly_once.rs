//! Exactly once: every approval path over the runs that follow it. A thread is asked, answered,
//! then continued with two more messages and a replay of the answer, with the history a real
//! client keeps (the approval call, its answer and the tool's result stay in `messages`).
//! Executions are counted at the tool service, never in the client's messages: CopilotKit folds a
//! repeated result for a call it knows into the message it already has.

use std::time::Duration;

use agui_host::settings::ThreadStoreKind;
use serde_json::{json, Value};

use super::*;

/// The two client generations and how each answers an approval.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Client {
    /// 1.0: the answer is a `resume` entry.
    V1,
    /// 1.0 as CopilotKit's `useInterrupt` answers: the `resume` entry, and the answer appended
    /// as a tool message on the call, which the client fills with the call's result once it
    /// arrives (so it keeps one message per call).
    V1Echo,
    /// 0.0.59 (CopilotKit): the answer is a tool message for the `request_approval` call.
    V0,
}

impl Client {
    fn body(self, messages: Vec<Value>, run: usize) -> Value {
        let mut body = match self {
            Client::V1 | Client::V1Echo => input(messages),
            Client::V0 => input_0x(messages),
        };
        body["runId"] = json!(format!("r{run}"));
        body
    }

    /// The id that names the approval: the interrupt id (1.0) or the approval call's id (0.x).
    fn approval_id(self, events: &[Value]) -> String {
        match self {
            Client::V1 | Client::V1Echo => interrupt_id(events, "call_1"),
            Client::V0 => approval_call_id(events),
        }
    }

    /// The answer run's body: the client's history plus the answer, the way each client sends
    /// it. Returns the body and the history the client keeps (with the 0.x answer in it).
    fn answer(
        self,
        history: &[Value],
        id: &str,
        payload: Value,
        run: usize,
    ) -> (Value, Vec<Value>) {
        match self {
            Client::V1 | Client::V1Echo => {
                let mut sent = history.to_vec();
                if self == Client::V1Echo {
                    sent.push(tool_result("call_1", &payload.to_string()));
                }
                let mut body = self.body(sent, run);
                body["resume"] = json!([resolved(id, payload)]);
                (body, history.to_vec())
            }
            Client::V0 => {
                let mut kept = history.to_vec();
                kept.push(tool_result(id, &payload.to_string()));
                (self.body(kept.clone(), run), kept)
            }
        }
    }
}

/// How the person answers in run 2, and what the tool service must have received in the end.
struct Path {
    payload: Value,
    allow_edit: bool,
    /// The arguments the one execution used; `None`: the tool never runs.
    executed_with: Option<Value>,
}

fn approve() -> Path {
    Path {
        payload: json!({"approved": true}),
        allow_edit: false,
        executed_with: Some(serde_json::from_str(TRANSFER_ARGS).unwrap()),
    }
}

fn reject() -> Path {
    Path {
        payload: json!({"approved": false}),
        allow_edit: false,
        executed_with: None,
    }
}

fn edit() -> Path {
    let edited = json!({"amount": 200, "to": "bob"});
    Path {
        payload: json!({"approved": true, "editedArgs": edited}),
        allow_edit: true,
        executed_with: Some(edited),
    }
}

#[track_caller]
fn assert_executions(service: &ToolService, path: &Path, after: &str) {
    let calls = service.calls_of("transfer_money");
    assert_eq!(
        calls,
        path.executed_with.iter().cloned().collect::<Vec<_>>(),
        "executions at the tool after {after}"
    );
    // The execution names its call, so a service can dedupe a lost-response retry.
    for [key, call_id] in service.call_ids_of("transfer_money") {
        assert_is_idempotency_key(&key);
        assert_eq!(call_id, "call_1");
    }
}

/// A later run: a plain reply, no tool call, no result, nothing about the old approval.
#[track_caller]
fn assert_plain_continuation(events: &[Value], client: Client, reply: &str) {
    assert_well_formed(events);
    if client == Client::V0 {
        assert_0x_compatible(events);
    }
    let finished = last(events);
    assert_eq!(
        finished["type"],
        "RUN_FINISHED",
        "{:?}: {finished}",
        types(events)
    );
    assert!(
        of_type(events, "TOOL_CALL_RESULT").is_empty(),
        "a later run repeats no tool result: {:?}",
        types(events)
    );
    assert!(of_type(events, "TOOL_CALL_START").is_empty());
    assert_eq!(the_text(events), reply);
}

/// Ask, answer, two more messages, a replayed answer: the tool runs at most once, in run 2.
/// With `expire_after_answer`, the approval's TTL passes before the third run.
async fn four_runs(client: Client, path: Path, expire_after_answer: bool) {
    let service = ToolService::start().await;
    let store = ThreadStoreKind::default();
    four_runs_against(service, store, client, path, expire_after_answer).await;
}

/// `four_runs` with the tool backed by `service` and the thread kept in `store` (with `Off`,
/// each run knows only the history the client sends).
async fn four_runs_against(
    service: ToolService,
    store: ThreadStoreKind,
    client: Client,
    path: Path,
    expire_after_answer: bool,
) {
    let tools = vec![transfer_tool(&service, path.allow_edit)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.threads.store = store;
        if expire_after_answer {
            let agent = settings.agents.get_mut("assistant").unwrap();
            agent.approval.ttl_secs = 3;
        }
    })
    .await;

    // Run 1: the model asks for the transfer.
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "transfer_money", TRANSFER_ARGS)],
        false,
    )));
    let question = user("Send 250 to Bob.");
    let events = app
        .run_events("/", &client.body(vec![question.clone()], 1))
        .await;
    assert_well_formed(&events);
    let id = client.approval_id(&events);
    let history = client_history(&[question], &events);
    assert_eq!(service.total(), 0, "nothing runs before the answer");

    // Run 2: the answer.
    let (body, kept) = client.answer(&history, &id, path.payload.clone(), 2);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    let answered = app.run_events("/", &body).await;
    assert_well_formed(&answered);
    assert_eq!(
        last(&answered)["type"],
        "RUN_FINISHED",
        "{:?}",
        types(&answered)
    );
    let answered_results = results(&answered);
    assert_eq!(answered_results.len(), 1, "{:?}", types(&answered));
    assert_executions(&service, &path, "the answer");
    let mut history = client_history(&kept, &answered);

    if expire_after_answer {
        tokio::time::sleep(Duration::from_millis(4100)).await;
    }

    // Runs 3 and 4: the conversation goes on.
    for (run, (message, reply)) in [
        ("thanks, now just say hello", "Hello."),
        ("and goodbye", "Goodbye."),
    ]
    .into_iter()
    .enumerate()
    {
        history.push(user(message));
        app.fake.push(Reply::Sse(chunks::text_reply(&[reply])));
        let events = app
            .run_events("/", &client.body(history.clone(), run + 3))
            .await;
        assert_plain_continuation(&events, client, reply);
        assert_executions(&service, &path, &format!("run {}", run + 3));
        history = client_history(&history, &events);
    }

    // Run 5: the answer sent again with the history the client kept (a retry, a double click,
    // a hostile client).
    let (replay, _) = client.answer(&history, &id, path.payload.clone(), 5);
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Nothing to do."])));
    let events = app.run_events("/", &replay).await;
    assert_plain_continuation(&events, client, "Nothing to do.");
    assert_executions(&service, &path, "the replayed answer");
    assert_provider_saw_clean_histories(&app);
    // Runs 3 to 5 (upstream requests 2 to 4) show the model the call's one result, as run 2
    // produced it: the kept result is history, never taken for a client's echo and removed.
    let (_, result) = &answered_results[0];
    for body in &app.upstream_bodies()[2..] {
        assert_eq!(
            &content_text(upstream_answer(body, "call_1")),
            result,
            "{body}"
        );
    }
}

#[tokio::test]
async fn an_approved_call_runs_once_over_later_runs_for_a_1_0_client() {
    four_runs(Client::V1, approve(), false).await;
}

#[tokio::test]
async fn an_approved_call_runs_once_over_later_runs_for_a_0x_client() {
    four_runs(Client::V0, approve(), false).await;
}

#[tokio::test]
async fn a_rejected_call_never_runs_over_later_runs_for_either_client() {
    four_runs(Client::V1, reject(), false).await;
    four_runs(Client::V0, reject(), false).await;
}

#[tokio::test]
async fn an_edited_call_runs_once_with_the_edit_for_either_client() {
    four_runs(Client::V1, edit(), false).await;
    four_runs(Client::V0, edit(), false).await;
}

#[tokio::test]
async fn a_conversation_goes_on_after_the_approvals_ttl_for_a_0x_client() {
    four_runs(Client::V0, approve(), true).await;
}

#[tokio::test]
async fn a_conversation_goes_on_after_the_approvals_ttl_for_a_1_0_client() {
    four_runs(Client::V1, approve(), true).await;
}

/// A tool whose own result looks like an approval answer (`{"approved": true}`) still has its
/// result: the kept result is not taken for the client's echo of the answer, so nothing runs
/// again on later messages or on the replayed answer, with or without a thread store.
async fn a_result_shaped_like_an_answer_runs_once(client: Client) {
    for store in [ThreadStoreKind::Off, ThreadStoreKind::Memory] {
        let service = ToolService::answering(json!({"approved": true})).await;
        four_runs_against(service, store, client, approve(), false).await;
    }
}

#[tokio::test]
async fn a_call_whose_result_looks_like_an_answer_runs_once_for_a_0x_client() {
    a_result_shaped_like_an_answer_runs_once(Client::V0).await;
}

#[tokio::test]
async fn a_call_whose_result_looks_like_an_answer_runs_once_for_a_1_0_client() {
    a_result_shaped_like_an_answer_runs_once(Client::V1).await;
}

/// The same for a 1.0 client that echoes its answer on the call, on the first answer and on the
/// replay: the echo is the call's only tool message, the replayed one a second message.
#[tokio::test]
async fn a_call_whose_result_looks_like_an_answer_runs_once_for_a_1_0_client_that_echoes() {
    a_result_shaped_like_an_answer_runs_once(Client::V1Echo).await;
}

/// A response lost on the way (the client never got the result) cannot be told from a first
/// answer without stored state (`threads.store = "off"`; with a store the recorded result is
/// put back and nothing runs, see tests/api/threads.rs): the call runs again, with the same
/// `Idempotency-Key`, so a service that dedupes by it performs the transfer once.
#[tokio::test]
async fn an_answer_resent_after_a_lost_response_carries_the_same_idempotency_key() {
    let service = ToolService::start().await;
    let app = spawn_transfer_app_without_store(&service).await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let body = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));
    for _ in 0..2 {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
        assert_success(&app.run_events("/", &body).await);
    }
    let ids = service.call_ids_of("transfer_money");
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], ids[1]);
    assert_is_idempotency_key(&ids[0][0]);
    assert_eq!(ids[0][1], "call_1");
}

/// An `Idempotency-Key` as the `http` tool sends it: a digest (of the scope, the agent, the
/// thread id and the call id), 64 hex digits.
#[track_caller]
pub(super) fn assert_is_idempotency_key(key: &str) {
    assert!(
        key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}"
    );
}
