//! The bounded outbox between a run and its response body, and the slow-reader guard.
//!
//! A task of its own drives the run's [`Pump`] and queues each chunk for the body; the body
//! takes chunks as the connection can write them. What is queued is bounded by
//! `server.max_stream_buffer_bytes`: at the bound the run waits (the model's stream waits with
//! it, through TCP), and if the client makes no room for `server.slow_client_timeout_secs` the
//! run ends with `RUN_ERROR` `client_too_slow`, which drops the model's stream at once. The
//! terminal event is queued past the bound: the client sees it once it reads the rest. Dropping
//! the body (a disconnect) ends the task and with it the run, as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::pump::Pump;
use super::sink::{self, FrameSink, Room};
use super::stops::Stop;
use super::RunBody;

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
pub(super) fn spawn(pump: Pump, span: tracing::Span, limits: StreamBufferLimits) -> RunBody {
    let backlog = Arc::new(Backlog {
        queued: AtomicUsize::new(0),
        room: Notify::new(),
    });
    let (sender, receiver) = mpsc::unbounded_channel();
    let outbox = Outbox {
        sender,
        backlog: Arc::clone(&backlog),
        limits,
        shutdown: pump.shutdown_token().clone(),
    };
    // On the shutdown's tracker, like every task that drives a run.
    let tasks = pump.tasks().clone();
    tasks.spawn(sink::drive(pump, outbox).instrument(span));
    Box::pin(body_stream(receiver, backlog, limits.max_bytes))
}

/// The sending side of the outbox.
struct Outbox {
    sender: mpsc::UnboundedSender<Bytes>,
    backlog: Arc<Backlog>,
    limits: StreamBufferLimits,
    shutdown: CancellationToken,
}

impl FrameSink for Outbox {
    /// Room below the bound; at it, waits for the client, or ends the run when the client
    /// leaves it full for too long or the grace period is over meanwhile.
    async fn room(&mut self) -> Room {
        while self.backlog.queued.load(Ordering::Acquire) >= self.limits.max_bytes {
            // `notify_one` keeps a permit when nobody waits, so room made between the check
            // and the wait is not missed.
            tokio::select! {
                () = self.sender.closed() => return Room::Closed,
                () = self.backlog.room.notified() => {}
                () = self.shutdown.cancelled() => return Room::End(Stop::Shutdown),
                () = tokio::time::sleep(self.limits.slow_client_timeout) => {
                    // The stop's own warning (`Stop::log`) says the run ends; this adds how much
                    // the client left unread.
                    tracing::debug!(
                        queued_bytes = self.backlog.queued.load(Ordering::Relaxed),
                        "the client left its stream full"
                    );
                    return Room::End(Stop::ClientTooSlow);
                }
            }
        }
        Room::Ready
    }

    async fn closed(&self) {
        self.sender.closed().await;
    }

    fn takes_keep_alives(&self) -> bool {
        true
    }

    async fn send(&mut self, batch: Bytes, _terminal: bool) -> bool {
        self.backlog.queued.fetch_add(batch.len(), Ordering::AcqRel);
        self.sender.send(batch).is_ok()
    }
}

/// The body: each queued chunk as it comes, the end when the task is done.
fn body_stream(
    mut receiver: mpsc::UnboundedReceiver<Bytes>,
    backlog: Arc<Backlog>,
    max_bytes: usize,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
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
