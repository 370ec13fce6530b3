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
use crate::protocol::{write_frame, Event, EventBody, RunError, KEEP_ALIVE_FRAME};
use crate::runs::redis::{Presence, RunKeys, SharedError, SharedLimits, SharedRuns, SharedWriter};
use crate::runs::{
    LogLimits, Next, OpenError, ReadError, Reader, ReaderSlot, ReaderSlots, RunLog, RunLogs,
};
use crate::settings::{OnDisconnect, Settings, ThreadStoreKind};
use crate::threads::StoreError;

/// How often a run with no reader here asks whether a reader elsewhere is still attached.
const PRESENCE_POLL: Duration = Duration::from_secs(1);

/// The run log and what a disconnect does, shared by every request.
#[derive(Debug)]
pub struct Resumable {
    logs: Arc<RunLogs>,
    /// What a disconnect does, unless the request asks (see [`Resumable::continues`]).
    on_disconnect: OnDisconnect,
    /// How long a run that goes on after a disconnect waits for a reader.
    grace: Duration,
    /// The caps on reconnect readers (`runs.max_readers_per_run`, `runs.max_readers`).
    readers: ReaderSlots,
    /// The log shared by replicas, with `threads.store = "redis"`.
    shared: Option<SharedRuns>,
}

impl Resumable {
    /// `None` when runs are not logged (`threads.store = "off"`).
    ///
    /// # Errors
    /// With the Redis store: Redis cannot be reached or its URL is malformed.
    pub async fn from_settings(settings: &Settings) -> Result<Option<Arc<Self>>, StoreError> {
        let shared = match settings.threads.store {
            ThreadStoreKind::Off => return Ok(None),
            ThreadStoreKind::Memory => None,
            ThreadStoreKind::Redis => Some(shared_runs(settings).await?),
        };
        let logs = Arc::new(RunLogs::new(LogLimits::from_settings(&settings.runs)));
        logs.sweep_in_background();
        Ok(Some(Arc::new(Resumable {
            logs,
            on_disconnect: settings.runs.on_disconnect,
            grace: Duration::from_secs(settings.runs.reconnect_grace_secs),
            readers: ReaderSlots::new(settings.runs.max_readers_per_run, settings.runs.max_readers),
            shared,
        })))
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

/// The shared log on a connection of its own: a busy run log never queues behind threads.
async fn shared_runs(settings: &Settings) -> Result<SharedRuns, StoreError> {
    let threads = &settings.threads;
    let reply_timeout = Duration::from_millis(threads.redis_timeout_ms.max(1));
    let limits = SharedLimits {
        lease_ttl: Duration::from_secs(settings.runs.lease_ttl_secs.max(1)),
        log_ttl: Duration::from_secs(settings.runs.log_ttl_secs),
        max_run_events: settings.runs.log_max_run_events,
        reply_timeout,
    };
    SharedRuns::connect(&threads.redis_url, limits, Arc::new(lost_frame))
        .await
        .map_err(|error| StoreError::Backend(error.to_string()))
}

/// The `RUN_ERROR` `run_lost` frame a reader appends when a run's owner is gone.
fn lost_frame(run_id: &str, seq: u64) -> Bytes {
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

/// A new run's logs: this process's, and the shared one with Redis. Until the run is driven
/// its run id is only reserved: a refused request gives it back ([`LoggedRun::discard`], or
/// dropping it), so a refusal leaves no run behind that a retry, a reconnect or a stop would
/// meet.
pub(super) struct LoggedRun {
    log: Arc<RunLog>,
    shared: Option<SharedWriter>,
    /// The index to give the run id back to; `None` once the run is driven.
    reserved_in: Option<Arc<RunLogs>>,
}

impl LoggedRun {
    /// The token that stops the run.
    pub(super) fn stop_token(&self) -> tokio_util::sync::CancellationToken {
        self.log.stop_token()
    }

    /// Gives the run id back, here and in Redis, before the refusal is answered: a retry
    /// right after it runs.
    pub(super) async fn discard(mut self) {
        if let Some(logs) = self.reserved_in.take() {
            logs.discard(&self.log);
        }
        if let Some(shared) = self.shared.take() {
            shared.abandon().await;
        }
    }
}

impl Drop for LoggedRun {
    /// A request dropped before its run was driven (its client left while the request was
    /// being admitted). The shared log's claim goes with its writer.
    fn drop(&mut self) {
        if let Some(logs) = self.reserved_in.take() {
            logs.discard(&self.log);
        }
    }
}

/// Opens the log of a new run. With Redis the run id is claimed there first, so a run id live
/// on another replica is refused too.
pub(super) async fn open(
    resumable: &Resumable,
    agent: &str,
    scope: &str,
    run_id: &str,
) -> Result<LoggedRun, Refused> {
    let stop = tokio_util::sync::CancellationToken::new();
    let shared = match &resumable.shared {
        Some(shared) => {
            let keys = RunKeys::new(run_id, agent, scope);
            Some(
                shared
                    .claim(keys, stop.clone())
                    .await
                    .map_err(shared_error)?,
            )
        }
        None => None,
    };
    match resumable.logs.open_with_stop(run_id, agent, scope, stop) {
        Ok(log) => Ok(LoggedRun {
            log,
            shared,
            reserved_in: Some(Arc::clone(&resumable.logs)),
        }),
        Err(OpenError::InProgress) => {
            if let Some(shared) = shared {
                shared.abandon().await;
            }
            Err(Refused::RunInProgress)
        }
    }
}

fn shared_error(error: SharedError) -> Refused {
    match error {
        SharedError::InProgress => Refused::RunInProgress,
        SharedError::Read(error) => Refused::Cursor(error),
        SharedError::Backend(message) => {
            tracing::error!(error = %message, "the run log in Redis is unavailable");
            Refused::RunLogUnavailable
        }
    }
}

/// Starts the task that drives a logged run and answers with the first reader of its log.
/// `continues`: the run goes on after its client disconnects (see [`Resumable::continues`]);
/// otherwise it is stopped as soon as its last reader is gone.
pub(super) fn drive(
    resumable: &Resumable,
    mut run: LoggedRun,
    pump: Pump,
    span: tracing::Span,
    (continues, keep_alive): (bool, Duration),
) -> RunBody {
    let grace = if continues {
        resumable.grace
    } else {
        Duration::ZERO
    };
    run.reserved_in = None;
    let log = Arc::clone(&run.log);
    let shared = run.shared.take();
    // Attached before the driver starts, so the run never looks abandoned at its start.
    let first_reader = log.follow(0);
    let tasks = pump.tasks().clone();
    tasks.spawn(drive_run(log, pump, grace, shared).instrument(span));
    match first_reader {
        Ok(follower) => reader_body(Reader::Local(follower), None, keep_alive),
        // A new log starts at 0; should that ever change, fail the connection, not the run.
        Err(_) => Box::pin(stream::once(async {
            Err(std::io::Error::other("run log unavailable"))
        })),
    }
}

/// The run's log as the sink of its pump: this process's log, and the shared log's appender.
struct LogSink {
    log: Arc<RunLog>,
    shared: Option<SharedWriter>,
}

impl FrameSink for LogSink {
    async fn room(&mut self) -> Room {
        Room::Ready
    }

    async fn closed(&self) {
        // A logged run is stopped through its stop token, never by its readers leaving.
        std::future::pending::<()>().await;
    }

    fn takes_keep_alives(&self) -> bool {
        false
    }

    async fn send(&mut self, batch: Bytes, terminal: bool) -> bool {
        self.log.append(batch.clone(), terminal);
        // A batch with no frame (token usage alone) is not worth a round trip to Redis.
        if let Some(shared) = self
            .shared
            .as_ref()
            .filter(|_| terminal || !batch.is_empty())
        {
            shared.append(batch, terminal).await;
        }
        true
    }
}

/// Drives the pump into the log, while a watchdog stops the run once it has had no reader,
/// here or on another replica, for `grace`.
async fn drive_run(log: Arc<RunLog>, pump: Pump, grace: Duration, shared: Option<SharedWriter>) {
    let _broken = BreakOffOnDrop(Arc::clone(&log));
    let presence = shared.as_ref().map(SharedWriter::presence);
    let watchdog = tokio::spawn(stop_when_abandoned(Arc::clone(&log), grace, presence));
    sink::drive(pump, LogSink { log, shared }).await;
    watchdog.abort();
}

/// Stops the run once it has had no reader for `grace`: none attached here, and none on
/// another replica (whose readers keep a presence key fresh in Redis).
async fn stop_when_abandoned(log: Arc<RunLog>, grace: Duration, presence: Option<Presence>) {
    loop {
        log.abandoned(grace).await;
        let Some(presence) = &presence else { break };
        if !presence.attached().await {
            break;
        }
        // Read elsewhere: once that reader leaves, the grace period starts again.
        while presence.attached().await {
            tokio::time::sleep(PRESENCE_POLL).await;
        }
    }
    tracing::info!(
        grace_secs = grace.as_secs_f64(),
        "no reader attached; stopping the run"
    );
    log.stop_token().cancel();
}

/// Ends the log without a terminal event if the driver is dropped before the run ended (the
/// runtime shutting down), so readers do not wait for events that will never come.
struct BreakOffOnDrop(Arc<RunLog>);

impl Drop for BreakOffOnDrop {
    fn drop(&mut self) {
        self.0.break_off();
    }
}

/// A body that reads the log: frames as they come, keep-alives while idle. A log that breaks
/// off, or a reader left behind by the log's bounds, fails the connection rather than ending
/// it cleanly without a terminal event; the client reconnects and is told why.
///
/// A reconnect's `slot` is its place under the reader caps, held as long as the body.
fn reader_body(reader: Reader, slot: Option<ReaderSlot>, keep_alive: Duration) -> RunBody {
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
    run: (&str, &str, &str),
    cursor: u64,
    keep_alive: Duration,
) -> Result<RunBody, Refused> {
    let found = find(resumable, run).await?;
    let run_key = match &found {
        Found::Local(log) => RunLogs::key_of(log),
        Found::Shared(_, run) => run.key().to_owned(),
    };
    let slot = resumable
        .readers
        .acquire(&run_key)
        .map_err(Refused::TooManyReaders)?;
    let reader = match found {
        Found::Local(log) => Reader::Local(log.follow(cursor).map_err(Refused::Cursor)?),
        Found::Shared(shared, run) => Reader::Shared(Box::new(
            shared.follow(run, cursor).await.map_err(shared_error)?,
        )),
    };
    Ok(reader_body(reader, Some(slot), keep_alive))
}

/// Ends a live run with the `cancelled` outcome; a run that already ended is left as it is.
pub(super) async fn stop(
    resumable: &Resumable,
    run: (&str, &str, &str),
) -> Result<StopState, Refused> {
    let found = find(resumable, run).await?;
    let ended = match &found {
        Found::Local(log) => log.is_ended(),
        Found::Shared(_, run) => run.is_ended(),
    };
    if ended {
        return Ok(StopState::Ended);
    }
    match found {
        Found::Local(log) => log.stop_token().cancel(),
        Found::Shared(shared, run) => shared.request_stop(&run).await.map_err(shared_error)?,
    }
    Ok(StopState::Stopping)
}

/// Where a run's log was found: here, or in Redis (a run another replica owns, or one this
/// process no longer keeps).
enum Found {
    Local(Arc<RunLog>),
    Shared(SharedRuns, crate::runs::redis::SharedRun),
}

/// The run (agent, run id, scope), if it is kept: another scope's run is as unknown as one
/// that never existed or has expired.
async fn find(
    resumable: &Resumable,
    (agent, run_id, scope): (&str, &str, &str),
) -> Result<Found, Refused> {
    if let Some(log) = resumable.logs.get(run_id, agent, scope) {
        return Ok(Found::Local(log));
    }
    let shared = resumable.shared.as_ref().ok_or(Refused::RunNotFound)?;
    let keys = RunKeys::new(run_id, agent, scope);
    match shared.find(keys).await.map_err(shared_error)? {
        Some(run) => Ok(Found::Shared(shared.clone(), run)),
        None => Err(Refused::RunNotFound),
    }
}

impl From<ReadError> for Refused {
    fn from(error: ReadError) -> Self {
        Refused::Cursor(error)
    }
}
