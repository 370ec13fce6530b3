//! The bounded outbox between a run and its response body, and the slow-reader guard.
//!
//! A task of its own drives the run's [`Pump`] and queues each chunk for the body; the body
//! takes chunks as the connection can write them. What is queued is bounded by
//! `server.max_stream_buffer_bytes`: at the bound the run waits (the model's stream waits with
//! it, through TCP), and if the client makes no room for `server.slow_client_timeout_secs` the
//! run ends with `RUN_ERROR` `client_too_slow`, which drops the model's stream at once. The
//! terminal event is queued past the bound: the client sees it once it reads the rest. Dropping
//! the body (a disconnect) ends the task and with it the run, as before.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use tokio::sync::{mpsc, Notify};
use tracing::Instrument;

use super::Pump;

/// What a slow client may hold up (`server.max_stream_buffer_bytes`,
/// `server.slow_client_timeout_secs`).
#[derive(Debug, Clone, Copy)]
pub struct StreamBufferLimits {
    pub max_bytes: usize,
    pub slow_client_timeout: Duration,
}

/// The byte count queued for the body, and the signal that room was made.
struct Backlog {
    queued: AtomicUsize,
    room: Notify,
}

/// Starts the task that drives `pump` and answers with the body that streams its chunks.
pub(super) fn spawn(pump: Pump, span: tracing::Span, limits: StreamBufferLimits) -> Body {
    let backlog = Arc::new(Backlog {
        queued: AtomicUsize::new(0),
        room: Notify::new(),
    });
    let (sender, receiver) = mpsc::unbounded_channel();
    // On the shutdown's tracker, like every task that drives a run.
    let tasks = pump.tasks.clone();
    tasks.spawn(drive(pump, sender, Arc::clone(&backlog), limits).instrument(span));
    Body::from_stream(body_stream(receiver, backlog, limits.max_bytes))
}

/// Steps the pump until the terminal event, queueing each chunk; stops early when the body is
/// dropped, or ends the run when the client leaves no room for too long.
async fn drive(
    mut pump: Pump,
    sender: mpsc::UnboundedSender<Bytes>,
    backlog: Arc<Backlog>,
    limits: StreamBufferLimits,
) {
    let closed = sender.closed();
    tokio::pin!(closed);
    let shutdown = pump.stop.clone();
    loop {
        if backlog.queued.load(Ordering::Acquire) >= limits.max_bytes {
            // `notify_one` keeps a permit when nobody waits, so room made between the check
            // and the wait is not missed.
            tokio::select! {
                () = &mut closed => return,
                () = backlog.room.notified() => continue,
                () = shutdown.cancelled() => {
                    let message = "The server is shutting down; please retry.";
                    if let Some(last) = pump.end_now("shutdown", message).await {
                        let _ = sender.send(last);
                    }
                    return;
                }
                () = tokio::time::sleep(limits.slow_client_timeout) => {
                    tracing::warn!(
                        queued_bytes = backlog.queued.load(Ordering::Relaxed),
                        "the client read too slowly; ending the run"
                    );
                    let message = "The client read the stream too slowly; the run was ended.";
                    if let Some(last) = pump.end_now("client_too_slow", message).await {
                        let _ = sender.send(last);
                    }
                    return;
                }
            }
        }
        let batch = tokio::select! {
            biased;
            () = &mut closed => return,
            batch = pump.next_batch() => batch,
        };
        let Some(batch) = batch else { return };
        backlog.queued.fetch_add(batch.len(), Ordering::AcqRel);
        if sender.send(batch).is_err() || pump.is_over() {
            return;
        }
    }
}

/// The body: each queued chunk as it comes, the end when the task is done.
fn body_stream(
    mut receiver: mpsc::UnboundedReceiver<Bytes>,
    backlog: Arc<Backlog>,
    max_bytes: usize,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| {
        receiver.poll_recv(cx).map(|chunk| {
            chunk.map(|chunk| {
                let before = backlog.queued.fetch_sub(chunk.len(), Ordering::AcqRel);
                if before >= max_bytes {
                    backlog.room.notify_one();
                }
                Ok(chunk)
            })
        })
    })
}
