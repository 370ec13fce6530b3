//! The one loop that drives a run: steps its [`Pump`] and hands each batch to a [`FrameSink`],
//! the client's outbox (`outbox`) or the run's log (`logged`), until the terminal event, or
//! until the sink says nobody reads any more or the run must end now.

use std::future::Future;

use super::pump::Pump;
use super::stops::Stop;
use crate::protocol::Batch;

/// Whether a sink takes another batch.
pub(super) enum Room {
    Ready,
    /// Nobody reads the run any more: it ends here, and dropping the pump ends the upstream.
    Closed,
    /// The run must end now, with this stop as its last batch.
    End(Stop),
}

/// Where a run's batches go.
pub(super) trait FrameSink: Send {
    /// Waits until the sink takes another batch.
    fn room(&mut self) -> impl Future<Output = Room> + Send;

    /// Resolves once nobody will read what the sink takes. A log's never does: it watches for
    /// a run nobody reads any more, which it stops through the run's stop token, and goes on
    /// waiting while the run ends with its terminal event.
    fn closed(&mut self) -> impl Future<Output = ()> + Send;

    /// Whether keep-alive comments are for this sink (a log keeps only frames).
    fn takes_keep_alives(&self) -> bool;

    /// Takes a batch; `terminal`: it holds the run's last event. `false`: nobody reads any more.
    fn send(&mut self, batch: Batch, terminal: bool) -> impl Future<Output = bool> + Send;
}

/// Steps `pump` into `sink` until the run is over or nobody reads it.
///
/// A block that uses the pump and the sink where it captured them: an `async fn` would keep
/// its arguments and the locals they move into side by side in the run's task, twice what the
/// run holds (the task is spawned with this future whole).
#[allow(clippy::manual_async_fn)] // on purpose, see above
pub(super) fn drive(mut pump: Pump, mut sink: impl FrameSink) -> impl Future<Output = ()> + Send {
    async move {
        loop {
            match sink.room().await {
                Room::Ready => {}
                Room::Closed => return,
                Room::End(stop) => {
                    if let Some(last) = pump.end_now(stop).await {
                        sink.send(last, true).await;
                    }
                    return;
                }
            }
            let batch = tokio::select! {
                biased;
                () = sink.closed() => return,
                batch = pump.next_batch() => batch,
            };
            let Some(batch) = batch else { return };
            if !sink.takes_keep_alives() && batch.is_keep_alive() {
                continue;
            }
            let over = pump.is_over();
            if !sink.send(batch, over).await || over {
                return;
            }
        }
    }
}
