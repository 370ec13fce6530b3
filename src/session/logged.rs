//! Logged runs: a run driven by a task of its own that writes its frames into the run's log
//! (`crate::runs`), and every response, the first as well as each reconnect, is a reader of
//! that log. So the run can outlive its connection when its request asks (`X-AGUI-On-Disconnect:
//! continue`) or the operator set `runs.on_disconnect = "continue"`, which is the one place the
//! rule "no run outlives its response" gives way: the driver task, not the response body, owns
//! the upstream request, and the run's stop token (a stop request, its last reader gone when
//! it did not ask to go on, or no reader for `runs.reconnect_grace_secs` when it did) ends it
//! with the `cancelled` outcome. With the Redis store the run's log is shared too
//! (`crate::runs::redis`): a reconnect or a stop may reach any replica, which reads the shared
//! log or asks the owner to stop.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use tracing::Instrument;

use super::pump::Pump;
use super::sink::{self, FrameSink, Room};
use super::{Refused, RunBody};
use crate::protocol::{write_frame, Batch, Event, EventBody, RunError, KEEP_ALIVE_FRAME};
use crate::runs::{
    KeptRun, LogError, LogReader, Next, OnThread, ReaderSlot, ReaderSlots, RunLogStore, RunRef,
    RunWriter, ThreadRef,
};
use serde::Deserialize;

/// What a run does when its client disconnects before its terminal event. A standard AG-UI
/// client stops a run by closing its connection, so the default stops the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// `cancel`, unless the request asks to `continue` (the `X-AGUI-On-Disconnect: continue`
    /// header, or `forwardedProps.aguiHost.onDisconnect = "continue"`) and a thread store keeps
    /// the run's log for a reconnect.
    #[default]
    Auto,
    /// The run ends at once, its upstream request is closed, and the thread keeps the answer
    /// as far as it had streamed; a request's ask to continue is ignored.
    Cancel,
    /// Every run goes on into its log for a client to reconnect to, until no reader has been
    /// attached for `reconnect_grace_secs` (with a thread store).
    Continue,
}

/// What a disconnect does and how many may read a run (from `[runs]`, built at assembly).
#[derive(Debug, Clone, Copy)]
pub struct DisconnectPolicy {
    pub on_disconnect: OnDisconnect,
    /// How long a run that goes on after a disconnect waits for a reader.
    pub grace: Duration,
    /// Readers of one run at once, and of all runs (0: no cap).
    pub max_readers: (usize, usize),
}

/// The run log and what a disconnect does, shared by every request.
#[derive(Debug)]
pub struct Resumable {
    logs: Arc<dyn RunLogStore>,
    /// What a disconnect does, unless the request asks (see [`Resumable::continues`]).
    on_disconnect: OnDisconnect,
    /// How long a run that goes on after a disconnect waits for a reader.
    grace: Duration,
    /// The caps on reconnect readers (`runs.max_readers_per_run`, `runs.max_readers`).
    readers: ReaderSlots,
}

impl Resumable {
    /// Runs logged in `logs`, by `policy`.
    pub fn new(logs: Arc<dyn RunLogStore>, policy: DisconnectPolicy) -> Self {
        let (per_run, total) = policy.max_readers;
        Resumable {
            logs,
            on_disconnect: policy.on_disconnect,
            grace: policy.grace,
            readers: ReaderSlots::new(per_run, total),
        }
    }

    /// Whether a run goes on after its client disconnects: by default only when the request
    /// `asked` for it, since a standard client stops a run by closing its connection (its stop
    /// button, `abortRun()`), and going on would bill a model for an answer the user stopped.
    pub fn continues(&self, asked: bool) -> bool {
        match self.on_disconnect {
            OnDisconnect::Cancel => false,
            OnDisconnect::Continue => true,
            OnDisconnect::Auto => asked,
        }
    }
}

