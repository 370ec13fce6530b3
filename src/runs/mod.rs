//! Resumable runs: the per-process log of each run's frames, which a reconnecting
//! client replays from its `Last-Event-ID` and then follows live, and the handle that stops a
//! run. The log is bounded (runs, frames and bytes per run, bytes in all) and forgets a run
//! some minutes after its terminal event; a cursor older than what is kept is an explicit
//! [`ReadError::CursorExpired`], never a silent restart. `frames` keeps each run's frames:
//! content frames in a row as their deltas, the others as their JSON. `store` is the seam the
//! session uses ([`RunLogStore`]): this process's logs ([`MemoryRunLogs`]), or those logs shared
//! with every replica on Redis (`redis`).

mod follow;
mod frames;
mod readers;
pub mod redis;
mod store;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use frames::Frames;
use tokio_util::sync::CancellationToken;

pub use follow::{Follower, Next};
pub use readers::{ReaderRefusal, ReaderSlot, ReaderSlots};
pub use store::{
    KeptRun, LogError, LogReader, MemoryRunLogs, OnThread, RunLogStore, RunRef, RunWriter,
    ThreadRef,
};

/// The bounds of the log (`[runs]`, built at assembly).
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    pub max_runs: usize,
    pub max_run_events: usize,
    pub max_run_bytes: usize,
    pub max_bytes: usize,
    /// How long a run stays readable after its terminal event.
    pub ttl: Duration,
}

/// Every logged run of this process, by (scope, agent, run id): a run id is the client's
/// choice, so two users (or two agents) may pick the same one without meeting.
#[derive(Debug)]
pub struct RunLogs {
    limits: LogLimits,
    runs: Mutex<Index>,
}

#[derive(Debug, Default)]
struct Index {
    /// By [`run_key`].
    runs: HashMap<String, Arc<RunLog>>,
    /// Run keys in the order they were opened: the oldest is forgotten first.
    order: VecDeque<String>,
    /// When expired runs were last dropped and the bytes of all runs last counted.
    last_sweep: Option<Instant>,
    /// The latest run on each thread it was told of, by [`thread_key`]: what a client
    /// connecting to the thread joins. Weak, so a run forgotten by the index is gone here too.
    by_thread: HashMap<String, Weak<RunLog>>,
}

/// How often the index is walked to drop expired runs and count bytes: walking it on every
/// open would cost a lock per kept run on the path of every new run.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Why a run could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("a run with this id is still streaming")]
    InProgress,
}

/// Why a log cannot be read from a cursor.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    /// The events after the cursor are no longer kept: the client must start a new run.
    #[error("the events after this cursor are no longer kept")]
    CursorExpired,
    /// The cursor names an event the run has not produced.
    #[error("the cursor is ahead of the run")]
    CursorAhead,
}

impl RunLogs {
    pub fn new(limits: LogLimits) -> Self {
        RunLogs {
            limits,
            runs: Mutex::new(Index::default()),
        }
    }

    /// Opens the log of a new run, forgetting expired runs and, past the bounds, the oldest.
    /// A finished run with the same id is replaced; a live one is not.
    pub fn open(&self, run_id: &str, agent: &str, scope: &str) -> Result<Arc<RunLog>, OpenError> {
        self.open_with_stop(run_id, agent, scope, CancellationToken::new())
    }

    /// [`RunLogs::open`], with the run's stop token made beforehand (the shared log's stop
    /// requests cancel it too).
    pub fn open_with_stop(
        &self,
        run_id: &str,
        agent: &str,
        scope: &str,
        stop: CancellationToken,
    ) -> Result<Arc<RunLog>, OpenError> {
        let key = run_key(run_id, agent, scope);
        let mut index = lock(&self.runs);
        self.sweep(&mut index);
        if let Some(existing) = index.runs.get(&key) {
            if !existing.is_ended() {
                return Err(OpenError::InProgress);
            }
            index.order.retain(|kept| *kept != key);
        }
        let log = Arc::new(RunLog::new(run_id, agent, scope, self.limits, stop));
        index.runs.insert(key.clone(), Arc::clone(&log));
        index.order.push_back(key);
        Ok(log)
    }

    /// Forgets `log`, a run that was opened but never started (its request was refused), and
    /// ends it for anyone who found it meanwhile: a refusal leaves nothing behind, and a retry
    /// with the same run id runs. A newer run under the same key is left alone.
    pub fn discard(&self, log: &Arc<RunLog>) {
        let key = run_key(&log.run_id, &log.agent, &log.scope);
        {
            let mut index = lock(&self.runs);
            if index
                .runs
                .get(&key)
                .is_some_and(|kept| Arc::ptr_eq(kept, log))
            {
                index.runs.remove(&key);
                index.order.retain(|kept| *kept != key);
            }
        }
        log.break_off();
    }

    /// The key the index and the reader caps know the run by.
    pub fn key_of(log: &RunLog) -> String {
        run_key(&log.run_id, &log.agent, &log.scope)
    }

