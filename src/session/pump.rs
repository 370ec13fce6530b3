//! The pump: a step machine between the agent's updates and the run's encoder. Each step is one
//! batch of typed frames (bytes are made where the batch leaves: the client's outbox, a log's
//! reader, Redis), `RUN_STARTED` first, then whatever the next wake-up gives (several updates
//! when they are ready at once), or a keep-alive comment; the last holds the terminal event.
//! A wake-up is the agent's next update, a [`Stop`], or idleness. The pump owns what a run holds
//! for its stream's whole life (its concurrency slot, its observers) and gives it back when the
//! terminal event is written, or when it is dropped (the client went away).

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_util::task::TaskTracker;

use super::observe::{Outcome, RunObserver};
use super::stops::{Stop, StopSignals, StopSources};
use crate::agent::{AgentError, AgentStream, AgentUpdate};
use crate::protocol::{Batch, EncodeError, RunEncoder};

/// Most bytes gathered into one body chunk when several updates are ready at once: batching
/// saves a write per event under load without holding back a slow stream.
const MAX_BATCH_BYTES: usize = 16 * 1024;

/// See the module docs.
pub(super) struct Pump {
    encoder: RunEncoder,
    /// `None` once the run ended: dropping the agent stream releases the upstream at once.
    updates: Option<AgentStream>,
    keep_alive: Duration,
    stops: StopSources,
    /// The timers and signals `wait` selects on, made at its first call.
    waits: Option<Box<Waits>>,
    /// Metrics, span, thread: told of each step, finished when the run ends.
    observers: Vec<Box<dyn RunObserver>>,
    /// The run's concurrency slot, freed when the terminal event is written.
    slot: Option<OwnedSemaphorePermit>,
    /// Where what outlives the pump (a save after a disconnect) runs, so shutdown waits for it.
    tasks: TaskTracker,
    started_at: Instant,
    /// When the last chunk was written (`None` before `RUN_STARTED`): the keep-alive counts from it.
    last_write: Option<Instant>,
}

/// What a run waits on besides its agent, kept across wake-ups (see `Pump::wait`).
struct Waits {
    idle: Pin<Box<Sleep>>,
    stops: StopSignals,
}

/// What polling the agent stream gave: an update, its end, or a panic.
type Polled = Result<Option<Result<AgentUpdate, AgentError>>, Box<dyn std::any::Any + Send>>;

/// Why the pump woke up.
#[allow(clippy::large_enum_variant)] // a local, moved once per step; boxing buys nothing
enum Wake {
    Next(Polled),
    Idle,
    Stop(Stop),
}

impl Pump {
    /// A pump for `updates`, writing through `encoder`, ended early by `stops`.
    pub(super) fn new(
        encoder: RunEncoder,
        updates: AgentStream,
        stops: StopSources,
        tasks: TaskTracker,
    ) -> Self {
        Pump {
            encoder,
            updates: Some(updates),
            keep_alive: Duration::from_secs(15),
            stops,
            waits: None,
            observers: Vec::new(),
            slot: None,
            tasks,
            started_at: Instant::now(),
            last_write: None,
        }
    }

    /// How long the stream may be idle before a keep-alive comment goes out.
    #[must_use]
    pub(super) fn keep_alive(mut self, interval: Duration) -> Self {
        self.keep_alive = interval;
        self
    }

