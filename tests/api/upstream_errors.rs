//! Failures after the stream began end it with one `RUN_ERROR`, last, with a stable `code`.
//!
//! The upstream faults of the table in docs/api.md, one test each, against the fake upstream:
//! statuses (with and without retries, `Retry-After`), and streams that break, stall, or make
//! no sense. Faults below HTTP (refused, DNS, TLS) are in `upstream_network`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// The stream's terminal `RUN_ERROR`, checked to be last and to carry `code`.
#[track_caller]
pub(crate) fn run_error<'a>(events: &'a [Value], code: &str) -> &'a Value {
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

// ---- Statuses before the first byte ---------------------------------------------------------

/// A run's events bounded in time: a fault must end the run, never hang it.
async fn events_within(app: &TestApp, limit: Duration) -> Vec<Value> {
    tokio::time::timeout(limit, app.run_events("/", &input(vec![user("hi")])))
        .await
        .unwrap_or_else(|_| panic!("the run did not end within {limit:?}"))
}

#[tokio::test]
async fn upstream_401_and_403_are_upstream_auth_and_never_retried() {
    for (status, hint) in [(401, "API key"), (403, "permissions")] {
        // Retries on: a refused credential is the same a second later.
        let app = spawn_app(|settings| settings.llm.max_retries = 3).await;
        app.fake.push(Reply::Status(
            status,
            r#"{"error":{"message":"Access denied due to invalid subscription key or wrong API endpoint.","code":"401"}}"#
                .into(),
        ));

        let events = events_within(&app, Duration::from_secs(10)).await;

        let error = run_error(&events, "upstream_auth");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&format!("HTTP {status}")), "{message}");
        assert!(message.contains(hint), "{message}");
        assert!(
            !message.contains("subscription key"),
            "an auth failure's upstream message is never shown: {message}"
        );
        assert_eq!(app.fake.requests().len(), 1, "HTTP {status} is not retried");
    }
}

#[tokio::test]
async fn upstream_5xx_is_retried_with_backoff_then_a_run_error() {
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    for _ in 0..3 {
        app.fake
            .push(Reply::Status(502, "<html>Bad Gateway</html>".into()));
    }
    let started = Instant::now();

    let events = events_within(&app, Duration::from_secs(10)).await;

    let error = run_error(&events, "upstream_http_502");
    assert!(
        !error["message"].as_str().unwrap().contains("html"),
        "the upstream body is never shown: {error}"
    );
    assert_eq!(
        app.fake.requests().len(),
        3,
        "one request and max_retries = 2 retries"
    );
    // Backoff with equal jitter: 125..250 ms, then 250..500 ms.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(375), "{elapsed:?}");
    assert_eq!(
        of_type(&events, "RUN_STARTED").len(),
        1,
        "retries are invisible to the client"
    );
}

#[tokio::test]
async fn upstream_5xx_then_success_finishes_the_run() {
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    app.fake.push(Reply::Status(
        503,
        r#"{"error":{"message":"The engine is currently overloaded."}}"#.into(),
    ));
    app.fake.push(Reply::Status(500, "oops".into()));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi", "!"])));

    let events = events_within(&app, Duration::from_secs(10)).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(texts(&events).len(), 1, "one answer, not one per attempt");
    assert_eq!(texts(&events)[0].1, "Hi!");
    assert_eq!(app.fake.requests().len(), 3);
    assert_eq!(
        app.fake.bodies()[0],
        app.fake.bodies()[2],
        "a retry sends the same request"
    );
}

#[tokio::test]
async fn upstream_429_retry_after_is_honoured() {
    let app = spawn_app(|settings| settings.llm.max_retries = 1).await;
    app.fake.push(Reply::StatusRetryAfter(
        429,
        r#"{"error":{"message":"Rate limit reached."}}"#.into(),
        1,
    ));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi!"])));
    let started = Instant::now();

    let events = events_within(&app, Duration::from_secs(10)).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(app.fake.requests().len(), 2);
    // The backoff alone would have waited at most 250 ms.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(1),
        "Retry-After: 1 was not honoured: retried after {elapsed:?}"
    );
}

#[tokio::test]
async fn upstream_429_retried_until_max_retries_then_a_run_error() {
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    for _ in 0..3 {
        app.fake.push(Reply::StatusRetryAfter(
            429,
            r#"{"error":{"message":"Rate limit reached."}}"#.into(),
            0,
        ));
    }

    let events = events_within(&app, Duration::from_secs(10)).await;

    run_error(&events, "upstream_http_429");
    assert_eq!(app.fake.requests().len(), 3);
}