    /// The run `run_id` of `agent`, if it is kept and belongs to `scope`: another scope's run
    /// is as unknown as one that never existed.
    pub fn get(&self, run_id: &str, agent: &str, scope: &str) -> Option<Arc<RunLog>> {
        let index = lock(&self.runs);
        let log = index.runs.get(&run_key(run_id, agent, scope))?;
        let visible = !log.expired(Instant::now(), self.limits.ttl);
        visible.then(|| Arc::clone(log))
    }

    /// Notes that `log` runs on thread `thread_id` (of its agent and scope), with `context`: what
    /// a client connecting to the thread needs of the run besides its frames (the session's).
    pub fn on_thread(&self, log: &Arc<RunLog>, thread_id: &str, context: Bytes) {
        lock(&log.frames).context = Some(context);
        let key = thread_key(thread_id, &log.agent, &log.scope);
        lock(&self.runs).by_thread.insert(key, Arc::downgrade(log));
    }

    /// The latest run this process was told of on thread `thread_id` of `agent` in `scope`, if
    /// it is still kept, and its context.
    pub fn latest_on_thread(
        &self,
        thread_id: &str,
        agent: &str,
        scope: &str,
    ) -> Option<(Arc<RunLog>, Bytes)> {
        let log = lock(&self.runs)
            .by_thread
            .get(&thread_key(thread_id, agent, scope))?
            .upgrade()?;
        if log.expired(Instant::now(), self.limits.ttl) {
            return None;
        }
        let context = lock(&log.frames).context.clone()?;
        Some((log, context))
    }

    /// How many runs are kept (expired ones until the next sweep).
    pub fn len(&self) -> usize {
        lock(&self.runs).runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for one more run: at most once per [`SWEEP_INTERVAL`], drops expired runs and
    /// the oldest past `max_bytes`; on every call, the oldest past `max_runs`. A run forgotten
    /// here stays readable by whoever holds it; new readers get 404.
    fn sweep(&self, index: &mut Index) {
        let now = Instant::now();
        if index
            .last_sweep
            .is_none_or(|last| now.duration_since(last) >= SWEEP_INTERVAL)
        {
            self.drop_expired(index, now);
        }
        while index.runs.len() >= self.limits.max_runs {
            let Some(oldest) = index.order.pop_front() else {
                break;
            };
            index.runs.remove(&oldest);
        }
    }

    /// Drops the runs expired at `now`, then the oldest while all runs together hold more than
    /// `max_bytes`.
    fn drop_expired(&self, index: &mut Index, now: Instant) {
        let Index {
            runs,
            order,
            last_sweep,
            by_thread,
        } = index;
        *last_sweep = Some(now);
        runs.retain(|_, log| !log.expired(now, self.limits.ttl));
        order.retain(|id| runs.contains_key(id));
        by_thread.retain(|_, log| log.strong_count() > 0);
        let mut bytes: usize = runs.values().map(|log| log.bytes()).sum();
        while bytes > self.limits.max_bytes {
            let Some(log) = order.pop_front().and_then(|oldest| runs.remove(&oldest)) else {
                break;
            };
            bytes = bytes.saturating_sub(log.bytes());
        }
    }

    /// Drops expired runs every [`SWEEP_INTERVAL`] even when no run opens, so that a server
    /// gone quiet gives their memory back; the task ends when the logs are dropped.
    pub fn sweep_in_background(self: &Arc<Self>) {
        let logs = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticks.tick().await;
                let Some(logs) = logs.upgrade() else { break };
                let mut index = lock(&logs.runs);
                logs.drop_expired(&mut index, Instant::now());
            }
        });
    }
}

/// The index's key of a run: each part length-prefixed, so no two runs share a key by moving
/// a separator.
fn run_key(run_id: &str, agent: &str, scope: &str) -> String {
    crate::text::key_digest(&[scope, agent, run_id])
}

/// The key of a thread in [`Index::by_thread`].
fn thread_key(thread_id: &str, agent: &str, scope: &str) -> String {
    crate::text::key_digest(&[scope, agent, thread_id])
}

/// One run's frames, its live state and its stop handle.
#[derive(Debug)]
pub struct RunLog {
    run_id: String,
    agent: String,
    scope: String,
    limits: LogLimits,
    frames: Mutex<Kept>,
    /// Wakes the followers when frames are appended or the log ends (a bare signal: a watch
    /// channel's eight notifiers and shared cell took about 350 bytes per kept run, and the
    /// followers read the frames from the log, not from the signal).
    appended: tokio::sync::Notify,
    /// How many readers are attached; the run's driver waits on it.
    readers: ReaderCount,
    /// Cancelled to stop the run (a stop request, or no reader for the grace period).
    stop: CancellationToken,
}

/// A run's frames and whether the run has ended.
#[derive(Debug)]
struct Kept {
    frames: Frames,
    /// When the terminal event was appended, or the run's driver went away without one.
    ended_at: Option<Instant>,
    /// The driver went away without a terminal event (a cancelled task).
    broken: bool,
    /// What a client connecting to the run's thread needs of it (see [`RunLogs::on_thread`]).
    context: Option<Bytes>,
}

