//! `[threads]`: whether and where the server remembers conversations, for how long, whose they
//! are, and how far it trusts a client's copy (see `crate::threads`).

use std::fmt;

use serde::Deserialize;

/// Where threads are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStoreKind {
    /// Nothing is kept: every run is self-contained.
    Off,
    /// In this process, bounded by `max_threads` and `max_bytes`; lost on restart.
    #[default]
    Memory,
    /// In Redis 6.2+ or Valkey at `redis_url`: shared by replicas, kept across restarts.
    Redis,
    /// In PostgreSQL at `postgres_url`: threads, leases and approvals shared by replicas and
    /// kept across restarts; run logs stay in each process.
    Postgres,
}

pub use crate::threads::{ConcurrentRunPolicy, HistoryPolicy};

#[derive(Clone, Deserialize)]
#[serde(default)]
pub struct ThreadSettings {
    pub store: ThreadStoreKind,
    /// `redis://[user:password@]host:port[/db]` (or `rediss://`); may hold a secret: never logged.
    pub redis_url: String,
    /// `postgres://user:password@host:port/db` (or a `key=value` string); may hold a secret:
    /// never logged.
    pub postgres_url: String,
    /// `postgres` store: most connections in the pool.
    pub postgres_pool_size: usize,
    /// `postgres` store: longest wait to connect, for a pooled connection or for one
    /// statement, in milliseconds.
    pub postgres_timeout_ms: u64,
    /// Seconds a thread is kept after its last run.
    pub ttl_secs: u64,
    /// `memory` store: most threads kept (0: no bound).
    pub max_threads: usize,
    /// `memory` store: most bytes of threads kept in all; any store: the largest one thread
    /// may be (0: no bound).
    pub max_bytes: usize,
    /// Any store: most threads one scope may hold (0: no bound); a new thread past it gets 403
    /// `thread_quota_exceeded`.
    pub max_threads_per_scope: usize,
    /// Any store: most bytes of threads one scope may hold (0: no bound).
    pub max_bytes_per_scope: usize,
    /// `memory` store: most approval decisions remembered at once (0: no bound). When full, a
    /// run acting on another decision fails (`decision_ledger_full`) rather than forget one.
    pub max_decisions: usize,
    /// A header a trusted proxy sets to the user's id (e.g. `X-User-Id`); empty: the scope is
    /// the authenticated token (or one development scope without authentication).
    pub scope_header: String,
    pub history: HistoryPolicy,
    pub on_concurrent_run: ConcurrentRunPolicy,
    /// `redis` and `postgres` stores: seconds a run's lease lasts unless renewed (a crashed replica blocks its
    /// threads this long).
    pub lease_ttl_secs: u64,
    /// `redis` store: longest wait for a connection or a reply, in milliseconds.
    pub redis_timeout_ms: u64,
}

impl Default for ThreadSettings {
    fn default() -> Self {
        ThreadSettings {
            store: ThreadStoreKind::Memory,
            redis_url: "redis://127.0.0.1:6379".into(),
            postgres_url: "postgres://agui@127.0.0.1:5432/agui".into(),
            postgres_pool_size: 16,
            postgres_timeout_ms: 5_000,
            ttl_secs: 7 * 24 * 3600,
            max_threads: 10_000,
            max_bytes: 256 * 1024 * 1024,
            max_threads_per_scope: 1_000,
            max_bytes_per_scope: 64 * 1024 * 1024,
            max_decisions: 100_000,
            scope_header: String::new(),
            history: HistoryPolicy::Verify,
            on_concurrent_run: ConcurrentRunPolicy::Reject,
            lease_ttl_secs: 30,
            redis_timeout_ms: 2_000,
        }
    }
}

impl fmt::Debug for ThreadSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadSettings")
            .field("store", &self.store)
            .field("redis_url", &crate::text::redact_url(&self.redis_url))
            .field("postgres_url", &crate::text::redact_url(&self.postgres_url))
            .field("postgres_pool_size", &self.postgres_pool_size)
            .field("postgres_timeout_ms", &self.postgres_timeout_ms)
            .field("ttl_secs", &self.ttl_secs)
            .field("max_threads", &self.max_threads)
            .field("max_bytes", &self.max_bytes)
            .field("max_threads_per_scope", &self.max_threads_per_scope)
            .field("max_bytes_per_scope", &self.max_bytes_per_scope)
            .field("max_decisions", &self.max_decisions)
            .field("scope_header", &self.scope_header)
            .field("history", &self.history)
            .field("on_concurrent_run", &self.on_concurrent_run)
            .field("lease_ttl_secs", &self.lease_ttl_secs)
            .field("redis_timeout_ms", &self.redis_timeout_ms)
            .finish()
    }
}