/// The `RUN_ERROR` `run_lost` frame a reader appends when a run's owner is gone (a shared log's
/// readers need it; the log itself knows no events).
pub fn lost_frame(run_id: &str, seq: u64) -> Bytes {
    let event = Event {
        body: EventBody::RunError(RunError {
            message: "The server running this run stopped; the run is lost. Please retry.".into(),
            code: Some("run_lost".into()),
            usage: None,
        }),
        timestamp: Some(crate::protocol::now_millis()),
        raw_event: None,
        metadata: None,
    };
    let mut out = format!("id: {run_id}:{seq}\n").into_bytes();
    if let Err(error) = write_frame(&event, &mut out) {
        tracing::error!(%error, "could not encode RUN_ERROR run_lost");
    }
    Bytes::from(out)
}

/// A new run's log. Until the run is driven its run id is only reserved: a refused request
/// gives it back ([`LoggedRun::discard`], or dropping it), so a refusal leaves no run behind
/// that a retry, a reconnect or a stop would meet.
pub(super) struct LoggedRun {
    writer: Box<dyn RunWriter>,
    stop: tokio_util::sync::CancellationToken,
    /// The run's thread and its context for connecting clients, noted once the run is driven.
    thread: Option<(String, Bytes)>,
}

impl LoggedRun {
    /// The run is on a thread, with `context` (its id and what a connecting client needs).
    pub(super) fn on_thread(mut self, context: Option<(String, Bytes)>) -> Self {
        self.thread = context;
        self
    }

    /// The token that stops the run.
    pub(super) fn stop_token(&self) -> tokio_util::sync::CancellationToken {
        self.stop.clone()
    }

    /// Gives the run id back before the refusal is answered: a retry right after it runs.
    pub(super) async fn discard(self) {
        self.writer.discard().await;
    }
}

/// Opens the log of a new run (with a shared store, the run id is claimed for every replica).
pub(super) async fn open(
    resumable: &Resumable,
    agent: &str,
    scope: &str,
    run_id: &str,
) -> Result<LoggedRun, Refused> {
    let stop = tokio_util::sync::CancellationToken::new();
    let run = RunRef {
        scope,
        agent,
        run_id,
    };
    let writer = resumable
        .logs
        .open(run, stop.clone())
        .await
        .map_err(log_error)?;
    Ok(LoggedRun {
        writer,
        stop,
        thread: None,
    })
}

fn log_error(error: LogError) -> Refused {
    match error {
        LogError::InProgress => Refused::RunInProgress,
        LogError::Read(error) => Refused::Cursor(error),
        LogError::Backend(message) => {
            tracing::error!(error = %message, "the run log is unavailable");
            Refused::RunLogUnavailable
        }
    }
}

/// Starts the task that drives a logged run and answers with the first reader of its log.
/// `continues`: the run goes on after its client disconnects (see [`Resumable::continues`]);
/// otherwise it is stopped as soon as its last reader is gone.
pub(super) fn drive(
    resumable: &Resumable,
    run: LoggedRun,
    pump: Pump,
    span: tracing::Span,
    (continues, keep_alive): (bool, Duration),
) -> RunBody {
    let grace = if continues {
        resumable.grace
    } else {
        Duration::ZERO
    };
    let LoggedRun {
        mut writer,
        stop,
        thread,
    } = run;
    // Attached before the driver starts, so the run never looks abandoned at its start.
    let first_reader = writer.start();
    let tasks = pump.tasks().clone();
    let abandoned = Some(writer.abandoned(grace));
    let sink = LogSink {
        writer,
        thread,
        abandoned,
        stop,
        grace,
    };
    tasks.spawn(sink::drive(pump, sink).instrument(span));
    match first_reader {
        Ok(reader) => reader_body(reader, None, keep_alive),
        // A new log starts at 0; should that ever change, fail the connection, not the run.
        Err(_) => Box::pin(stream::once(async {
            Err(std::io::Error::other("run log unavailable"))
        })),
    }
}

/// The run's log as the sink of its pump. It also stops the run once it has had no reader,
/// here or anywhere else, for `grace`: the stop reaches the pump as a stop request, which ends
/// the run with its terminal event, so the drive goes on until then (one task, no watchdog of
/// its own, and no future around the drive that would hold a second place for it).
struct LogSink {
    writer: Box<dyn RunWriter>,
    /// The run's thread and its context for connecting clients, noted before the first batch
    /// (here rather than before the drive, so the drive's task holds no second place for the
    /// pump while it waits on that).
    thread: Option<(String, Bytes)>,
    /// Resolves once the run has had no reader for `grace`; `None` once it has.
    abandoned: Option<futures_util::future::BoxFuture<'static, ()>>,
    stop: tokio_util::sync::CancellationToken,
    grace: Duration,
}

