//! Failures after the stream began end it with one `RUN_ERROR`, last, with a stable `code`.

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// The stream's terminal `RUN_ERROR`, checked to be last and to carry `code`.
#[track_caller]
fn run_error<'a>(events: &'a [Value], code: &str) -> &'a Value {
    assert_well_formed(events);
    let error = last(events);
    assert_eq!(error["type"], "RUN_ERROR", "{events:?}");
    assert_eq!(error["code"], code, "{error}");
    assert!(
        !error["message"].as_str().unwrap_or("").is_empty(),
        "RUN_ERROR.message says what happened: {error}"
    );
    assert!(
        !error.to_string().contains(API_KEY),
        "the API key leaked: {error}"
    );
    error
}

#[tokio::test]
async fn an_upstream_500_before_any_byte_is_a_run_error() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Status(
        500,
        r#"{"error":{"message":"The server had an error while processing your request."}}"#.into(),
    ));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    run_error(&events, "upstream_http_500");
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(app.fake.requests().len(), 1, "max_retries = 0");
}

#[tokio::test]
async fn an_upstream_429_is_a_run_error_when_retries_are_off() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::StatusRetryAfter(
        429,
        r#"{"error":{"message":"Rate limit reached.","type":"requests"}}"#.into(),
        0,
    ));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    run_error(&events, "upstream_http_429");
    assert_eq!(app.fake.requests().len(), 1);
}

#[tokio::test]
async fn an_upstream_429_is_retried_when_retries_are_allowed() {
    let app = spawn_app(|settings| settings.llm.max_retries = 1).await;
    app.fake.push(Reply::StatusRetryAfter(
        429,
        r#"{"error":{"message":"Rate limit reached."}}"#.into(),
        0,
    ));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi!"])));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(texts(&events)[0].1, "Hi!");
    assert_eq!(app.fake.requests().len(), 2);
}

#[tokio::test]
async fn an_upstream_stream_cut_mid_way_is_a_run_error_and_is_not_retried() {
    // Retries are on: a stream that already produced output must still never be replayed.
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    app.fake
        .push(Reply::Cut(vec![chunks::role(), chunks::text("Hel")]));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_eq!(
        app.fake.requests().len(),
        1,
        "a cut stream is not retried: {events:?}"
    );
    run_error(&events, "upstream_stream_cut");
    assert_eq!(texts(&events)[0].1, "Hel", "what arrived was streamed");
}

#[tokio::test]
async fn an_error_frame_mid_stream_is_a_run_error() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(vec![
        chunks::role(),
        chunks::text("Hel"),
        chunks::error("The model is overloaded."),
    ]));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    run_error(&events, "upstream_error");
}

#[tokio::test]
async fn a_model_still_calling_server_tools_after_max_iterations_is_a_run_error() {
    let app = spawn_app(|settings| {
        settings.agents.get_mut("assistant").unwrap().max_iterations = 2;
    })
    .await;
    for call in ["call_1", "call_2"] {
        app.fake.push(Reply::Sse(chunks::tool_calls(
            &[(call, "get_weather", r#"{"location":"Paris"}"#)],
            false,
        )));
    }

    let events = app
        .run_events("/", &input(vec![user("Loop forever")]))
        .await;

    assert_eq!(
        app.fake.requests().len(),
        2,
        "exactly max_iterations model calls: {events:?}"
    );
    run_error(&events, "max_iterations");
}

#[tokio::test]
async fn a_run_error_never_reveals_the_api_key() {
    // Some gateways echo the key they refused; the app must not pass that on to the browser.
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Status(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {API_KEY}."), "code": "invalid_api_key"}})
            .to_string(),
    ));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_ERROR", "{events:?}");
    let whole_stream = serde_json::to_string(&events).unwrap();
    assert!(
        !whole_stream.contains(API_KEY),
        "the API key leaked: {whole_stream}"
    );
}
