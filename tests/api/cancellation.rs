//! A client that goes away stops the run (without a thread store, or with
//! `runs.on_disconnect = "cancel"`): the model request is abandoned too, so no tokens are paid
//! for an answer nobody reads.

use std::time::Duration;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;
use agui_host::settings::{OnDisconnect, Settings, ThreadStoreKind};

#[tokio::test]
async fn dropping_the_response_mid_stream_closes_the_upstream_request() {
    hang_up_mid_stream(|s| s.threads.store = ThreadStoreKind::Off).await;
}

#[tokio::test]
async fn dropping_the_response_of_a_logged_run_set_to_cancel_closes_the_upstream_request() {
    hang_up_mid_stream(|s| s.runs.on_disconnect = OnDisconnect::Cancel).await;
}

async fn hang_up_mid_stream(configure: impl FnOnce(&mut Settings)) {
    let app = spawn_app(configure).await;
    // A long, slow answer: 200 deltas 50 ms apart, far from over when the client leaves.
    let words: Vec<String> = (0..200).map(|i| format!("word{i} ")).collect();
    let parts: Vec<&str> = words.iter().map(String::as_str).collect();
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&parts),
        Duration::from_millis(50),
    ));

    let response = app
        .post_run("/", &input(vec![user("Tell me a long story")]))
        .await;
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let first = reader.next().await.expect("RUN_STARTED");
    assert_eq!(first["type"], "RUN_STARTED");
    let mut contents = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        while contents < 3 {
            let event = reader.next().await.expect("the stream goes on");
            if event["type"] == "TEXT_MESSAGE_CONTENT" {
                contents += 1;
            }
        }
    })
    .await
    .expect("three text deltas within 10 s");
    assert_eq!(
        app.fake.disconnects(),
        0,
        "the upstream is still being read while the client reads"
    );

    reader.hang_up();

    assert!(
        app.fake.wait_for_disconnect(Duration::from_secs(2)).await,
        "the app kept the upstream request open after the client left"
    );
}

#[tokio::test]
async fn a_slow_upstream_within_the_idle_timeout_is_not_an_error() {
    // Guards the test above against a false positive: a 50 ms gap between frames is
    // normal streaming, the run completes, and a completed reply is not a disconnect.
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&["a", "b", "c"]),
        Duration::from_millis(50),
    ));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(app.fake.disconnects(), 0);
}
