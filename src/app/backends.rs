//! The one place the store kind is chosen: the thread records, leases and decision ledger, and
//! the run logs, all of memory, all on Redis, or records, leases and ledger on Postgres with
//! the run logs in this process (`threads.store`). Everything above takes them
//! as traits (`ThreadStore`, `DecisionLedger`, `RunLogStore`), so a store of another kind is
//! a new arm here and its implementations beside the others.

use std::sync::Arc;
use std::time::Duration;

use crate::runs::redis::{RedisRunLogs, SharedLimits, SharedRuns};
use crate::runs::{LogLimits, MemoryRunLogs, RunLogStore, RunLogs};
use crate::session::{lost_frame, DisconnectPolicy, Resumable};
use crate::settings::{RunSettings, Settings, ThreadSettings, ThreadStoreKind};
use crate::threads::{AgentTools, ScopeQuota, StoreError, ThreadBackends, ThreadPolicies, Threads};

/// What the server remembers: threads and run logs; both `None` with `threads.store = "off"`.
pub(super) type Stores = (Option<Arc<Threads>>, Option<Arc<Resumable>>);

/// Opens the stores `settings` name (`threads` as the thread store is built with them).
///
/// # Errors
/// Redis cannot be reached or its URL is malformed.
pub(super) async fn open(
    settings: &Settings,
    threads: &ThreadSettings,
    agent_tools: std::collections::BTreeMap<String, AgentTools>,
) -> Result<Stores, StoreError> {
    let here = || MemoryRunLogs::new(Arc::new(RunLogs::new(log_limits(&settings.runs))));
    let (records, logs): (ThreadBackends, Arc<dyn RunLogStore>) = match settings.threads.store {
        ThreadStoreKind::Off => return Ok((None, None)),
        ThreadStoreKind::Memory => (
            ThreadBackends::memory(
                (threads.max_threads, threads.max_bytes),
                ttl(threads),
                quota(threads),
                threads.max_decisions,
            ),
            Arc::new(here()),
        ),
        ThreadStoreKind::Redis => {
            let reply_timeout = Duration::from_millis(threads.redis_timeout_ms.max(1));
            let connection =
                crate::threads::redis::connect(&threads.redis_url, reply_timeout).await?;
            let shared = shared_runs(settings, reply_timeout).await?;
            (
                ThreadBackends::redis(
                    &connection,
                    (
                        ttl(threads),
                        Duration::from_secs(threads.lease_ttl_secs.max(1)),
                    ),
                    threads.max_bytes,
                    quota(threads),
                ),
                Arc::new(RedisRunLogs::new(here(), shared)),
            )
        }
        ThreadStoreKind::Postgres => {
            let timeout = Duration::from_millis(threads.postgres_timeout_ms.max(1));
            let pool = crate::threads::postgres::connect(
                &threads.postgres_url,
                threads.postgres_pool_size,
                timeout,
            )
            .await?;
            (
                ThreadBackends::postgres(
                    &pool,
                    (
                        ttl(threads),
                        Duration::from_secs(threads.lease_ttl_secs.max(1)),
                    ),
                    threads.max_bytes,
                    quota(threads),
                ),
                // Run logs are not shared through Postgres: a reconnect goes to the replica
                // that runs the run (docs/threads.md).
                Arc::new(here()),
            )
        }
    };
    Ok((
        Some(Arc::new(Threads::new(
            records,
            policies(threads),
            agent_tools,
        ))),
        Some(Arc::new(Resumable::new(
            logs,
            disconnect_policy(&settings.runs),
        ))),
    ))
}

/// How long a thread is kept after its last save.
fn ttl(threads: &ThreadSettings) -> Duration {
    Duration::from_secs(threads.ttl_secs.max(1))
}

fn quota(threads: &ThreadSettings) -> ScopeQuota {
    ScopeQuota {
        max_threads: threads.max_threads_per_scope,
        max_bytes: threads.max_bytes_per_scope,
    }
}

fn policies(threads: &ThreadSettings) -> ThreadPolicies {
    ThreadPolicies {
        ttl: ttl(threads),
        history: threads.history,
        on_concurrent_run: threads.on_concurrent_run,
        scope_header: Some(threads.scope_header.trim().to_ascii_lowercase())
            .filter(|header| !header.is_empty()),
    }
}

/// The bounds of this process's run logs, from `[runs]`.
pub(crate) fn log_limits(runs: &RunSettings) -> LogLimits {
    LogLimits {
        max_runs: runs.log_max_runs.max(1),
        max_run_events: runs.log_max_run_events.max(1),
        max_run_bytes: runs.log_max_run_bytes.max(1),
        max_bytes: runs.log_max_bytes.max(1),
        ttl: Duration::from_secs(runs.log_ttl_secs),
    }
}

fn disconnect_policy(runs: &RunSettings) -> DisconnectPolicy {
    DisconnectPolicy {
        on_disconnect: runs.on_disconnect,
        grace: Duration::from_secs(runs.reconnect_grace_secs),
        max_readers: (runs.max_readers_per_run, runs.max_readers),
    }
}

/// The shared run log, on a connection of its own: a busy run log never queues behind threads.
async fn shared_runs(
    settings: &Settings,
    reply_timeout: Duration,
) -> Result<SharedRuns, StoreError> {
    let limits = SharedLimits {
        lease_ttl: Duration::from_secs(settings.runs.lease_ttl_secs.max(1)),
        log_ttl: Duration::from_secs(settings.runs.log_ttl_secs),
        max_run_events: settings.runs.log_max_run_events,
        reply_timeout,
    };
    SharedRuns::connect(&settings.threads.redis_url, limits, Arc::new(lost_frame))
        .await
        .map_err(|error| StoreError::Backend(error.to_string()))
}
