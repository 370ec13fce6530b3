//! Threads the server remembers: the [`ThreadStore`] trait and its `memory`, `redis` and
//! `postgres` backends, the thread list ([`list`]), the per-thread run lease, the ledger of
//! carried-out approval decisions, the recorder that turns a run's events into the
//! conversation the client holds afterwards, the runs and branches a thread keeps
//! (`lineage`), and the check of a client's history against that record. A thread is keyed by
//! (scope, agent, threadId): the scope is who is asking, so a
//! thread id is never an authorization token, and a thread of another scope looks exactly like
//! a missing one. Uses `protocol` only (its policies are its own types, built at assembly);
//! the session drives it.

mod lease;
pub mod ledger;
pub mod lineage;
pub mod list;
mod memory;
pub mod postgres;
pub mod recorder;
pub mod redis;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::text::key_digest;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{Interrupt, Message};

pub use lease::{Lease, LeaseError, Leases, SharedLeases};
pub use ledger::{DecisionKey, DecisionLedger, MemoryLedger, RedisLedger};
pub use lineage::{Lineage, RunMark};
pub use list::{ArchivedFilter, ListCursor, ListQuery, ThreadPage, ThreadStatus, ThreadSummary};
pub use memory::MemoryStore;
pub use postgres::{PostgresLeases, PostgresLedger, PostgresStore};
pub use recorder::{RecordedRun, ThreadRecorder};
pub use redis::{RedisLeases, RedisStore};

/// How a client's history is treated on a thread the server knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryPolicy {
    /// Checked against the server's record (422 on a changed or invented server tool result;
    /// recorded results the client dropped are put back).
    #[default]
    Verify,
    /// Used as sent.
    TrustClient,
}

/// What a run on a thread that is already streaming does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrentRunPolicy {
    /// 409 `thread_busy`.
    #[default]
    Reject,
    /// The older run ends with `RUN_ERROR` `thread_superseded`; the new one runs.
    Supersede,
}

/// Which thread: the scope (who asks), the agent, and the client's thread id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadKey {
    pub scope: String,
    pub agent: String,
    pub thread_id: String,
}

impl ThreadKey {
    /// A fixed-length digest of the three parts, each length-prefixed so no two keys collide
    /// by moving a separator; what the Redis backend names its keys by (a client's thread id
    /// can be long and hold any byte).
    pub fn digest(&self) -> String {
        key_digest(&[&self.scope, &self.agent, &self.thread_id])
    }
}

/// What the server keeps of a thread: the conversation as the client holds it after the last
/// run, the state, the interrupts still open, and which tool results the server produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRecord {
    pub agent: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    #[serde(default)]
    pub interrupts: Vec<Interrupt>,
    /// Tool calls whose results the server produced (ran a server tool, or recorded a
    /// decision): a client may not change or invent these.
    #[serde(default)]
    pub server_results: BTreeSet<String>,
    pub last_run_id: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// Set by `PATCH`; `None`: the list derives one from the first user message. Absent from
    /// records saved before titles existed, which load as untitled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Hidden from the list unless asked for (`?archived=true|all`); runs go on as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
    /// The runs kept and the branches forks left (see [`lineage`]); empty in a record saved
    /// before runs were kept.
    #[serde(default, skip_serializing_if = "Lineage::is_empty")]
    pub lineage: Lineage,
}

/// Why the store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("could not encode the thread: {0}")]
    Encode(serde_json::Error),
    #[error("a stored thread could not be decoded: {0}")]
    Decode(serde_json::Error),
    #[error("the thread is {size} bytes, over the store's limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("the run no longer holds the thread's lease, so a newer run's record stands")]
    LeaseLost,
    #[error("the scope's thread quota is reached: {0}")]
    QuotaExceeded(Quota),
    #[error("the decision ledger holds its limit of {limit} entries; refusing to act on more")]
    LedgerFull { limit: usize },
    #[error("thread store backend: {0}")]
    Backend(String),
}

