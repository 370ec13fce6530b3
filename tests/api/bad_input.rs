//! Input the server refuses before streaming (a 4xx with a JSON error body and no stream), and
//! legacy or tolerant input it must accept.

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// Posts `body`, expects `status` with the JSON error shape, and no model call.
async fn assert_refused(app: &TestApp, path: &str, body: Vec<u8>, status: u16) -> Value {
    let response = app.post_raw(path, body).await;
    assert_eq!(response.status(), status);
    let error = error_body(response).await;
    assert!(
        app.fake.requests().is_empty(),
        "a refused request must not reach the model"
    );
    error
}

fn json_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).unwrap()
}

#[tokio::test]
async fn malformed_json_is_a_400() {
    let app = spawn_app(|_| {}).await;
    assert_refused(&app, "/", br#"{"threadId":"t1","messages":["#.to_vec(), 400).await;
}

#[tokio::test]
async fn messages_that_is_not_an_array_is_a_422() {
    let app = spawn_app(|_| {}).await;
    let mut body = input(vec![]);
    body["messages"] = json!("hello");
    assert_refused(&app, "/", json_bytes(&body), 422).await;
}

#[tokio::test]
async fn a_numeric_thread_id_is_a_422() {
    let app = spawn_app(|_| {}).await;
    let mut body = input(vec![user("hi")]);
    body["threadId"] = json!(42);
    assert_refused(&app, "/", json_bytes(&body), 422).await;
}

#[tokio::test]
async fn an_unknown_message_role_is_a_422() {
    let app = spawn_app(|_| {}).await;
    let body = input(vec![
        user("hi"),
        json!({"id": "w-1", "role": "wizard", "content": "abracadabra"}),
    ]);
    assert_refused(&app, "/", json_bytes(&body), 422).await;
}

#[tokio::test]
async fn missing_messages_is_a_422() {
    let app = spawn_app(|_| {}).await;
    let mut body = input(vec![]);
    body.as_object_mut().unwrap().remove("messages");
    assert_refused(&app, "/", json_bytes(&body), 422).await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413() {
    let app = spawn_app(|settings| settings.server.body_limit_bytes = 1024).await;
    let body = input(vec![user(&"x".repeat(3000))]);
    assert_refused(&app, "/", json_bytes(&body), 413).await;
}

#[tokio::test]
async fn an_unknown_agent_route_is_a_404() {
    let app = spawn_app(|_| {}).await;
    let body = input(vec![user("hi")]);
    assert_refused(&app, "/nobody", json_bytes(&body), 404).await;
}

#[tokio::test]
async fn legacy_and_tolerant_inputs_are_accepted() {
    let minimal = json!({"threadId": "t1", "runId": "r1", "messages": [user("hi")]});
    let mut null_props = input(vec![user("hi")]);
    null_props["forwardedProps"] = Value::Null;
    null_props["state"] = Value::Null;
    let mut unknown_fields = input(vec![user("hi")]);
    unknown_fields["someFutureField"] = json!({"x": 1});
    unknown_fields["messages"][0]["someFutureField"] = json!(true);
    unknown_fields["parentRunId"] = json!("r0");
    let cases = [
        ("absent tools/context/state/forwardedProps", &minimal),
        ("null forwardedProps and state", &null_props),
        ("unknown extra fields", &unknown_fields),
    ];

    for (case, body) in cases {
        let app = spawn_app(|_| {}).await;
        app.fake.push(Reply::Sse(chunks::text_reply(&["Hi!"])));
        let response = app.post_run("/", body).await;
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "{case} must be accepted; got {text}");
        let events = parse_sse(&text);
        assert_well_formed(&events);
        assert_eq!(last(&events)["type"], "RUN_FINISHED", "{case}: {events:?}");
        assert_eq!(texts(&events)[0].1, "Hi!", "{case}");
    }
}
