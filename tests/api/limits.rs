//! Limits that hold for a stream's whole life: the concurrent-run slot (503 + Retry-After), the
//! per-run deadline and the upstream idle timeout (each a RUN_ERROR with its own code).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// A text reply of `parts` deltas, each after `gap`.
fn slow_reply(parts: usize, gap: Duration) -> Reply {
    let words: Vec<String> = (0..parts).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    Reply::SlowSse(chunks::text_reply(&words), gap)
}

/// Reads the rest of a stream, checks it and returns every event (with `first` in front).
async fn rest_of(first: Value, mut reader: EventReader) -> Vec<Value> {
    let mut events = vec![first];
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), reader.next())
        .await
        .expect("the stream goes on or ends within 10 s")
    {
        events.push(event);
    }
    assert_well_formed(&events);
    events
}

#[tokio::test]
async fn a_full_server_answers_503_with_retry_after_until_a_stream_ends() {
    let app = spawn_app(|s| {
        s.server.limits.max_concurrent_runs = 1;
        s.server.limits.retry_after_secs = 7;
    })
    .await;
    app.fake.push(slow_reply(8, Duration::from_millis(60)));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Next!"])));

    let first = app.post_run("/", &input(vec![user("long")])).await;
    assert_eq!(first.status(), 200);
    let mut reader = EventReader::new(first);
    let started = reader.next().await.expect("RUN_STARTED");
    assert_eq!(started["type"], "RUN_STARTED");

    // The first run's headers (and its first event) are out: its slot must still be taken.
    let refused = app.post_run("/", &input(vec![user("me too")])).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "7");
    let body = error_body(refused).await;
    assert_eq!(body["error"]["code"], "too_many_runs");
    assert_eq!(
        app.fake.requests().len(),
        1,
        "the refused run never reached the model"
    );

    let events = rest_of(started, reader).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");

    // The stream is over, so its slot is free again.
    let events = app.run_events("/", &input(vec![user("now?")])).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    assert_eq!(texts(&events)[0].1, "Next!");
}

#[tokio::test]
async fn a_client_that_hangs_up_frees_its_slot() {
    let app = spawn_app(|s| {
        s.server.limits.max_concurrent_runs = 1;
        s.runs.on_disconnect = agui_host::settings::OnDisconnect::Cancel;
    })
    .await;
    app.fake.push(slow_reply(100, Duration::from_millis(50)));

    let first = app.post_run("/", &input(vec![user("long")])).await;
    let mut reader = EventReader::new(first);
    assert_eq!(
        reader.next().await.expect("RUN_STARTED")["type"],
        "RUN_STARTED"
    );
    reader.hang_up();
    assert!(app.fake.wait_for_disconnect(Duration::from_secs(2)).await);

    // The server notices the hang-up on its next write; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Hi"])));
        let response = app.post_run("/", &input(vec![user("again")])).await;
        if response.status() == 200 {
            let events = parse_sse(&response.text().await.unwrap());
            assert_well_formed(&events);
            break;
        }
        assert_eq!(response.status(), 503);
        assert!(Instant::now() < deadline, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_run_past_its_deadline_ends_with_run_deadline() {
    let app = spawn_app(|s| s.server.limits.run_deadline_secs = 0.4).await;
    app.fake.push(slow_reply(100, Duration::from_millis(50)));
    let started = Instant::now();

    let events = app.run_events("/", &input(vec![user("long")])).await;

    assert_well_formed(&events);
    let error = last(&events);
    assert_eq!(error["type"], "RUN_ERROR", "{events:?}");
    assert_eq!(error["code"], "run_deadline", "{error}");
    assert!(
        !texts(&events).is_empty(),
        "the run streamed before its deadline"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert!(
        app.fake.wait_for_disconnect(Duration::from_secs(2)).await,
        "the upstream request was abandoned with the run"
    );
}

#[tokio::test]
async fn a_silent_upstream_ends_the_run_with_upstream_timeout() {
    let app = spawn_app(|s| s.llm.idle_timeout_secs = 1).await;
    // The headers come at once, then nothing for 5 s.
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&["too", "late"]),
        Duration::from_secs(5),
    ));
    let started = Instant::now();

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    let error = last(&events);
    assert_eq!(error["type"], "RUN_ERROR", "{events:?}");
    assert_eq!(error["code"], "upstream_timeout", "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}
