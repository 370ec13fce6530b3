//! Graceful shutdown: open streams may finish within the grace period; the ones still open
//! after it end with `RUN_ERROR` code `shutdown` (never a silently cut stream), and the server
//! returns.

use std::time::{Duration, Instant};

use agui_host::App;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::fake_llm::{chunks, FakeLlm, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

struct Running {
    address: String,
    fake: FakeLlm,
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    metrics: std::sync::Arc<agui_host::http::Metrics>,
}

/// The app with `grace` seconds of shutdown grace, served by `run_until` so the test decides
/// when the shutdown signal comes.
async fn start(grace: f64) -> Running {
    let fake = FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    settings.server.shutdown_grace_secs = grace;
    let app = App::build(settings).await.expect("the app builds");
    let address = format!("http://{}", app.local_addr());
    let metrics = app.metrics();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    Running {
        address,
        fake,
        stop,
        server,
        metrics,
    }
}

/// Opens a run and returns its reader after the first text delta.
async fn open_run(running: &Running) -> (Vec<Value>, EventReader) {
    let response = reqwest::Client::new()
        .post(format!("{}/", running.address))
        .json(&input(vec![user("a long story")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let mut events = Vec::new();
    while !events
        .iter()
        .any(|e: &Value| e["type"] == "TEXT_MESSAGE_CONTENT")
    {
        events.push(reader.next().await.expect("the run streams"));
    }
    (events, reader)
}

async fn read_to_end(mut events: Vec<Value>, mut reader: EventReader) -> Vec<Value> {
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), reader.next())
        .await
        .expect("the stream ends within 10 s")
    {
        events.push(event);
    }
    assert_well_formed(&events);
    events
}

#[tokio::test]
async fn a_stream_still_open_after_the_grace_period_ends_with_run_error_shutdown() {
    let running = start(0.3).await;
    let words: Vec<String> = (0..200).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    running.fake.push(Reply::SlowSse(
        chunks::text_reply(&words),
        Duration::from_millis(50),
    ));
    let (events, reader) = open_run(&running).await;

    let signalled = Instant::now();
    running.stop.send(()).unwrap();
    let events = read_to_end(events, reader).await;
    let ended_after = signalled.elapsed();

    let error = last(&events);
    assert_eq!(error["type"], "RUN_ERROR", "{events:?}");
    assert_eq!(error["code"], "shutdown", "{error}");
    assert!(
        of_type(&events, "TEXT_MESSAGE_CONTENT").len() > 2,
        "the run went on streaming during the grace period"
    );
    assert!(
        ended_after >= Duration::from_millis(300),
        "ended before the grace period was over: {ended_after:?}"
    );
    let result = tokio::time::timeout(Duration::from_secs(5), running.server)
        .await
        .expect("the server returns after the grace period")
        .expect("the server task did not panic");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        running
            .metrics
            .encode()
            .contains(r#"agui_run_errors_total{agent="assistant",code="shutdown"} 1"#),
        "{}",
        running.metrics.encode()
    );
    assert!(
        running
            .fake
            .wait_for_disconnect(Duration::from_secs(2))
            .await
    );
}

#[tokio::test]
async fn a_stream_that_ends_within_the_grace_period_finishes_normally() {
    let running = start(5.0).await;
    running.fake.push(Reply::SlowSse(
        chunks::text_reply(&["one ", "two ", "three ", "four ", "five"]),
        Duration::from_millis(60),
    ));
    let (events, reader) = open_run(&running).await;

    let signalled = Instant::now();
    running.stop.send(()).unwrap();
    let events = read_to_end(events, reader).await;

    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(texts(&events)[0].1, "one two three four five");
    tokio::time::timeout(Duration::from_secs(3), running.server)
        .await
        .expect("the server returns once the last stream is over, not after the whole grace")
        .unwrap()
        .unwrap();
    assert!(signalled.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn new_connections_are_refused_once_shutdown_began() {
    let running = start(5.0).await;
    running.fake.push(Reply::SlowSse(
        chunks::text_reply(&["a ", "b ", "c ", "d ", "e ", "f"]),
        Duration::from_millis(100),
    ));
    let (events, reader) = open_run(&running).await;

    running.stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = reqwest::Client::new()
        .get(format!("{}/health", running.address))
        .send()
        .await;
    assert!(
        late.is_err(),
        "a new connection was served during shutdown: {late:?}"
    );

    let events = read_to_end(events, reader).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}
