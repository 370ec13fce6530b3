//! Hostile input over real HTTP: the nastiest bodies get a 4xx JSON error before any stream,
//! never reach the model, and the server keeps serving. Each input limit is refused with a code
//! naming it. (The decoder's property test is in `src/http/decode/tests.rs`.)

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

async fn assert_refused_with(app: &TestApp, body: Vec<u8>, status: u16, code: &str) -> Value {
    let response = app.post_raw("/", body).await;
    assert_eq!(response.status(), status, "expected {code}");
    let error = error_body(response).await;
    assert_eq!(error["error"]["code"], code, "{error}");
    error
}

async fn assert_still_serving(app: &TestApp) {
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Still here."])));
    let events = app.run_events("/", &input(vec![user("hi")])).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
}

#[tokio::test]
async fn the_nastiest_bodies_get_a_4xx_json_and_the_server_keeps_serving() {
    let app = spawn_app(|_| {}).await;
    let deep_state = format!(
        "{{\"threadId\":\"t\",\"runId\":\"r\",\"messages\":[],\"state\":{}",
        "[".repeat(100_000)
    );
    let message = r#"{"id":"","role":"user","content":""}"#;
    let many_messages = format!(
        "{{\"threadId\":\"t\",\"runId\":\"r\",\"messages\":[{}]}}",
        vec![message; 100_000].join(",")
    );
    assert!(
        many_messages.len() < 4 * 1024 * 1024,
        "within the body limit"
    );
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "100,000 `[`",
            "[".repeat(100_000).into_bytes(),
            422,
            "invalid_request",
        ),
        (
            "a state nested 100,000 deep",
            deep_state.into_bytes(),
            400,
            "invalid_json",
        ),
        (
            "100,000 messages",
            many_messages.into_bytes(),
            422,
            "too_many_messages",
        ),
        (
            "invalid UTF-8 in a string",
            b"{\"threadId\":\"t\xff\xfe\",\"runId\":\"r\",\"messages\":[]}".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "raw binary",
            vec![0xff, 0x00, 0xc3, 0x28, 0x7b],
            400,
            "invalid_json",
        ),
        (
            "a number out of range",
            br#"{"threadId":"t","runId":"r","messages":[],"state":{"n":1e400}}"#.to_vec(),
            400,
            "invalid_json",
        ),
        (
            "a duplicate key",
            br#"{"threadId":"t","runId":"r","messages":[],"messages":[]}"#.to_vec(),
            422,
            "invalid_request",
        ),
    ];
    for (case, body, status, code) in cases {
        let response = app.post_raw("/", body).await;
        assert_eq!(response.status(), status, "{case}");
        let error = error_body(response).await;
        assert_eq!(error["error"]["code"], code, "{case}: {error}");
    }
    assert!(app.fake.requests().is_empty(), "nothing reached the model");
    assert_still_serving(&app).await;
}

#[tokio::test]
async fn each_input_limit_is_a_422_naming_it() {
    let app = spawn_app(|s| {
        let limits = &mut s.server.input_limits;
        limits.max_messages = 3;
        limits.max_content_bytes = 1000;
        limits.max_tools = 2;
        limits.max_context_entries = 2;
        limits.max_context_bytes = 100;
        // Above the helpers' message ids (42 bytes), which this limit bounds too.
        limits.max_id_bytes = 48;
        limits.max_resume_entries = 2;
        limits.max_resume_bytes = 200;
    })
    .await;
    let over_messages = input(vec![user("1"), user("2"), user("3"), user("4")]);
    let over_content = input(vec![
        user(&"x".repeat(600)),
        assistant_calls(&[("c1", "f", &format!("{{\"a\":\"{}\"}}", "y".repeat(300)))]),
        tool_result("c1", &"z".repeat(100)),
    ]);
    let mut over_tools = input(vec![user("hi")]);
    over_tools["tools"] = json!([client_tool("a"), client_tool("b"), client_tool("c")]);
    let mut over_entries = input(vec![user("hi")]);
    over_entries["context"] = json!([
        {"description": "a", "value": "1"},
        {"description": "b", "value": "2"},
        {"description": "c", "value": "3"},
    ]);
    let mut over_context = input(vec![user("hi")]);
    over_context["context"] = json!([{"description": "page", "value": "v".repeat(100)}]);
    let mut over_thread_id = input(vec![user("hi")]);
    over_thread_id["threadId"] = json!("t".repeat(49));
    let mut over_run_id = input(vec![user("hi")]);
    over_run_id["runId"] = json!("r".repeat(49));
    let entry = |id: &str| json!({"interruptId": id, "status": "resolved", "payload": {}});
    let mut over_resume_entries = input(vec![user("hi")]);
    over_resume_entries["resume"] = json!([entry("a"), entry("b"), entry("c")]);
    let mut over_resume_bytes = input(vec![user("hi")]);
    over_resume_bytes["resume"] = json!([entry(&"apr_".repeat(60))]);
    for (body, code, key) in [
        (over_thread_id, "id_too_long", "max_id_bytes"),
        (over_run_id, "id_too_long", "max_id_bytes"),
        (
            over_resume_entries,
            "too_many_resume_entries",
            "max_resume_entries",
        ),
        (over_resume_bytes, "resume_too_large", "max_resume_bytes"),
        (over_messages, "too_many_messages", "max_messages"),
        (over_content, "content_too_large", "max_content_bytes"),
        (over_tools, "too_many_tools", "max_tools"),
        (
            over_entries,
            "too_many_context_entries",
            "max_context_entries",
        ),
        (over_context, "context_too_large", "max_context_bytes"),
    ] {
        let error = assert_refused_with(&app, serde_json::to_vec(&body).unwrap(), 422, code).await;
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("server.input_limits.{key}")),
            "the message names the limit: {message}"
        );
    }
    assert!(app.fake.requests().is_empty(), "nothing reached the model");
    // At the limits: a run.
    let mut at_limits = input(vec![user("1"), user("2"), user("3")]);
    at_limits["tools"] = json!([client_tool("a"), client_tool("b")]);
    app.fake.push(Reply::Sse(chunks::text_reply(&["ok"])));
    let events = app.run_events("/", &at_limits).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
}