    /// Adds an observer of the run.
    #[must_use]
    pub(super) fn observed_by(mut self, observer: Box<dyn RunObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// Holds the run's concurrency slot until the run ends.
    #[must_use]
    pub(super) fn holding(mut self, slot: Option<OwnedSemaphorePermit>) -> Self {
        self.slot = slot;
        self
    }

    /// The token that ends the run when the shutdown grace period is over.
    pub(super) fn shutdown_token(&self) -> &tokio_util::sync::CancellationToken {
        &self.stops.shutdown
    }

    /// Where tasks that outlive a request are spawned.
    pub(super) fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Whether the terminal event has been written.
    pub(super) fn is_over(&self) -> bool {
        self.updates.is_none()
    }

    /// The next batch of frames (see the module docs); `None` after the end.
    pub(super) async fn next_batch(&mut self) -> Option<Batch> {
        self.updates.as_ref()?;
        let mut out = Batch::default();
        let events_before = self.encoder.events_written();
        if self.last_write.is_none() {
            // RUN_STARTED goes out before the model is even called: time to first byte is ours.
            self.write_or_fail(RunEncoder::start, &mut out);
        } else {
            let wake = self.wait().await;
            match wake {
                Wake::Idle => {
                    let keep_alive = Batch::keep_alive();
                    self.tell_write(0, keep_alive.len());
                    self.last_write = Some(Instant::now());
                    return Some(keep_alive);
                }
                Wake::Stop(stop) => self.stop(stop, &mut out),
                Wake::Next(next) => self.handle(next, &mut out),
            }
            while out.len() < MAX_BATCH_BYTES {
                let Some(updates) = self.updates.as_mut() else {
                    break;
                };
                match AssertUnwindSafe(updates.next())
                    .catch_unwind()
                    .now_or_never()
                {
                    Some(next) => self.handle(next, &mut out),
                    None => break,
                }
            }
        }
        Some(self.settle(out, events_before).await)
    }

    /// Ends the run at once for `stop` (the agent stream, and with it the upstream request,
    /// goes now); the final batch to send. `None` if the run was over.
    pub(super) async fn end_now(&mut self, stop: Stop) -> Option<Batch> {
        self.updates.as_ref()?;
        let mut out = Batch::default();
        let events_before = self.encoder.events_written();
        self.stop(stop, &mut out);
        Some(self.settle(out, events_before).await)
    }

    /// Tells the observers of a batch about to leave; once it holds the terminal event, frees
    /// the run's slot and finishes the observers (the thread is saved) before it leaves.
    async fn settle(&mut self, out: Batch, events_before: u64) -> Batch {
        self.last_write = Some(Instant::now());
        let events = self.encoder.events_written() - events_before;
        self.tell_write(events, out.len());
        if self.updates.is_none() {
            // The terminal event is in `out`: free the run's slot now, not when the client has
            // read it or the connection closes.
            self.slot = None;
            for observer in std::mem::take(&mut self.observers) {
                observer.finish().await;
            }
        }
        out
    }

    /// Waits for the next thing that moves the run. The keep-alive timer lives as long as the
    /// run and is moved only when it fires early (it counts from the last write).
    async fn wait(&mut self) -> Wake {
        let keep_alive = self.keep_alive;
        let stops = &self.stops;
        let waits = self.waits.get_or_insert_with(|| {
            Box::new(Waits {
                idle: Box::pin(tokio::time::sleep(keep_alive)),
                stops: StopSignals::new(stops),
            })
        });
        let Some(updates) = self.updates.as_mut() else {
            return Wake::Next(Ok(None));
        };
        loop {
            // Biased: once the grace period or the deadline is over, a busy agent cannot keep
            // the run going by always having the next update ready.
            let wake = tokio::select! {
                biased;
                stop = waits.stops.next() => Wake::Stop(stop),
                next = AssertUnwindSafe(updates.next()).catch_unwind() => Wake::Next(next),
                () = &mut waits.idle => Wake::Idle,
            };
            if let Wake::Idle = wake {
                let due = self.last_write.unwrap_or(self.started_at) + keep_alive;
                if Instant::now() < due {
                    waits.idle.as_mut().reset(due);
                    continue;
                }
                waits.idle.as_mut().reset(Instant::now() + keep_alive);
            }
            return wake;
        }
    }

    fn tell_write(&mut self, events: u64, bytes: usize) {
        for observer in &mut self.observers {
            observer.on_write(events, bytes);
        }
    }

    fn handle(&mut self, next: Polled, out: &mut Batch) {
        let update = match next {
            Err(_panic) => {
                tracing::error!("the agent panicked; ending the run");
                return self.fail("internal_error", "An internal error ended the run.", out);
            }
            Ok(None) => {
                self.write_or_fail(RunEncoder::finish, out);
                // Still running unless `finish` failed, which already ended the run with an error.
                if self.updates.is_some() {
                    self.end(Outcome::Finished);
                }
                return;
            }
            Ok(Some(Err(error))) => {
                tracing::warn!(code = error.code(), %error, "run failed");
                return self.fail(error.code(), &error.public_message(), out);
            }
            Ok(Some(Ok(update))) => update,
        };
        for observer in &mut self.observers {
            observer.on_update(&update);
        }
        match update {
            AgentUpdate::Event(body) => self.write_or_fail(|e, out| e.push(body, out), out),
            AgentUpdate::Usage(usage) => self.encoder.add_usage(usage),
            AgentUpdate::Interrupt(interrupt) => self.encoder.add_interrupt(*interrupt),
            AgentUpdate::ToolProgress(_) => {
                // Only the status middleware shows progress; without it there is nothing to send.
            }
            AgentUpdate::ApprovalRequest(request) => {
                tracing::error!(
                    tool = %request.tool_name,
                    "an approval request reached the encoder: no approval gate is wired"
                );
                self.fail("internal_error", "An internal error ended the run.", out);
            }
        }
    }

    fn write_or_fail(
        &mut self,
        write: impl FnOnce(&mut RunEncoder, &mut Batch) -> Result<(), EncodeError>,
        out: &mut Batch,
    ) {
        if let Err(error) = write(&mut self.encoder, out) {
            tracing::error!(%error, "the agent produced an invalid event sequence");
            self.fail("internal_error", "An internal error ended the run.", out);
        }
    }

    /// Ends the run for `stop`: `RUN_ERROR` with its code, or, for a stop request, the
    /// cancelled end.
    fn stop(&mut self, stop: Stop, out: &mut Batch) {
        stop.log();
        match stop.code() {
            Some(code) => self.fail(code, stop.message(), out),
            None => {
                if let Err(error) = self.encoder.cancel(stop.message(), out) {
                    tracing::error!(%error, "could not encode the end of a stopped run");
                }
                self.end(Outcome::Stopped);
            }
        }
    }

    fn fail(&mut self, code: &str, message: &str, out: &mut Batch) {
        if let Err(error) = self.encoder.fail(code, message, out) {
            tracing::error!(%error, "could not encode RUN_ERROR");
        }
        self.end(Outcome::Failed { code });
    }

    /// The run is over: the agent stream (and with it the upstream request) goes now; the
    /// slot and the observers once the last bytes are counted (see `settle`).
    fn end(&mut self, outcome: Outcome<'_>) {
        self.updates = None;
        for observer in &mut self.observers {
            observer.on_end(outcome);
        }
        tracing::info!(
            outcome = outcome.name(),
            elapsed_ms = self.elapsed_ms(),
            "run ended"
        );
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.updates.take().is_some() {
            // The client went away mid-run (disconnect or Stop): dropping the agent stream here
            // closes the upstream request; nothing keeps running.
            for observer in &mut self.observers {
                observer.on_end(Outcome::Disconnected);
            }
            tracing::info!(
                elapsed_ms = self.elapsed_ms(),
                "client disconnected; run cancelled"
            );
        }
        // What the client saw is kept (a disconnect does not roll the thread back); the save
        // cannot be awaited here, so it runs on its own, and shutdown waits for it.
        let observers = std::mem::take(&mut self.observers);
        if observers.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.tasks.spawn_on(
                async move {
                    for observer in observers {
                        observer.finish().await;
                    }
                },
                &runtime,
            );
        }
    }
}

#[cfg(test)]
#[path = "pump_tests.rs"]
mod tests;