#[tokio::test]
async fn upstream_429_with_a_long_retry_after_fails_at_once() {
    // Holding the user's run open for a minute is worse than saying the server is busy.
    let app = spawn_app(|settings| settings.llm.max_retries = 3).await;
    app.fake.push(Reply::StatusRetryAfter(
        429,
        r#"{"error":{"message":"Rate limit reached."}}"#.into(),
        60,
    ));
    let started = Instant::now();

    let events = events_within(&app, Duration::from_secs(10)).await;

    run_error(&events, "upstream_http_429");
    assert_eq!(app.fake.requests().len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn upstream_first_byte_timeout_is_upstream_timeout_and_not_retried() {
    let app = spawn_app(|settings| {
        settings.llm.first_byte_timeout_secs = 1;
        settings.llm.max_retries = 2;
    })
    .await;
    app.fake.push(Reply::Silent(Duration::from_secs(30)));
    let started = Instant::now();

    let events = events_within(&app, Duration::from_secs(10)).await;

    let error = run_error(&events, "upstream_timeout");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("did not start answering"),
        "{error}"
    );
    // Not retried: the server may be busy generating, and a retry would pay twice.
    assert_eq!(app.fake.requests().len(), 1);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
}

// ---- Faults after the stream began: never retried --------------------------------------------

#[tokio::test]
async fn upstream_malformed_chunk_is_upstream_malformed_and_not_retried() {
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    app.fake.push(Reply::Sse(vec![
        chunks::role(),
        chunks::text("Hel"),
        r#"{"choices":[{"index":0,"delta":{"content":"lo"#.into(),
        chunks::text("never"),
        chunks::finish("stop"),
        chunks::done(),
    ]));

    let events = events_within(&app, Duration::from_secs(10)).await;

    let error = run_error(&events, "upstream_malformed");
    assert!(
        !error["message"].as_str().unwrap().contains("choices"),
        "the offending payload is never shown: {error}"
    );
    assert_eq!(
        texts(&events)[0].1,
        "Hel",
        "what arrived before was streamed"
    );
    assert_eq!(app.fake.requests().len(), 1);
}

#[tokio::test]
async fn upstream_stalled_mid_stream_is_upstream_timeout_and_not_retried() {
    let app = spawn_app(|settings| {
        settings.llm.idle_timeout_secs = 1;
        settings.llm.max_retries = 2;
    })
    .await;
    app.fake.push(Reply::Stall(vec![
        chunks::role(),
        chunks::text("Hel"),
        chunks::text("lo"),
    ]));
    let started = Instant::now();

    let events = events_within(&app, Duration::from_secs(10)).await;

    let error = run_error(&events, "upstream_timeout");
    assert!(
        error["message"].as_str().unwrap().contains("mid-reply"),
        "{error}"
    );
    assert_eq!(texts(&events)[0].1, "Hello");
    assert_eq!(
        app.fake.requests().len(),
        1,
        "a stream that began is not replayed"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert!(
        app.fake.wait_for_disconnect(Duration::from_secs(2)).await,
        "the stalled upstream request is closed"
    );
}

#[tokio::test]
async fn upstream_error_frame_is_not_retried() {
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    app.fake.push(Reply::Sse(vec![
        chunks::role(),
        chunks::error("The model is overloaded."),
    ]));

    let events = events_within(&app, Duration::from_secs(10)).await;

    run_error(&events, "upstream_error");
    assert_eq!(app.fake.requests().len(), 1);
}

#[tokio::test]
async fn upstream_reply_without_any_choice_is_upstream_malformed() {
    // Only chunks with empty `choices` (as a filtering proxy, or the usage chunk alone), then
    // `[DONE]`: not a chat completion, so the run must not finish as if the model said nothing.
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    app.fake.push(Reply::Sse(vec![
        chunks::usage(12, 0),
        chunks::usage(12, 0),
        chunks::done(),
    ]));

    let events = events_within(&app, Duration::from_secs(10)).await;

    run_error(&events, "upstream_malformed");
    assert!(texts(&events).is_empty());
    assert_eq!(app.fake.requests().len(), 1, "a 200 stream is not retried");
}

#[tokio::test]
async fn upstream_reply_with_an_empty_choice_finishes_without_a_message() {
    // The counterpart: a choice with no content is an answer; the model had nothing to say.
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(vec![
        chunks::role(),
        chunks::finish("stop"),
        chunks::done(),
    ]));

    let events = events_within(&app, Duration::from_secs(10)).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert!(texts(&events).is_empty(), "{events:?}");
}

#[tokio::test]
async fn upstream_body_ending_without_finish_or_done_is_a_stream_cut() {
    // A clean end of the body (no transport error) that is still not a complete reply.
    let app = spawn_app(|settings| settings.llm.max_retries = 2).await;
    app.fake
        .push(Reply::Sse(vec![chunks::role(), chunks::text("Hel")]));

    let events = events_within(&app, Duration::from_secs(10)).await;

    run_error(&events, "upstream_stream_cut");
    assert_eq!(texts(&events)[0].1, "Hel");
    assert_eq!(app.fake.requests().len(), 1);
}

#[tokio::test]
async fn a_fault_in_a_later_model_call_ends_the_run_after_the_tool_results() {
    // The first model call asked for a server tool; the second one fails. Its retries are
    // allowed (nothing of that call was sent yet), and the run ends with one RUN_ERROR after
    // the tool result that was already streamed.
    let app = spawn_app(|settings| settings.llm.max_retries = 1).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "get_weather", r#"{"location":"Paris"}"#)],
        false,
    )));
    app.fake.push(Reply::Status(503, "busy".into()));
    app.fake
        .push(Reply::Cut(vec![chunks::role(), chunks::text("It is")]));

    let events = events_within(&app, Duration::from_secs(10)).await;

    run_error(&events, "upstream_stream_cut");
    assert_eq!(of_type(&events, "TOOL_CALL_RESULT").len(), 1, "{events:?}");
    assert_eq!(
        app.fake.requests().len(),
        3,
        "the 503 of the second call was retried once, the cut was not"
    );
}