/// Message ids, tool-call ids, tool calls per message, metadata and `forwardedProps` are
/// bounded too: each was accepted at any size once (a 1 MB id, 50,000 calls in one message,
/// megabytes of metadata), and metadata is stored with the thread.
#[tokio::test]
async fn ids_tool_calls_metadata_and_forwarded_props_are_each_a_422_naming_the_limit() {
    let app = spawn_app(|s| {
        let limits = &mut s.server.input_limits;
        limits.max_id_bytes = 64;
        limits.max_tool_calls_per_message = 2;
        limits.max_metadata_bytes = 100;
        limits.max_forwarded_props_bytes = 100;
    })
    .await;
    let long = "i".repeat(65);
    let mut long_message_id = user("hi");
    long_message_id["id"] = json!(long);
    let mut metadata = user("hi");
    metadata["metadata"] = json!({"note": "m".repeat(100)});
    let mut call_metadata = assistant_calls(&[("c1", "f", "{}")]);
    call_metadata["toolCalls"][0]["metadata"] = json!({"note": "m".repeat(100)});
    let mut forwarded = input(vec![user("hi")]);
    forwarded["forwardedProps"] = json!({"props": "p".repeat(100)});
    let cases = [
        (
            "a long message id",
            input(vec![long_message_id]),
            "id_too_long",
            "max_id_bytes",
        ),
        (
            "a megabyte message id with a newline",
            input(vec![
                json!({"id": format!("{}\n", "x".repeat(1 << 20)), "role": "user", "content": "hi"}),
            ]),
            "id_too_long",
            "max_id_bytes",
        ),
        (
            "a long tool-call id",
            input(vec![user("hi"), assistant_calls(&[(&long, "f", "{}")])]),
            "id_too_long",
            "max_id_bytes",
        ),
        (
            "a long toolCallId",
            input(vec![user("hi"), tool_result(&long, "42")]),
            "id_too_long",
            "max_id_bytes",
        ),
        (
            "three tool calls in one message",
            input(vec![
                user("hi"),
                assistant_calls(&[("c1", "f", "{}"), ("c2", "f", "{}"), ("c3", "f", "{}")]),
            ]),
            "too_many_tool_calls",
            "max_tool_calls_per_message",
        ),
        (
            "message metadata",
            input(vec![metadata]),
            "metadata_too_large",
            "max_metadata_bytes",
        ),
        (
            "tool-call metadata",
            input(vec![user("hi"), call_metadata]),
            "metadata_too_large",
            "max_metadata_bytes",
        ),
        (
            "forwardedProps",
            forwarded,
            "forwarded_props_too_large",
            "max_forwarded_props_bytes",
        ),
    ];
    for (case, body, code, key) in cases {
        let response = app.post_run("/", &body).await;
        assert_eq!(response.status(), 422, "{case}");
        let error = error_body(response).await;
        assert_eq!(error["error"]["code"], code, "{case}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("server.input_limits.{key}")),
            "{case}: the message names the limit: {message}"
        );
    }
    assert!(app.fake.requests().is_empty(), "nothing reached the model");
    // At the limits: a run.
    let mut at_limits = user("hi");
    at_limits["id"] = json!("i".repeat(64));
    at_limits["metadata"] = json!({"n": "m".repeat(80)});
    let mut body = input(vec![
        at_limits,
        assistant_calls(&[(&"c".repeat(64), "f", "{}"), ("c2", "f", "{}")]),
        tool_result(&"c".repeat(64), "1"),
        tool_result("c2", "2"),
    ]);
    body["forwardedProps"] = json!({"props": "p".repeat(80)});
    app.fake.push(Reply::Sse(chunks::text_reply(&["ok"])));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
}
