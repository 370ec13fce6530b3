//! The run log shared by replicas, on Redis (6.2+ or Valkey): one Stream per run whose entry
//! ids are the pump's own seqs (`<seq>-0`), an owner lease the run's process renews, a stop
//! flag and a stop channel, and a presence key readers on other replicas refresh. The owner
//! keeps its in-process [`super::RunLog`] for its own readers and hands each batch to an
//! appender task that writes it with one script call (a bounded queue between them); readers on
//! other replicas replay with `XREAD` on a connection of their own ([`SharedFollower`]). Every
//! write that could race is a script that checks the lease first, so a process that lost its
//! lease can never append after a reader declared the run lost.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Script};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod follow;
mod keys;
mod store;

pub use follow::SharedFollower;
use keys::{backend, parse_entry, StreamEntry};
pub use keys::{LostFrame, RunKeys};
pub use store::RedisRunLogs;

use super::{lock, LogError, ReadError};

/// The channel every replica listens on for stop requests; a message is a run's key digest.
const STOP_CHANNEL: &str = "agui:runs:stop";

/// Batches a run may have waiting for Redis before its pump waits too: enough to ride out a
/// slow reply without holding the run back, few enough that a stalled Redis costs little memory.
const APPEND_QUEUE: usize = 32;

/// Most bytes one append script carries when several batches are waiting.
const MAX_APPEND_BYTES: usize = 256 * 1024;

/// Appends a batch while the caller holds the lease; the last frame of a terminal batch is
/// marked `t`, and the end of the run shortens the log's life and frees the lease.
static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local seq = tonumber(ARGV[2])
for i = 7, #ARGV do
  local id = string.format('%d-0', seq + i - 7)
  if ARGV[6] == '1' and i == #ARGV then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], id, 'f', ARGV[i], 't', '1')
  else
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], id, 'f', ARGV[i])
  end
end
if ARGV[6] == '1' then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('DEL', KEYS[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1",
    )
});

/// Takes a run id for a new run, replacing an ended (or lost) run's log.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
  return 1
end
return 0",
    )
});

/// Renews the lease and the log's life; 2 when a stop was requested, 0 when the lease is lost.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 1 then return 2 end
return 1",
    )
});

/// Frees the lease if the caller still holds it.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0",
    )
});

/// What the bounds and lifetimes of the shared log are.
#[derive(Debug, Clone, Copy)]
pub struct SharedLimits {
    /// How long a run's owner may go silent before readers elsewhere call the run lost.
    pub lease_ttl: Duration,
    /// How long a log stays after its terminal event.
    pub log_ttl: Duration,
    /// Entries kept per run (`MAXLEN ~`).
    pub max_run_events: usize,
    /// How long one Redis reply may take (the shared connection's timeout).
    pub reply_timeout: Duration,
}

/// The shared log service of this process. Cheap to clone.
#[derive(Clone)]
pub struct SharedRuns {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionManager,
    client: redis::Client,
    limits: SharedLimits,
    lost_frame: LostFrame,
    /// The stop tokens of the runs this process owns, by key digest.
    owned: Mutex<HashMap<String, CancellationToken>>,
    subscriber: Mutex<Option<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for SharedRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRuns")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(subscriber) = lock(&self.subscriber).take() {
            subscriber.abort();
        }
    }
}

/// What a reader on this replica finds of a run in Redis.
#[derive(Debug, Clone)]
pub struct SharedRun {
    keys: RunKeys,
    first_seq: u64,
    last_seq: u64,
    ended: bool,
}

impl SharedRun {
    /// The run's key, the same digest of (scope, agent, run id) the process's own log uses.
    pub fn key(&self) -> &str {
        &self.keys.digest
    }

    /// Whether the log holds the run's terminal event.
    pub fn is_ended(&self) -> bool {
        self.ended
    }
}