/// What one scope may hold in a store (`threads.max_threads_per_scope`,
/// `threads.max_bytes_per_scope`; 0: no bound). A scope is who asks (a token, a proxy's user),
/// so without it one caller could fill the store, and with the memory store's eviction push
/// every other caller's threads out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeQuota {
    pub max_threads: usize,
    pub max_bytes: usize,
}

/// Which quota a scope reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Quota {
    #[error("at most {limit} threads")]
    Threads { limit: usize },
    #[error("at most {limit} bytes of threads")]
    Bytes { limit: usize },
}

impl ScopeQuota {
    /// Whether a run may start on a thread of a scope holding `threads` threads of `bytes`
    /// bytes; `held`: the scope holds this thread already. The bytes are a soft bound: a scope
    /// may pass them by the one save that crossed them (a record is at most
    /// `threads.max_bytes`), and then runs no more until it deletes threads, so the check
    /// needs no guess at how large the run's record will be.
    ///
    /// # Errors
    /// The quota the scope has reached.
    pub fn admit(&self, threads: usize, bytes: usize, held: bool) -> Result<(), StoreError> {
        self.check(threads, bytes, held)
    }

    /// Whether the save of a thread may go ahead, the scope holding `threads` threads of
    /// `bytes` bytes besides this thread's own (`held`: the scope holds it already).
    ///
    /// # Errors
    /// The quota the save would break.
    pub fn save(&self, threads: usize, others_bytes: usize, held: bool) -> Result<(), StoreError> {
        self.check(threads, others_bytes, held)
    }

    fn check(&self, threads: usize, bytes: usize, held: bool) -> Result<(), StoreError> {
        if !held && self.max_threads > 0 && threads >= self.max_threads {
            return Err(StoreError::QuotaExceeded(Quota::Threads {
                limit: self.max_threads,
            }));
        }
        if self.max_bytes > 0 && bytes > self.max_bytes {
            return Err(StoreError::QuotaExceeded(Quota::Bytes {
                limit: self.max_bytes,
            }));
        }
        Ok(())
    }
}

/// Where threads live. Every record carries its expiry in the backend: an expired thread is
/// never returned.
pub trait ThreadStore: Send + Sync + std::fmt::Debug + 'static {
    fn load<'a>(
        &'a self,
        key: &'a ThreadKey,
    ) -> BoxFuture<'a, Result<Option<ThreadRecord>, StoreError>>;
    /// Writes the whole record of the lease's thread and restarts its time to live, only if
    /// the lease still holds the thread at the moment of writing (checked and written in one
    /// step); otherwise [`StoreError::LeaseLost`] and nothing is written. A store is used
    /// with the leases its [`ThreadBackends`] pairs it with.
    fn save<'a>(
        &'a self,
        lease: &'a Lease,
        record: &'a ThreadRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Forgets the thread; `true` when there was one.
    fn delete<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// One page of a scope's threads of one agent, in the list's order (see [`list`]), from a
    /// per-scope index: never a scan of other scopes' threads. Expired threads are never
    /// listed. [`ThreadStatus::Running`] is left to the leases ([`Threads::list`]).
    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Result<ThreadPage, StoreError>>;
    /// Whether a run on the thread may start, by its scope's quota: a thread the scope does
    /// not hold yet needs room in its count, any thread a scope within its bytes. Asked before
    /// the run, so a caller at its quota is told so with a 4xx instead of after the model has
    /// answered; the save checks again, atomically ([`StoreError::QuotaExceeded`]).
    fn admit<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = key;
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The thread service the HTTP layer holds: a store, the leases, and the policies.
#[derive(Debug)]
pub struct Threads {
    pub store: Arc<dyn ThreadStore>,
    pub leases: Leases,
    /// Carried-out approval decisions, kept apart from the records (see [`ledger`]).
    pub ledger: Arc<dyn DecisionLedger>,
    /// How long a thread is kept after its last save; also how long a decision is remembered
    /// when its approval id never expires.
    pub ttl: Duration,
    pub history: HistoryPolicy,
    pub on_concurrent_run: ConcurrentRunPolicy,
    /// The header a trusted proxy names the user in; `None`: scope from the token.
    pub scope_header: Option<String>,
    /// What the history check knows of each agent's tools, by agent name.
    pub agent_tools: BTreeMap<String, AgentTools>,
}