impl FrameSink for LogSink {
    async fn room(&mut self) -> Room {
        Room::Ready
    }

    async fn closed(&mut self) {
        // A logged run is stopped through its stop token, never by its readers leaving.
        if let Some(abandoned) = self.abandoned.as_mut() {
            abandoned.await;
            self.abandoned = None;
            tracing::info!(
                grace_secs = self.grace.as_secs_f64(),
                "no reader attached; stopping the run"
            );
            self.stop.cancel();
        }
        std::future::pending::<()>().await;
    }

    fn takes_keep_alives(&self) -> bool {
        false
    }

    async fn send(&mut self, batch: Batch, terminal: bool) -> bool {
        if let Some((thread_id, context)) = self.thread.take() {
            self.writer.on_thread(&thread_id, context).await;
        }
        self.writer.append(batch, terminal).await;
        true
    }
}

/// A body that reads the log: frames as they come, keep-alives while idle. A log that breaks
/// off, or a reader left behind by the log's bounds, fails the connection rather than ending
/// it cleanly without a terminal event; the client reconnects and is told why.
///
/// A reconnect's `slot` is its place under the reader caps, held as long as the body.
fn reader_body(
    reader: Box<dyn LogReader>,
    slot: Option<ReaderSlot>,
    keep_alive: Duration,
) -> RunBody {
    let chunks = stream::unfold((reader, slot), move |(mut follower, slot)| async move {
        let chunk = match follower.next(keep_alive).await? {
            Next::Frames { bytes, .. } => Ok(bytes),
            Next::Idle => Ok(Bytes::from_static(KEEP_ALIVE_FRAME)),
            Next::Broken => Err(std::io::Error::other(
                "the run ended without a terminal event",
            )),
            Next::Expired => Err(std::io::Error::other("the reader fell behind the run log")),
            Next::Unavailable => Err(std::io::Error::other("the run log is unavailable")),
        };
        Some((chunk, (follower, slot)))
    });
    Box::pin(chunks)
}

/// Whether a stop found the run still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopState {
    /// The run had already ended; nothing was done.
    Ended,
    /// The run was asked to stop; it ends with the cancelled outcome.
    Stopping,
}

/// The events of a kept run after `cursor` (0: all), then the live run until its terminal event.
pub(super) async fn reconnect(
    resumable: &Resumable,
    run: RunRef<'_>,
    cursor: u64,
    keep_alive: Duration,
) -> Result<RunBody, Refused> {
    let found = resumable.logs.find(run).await.map_err(log_error)?;
    let found = found.ok_or(Refused::RunNotFound)?;
    follow(resumable, found, cursor, keep_alive).await
}

/// The thread's latest logged run, and its context (see `super::connect`).
pub(super) async fn latest_on_thread(
    resumable: &Resumable,
    thread: ThreadRef<'_>,
) -> Result<Option<OnThread>, Refused> {
    resumable
        .logs
        .latest_on_thread(thread)
        .await
        .map_err(log_error)
}

/// The frames of `found` after `cursor`, then the live run, as a reconnect reads them (under
/// the same reader caps).
pub(super) async fn follow(
    resumable: &Resumable,
    found: Box<dyn KeptRun>,
    cursor: u64,
    keep_alive: Duration,
) -> Result<RunBody, Refused> {
    let slot = resumable
        .readers
        .acquire(&found.key())
        .map_err(Refused::TooManyReaders)?;
    let reader = found.follow(cursor).await.map_err(log_error)?;
    Ok(reader_body(reader, Some(slot), keep_alive))
}

/// Ends a live run with the `cancelled` outcome; a run that already ended is left as it is.
pub(super) async fn stop(resumable: &Resumable, run: RunRef<'_>) -> Result<StopState, Refused> {
    let found = resumable.logs.find(run).await.map_err(log_error)?;
    let found = found.ok_or(Refused::RunNotFound)?;
    if found.is_ended() {
        return Ok(StopState::Ended);
    }
    found.request_stop().await.map_err(log_error)?;
    Ok(StopState::Stopping)
}