impl SharedRuns {
    /// The service on `connection` (shared, never blocked) and `client` (which opens each
    /// remote reader's own connection and the stop subscription). Subscribes before it returns,
    /// so a stop sent once the server is up is never missed.
    ///
    /// # Errors
    /// Redis cannot be reached.
    pub async fn start(
        connection: ConnectionManager,
        client: redis::Client,
        limits: SharedLimits,
        lost_frame: LostFrame,
    ) -> Result<SharedRuns, LogError> {
        let mut pubsub = client.get_async_pubsub().await.map_err(backend)?;
        pubsub.subscribe(STOP_CHANNEL).await.map_err(backend)?;
        let runs = SharedRuns {
            inner: Arc::new(Inner {
                connection,
                client,
                limits,
                lost_frame,
                owned: Mutex::default(),
                subscriber: Mutex::default(),
            }),
        };
        let listener = tokio::spawn(listen_for_stops(Arc::downgrade(&runs.inner), pubsub));
        *lock(&runs.inner.subscriber) = Some(listener.abort_handle());
        Ok(runs)
    }

    /// The service for the Redis at `url`: a shared connection of its own (a busy run log
    /// never queues behind the thread store's commands), and the client that opens each
    /// remote reader's connection and the stop subscription.
    ///
    /// # Errors
    /// A malformed URL, or Redis not answering.
    pub async fn connect(
        url: &str,
        limits: SharedLimits,
        lost_frame: LostFrame,
    ) -> Result<SharedRuns, LogError> {
        let client = redis::Client::open(url).map_err(backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(limits.reply_timeout))
            .set_response_timeout(Some(limits.reply_timeout))
            .set_number_of_retries(2);
        let connection = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(backend)?;
        SharedRuns::start(connection, client, limits, lost_frame).await
    }

    fn ms(duration: Duration) -> u64 {
        u64::try_from(duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// How long a live log is kept without an append or a renewal: long enough past a dead
    /// owner's lease for a reader to find the run and be told it is lost.
    fn live_ttl(&self) -> Duration {
        self.inner.limits.log_ttl + self.inner.limits.lease_ttl
    }

    /// Claims `keys` for a new run owned by this process and starts its appender and lease
    /// renewal; `stop` is cancelled by a stop request from any replica.
    ///
    /// # Errors
    /// The run id is live (here or elsewhere), or Redis failed.
    pub async fn claim(
        &self,
        keys: RunKeys,
        stop: CancellationToken,
    ) -> Result<SharedWriter, LogError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut connection = self.inner.connection.clone();
        let claimed: i64 = CLAIM
            .key(&keys.owner)
            .key(&keys.log)
            .key(&keys.stop)
            .key(&keys.readers)
            .arg(&token)
            .arg(Self::ms(self.inner.limits.lease_ttl))
            .invoke_async(&mut connection)
            .await
            .map_err(backend)?;
        if claimed != 1 {
            return Err(LogError::InProgress);
        }
        lock(&self.inner.owned).insert(keys.digest.clone(), stop.clone());
        let keys = Arc::new(keys);
        let renewal = tokio::spawn(self.clone().renew(Arc::clone(&keys), token.clone(), stop));
        let (queue, batches) = mpsc::channel(APPEND_QUEUE);
        let appender = Appender {
            runs: self.clone(),
            keys: Arc::clone(&keys),
            token,
            next_seq: 1,
            renewal: renewal.abort_handle(),
            broken: false,
            ended: false,
        };
        let appender = tokio::spawn(appender.run(batches));
        Ok(SharedWriter {
            runs: self.clone(),
            keys,
            queue,
            appender,
        })
    }

    /// Renews the lease every third of its TTL until the run ends; a stop flag found on the
    /// way stops the run (the stop channel's message may have been missed), and a lease lost
    /// stops the renewals: readers elsewhere will call the run lost.
    async fn renew(self, keys: Arc<RunKeys>, token: String, stop: CancellationToken) {
        loop {
            tokio::time::sleep(self.inner.limits.lease_ttl / 3).await;
            let mut connection = self.inner.connection.clone();
            let renewed: Result<i64, _> = RENEW
                .key(&keys.owner)
                .key(&keys.log)
                .key(&keys.stop)
                .arg(&token)
                .arg(Self::ms(self.inner.limits.lease_ttl))
                .arg(Self::ms(self.live_ttl()))
                .invoke_async(&mut connection)
                .await;
            match renewed {
                Ok(1) => {}
                Ok(2) => stop.cancel(),
                Ok(_) => {
                    tracing::warn!(run_id = %keys.run_id, "the run lost its lease in Redis");
                    return;
                }
                // A failed renewal is retried; the lease's TTL leaves room for two more.
                Err(error) => tracing::warn!(%error, "could not renew a run's lease"),
            }
        }
    }

    /// Notes that the run of `keys` runs on thread `thread`, with `context`: the thread's
    /// latest run for every replica. Both keys last as long as an ended run's log
    /// (`runs.log_ttl_secs`), so a run that outlives that is joined live from its own replica
    /// only, and once it has ended its thread's record holds it.
    ///
    /// # Errors
    /// Redis failed.
    pub async fn note_thread(
        &self,
        keys: &RunKeys,
        thread: super::ThreadRef<'_>,
        context: &[u8],
    ) -> Result<(), LogError> {
        let ttl = Self::ms(self.inner.limits.log_ttl).max(1);
        let mut connection = self.inner.connection.clone();
        redis::pipe()
            .cmd("SET")
            .arg(&keys.context)
            .arg(context)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("SET")
            .arg(keys::thread_key(
                thread.thread_id,
                thread.agent,
                thread.scope,
            ))
            .arg(&keys.run_id)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(backend)
    }

    /// The latest run on `thread` another replica noted, and its context.
    ///
    /// # Errors
    /// Redis failed.
    pub async fn latest_on_thread(
        &self,
        thread: super::ThreadRef<'_>,
    ) -> Result<Option<(SharedRun, Bytes)>, LogError> {
        let mut connection = self.inner.connection.clone();
        let run_id: Option<String> = redis::cmd("GET")
            .arg(keys::thread_key(
                thread.thread_id,
                thread.agent,
                thread.scope,
            ))
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        let Some(run_id) = run_id else {
            return Ok(None);
        };
        let keys = RunKeys::new(&run_id, thread.agent, thread.scope);
        let context: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&keys.context)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        let Some(context) = context else {
            return Ok(None);
        };
        Ok(self
            .find(keys)
            .await?
            .map(|run| (run, Bytes::from(context))))
    }

