//! MCP elicitation carried to the user as AG-UI interrupts.
//!
//! The in-repo server (`examples/mcp_test_server.rs`) asks the 2026-07-28 way: `tools/call`
//! answers `input_required` with its questions and an opaque `requestState`. The contract
//! (docs/mcp.md, "When a server asks the user"): each question becomes an `input_required`
//! interrupt (a `request_input` call for 0.x clients) whose signed id carries the question and
//! the state; the answers retry the call, whose result is streamed in the resumed run; decline
//! and cancel reach the server as such; an invalid answer, a forged or edited state, or an
//! answer missing a question is refused before anything is sent to the server; the retry
//! happens once over every later run, on any replica sharing the keys.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::approvals::{
    assert_refused, assert_success, cancelled, client_history, interrupt_id, interrupts, resolved,
    resume_input,
};
use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::mcp::{
    everything, result_of, spawn_mcp_app, test_server, test_server_over_http, with_servers, McpApp,
};
use crate::redis_server::RedisServer;
use crate::verify::{assert_0x_compatible, assert_well_formed};

const BOOK_ARGS: &str = r#"{"restaurant": "Chez Rust"}"#;
const SHARED_KEY: &str = "an-approval-key-both-replicas-share-of-40-chars";

/// How many tables the test server booked (it counts per process: one app, one server).
async fn bookings(mcp: &McpApp, call_id: &str) -> String {
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[(call_id, "test__bookings", "{}")],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Counted."])));
    let mut body = input(vec![user("How many bookings?")]);
    body["threadId"] = json!(format!("count-{call_id}"));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    result_of(&events, call_id)
}

/// Run 1: the model calls `test__book_table`, which asks how many people. Returns the run's
/// events and the client's history after it.
async fn asked_to_book(
    app: &TestApp,
    body: impl Fn(Vec<Value>) -> Value,
) -> (Vec<Value>, Vec<Value>) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "test__book_table", BOOK_ARGS)],
        false,
    )));
    let question = user("Book a table at Chez Rust.");
    let events = app.run_events("/", &body(vec![question.clone()])).await;
    assert_well_formed(&events);
    let history = client_history(&[question], &events);
    (events, history)
}

#[track_caller]
fn assert_asks_for_the_party(events: &[Value]) -> String {
    assert!(
        of_type(events, "TOOL_CALL_RESULT").is_empty(),
        "the call waits for the user: {:?}",
        types(events)
    );
    let all = interrupts(events);
    assert_eq!(all.len(), 1, "{all:?}");
    let interrupt = &all[0];
    assert_eq!(interrupt["reason"], "input_required", "{interrupt}");
    assert_eq!(interrupt["toolCallId"], "call_1");
    assert_eq!(
        interrupt["message"],
        "How many people at Chez Rust, and under what name?"
    );
    assert_eq!(interrupt["responseSchema"]["required"], json!(["size"]));
    assert_eq!(
        interrupt["responseSchema"]["properties"]["size"]["type"],
        "integer"
    );
    assert_eq!(
        interrupt["metadata"]["agui-host"],
        json!({"source": "mcp", "server": "test", "tool": "test__book_table"})
    );
    assert!(interrupt["expiresAt"].is_string(), "{interrupt}");
    interrupt_id(events, "call_1")
}