impl RunLog {
    fn new(
        run_id: &str,
        agent: &str,
        scope: &str,
        limits: LogLimits,
        stop: CancellationToken,
    ) -> Self {
        RunLog {
            run_id: run_id.to_owned(),
            agent: agent.to_owned(),
            scope: scope.to_owned(),
            limits,
            frames: Mutex::new(Kept {
                frames: Frames::new(crate::protocol::event_id_prefix(run_id)),
                ended_at: None,
                broken: false,
                context: None,
            }),
            appended: tokio::sync::Notify::new(),
            readers: ReaderCount::default(),
            stop,
        }
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn agent(&self) -> &str {
        &self.agent
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The token that stops the run.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    pub fn is_ended(&self) -> bool {
        lock(&self.frames).ended_at.is_some()
    }

    fn bytes(&self) -> usize {
        lock(&self.frames).frames.bytes()
    }

    fn expired(&self, now: Instant, ttl: Duration) -> bool {
        lock(&self.frames)
            .ended_at
            .is_some_and(|ended| now.duration_since(ended) >= ttl)
    }

    /// Appends one batch of frames as the encoder wrote them (no keep-alives). `terminal`: the
    /// batch holds the run's last event.
    pub fn append(&self, batch: crate::protocol::Batch, terminal: bool) {
        {
            let mut kept = lock(&self.frames);
            kept.frames.append(batch);
            kept.frames
                .trim(self.limits.max_run_events, self.limits.max_run_bytes);
            if terminal {
                kept.ended_at = Some(Instant::now());
                // Kept for reconnects long after the run: without the spare room its growth
                // left.
                kept.frames.shrink();
            }
        }
        // A terminal batch with no frames still wakes the followers.
        self.appended.notify_waiters();
    }

    /// The run's driver went away without a terminal event: readers end their streams instead
    /// of waiting for events that will never come.
    pub fn break_off(&self) {
        {
            let mut kept = lock(&self.frames);
            if kept.ended_at.is_some() {
                return;
            }
            kept.ended_at = Some(Instant::now());
            kept.broken = true;
        }
        self.appended.notify_waiters();
    }

    /// Resolves once no reader has been attached for `grace` in a row.
    pub async fn abandoned(&self, grace: Duration) {
        loop {
            self.readers.until(|n| n == 0).await;
            // Still none after the grace period: abandoned.
            if tokio::time::timeout(grace, self.readers.until(|n| n > 0))
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Attaches a reader that gets every frame after `cursor` (0: from the start), then the
    /// live ones until the terminal event. The reader counts as attached from here on.
    pub fn follow(self: &Arc<Self>, cursor: u64) -> Result<Follower, ReadError> {
        let follower = Follower::new(Arc::clone(self), cursor);
        let kept = lock(&self.frames);
        if cursor + 1 < kept.frames.first_seq() {
            return Err(ReadError::CursorExpired);
        }
        if cursor > kept.frames.last_seq() {
            return Err(ReadError::CursorAhead);
        }
        Ok(follower)
    }

    /// Frames after `cursor`, at most `max_bytes` of them (at least one), and whether the log
    /// ends after them; `Err` when they are no longer kept.
    fn read_after(&self, cursor: u64, max_bytes: usize) -> Result<Batch, ReadError> {
        let kept = lock(&self.frames);
        let read = kept.frames.read_after(cursor, max_bytes)?;
        let ended = cursor + read.frames >= kept.frames.last_seq() && kept.ended_at.is_some();
        Ok(Batch {
            bytes: read.bytes,
            frames: read.frames,
            ended,
            broken: ended && kept.broken,
        })
    }
}

/// The readers attached to a log: a count and a signal that it changed (lighter than a watch
/// channel, and a log is kept for `log_ttl` after its run).
#[derive(Debug, Default)]
struct ReaderCount {
    count: std::sync::atomic::AtomicUsize,
    changed: tokio::sync::Notify,
}

impl ReaderCount {
    fn attach(&self) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    fn detach(&self) {
        let _ = self.count.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |n| Some(n.saturating_sub(1)),
        );
        self.changed.notify_waiters();
    }

    /// Resolves once the count satisfies `holds`.
    async fn until(&self, holds: impl Fn(usize) -> bool) {
        loop {
            // Registered before the check, so a change between the check and the wait wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if holds(self.count.load(std::sync::atomic::Ordering::Acquire)) {
                return;
            }
            changed.await;
        }
    }
}

/// What one read of the log gave.
#[derive(Debug, Default)]
struct Batch {
    /// The frames, in one chunk.
    bytes: Bytes,
    frames: u64,
    /// Nothing follows these frames.
    ended: bool,
    /// ... because the run's driver went away without a terminal event.
    broken: bool,
}

/// The seq of `Last-Event-ID` `<runId>:<seq>` for `run_id`; `None` when it is not that shape.
pub fn parse_cursor(run_id: &str, last_event_id: &str) -> Option<u64> {
    let seq = last_event_id.strip_prefix(run_id)?.strip_prefix(':')?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // No run reaches the last seq, and reading after it would overflow.
    seq.parse().ok().filter(|seq| *seq < u64::MAX)
}

/// A poisoned lock only means a panic elsewhere mid-update of plain data; the data is still
/// usable, and a log must never take the server down with it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