    /// The run, if its log is in Redis (with its first and last seq); `None` otherwise.
    ///
    /// # Errors
    /// Redis failed.
    pub async fn find(&self, keys: RunKeys) -> Result<Option<SharedRun>, LogError> {
        let mut connection = self.inner.connection.clone();
        let (first, last, owned): (Vec<StreamEntry>, Vec<StreamEntry>, bool) = redis::pipe()
            .cmd("XRANGE")
            .arg(&keys.log)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .cmd("XREVRANGE")
            .arg(&keys.log)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .cmd("EXISTS")
            .arg(&keys.owner)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        let (Some(first), Some(last)) = (first.first(), last.first()) else {
            // Claimed but not written yet: the owner's readers may already have its first
            // events (its appender runs behind them).
            return Ok(owned.then_some(SharedRun {
                keys,
                first_seq: 1,
                last_seq: 0,
                ended: false,
            }));
        };
        let (first, last) = (parse_entry(first)?, parse_entry(last)?);
        Ok(Some(SharedRun {
            keys,
            first_seq: first.seq,
            last_seq: last.seq,
            ended: last.terminal,
        }))
    }

    /// A reader of `run` after `cursor`, on a connection of its own.
    ///
    /// # Errors
    /// The cursor is before what is kept or after the run's last event, or Redis failed.
    pub async fn follow(&self, run: SharedRun, cursor: u64) -> Result<SharedFollower, LogError> {
        if cursor + 1 < run.first_seq {
            return Err(ReadError::CursorExpired.into());
        }
        // Past the last entry of a live run is fine: the owner's appender may not have written
        // what its own readers already got (see `redis_follow`).
        if cursor > run.last_seq && run.ended {
            return Err(ReadError::CursorAhead.into());
        }
        let timeout = self.inner.limits.reply_timeout;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            // Longer than any BLOCK the reader sends, or every quiet read would time out.
            .set_response_timeout(Some(follow::READ_BLOCK + timeout));
        let connection: MultiplexedConnection = self
            .inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(backend)?;
        Ok(SharedFollower::new(
            connection,
            run.keys,
            cursor,
            self.inner.limits.log_ttl,
            Arc::clone(&self.inner.lost_frame),
            run.ended && cursor == run.last_seq,
        ))
    }

