//! The seam between a run's session and where its log is kept: [`RunLogStore`] opens a new
//! run's log ([`RunWriter`]) and finds a kept one ([`KeptRun`]), whose readers are
//! [`LogReader`]s. [`MemoryRunLogs`] keeps logs in this process; `redis::RedisRunLogs` keeps
//! them here too and shares them with every replica. The session knows only these traits, so a
//! store of another kind is one more implementation, chosen where the app is assembled.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt};
use tokio_util::sync::CancellationToken;

use super::{Follower, Next, OpenError, ReadError, RunLog, RunLogs};
use crate::protocol::Batch;

/// Which run: a run id is the client's choice, so two callers (or two agents) may pick the same
/// one without meeting.
#[derive(Debug, Clone, Copy)]
pub struct RunRef<'a> {
    pub scope: &'a str,
    pub agent: &'a str,
    pub run_id: &'a str,
}

/// Which thread: a thread id is the client's choice, kept apart by scope and agent like a run.
#[derive(Debug, Clone, Copy)]
pub struct ThreadRef<'a> {
    pub scope: &'a str,
    pub agent: &'a str,
    pub thread_id: &'a str,
}

/// The latest run on a thread, as a client connecting to the thread finds it: the run, and the
/// context its session noted (see [`RunWriter::on_thread`]).
pub struct OnThread {
    pub run: Box<dyn KeptRun>,
    pub context: Bytes,
}

impl std::fmt::Debug for OnThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnThread")
            .field("run", &self.run.key())
            .field("context_bytes", &self.context.len())
            .finish()
    }
}

/// Why a run log could not answer.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("a run with this id is still streaming")]
    InProgress,
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("run log backend: {0}")]
    Backend(String),
}

/// Where runs' logs are kept.
pub trait RunLogStore: Send + Sync + std::fmt::Debug + 'static {
    /// Reserves `run`'s id for a new run and opens its log; `stop` is cancelled by a stop
    /// request, wherever it arrives. Refused while a run with that id is live.
    fn open<'a>(
        &'a self,
        run: RunRef<'a>,
        stop: CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn RunWriter>, LogError>>;

    /// The kept run `run`, if any: another scope's is as unknown as one never run.
    fn find<'a>(
        &'a self,
        run: RunRef<'a>,
    ) -> BoxFuture<'a, Result<Option<Box<dyn KeptRun>>, LogError>>;

    /// The latest kept run on `thread` that its session noted ([`RunWriter::on_thread`]), live
    /// or ended.
    fn latest_on_thread<'a>(
        &'a self,
        thread: ThreadRef<'a>,
    ) -> BoxFuture<'a, Result<Option<OnThread>, LogError>>;
}

/// The writing end of a new run's log. Until [`RunWriter::start`] the run id is only reserved:
/// dropping the writer, or [`RunWriter::discard`], gives it back. Once started, a writer dropped
/// before the terminal event ends the log as broken, so readers stop waiting.
pub trait RunWriter: Send + Sync {
    /// The run is driven from now on; the reader that answers its first response, attached
    /// before the first batch so the run never looks abandoned at its start.
    ///
    /// # Errors
    /// The log cannot be read from its start (a new log always can).
    fn start(&mut self) -> Result<Box<dyn LogReader>, LogError>;

    /// Appends one batch of frames (no keep-alives); `terminal`: it holds the last event.
    fn append(&mut self, batch: Batch, terminal: bool) -> BoxFuture<'_, ()>;

    /// Notes that the run runs on thread `thread_id` (of its scope and agent), with `context`,
    /// what a client connecting to the thread needs of the run besides its frames: the run is
    /// then the thread's latest ([`RunLogStore::latest_on_thread`]).
    fn on_thread(&mut self, thread_id: &str, context: Bytes) -> BoxFuture<'_, ()>;

    /// Resolves once the run has had no reader, here or anywhere else, for `grace` in a row.
    fn abandoned(&self, grace: Duration) -> BoxFuture<'static, ()>;

    /// Gives the run id back before the run was driven (its request was refused), so that a
    /// retry right after it runs.
    fn discard(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// A kept run, as a reconnect or a stop finds it.
pub trait KeptRun: Send + Sync {
    /// The run's key, which the reader caps count by.
    fn key(&self) -> String;

    /// Whether its log holds the terminal event.
    fn is_ended(&self) -> bool;

    /// Asks the run's owner, wherever it is, to stop it.
    fn request_stop(&self) -> BoxFuture<'_, Result<(), LogError>>;

    /// A reader of the frames after `cursor` (0: all), then of the live run.
    fn follow(
        self: Box<Self>,
        cursor: u64,
    ) -> BoxFuture<'static, Result<Box<dyn LogReader>, LogError>>;
}

/// A reader of one run's log.
pub trait LogReader: Send {
    /// The next frames, waiting up to `idle` for them; `None` once the log has ended.
    fn next(&mut self, idle: Duration) -> BoxFuture<'_, Option<Next>>;
}

impl LogReader for Follower {
    fn next(&mut self, idle: Duration) -> BoxFuture<'_, Option<Next>> {
        Follower::next(self, idle).boxed()
    }
}

/// Run logs kept in this process only.
#[derive(Debug)]
pub struct MemoryRunLogs {
    logs: Arc<RunLogs>,
}

impl MemoryRunLogs {
    /// The store over `logs` (whose expired runs it sweeps in the background).
    pub fn new(logs: Arc<RunLogs>) -> Self {
        logs.sweep_in_background();
        MemoryRunLogs { logs }
    }