#[tokio::test]
async fn a_servers_question_is_an_interrupt_and_the_answer_retries_the_call_once() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    let (run1, history) = asked_to_book(app, input).await;
    let id = assert_asks_for_the_party(&run1);

    // An answer that fails the question's schema is refused; nothing reaches the server.
    let mut bad = resume_input(history.clone(), json!([resolved(&id, json!({"size": 0}))]));
    bad["runId"] = json!("bad");
    let refused = app.run_events("/", &bad).await;
    assert_refused(&refused, "invalid_resume_payload");
    assert!(
        last(&refused)["message"]
            .as_str()
            .unwrap()
            .contains("/size"),
        "{:?}",
        last(&refused)
    );

    // The answer: the call is retried with it and the state, and its result streams.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Your table is booked."])));
    let resume = json!([resolved(&id, json!({"size": 4, "name": "Ada"}))]);
    let run2 = app
        .run_events("/", &resume_input(history.clone(), resume.clone()))
        .await;
    assert_well_formed(&run2);
    assert_success(&run2);
    assert!(
        of_type(&run2, "TOOL_CALL_START").is_empty(),
        "{:?}",
        types(&run2)
    );
    assert_eq!(
        result_of(&run2, "call_1"),
        "Booked a table for 4 at Chez Rust"
    );
    assert_eq!(
        crate::mcp::tool_message(app, 1, "call_1"),
        "Booked a table for 4 at Chez Rust"
    );

    // Two more runs, then the same answer again on the history the client kept: no retry.
    let mut kept = client_history(&history, &run2);
    for (n, text) in ["Thanks.", "What time?"].into_iter().enumerate() {
        kept.push(user(text));
        app.fake.push(Reply::Sse(chunks::text_reply(&["Noted."])));
        let mut body = input(kept.clone());
        body["runId"] = json!(format!("later{n}"));
        let events = app.run_events("/", &body).await;
        assert_success(&events);
        kept = client_history(&kept, &events);
    }
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Still booked."])));
    let mut replay = resume_input(kept, resume.clone());
    replay["runId"] = json!("replay");
    let events = app.run_events("/", &replay).await;
    assert_well_formed(&events);
    assert!(
        of_type(&events, "TOOL_CALL_RESULT").is_empty(),
        "{:?}",
        types(&events)
    );
    // And on the history from before the answer (a lost response): the ledger knows.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Still booked."])));
    let mut lost = resume_input(history, resume);
    lost["runId"] = json!("lost");
    let events = app.run_events("/", &lost).await;
    assert_well_formed(&events);
    assert_eq!(bookings(&mcp, "count_1").await, "1", "booked exactly once");
    mcp.shut_down().await;
}