    /// Asks the run's owner, wherever it is, to stop the run: a flag its next renewal finds,
    /// and a message on the stop channel that reaches it at once.
    ///
    /// # Errors
    /// Redis failed.
    pub async fn request_stop(&self, run: &SharedRun) -> Result<(), LogError> {
        if let Some(stop) = lock(&self.inner.owned).get(&run.keys.digest) {
            stop.cancel();
            return Ok(());
        }
        let mut connection = self.inner.connection.clone();
        redis::pipe()
            .cmd("SET")
            .arg(&run.keys.stop)
            .arg(1)
            .arg("PX")
            .arg(Self::ms(self.live_ttl()))
            .ignore()
            .cmd("PUBLISH")
            .arg(STOP_CHANNEL)
            .arg(&run.keys.digest)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(backend)
    }

    async fn remote_reader_attached(&self, keys: &RunKeys) -> bool {
        let mut connection = self.inner.connection.clone();
        let attached: Result<bool, _> = redis::cmd("EXISTS")
            .arg(&keys.readers)
            .query_async(&mut connection)
            .await;
        // Redis unreachable: nobody can be reading the shared log either.
        attached.unwrap_or(false)
    }

    async fn release(&self, keys: &RunKeys, token: &str) {
        let mut connection = self.inner.connection.clone();
        let released: Result<i64, _> = RELEASE
            .key(&keys.owner)
            .arg(token)
            .invoke_async(&mut connection)
            .await;
        if let Err(error) = released {
            tracing::warn!(%error, "could not release a run's lease; it expires by itself");
        }
    }
}

/// The waits between attempts to subscribe again: 250 ms doubling to 5 s, with jitter, so the
/// replicas that lost Redis together do not all come back at once.
const STOP_RESUBSCRIBE: crate::retry::RetryPolicy =
    crate::retry::RetryPolicy::new(Duration::from_millis(250), Duration::from_secs(5));

/// Cancels the runs this process owns when a stop for them arrives; reconnects when the
/// subscription drops (a stop sent meanwhile is still found by the owner's next renewal).
async fn listen_for_stops(runs: std::sync::Weak<Inner>, mut pubsub: redis::aio::PubSub) {
    loop {
        {
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                let Some(runs) = runs.upgrade() else { return };
                if let Ok(digest) = std::str::from_utf8(message.get_payload_bytes()) {
                    if let Some(stop) = lock(&runs.owned).get(digest) {
                        stop.cancel();
                    }
                }
            }
        }
        tracing::warn!("the stop subscription to Redis dropped; reconnecting");
        let mut waits = STOP_RESUBSCRIBE.waits();
        loop {
            // The series has no end; the fallback only keeps the loop total.
            let wait = waits.next().unwrap_or(Duration::from_secs(5));
            tokio::time::sleep(wait).await;
            let Some(client) = runs.upgrade().map(|runs| runs.client.clone()) else {
                return;
            };
            if let Ok(mut again) = client.get_async_pubsub().await {
                if again.subscribe(STOP_CHANNEL).await.is_ok() {
                    pubsub = again;
                    break;
                }
            }
        }
    }
}

/// The owner's handle on a run's shared log: hands batches to the appender.
#[derive(Debug)]
pub struct SharedWriter {
    runs: SharedRuns,
    keys: Arc<RunKeys>,
    queue: mpsc::Sender<(Vec<Bytes>, bool)>,
    /// Ends once the queue is closed and, for a run that did not end, the lease is freed.
    appender: tokio::task::JoinHandle<()>,
}

impl SharedWriter {
    /// Queues a batch's frames (each one's SSE bytes) for Redis. Waits only when [`APPEND_QUEUE`] batches are already waiting
    /// (Redis is slower than the model), which holds the run back instead of buffering it
    /// without bound; an appender that gave up takes every batch at once.
    pub async fn append(&self, frames: Vec<Bytes>, terminal: bool) {
        // Only fails when the appender is gone, which it is not before the sender.
        let _ = self.queue.send((frames, terminal)).await;
    }