/// What the history check knows of one agent's tools.
#[derive(Debug, Clone, Default)]
pub struct AgentTools {
    /// Server tool names: a result for one of these must come from the server.
    pub server_tools: BTreeSet<String>,
    /// Name prefixes of server tools whose list can change while the server runs (an MCP
    /// server's `<name>__`): a result for a tool named so must come from the server too.
    pub server_tool_prefixes: Vec<String>,
    /// The result the agent gives a call a person declined.
    pub declined_result: String,
    /// Whether a client tool named like a server tool is the client's (the agent's
    /// `tool_name_clash = "prefer_client"`): only then is a result for that name the client's.
    pub client_tools_win: bool,
}

/// What a thread service is made of: the records, the leases, the decision ledger, of one
/// kind of store (chosen where the app is assembled).
#[derive(Debug)]
pub struct ThreadBackends {
    pub store: Arc<dyn ThreadStore>,
    pub leases: Leases,
    pub ledger: Arc<dyn DecisionLedger>,
}

impl ThreadBackends {
    /// Everything in this process: threads for one replica. At most `max_threads` threads of
    /// `max_bytes` in all (the oldest forgotten first), each kept `ttl` after its last save;
    /// at most `max_decisions` decisions in the ledger.
    pub fn memory(
        (max_threads, max_bytes): (usize, usize),
        ttl: Duration,
        quota: ScopeQuota,
        max_decisions: usize,
    ) -> Self {
        let store = MemoryStore::new(max_threads, max_bytes, ttl).with_scope_quota(quota);
        ThreadBackends {
            store: Arc::new(store),
            leases: Leases::local(),
            ledger: Arc::new(MemoryLedger::new(max_decisions)),
        }
    }

    /// Everything in the Redis `connection` leads to: threads shared by replicas, each record
    /// at most `max_bytes` and kept `ttl`; a run's lease lasts `lease_ttl` unrenewed.
    pub fn redis(
        connection: &::redis::aio::ConnectionManager,
        (ttl, lease_ttl): (Duration, Duration),
        max_bytes: usize,
        quota: ScopeQuota,
    ) -> Self {
        let store = RedisStore::new(connection.clone(), ttl, max_bytes).with_scope_quota(quota);
        ThreadBackends {
            store: Arc::new(store),
            leases: Leases::shared(Arc::new(RedisLeases::new(connection.clone(), lease_ttl))),
            ledger: Arc::new(RedisLedger::new(connection.clone())),
        }
    }
}

impl ThreadBackends {
    /// Everything in the Postgres database `pool` leads to (already migrated,
    /// [`postgres::connect`]): threads, leases and decisions shared by replicas, each record at
    /// most `max_bytes` and kept `ttl`; a run's lease lasts `lease_ttl` unrenewed.
    pub fn postgres(
        pool: &deadpool_postgres::Pool,
        (ttl, lease_ttl): (Duration, Duration),
        max_bytes: usize,
        quota: ScopeQuota,
    ) -> Self {
        let store = PostgresStore::new(pool.clone(), ttl, max_bytes).with_scope_quota(quota);
        ThreadBackends {
            store: Arc::new(store),
            leases: Leases::shared(Arc::new(PostgresLeases::new(pool.clone(), lease_ttl))),
            ledger: Arc::new(PostgresLedger::new(pool.clone())),
        }
    }
}