    /// Opens `run`'s log here.
    pub(super) fn open_here(
        &self,
        run: RunRef<'_>,
        stop: CancellationToken,
    ) -> Result<MemoryWriter, LogError> {
        match self
            .logs
            .open_with_stop(run.run_id, run.agent, run.scope, stop)
        {
            Ok(log) => Ok(MemoryWriter {
                log,
                logs: Arc::clone(&self.logs),
                started: false,
            }),
            Err(OpenError::InProgress) => Err(LogError::InProgress),
        }
    }

    /// The latest run on `thread` this process keeps.
    pub(super) fn latest_here(&self, thread: ThreadRef<'_>) -> Option<OnThread> {
        self.logs
            .latest_on_thread(thread.thread_id, thread.agent, thread.scope)
            .map(|(log, context)| OnThread {
                run: Box::new(KeptHere(log)),
                context,
            })
    }

    /// `run`, if this process keeps it.
    pub(super) fn find_here(&self, run: RunRef<'_>) -> Option<KeptHere> {
        self.logs
            .get(run.run_id, run.agent, run.scope)
            .map(KeptHere)
    }
}

impl RunLogStore for MemoryRunLogs {
    fn open<'a>(
        &'a self,
        run: RunRef<'a>,
        stop: CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn RunWriter>, LogError>> {
        let opened = self
            .open_here(run, stop)
            .map(|writer| Box::new(writer) as Box<dyn RunWriter>);
        std::future::ready(opened).boxed()
    }

    fn find<'a>(
        &'a self,
        run: RunRef<'a>,
    ) -> BoxFuture<'a, Result<Option<Box<dyn KeptRun>>, LogError>> {
        let found = self
            .find_here(run)
            .map(|kept| Box::new(kept) as Box<dyn KeptRun>);
        std::future::ready(Ok(found)).boxed()
    }

    fn latest_on_thread<'a>(
        &'a self,
        thread: ThreadRef<'a>,
    ) -> BoxFuture<'a, Result<Option<OnThread>, LogError>> {
        std::future::ready(Ok(self.latest_here(thread))).boxed()
    }
}

/// A new run's log in this process.
#[derive(Debug)]
pub(super) struct MemoryWriter {
    pub(super) log: Arc<RunLog>,
    logs: Arc<RunLogs>,
    started: bool,
}

impl MemoryWriter {
    pub(super) fn append_here(&self, batch: Batch, terminal: bool) {
        self.log.append(batch, terminal);
    }

    pub(super) fn on_thread_here(&self, thread_id: &str, context: Bytes) {
        self.logs.on_thread(&self.log, thread_id, context);
    }
}

impl RunWriter for MemoryWriter {
    fn start(&mut self) -> Result<Box<dyn LogReader>, LogError> {
        self.started = true;
        let follower = self.log.follow(0)?;
        Ok(Box::new(follower))
    }

    fn append(&mut self, batch: Batch, terminal: bool) -> BoxFuture<'_, ()> {
        self.append_here(batch, terminal);
        std::future::ready(()).boxed()
    }

    fn on_thread(&mut self, thread_id: &str, context: Bytes) -> BoxFuture<'_, ()> {
        self.on_thread_here(thread_id, context);
        std::future::ready(()).boxed()
    }

    fn abandoned(&self, grace: Duration) -> BoxFuture<'static, ()> {
        let log = Arc::clone(&self.log);
        async move { log.abandoned(grace).await }.boxed()
    }

    fn discard(self: Box<Self>) -> BoxFuture<'static, ()> {
        // Dropping a writer that was never started discards it.
        drop(self);
        std::future::ready(()).boxed()
    }
}

impl Drop for MemoryWriter {
    fn drop(&mut self) {
        if self.started {
            // Ends the log without a terminal event if the run's driver went away before the
            // run ended (the runtime shutting down), so readers do not wait for events that
            // will never come; a log that ended is left as it is.
            self.log.break_off();
        } else {
            // A request refused, or dropped, before its run was driven: nothing is left behind.
            self.logs.discard(&self.log);
        }
    }
}

/// A run this process keeps.
#[derive(Debug)]
pub(super) struct KeptHere(Arc<RunLog>);

impl KeptRun for KeptHere {
    fn key(&self) -> String {
        RunLogs::key_of(&self.0)
    }

    fn is_ended(&self) -> bool {
        self.0.is_ended()
    }

    fn request_stop(&self) -> BoxFuture<'_, Result<(), LogError>> {
        self.0.stop_token().cancel();
        std::future::ready(Ok(())).boxed()
    }

    fn follow(
        self: Box<Self>,
        cursor: u64,
    ) -> BoxFuture<'static, Result<Box<dyn LogReader>, LogError>> {
        let reader = self
            .0
            .follow(cursor)
            .map(|follower| Box::new(follower) as Box<dyn LogReader>)
            .map_err(LogError::from);
        std::future::ready(reader).boxed()
    }
}