    /// Notes the run's thread for every replica (see [`SharedRuns::note_thread`]).
    ///
    /// # Errors
    /// Redis failed.
    pub async fn note_thread(
        &self,
        thread: super::ThreadRef<'_>,
        context: &[u8],
    ) -> Result<(), LogError> {
        self.runs.note_thread(&self.keys, thread, context).await
    }

    /// Gives the run id back, for a run claimed but never started (its request was refused):
    /// the appender has written nothing, and once it has freed the lease the run is unknown
    /// to every replica, so a retry with the same run id is not told it is in progress.
    pub async fn abandon(self) {
        let SharedWriter {
            queue, appender, ..
        } = self;
        drop(queue);
        if let Err(error) = appender.await {
            tracing::warn!(%error, "the run's appender failed; its lease expires by itself");
        }
    }

    /// What tells whether a reader on another replica is attached.
    pub fn presence(&self) -> Presence {
        Presence {
            runs: self.runs.clone(),
            keys: Arc::clone(&self.keys),
        }
    }
}

/// Whether readers on other replicas are attached to a run (their presence key is fresh).
#[derive(Debug, Clone)]
pub struct Presence {
    runs: SharedRuns,
    keys: Arc<RunKeys>,
}

impl Presence {
    pub async fn attached(&self) -> bool {
        self.runs.remote_reader_attached(&self.keys).await
    }
}

fn frames_len(frames: &[Bytes]) -> usize {
    frames.iter().map(Bytes::len).sum()
}

/// The task that writes one run's batches to its Stream, in order, one script call for all
/// the batches waiting at once.
struct Appender {
    runs: SharedRuns,
    keys: Arc<RunKeys>,
    token: String,
    next_seq: u64,
    renewal: tokio::task::AbortHandle,
    /// An append failed or the lease was lost: nothing more is written, so the shared log is
    /// a prefix of the run that readers elsewhere see end in `run_lost`.
    broken: bool,
    ended: bool,
}

impl Appender {
    async fn run(mut self, mut batches: mpsc::Receiver<(Vec<Bytes>, bool)>) {
        while let Some(first) = batches.recv().await {
            let mut waiting = vec![first];
            let mut bytes = frames_len(&waiting[0].0);
            while bytes < MAX_APPEND_BYTES && !waiting.last().is_some_and(|(_, end)| *end) {
                let Ok(next) = batches.try_recv() else { break };
                bytes += frames_len(&next.0);
                waiting.push(next);
            }
            if !self.broken {
                self.append(waiting).await;
            }
        }
        self.renewal.abort();
        lock(&self.runs.inner.owned).remove(&self.keys.digest);
        if !self.ended {
            // The run's driver went away without a terminal event (or the log broke): free
            // the lease now, so readers elsewhere are told the run is lost without waiting.
            self.runs.release(&self.keys, &self.token).await;
        }
    }

    async fn append(&mut self, batches: Vec<(Vec<Bytes>, bool)>) {
        let terminal = batches.last().is_some_and(|(_, end)| *end);
        let frames: Vec<Bytes> = batches.into_iter().flat_map(|(frames, _)| frames).collect();
        let count = frames.len() as u64;
        let limits = self.runs.inner.limits;
        let mut script = APPEND.prepare_invoke();
        script
            .key(&self.keys.log)
            .key(&self.keys.owner)
            .arg(&self.token)
            .arg(self.next_seq)
            .arg(limits.max_run_events.max(1))
            .arg(SharedRuns::ms(self.runs.live_ttl()))
            .arg(SharedRuns::ms(limits.log_ttl))
            .arg(u8::from(terminal));
        for frame in &frames {
            script.arg(frame.as_ref());
        }
        let mut connection = self.runs.inner.connection.clone();
        match script.invoke_async::<i64>(&mut connection).await {
            Ok(1) => {
                self.next_seq += count;
                self.ended = terminal;
            }
            outcome => {
                tracing::warn!(
                    run_id = %self.keys.run_id,
                    error = outcome.err().map(|e| e.to_string()),
                    "the run's events could not be written to Redis; readers on other \
                     replicas will be told the run is lost"
                );
                self.broken = true;
                self.renewal.abort();
            }
        }
    }
}