/// How the thread service treats runs and requests (from `[threads]`, built at assembly).
#[derive(Debug, Clone)]
pub struct ThreadPolicies {
    /// How long a thread is kept after its last save.
    pub ttl: Duration,
    pub history: HistoryPolicy,
    pub on_concurrent_run: ConcurrentRunPolicy,
    /// The header a trusted proxy names the user in (lower case); `None`: scope from the token.
    pub scope_header: Option<String>,
}

impl Threads {
    /// The service over `backends`, by `policies`.
    pub fn new(
        backends: ThreadBackends,
        policies: ThreadPolicies,
        agent_tools: BTreeMap<String, AgentTools>,
    ) -> Threads {
        let ThreadBackends {
            store,
            leases,
            ledger,
        } = backends;
        Threads {
            store,
            leases,
            ledger,
            ttl: policies.ttl,
            history: policies.history,
            on_concurrent_run: policies.on_concurrent_run,
            scope_header: policies.scope_header,
            agent_tools,
        }
    }

    /// The thread's record, if it has one. A record this version cannot read is as good as
    /// none: the next save replaces it.
    ///
    /// # Errors
    /// The store is not answering.
    pub async fn load(&self, key: &ThreadKey) -> Result<Option<ThreadRecord>, StoreError> {
        match self.store.load(key).await {
            Err(StoreError::Decode(error)) => {
                tracing::warn!(%error, "a stored thread could not be read; starting afresh");
                Ok(None)
            }
            loaded => loaded,
        }
    }
}

/// What `PATCH /<agent>/threads/<id>` changes; `None`: left as it is.
#[derive(Debug, Clone, Default)]
pub struct ThreadEdit {
    /// `Some(None)` clears the title (the list derives one again).
    pub title: Option<Option<String>>,
    pub archived: Option<bool>,
}

/// Why an edit was not made.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("no such thread")]
    NotFound,
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Threads {
    /// A page of the query's threads, each marked running when a run holds its lease.
    ///
    /// # Errors
    /// The store is not answering.
    pub async fn list(&self, query: &ListQuery) -> Result<ThreadPage, StoreError> {
        let mut page = self.store.list(query).await?;
        let keys: Vec<ThreadKey> = page
            .threads
            .iter()
            .map(|summary| ThreadKey {
                scope: query.scope.clone(),
                agent: query.agent.clone(),
                thread_id: summary.thread_id.clone(),
            })
            .collect();
        let running = self.leases.held(&keys).await?;
        for (summary, running) in page.threads.iter_mut().zip(running) {
            if running {
                summary.status = ThreadStatus::Running;
            }
        }
        Ok(page)
    }

    /// Renames or (un)archives a thread. Written under the thread's lease like a run's save,
    /// so an edit and a run never overwrite each other: while a run streams the edit is
    /// [`LeaseError::Busy`]. `updatedAt` is left alone: an edit does not move a thread up the
    /// list.
    ///
    /// # Errors
    /// No such thread, a run holds it, or the store failed.
    pub async fn edit(
        &self,
        key: &ThreadKey,
        edit: ThreadEdit,
    ) -> Result<ThreadSummary, EditError> {
        let lease = self.leases.acquire(key, false).await?;
        let edited = async {
            let mut record = self.load(key).await?.ok_or(EditError::NotFound)?;
            if let Some(title) = edit.title {
                record.title = title;
            }
            if let Some(archived) = edit.archived {
                record.archived = archived;
            }
            self.store.save(&lease, &record).await?;
            Ok(record.summary(&key.thread_id))
        }
        .await;
        lease.release().await;
        edited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_digest_separates_parts_by_length_not_by_a_separator() {
        let a = ThreadKey {
            scope: "ab".into(),
            agent: "c".into(),
            thread_id: "d".into(),
        };
        let b = ThreadKey {
            scope: "a".into(),
            agent: "bc".into(),
            thread_id: "d".into(),
        };
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), a.clone().digest());
        assert_eq!(a.digest().len(), 64);
    }
}
