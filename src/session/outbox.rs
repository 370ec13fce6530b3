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

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::pump::Pump;
use super::sink::{self, FrameSink, Room};
use super::stops::Stop;
use super::RunBody;
use crate::protocol::Batch;

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
        block: FrameBlock::default(),
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
    /// Where batches are written as bytes to leave.
    block: FrameBlock,
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

    async fn closed(&mut self) {
        self.sender.closed().await;
    }

    fn takes_keep_alives(&self) -> bool {
        true
    }

    async fn send(&mut self, batch: Batch, _terminal: bool) -> bool {
        let bytes = self.block.bytes_of(&batch);
        self.backlog.queued.fetch_add(bytes.len(), Ordering::AcqRel);
        self.sender.send(bytes).is_ok()
    }
}

/// The block a run's batches are written into: a few paced frames, and at most this much left
/// unused while a stream is open (a larger batch gets a block of its own size).
const FRAME_BLOCK_BYTES: usize = 512;

/// The block a run's batches are written into on their way to the socket.
#[derive(Debug, Default)]
struct FrameBlock(BytesMut);

impl FrameBlock {
    /// `batch`'s bytes: written into the run's current block and split off it, so that a paced
    /// run's one-frame batches share a few allocations instead of taking one each.
    fn bytes_of(&mut self, batch: &Batch) -> Bytes {
        if batch.is_keep_alive() {
            return Bytes::from_static(crate::protocol::KEEP_ALIVE_FRAME);
        }
        if self.0.capacity() < batch.len() {
            self.0 = BytesMut::with_capacity(batch.len().max(FRAME_BLOCK_BYTES));
        }
        batch.write(&mut self.0);
        self.0.split().freeze()
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::protocol::{Frame, FrameAt, FrameOut};

    /// A batch of one event whose JSON is `len` bytes of `fill`.
    fn batch(fill: u8, len: usize) -> Batch {
        let mut batch = Batch::default();
        let prefix: Arc<[u8]> = Arc::from(&b"id: r:"[..]);
        let at = FrameAt {
            seq: 1,
            id_prefix: Some(&prefix),
        };
        batch.put(Frame::Event(Bytes::from(vec![fill; len])), at);
        batch
    }

    #[test]
    fn batches_keep_their_bytes_and_share_blocks() {
        let mut block = FrameBlock::default();
        let mut inputs: Vec<Batch> = (0..40u8)
            .map(|i| batch(b'a' + i % 26, 100 + usize::from(i)))
            .collect();
        inputs.insert(17, batch(b'z', FRAME_BLOCK_BYTES * 3 + 1));
        let written: Vec<Bytes> = inputs.iter().map(|batch| block.bytes_of(batch)).collect();
        for (input, bytes) in inputs.iter().zip(&written) {
            assert_eq!(bytes, &input.to_bytes());
        }
        // The first batches were packed into one block: each starts where the one before ended.
        let mut filled = 0;
        let in_first_block = inputs
            .iter()
            .take_while(|batch| {
                filled += batch.len();
                filled <= FRAME_BLOCK_BYTES
            })
            .count();
        assert!(in_first_block >= 3, "a block holds a few paced frames");
        for pair in written[..in_first_block].windows(2) {
            assert_eq!(
                pair[0].as_ptr().wrapping_add(pair[0].len()),
                pair[1].as_ptr()
            );
        }
        // Dropping some batches leaves the others, and the blocks they share, intact.
        let kept: Vec<_> = written.into_iter().step_by(3).collect();
        for (input, bytes) in inputs.iter().step_by(3).zip(&kept) {
            assert_eq!(bytes, &input.to_bytes());
        }
    }
}
