//! The pump on its own, driven by a scripted agent stream with tokio's clock paused: batching,
//! keep-alive, the deadline, shutdown, a failing or panicking agent, and the one terminal event
//! (`RUN_ERROR` ends a run as it stands: the encoder closes open messages only before
//! `RUN_FINISHED`).

use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Pump;
use crate::agent::{AgentError, AgentStream, AgentUpdate};
use crate::protocol::{EventBody, ProtocolVersion, RunEncoder, KEEP_ALIVE_FRAME};
use crate::session::StopSources;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

fn pump(updates: AgentStream, deadline: Option<Duration>, stop: CancellationToken) -> Pump {
    let encoder = RunEncoder::new(ProtocolVersion::V1, "thread".into(), "run".into());
    let stops = StopSources {
        shutdown: stop,
        deadline: deadline.map(|limit| Instant::now() + limit),
        ..StopSources::default()
    };
    Pump::new(encoder, updates, stops, TaskTracker::new()).keep_alive(KEEP_ALIVE)
}

/// The pump as a stream of body chunks, driven by whoever polls it.
fn event_stream(
    pump: Pump,
    _span: tracing::Span,
) -> impl futures_util::Stream<Item = Result<axum::body::Bytes, std::convert::Infallible>> {
    stream::unfold(pump, |mut pump| async move {
        let batch = pump.next_batch().await?;
        Some((Ok(batch.to_bytes()), pump))
    })
}

#[allow(clippy::unnecessary_wraps)] // an item of an agent stream, like the `Err`s beside it
fn text(delta: &str) -> Result<AgentUpdate, AgentError> {
    Ok(AgentUpdate::Event(EventBody::text_content("m", delta)))
}

#[allow(clippy::unnecessary_wraps)] // an item of an agent stream, like the `Err`s beside it
fn start() -> Result<AgentUpdate, AgentError> {
    Ok(AgentUpdate::Event(EventBody::text_start("m")))
}

/// Each body chunk as the event types (or `keep-alive`) it holds, in order.
fn chunk_types(chunk: &[u8]) -> Vec<String> {
    if chunk == KEEP_ALIVE_FRAME {
        return vec!["keep-alive".into()];
    }
    let text = std::str::from_utf8(chunk).expect("UTF-8 frames");
    text.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let data = frame
                .strip_prefix("data: ")
                .expect("one data line per frame");
            let event: serde_json::Value = serde_json::from_str(data).expect("JSON data");
            let kind = event["type"].as_str().unwrap_or_default().to_owned();
            match event["code"].as_str() {
                Some(code) => format!("{kind}:{code}"),
                None => kind,
            }
        })
        .collect()
}

async fn next_chunk<S>(body: &mut std::pin::Pin<Box<S>>) -> Vec<String>
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, std::convert::Infallible>>,
{
    let chunk = body.next().await.expect("a chunk before the end");
    chunk_types(&chunk.expect("infallible"))
}

async fn chunks(pump: Pump) -> Vec<Vec<String>> {
    event_stream(pump, tracing::Span::none())
        .map(|chunk| chunk_types(&chunk.expect("infallible")))
        .collect()
        .await
}

#[tokio::test(start_paused = true)]
async fn run_started_goes_out_alone_then_ready_updates_share_one_write() {
    let updates = stream::iter(vec![start(), text("a"), text("b")]).boxed();
    let chunks = chunks(pump(updates, None, CancellationToken::new())).await;
    assert_eq!(
        chunks,
        [
            vec!["RUN_STARTED"],
            vec![
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_run_sends_keep_alives_and_then_continues() {
    let (sender, receiver) = mpsc::unbounded_channel();
    let updates = tokio_stream_from(receiver);
    let mut body = Box::pin(event_stream(
        pump(updates, None, CancellationToken::new()),
        tracing::Span::none(),
    ));
    assert_eq!(next_chunk(&mut body).await, ["RUN_STARTED"]);
    let before = Instant::now();
    assert_eq!(next_chunk(&mut body).await, ["keep-alive"]);
    assert_eq!(before.elapsed(), KEEP_ALIVE);
    assert_eq!(next_chunk(&mut body).await, ["keep-alive"]);
    sender.send(start()).unwrap();
    assert_eq!(next_chunk(&mut body).await, ["TEXT_MESSAGE_START"]);
    drop(sender);
    assert_eq!(
        next_chunk(&mut body).await,
        ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    );
    assert!(
        body.next().await.is_none(),
        "nothing after the terminal event"
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_ends_a_busy_run_with_run_deadline() {
    // An agent that always has the next update a little later, forever.
    let updates = stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((text("more"), ()))
    });
    let updates = stream::once(async { start() }).chain(updates).boxed();
    let chunks = chunks(pump(
        updates,
        Some(Duration::from_secs(5)),
        CancellationToken::new(),
    ))
    .await;
    assert_eq!(
        chunks
            .last()
            .and_then(|last| last.last())
            .map(String::as_str),
        Some("RUN_ERROR:run_deadline")
    );
    let contents = chunks
        .iter()
        .flatten()
        .filter(|t| *t == "TEXT_MESSAGE_CONTENT")
        .count();
    assert!((3..=5).contains(&contents), "{contents} updates in 5 s");
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_run_even_when_the_agent_has_more_ready() {
    let stop = CancellationToken::new();
    let updates = stream::iter(vec![start(), text("a")])
        .chain(stream::pending())
        .boxed();
    let mut body = Box::pin(event_stream(
        pump(updates, None, stop.clone()),
        tracing::Span::none(),
    ));
    assert_eq!(next_chunk(&mut body).await, ["RUN_STARTED"]);
    assert_eq!(
        next_chunk(&mut body).await,
        ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    );
    stop.cancel();
    assert_eq!(next_chunk(&mut body).await, ["RUN_ERROR:shutdown"]);
    assert!(body.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_failing_agent_ends_with_its_code_and_a_panicking_one_with_internal_error() {
    let failing = stream::iter(vec![
        start(),
        Err(AgentError::MaxIterations(3)),
        text("never sent"),
    ])
    .boxed();
    let failed = chunks(pump(failing, None, CancellationToken::new())).await;
    assert_eq!(
        failed[1],
        ["TEXT_MESSAGE_START", "RUN_ERROR:max_iterations"]
    );
    assert_eq!(failed.len(), 2, "nothing after the terminal event");

    let panicking = stream::iter(vec![start()])
        .chain(stream::poll_fn(|_| -> std::task::Poll<Option<_>> {
            panic!("a bug in an agent")
        }))
        .boxed();
    let panicked = chunks(pump(panicking, None, CancellationToken::new())).await;
    assert_eq!(
        panicked[1],
        ["TEXT_MESSAGE_START", "RUN_ERROR:internal_error"]
    );
    assert_eq!(panicked.len(), 2, "nothing after the terminal event");
}

/// An unbounded receiver as an agent stream.
fn tokio_stream_from(
    mut receiver: mpsc::UnboundedReceiver<Result<AgentUpdate, AgentError>>,
) -> AgentStream {
    stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed()
}