#[tokio::test]
async fn decline_and_cancel_reach_the_server() {
    let mcp = spawn_mcp_app(|s| {
        with_servers(s, vec![test_server()]);
        s.threads.store = agui_host::settings::ThreadStoreKind::Off;
    })
    .await;
    let app = &mcp.app;
    let (run1, history) = asked_to_book(app, input).await;
    let id = assert_asks_for_the_party(&run1);
    for (n, (answer, said)) in [
        (
            resolved(&id, json!({"action": "decline"})),
            "The user declined to give the party; nothing was booked",
        ),
        (
            cancelled(&id),
            "The user cancelled the booking; nothing was booked",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        let mut body = resume_input(history.clone(), json!([answer]));
        body["runId"] = json!(format!("r{n}"));
        let events = app.run_events("/", &body).await;
        assert_success(&events);
        assert_eq!(result_of(&events, "call_1"), said);
    }
    assert_eq!(bookings(&mcp, "count_1").await, "0");
    mcp.shut_down().await;
}

/// An interrupt id with the state it carries replaced by `state`, re-encoded: the tag no
/// longer covers what the id says.
fn with_state(id: &str, state: &str) -> String {
    let bytes = URL_SAFE_NO_PAD
        .decode(id.strip_prefix("apr_").unwrap())
        .unwrap();
    let header = 1 + 4 + 8 + 16;
    let mut carried: Value = serde_json::from_slice(&bytes[header..]).unwrap();
    assert_eq!(carried["_"]["state"], "book:Chez Rust", "{carried}");
    carried["_"]["state"] = json!(state);
    let mut forged = bytes[..header].to_vec();
    forged.extend_from_slice(carried.to_string().as_bytes());
    format!("apr_{}", URL_SAFE_NO_PAD.encode(forged))
}

#[tokio::test]
async fn a_forged_or_edited_request_state_is_refused() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    let (run1, history) = asked_to_book(app, input).await;
    let id = assert_asks_for_the_party(&run1);
    for (n, forged) in [
        with_state(&id, "book:The Ritz"),
        with_state(&id, "book:Chez Rust "),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = resume_input(
            history.clone(),
            json!([resolved(&forged, json!({"size": 2}))]),
        );
        body["runId"] = json!(format!("forged{n}"));
        assert_refused(&app.run_events("/", &body).await, "interrupt_unknown");
    }
    assert_eq!(
        bookings(&mcp, "count_1").await,
        "0",
        "nothing reached the server"
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn two_questions_at_once_need_both_answers_and_a_url_question_is_a_link() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "test__plan_trip", r#"{"city": "Lisbon"}"#)],
        false,
    )));
    let question = user("Plan a trip to Lisbon.");
    let run1 = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&run1);
    let all = interrupts(&run1);
    assert_eq!(all.len(), 2, "{all:?}");
    let dates = all
        .iter()
        .find(|i| i["message"] == "When do you travel?")
        .unwrap();
    let login = all
        .iter()
        .find(|i| i["message"].as_str().unwrap().starts_with("Sign in"))
        .unwrap();
    assert!(
        login["message"]
            .as_str()
            .unwrap()
            .contains("https://travel.example.test/login"),
        "the link is in the question: {login}"
    );
    assert_eq!(
        login["metadata"]["agui-host"]["url"],
        "https://travel.example.test/login"
    );
    assert_ne!(dates["id"], login["id"]);
    let history = client_history(&[question], &run1);
    let dates_answer = resolved(
        dates["id"].as_str().unwrap(),
        json!({"from": "Mon", "to": "Fri"}),
    );
    let login_answer = resolved(login["id"].as_str().unwrap(), json!({}));

    let mut half = resume_input(history.clone(), json!([dates_answer.clone()]));
    half["runId"] = json!("half");
    assert_refused(&app.run_events("/", &half).await, "interrupt_unanswered");

    app.fake.push(Reply::Sse(chunks::text_reply(&["Planned."])));
    let events = app
        .run_events(
            "/",
            &resume_input(history, json!([login_answer, dates_answer])),
        )
        .await;
    assert_success(&events);
    assert_eq!(
        result_of(&events, "call_1"),
        r#"Trip from "Mon" to "Fri"; sign-in "accept""#
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_server_over_streamable_http_asks_too() {
    let server = test_server_over_http().await;
    let mcp = spawn_mcp_app(|s| {
        with_servers(s, vec![crate::mcp::http("test", &server.url)]);
    })
    .await;
    let app = &mcp.app;
    let (run1, history) = asked_to_book(app, input).await;
    let id = assert_asks_for_the_party(&run1);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Booked."])));
    let events = app
        .run_events(
            "/",
            &resume_input(history, json!([resolved(&id, json!({"size": 3}))])),
        )
        .await;
    assert_success(&events);
    assert_eq!(
        result_of(&events, "call_1"),
        "Booked a table for 3 at Chez Rust"
    );
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_question_asked_on_one_replica_is_answered_on_another_over_redis() {
    let redis = RedisServer::start().await;
    let replica = || {
        spawn_mcp_app(|s| {
            with_servers(s, vec![test_server()]);
            s.threads.store = agui_host::settings::ThreadStoreKind::Redis;
            s.threads.redis_url = redis.url();
            s.security.approval_keys = vec![SHARED_KEY.into()];
        })
    };
    let a = replica().await;
    let b = replica().await;
    let (run1, history) = asked_to_book(&a.app, input).await;
    let id = assert_asks_for_the_party(&run1);
    let answer = resume_input(history, json!([resolved(&id, json!({"size": 6}))]));
    b.app
        .fake
        .push(Reply::Sse(chunks::text_reply(&["Booked."])));
    let events = b.app.run_events("/", &answer).await;
    assert_success(&events);
    assert_eq!(
        result_of(&events, "call_1"),
        "Booked a table for 6 at Chez Rust"
    );

    // The same answer replayed on the first replica retries nothing.
    a.app
        .fake
        .push(Reply::Sse(chunks::text_reply(&["Already."])));
    let mut replay = answer;
    replay["runId"] = json!("replay");
    let events = a.app.run_events("/", &replay).await;
    assert_well_formed(&events);
    assert!(
        of_type(&events, "TOOL_CALL_RESULT").is_empty(),
        "{:?}",
        types(&events)
    );
    assert_eq!(bookings(&b, "count_b").await, "1");
    assert_eq!(
        bookings(&a, "count_a").await,
        "0",
        "a's server never booked"
    );
    a.shut_down().await;
    b.shut_down().await;
}

#[tokio::test]
async fn a_0x_client_is_asked_through_request_input_calls() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![test_server()])).await;
    let app = &mcp.app;
    let (run1, history) = asked_to_book(app, input_0x).await;
    assert_0x_compatible(&run1);
    let ask = of_type(&run1, "TOOL_CALL_START")
        .into_iter()
        .find(|e| e["toolCallName"] == "request_input")
        .unwrap_or_else(|| panic!("{:?}", types(&run1)));
    let ask_id = ask["toolCallId"].as_str().unwrap().to_owned();
    let question: Value = serde_json::from_str(&tool_args(&run1)[&ask_id]).unwrap();
    assert_eq!(question["toolCallId"], "call_1");
    assert_eq!(question["toolName"], "test__book_table");
    assert_eq!(question["responseSchema"]["required"], json!(["size"]));
    assert_eq!(question["source"]["server"], "test");

    // The data the 0.x call carries is covered by its id's tag: an edit is refused.
    let mut forged = history.clone();
    for message in &mut forged {
        for call in message["toolCalls"].as_array_mut().into_iter().flatten() {
            if call["id"] == ask_id.as_str() {
                let mut arguments: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                let carried = URL_SAFE_NO_PAD
                    .decode(arguments["carried"].as_str().unwrap())
                    .unwrap();
                let edited = String::from_utf8(carried)
                    .unwrap()
                    .replace("book:Chez Rust", "book:The Ritz");
                arguments["carried"] = json!(URL_SAFE_NO_PAD.encode(edited));
                call["function"]["arguments"] = json!(arguments.to_string());
            }
        }
    }
    forged.push(tool_result(&ask_id, r#"{"size":2}"#));
    let mut body = input_0x(forged);
    body["runId"] = json!("forged");
    assert_refused(&app.run_events("/", &body).await, "interrupt_unknown");

    let mut answered = history;
    answered.push(tool_result(&ask_id, r#"{"size":2}"#));
    let mut body = input_0x(answered);
    body["runId"] = json!("r2");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Booked."])));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(
        result_of(&events, "call_1"),
        "Booked a table for 2 at Chez Rust"
    );
    let raw = app.upstream_bodies().last().unwrap().to_string();
    assert!(
        !raw.contains("request_input") && !raw.contains(&ask_id),
        "the question never reaches the model: {raw}"
    );
    mcp.shut_down().await;
}

/// The reference server asks the old way, with `elicitation/create` in the middle of its call:
/// declined at once, and its tool says so.
#[tokio::test]
async fn a_server_asking_during_its_call_is_declined() {
    let mcp = spawn_mcp_app(|s| with_servers(s, vec![everything()])).await;
    let app = &mcp.app;
    app.fake.push_call_then_text(
        ("call_1", "everything__trigger-elicitation-request", "{}"),
        "Declined.",
    );
    let events = app.run_events("/", &input(vec![user("Ask me.")])).await;
    assert_well_formed(&events);
    assert_success(&events);
    let result = result_of(&events, "call_1");
    assert!(result.contains("declined"), "{result}");
    mcp.shut_down().await;
}
