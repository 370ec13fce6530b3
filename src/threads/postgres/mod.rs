//! The PostgreSQL thread store: thread records, the run leases that fence their saves, and the
//! approval ledger, in three tables of one database ([`schema`], migrated at start-up), over a
//! pool of `tokio-postgres` connections (`deadpool-postgres`). Run logs are not kept here: with
//! this store they stay in each process (shared run logs are the Redis store's).
//!
//! The fence: a run's lease is a row (`agui_thread_leases`: the thread, a random token, an
//! expiry on the database's clock), taken, renewed and released by statements that compare the
//! token, so leases hold across replicas as Redis's do. A save is one transaction that first
//! locks the lease row if, and only if, it still holds the saving run's token and has not
//! expired (`SELECT … FOR UPDATE`), then writes the record: a run that superseded this one has
//! changed the token, so the older run's save finds no row and writes nothing, and a supersede
//! arriving during the save waits for it to commit.
//!
//! A scope's quota is checked inside the same transaction, under a transaction-level advisory
//! lock on the scope, so two replicas saving threads of one scope at once cannot both take
//! its last place. Expired rows are never read (every statement filters on
//! `expires_at > now()`) and are deleted in batches by a sweep that a save starts at most once
//! a minute.

mod ledger;
pub mod schema;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, Runtime};
use futures_util::future::{BoxFuture, FutureExt};
use tokio_postgres::NoTls;

pub use ledger::PostgresLedger;

use super::lease::{Lease, LeaseError, SharedLeases};
use super::{
    ListQuery, ScopeQuota, StoreError, ThreadKey, ThreadPage, ThreadRecord, ThreadStatus,
    ThreadStore, ThreadSummary,
};
use crate::threads::ArchivedFilter;

/// The class of the advisory locks a save takes on its scope (its second key is the scope's
/// hash), apart from the migrations' lock.
const SCOPE_LOCK_CLASS: i32 = 0x6167_7569;

/// How often a save may start a sweep of expired rows, in milliseconds.
const SWEEP_EVERY_MS: i64 = 60_000;

/// Most expired rows of a table one sweep deletes.
const SWEEP_BATCH: i64 = 1_000;

/// The longest expiry a row is given: an interval Postgres can add to `now()` (a TTL that
/// large means "never").
const MAX_KEEP_MS: i64 = 100 * 365 * 24 * 3_600 * 1_000;

/// Opens a pool of at most `pool_size` connections to the database at `url` (a
/// `postgres://user:password@host:port/db` URL or a `key=value` string), then applies the
/// schema's migrations. `timeout` bounds connecting, waiting for a pooled connection and (as
/// the session's `statement_timeout`, unless the URL sets options of its own) each statement,
/// so a database that stops answering is an error, never a request that hangs.
///
/// # Errors
/// A malformed URL, the database unreachable, or a migration refused.
pub async fn connect(url: &str, pool_size: usize, timeout: Duration) -> Result<Pool, StoreError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|error: tokio_postgres::Error| StoreError::Backend(error.to_string()))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    if config.get_options().is_none() {
        config.options(format!("-c statement_timeout={}", millis(timeout)));
    }
    let manager = Manager::from_config(config, NoTls, ManagerConfig::default());
    let pool = Pool::builder(manager)
        .max_size(pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .build()
        .map_err(|error| StoreError::Backend(error.to_string()))?;
    schema::migrate(&pool).await?;
    Ok(pool)
}

/// A database error as the store reports it: the server's own message when there is one.
#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter: it takes what `map_err` gives
pub(super) fn pg(error: tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => {
            StoreError::Backend(format!("postgres: {}: {}", db.code().code(), db.message()))
        }
        None => StoreError::Backend(format!("postgres: {error}")),
    }
}

#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter: it takes what `map_err` gives
pub(super) fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Backend(format!("postgres pool: {error}"))
}

/// A duration in whole milliseconds, within what an expiry can be.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).map_or(MAX_KEEP_MS, |ms| ms.min(MAX_KEEP_MS))
}

/// See the module docs.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    ttl: Duration,
    max_bytes: usize,
    quota: ScopeQuota,
    /// When a save last started a sweep (ms since the epoch).
    last_sweep: Arc<AtomicI64>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("ttl", &self.ttl)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// What a scope holds: live threads, their bytes besides the one asked about, and whether it
/// holds that one.
struct Usage {
    threads: usize,
    others_bytes: usize,
    own_bytes: usize,
    held: bool,
}

const USAGE: &str = "SELECT count(*), \
        coalesce(sum(bytes) FILTER (WHERE NOT (agent = $2 AND thread_id = $3)), 0)::bigint, \
        coalesce(sum(bytes) FILTER (WHERE agent = $2 AND thread_id = $3), 0)::bigint, \
        coalesce(bool_or(agent = $2 AND thread_id = $3), false) \
    FROM agui_threads WHERE scope = $1 AND expires_at > now()";

const UPSERT: &str = "INSERT INTO agui_threads (scope, agent, thread_id, record, bytes, title, \
        archived, interrupted, message_count, last_run_id, created_at, updated_at, expires_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
        now() + $13::bigint * interval '1 millisecond') \
    ON CONFLICT (scope, agent, thread_id) DO UPDATE SET record = EXCLUDED.record, \
        bytes = EXCLUDED.bytes, title = EXCLUDED.title, archived = EXCLUDED.archived, \
        interrupted = EXCLUDED.interrupted, message_count = EXCLUDED.message_count, \
        last_run_id = EXCLUDED.last_run_id, created_at = EXCLUDED.created_at, \
        updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at";

impl PostgresStore {
    /// A store on `pool` whose threads expire `ttl` after their last save; a record over
    /// `max_bytes` (0: no limit) is refused rather than stored.
    pub fn new(pool: Pool, ttl: Duration, max_bytes: usize) -> PostgresStore {
        PostgresStore {
            pool,
            ttl,
            max_bytes,
            quota: ScopeQuota::default(),
            last_sweep: Arc::new(AtomicI64::new(0)),
        }
    }

    /// The same store with each scope held to `quota`.
    #[must_use]
    pub fn with_scope_quota(mut self, quota: ScopeQuota) -> PostgresStore {
        self.quota = quota;
        self
    }

    fn limited(&self) -> bool {
        self.quota != ScopeQuota::default()
    }

    async fn usage(
        client: &impl deadpool_postgres::GenericClient,
        key: &ThreadKey,
    ) -> Result<Usage, StoreError> {
        let statement = client.prepare_cached(USAGE).await.map_err(pg)?;
        let row = client
            .query_one(&statement, &[&key.scope, &key.agent, &key.thread_id])
            .await
            .map_err(pg)?;
        let count = |index: usize| usize::try_from(row.get::<_, i64>(index)).unwrap_or(0);
        Ok(Usage {
            threads: count(0),
            others_bytes: count(1),
            own_bytes: count(2),
            held: row.get(3),
        })
    }

    async fn save_now(&self, lease: &Lease, record: &ThreadRecord) -> Result<(), StoreError> {
        let data = serde_json::to_vec(record).map_err(StoreError::Encode)?;
        if self.max_bytes > 0 && data.len() > self.max_bytes {
            return Err(StoreError::TooLarge {
                size: data.len(),
                limit: self.max_bytes,
            });
        }
        let key = lease.key();
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let transaction = client.transaction().await.map_err(pg)?;
        let fence = transaction
            .prepare_cached(
                "SELECT 1 FROM agui_thread_leases WHERE scope = $1 AND agent = $2 \
                 AND thread_id = $3 AND token = $4 AND expires_at > now() FOR UPDATE",
            )
            .await
            .map_err(pg)?;
        let held = transaction
            .query_opt(
                &fence,
                &[&key.scope, &key.agent, &key.thread_id, &lease.token()],
            )
            .await
            .map_err(pg)?;
        if held.is_none() {
            return Err(StoreError::LeaseLost);
        }
        if self.limited() {
            transaction
                .execute(
                    "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                    &[&SCOPE_LOCK_CLASS, &key.scope],
                )
                .await
                .map_err(pg)?;
            let usage = Self::usage(&transaction, key).await?;
            self.quota
                .save(usage.threads, usage.others_bytes, usage.held)?;
        }
        let summary = record.summary(&key.thread_id);
        let upsert = transaction.prepare_cached(UPSERT).await.map_err(pg)?;
        transaction
            .execute(
                &upsert,
                &[
                    &key.scope,
                    &key.agent,
                    &key.thread_id,
                    &data,
                    &i32::try_from(data.len()).unwrap_or(i32::MAX),
                    &summary.title,
                    &summary.archived,
                    &(summary.status == ThreadStatus::Interrupted),
                    &i32::try_from(summary.message_count).unwrap_or(i32::MAX),
                    &summary.last_run_id,
                    &summary.created_at,
                    &summary.updated_at,
                    &millis(self.ttl),
                ],
            )
            .await
            .map_err(pg)?;
        transaction.commit().await.map_err(pg)?;
        self.maybe_sweep();
        Ok(())
    }

    /// Starts a sweep of expired rows when none ran for a minute (see the module docs).
    fn maybe_sweep(&self) {
        let now = crate::protocol::now_millis();
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now - last < SWEEP_EVERY_MS
            || self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let pool = self.pool.clone();
        tokio::spawn(async move {
            if let Err(error) = sweep(&pool).await {
                tracing::warn!(%error, "could not sweep expired threads");
            }
        });
    }

    async fn list_now(&self, query: &ListQuery) -> Result<ThreadPage, StoreError> {
        let limit = i64::try_from(query.limit + 1).unwrap_or(i64::MAX);
        let (after_at, after_id) = query.after.as_ref().map_or((0, ""), |after| {
            (after.updated_at, after.thread_id.as_str())
        });
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&query.scope, &query.agent, &limit];
        let after = if query.after.is_some() {
            params.push(&after_at);
            params.push(&after_id);
            " AND updated_at <= $4 AND (updated_at < $4 OR thread_id > $5)"
        } else {
            ""
        };
        // One statement per shape, each a range of the list index in its order. Both flags
        // at once are two such ranges merged: one ordered scan of (scope, agent) would have
        // to sort every thread of the scope.
        let page = |archived: bool| {
            format!(
                "SELECT thread_id, title, created_at, updated_at, last_run_id, interrupted, \
                 archived, message_count FROM agui_threads \
                 WHERE scope = $1 AND agent = $2 AND archived = {archived} \
                 AND expires_at > now(){after} ORDER BY updated_at DESC, thread_id LIMIT $3"
            )
        };
        let sql = match query.archived {
            ArchivedFilter::Active => page(false),
            ArchivedFilter::Archived => page(true),
            ArchivedFilter::All => format!(
                "({}) UNION ALL ({}) ORDER BY updated_at DESC, thread_id LIMIT $3",
                page(false),
                page(true)
            ),
        };
        let client = self.pool.get().await.map_err(pool_error)?;
        let statement = client.prepare_cached(&sql).await.map_err(pg)?;
        let rows = client.query(&statement, &params).await.map_err(pg)?;
        let found = rows
            .iter()
            .map(|row| ThreadSummary {
                thread_id: row.get(0),
                title: row.get(1),
                created_at: row.get(2),
                updated_at: row.get(3),
                last_run_id: row.get(4),
                status: if row.get(5) {
                    ThreadStatus::Interrupted
                } else {
                    ThreadStatus::Idle
                },
                archived: row.get(6),
                message_count: usize::try_from(row.get::<_, i32>(7)).unwrap_or(0),
            })
            .collect();
        Ok(ThreadPage::from_overfetch(found, query.limit))
    }
}

/// Deletes up to [`SWEEP_BATCH`] expired rows of each table.
async fn sweep(pool: &Pool) -> Result<(), StoreError> {
    let client = pool.get().await.map_err(pool_error)?;
    for table in ["agui_threads", "agui_thread_leases", "agui_decisions"] {
        let sql = format!(
            "DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} \
             WHERE expires_at <= now() LIMIT {SWEEP_BATCH}))"
        );
        client.execute(sql.as_str(), &[]).await.map_err(pg)?;
    }
    Ok(())
}

impl ThreadStore for PostgresStore {
    fn load<'a>(
        &'a self,
        key: &'a ThreadKey,
    ) -> BoxFuture<'a, Result<Option<ThreadRecord>, StoreError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "SELECT record FROM agui_threads WHERE scope = $1 AND agent = $2 \
                     AND thread_id = $3 AND expires_at > now()",
                )
                .await
                .map_err(pg)?;
            let row = client
                .query_opt(&statement, &[&key.scope, &key.agent, &key.thread_id])
                .await
                .map_err(pg)?;
            row.map(|row| {
                serde_json::from_slice(row.get::<_, &[u8]>(0)).map_err(StoreError::Decode)
            })
            .transpose()
        }
        .boxed()
    }

    fn save<'a>(
        &'a self,
        lease: &'a Lease,
        record: &'a ThreadRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.save_now(lease, record).boxed()
    }

    fn delete<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "DELETE FROM agui_threads WHERE scope = $1 AND agent = $2 \
                     AND thread_id = $3 RETURNING expires_at > now()",
                )
                .await
                .map_err(pg)?;
            let row = client
                .query_opt(&statement, &[&key.scope, &key.agent, &key.thread_id])
                .await
                .map_err(pg)?;
            Ok(row.is_some_and(|row| row.get(0)))
        }
        .boxed()
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Result<ThreadPage, StoreError>> {
        self.list_now(query).boxed()
    }

    fn admit<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            if !self.limited() {
                return Ok(());
            }
            let client = self.pool.get().await.map_err(pool_error)?;
            let usage = Self::usage(&client, key).await?;
            self.quota.admit(
                usage.threads,
                usage.others_bytes + usage.own_bytes,
                usage.held,
            )
        }
        .boxed()
    }
}

/// Run leases that hold across every process sharing this database (see the module docs).
#[derive(Clone)]
pub struct PostgresLeases {
    pool: Pool,
    ttl: Duration,
}

impl std::fmt::Debug for PostgresLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLeases")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl PostgresLeases {
    /// Leases on `pool`; `ttl` is how long a crashed holder blocks its thread.
    pub fn new(pool: Pool, ttl: Duration) -> PostgresLeases {
        PostgresLeases { pool, ttl }
    }
}

impl SharedLeases for PostgresLeases {
    fn take<'a>(
        &'a self,
        key: &'a ThreadKey,
        token: &'a str,
        supersede: bool,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            // A lease row that expired is free whoever wrote it.
            let statement = client
                .prepare_cached(
                    "INSERT INTO agui_thread_leases (scope, agent, thread_id, token, expires_at) \
                     VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond') \
                     ON CONFLICT (scope, agent, thread_id) DO UPDATE \
                     SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
                     WHERE $6 OR agui_thread_leases.expires_at <= now() RETURNING 1",
                )
                .await
                .map_err(pg)?;
            let granted = client
                .query_opt(
                    &statement,
                    &[
                        &key.scope,
                        &key.agent,
                        &key.thread_id,
                        &token,
                        &millis(self.ttl),
                        &supersede,
                    ],
                )
                .await
                .map_err(pg)?;
            granted.map(drop).ok_or(LeaseError::Busy)
        }
        .boxed()
    }

    fn renew<'a>(
        &'a self,
        key: &'a ThreadKey,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "UPDATE agui_thread_leases \
                     SET expires_at = now() + $5::bigint * interval '1 millisecond' \
                     WHERE scope = $1 AND agent = $2 AND thread_id = $3 AND token = $4 \
                     AND expires_at > now()",
                )
                .await
                .map_err(pg)?;
            let renewed = client
                .execute(
                    &statement,
                    &[
                        &key.scope,
                        &key.agent,
                        &key.thread_id,
                        &token,
                        &millis(self.ttl),
                    ],
                )
                .await
                .map_err(pg)?;
            Ok(renewed == 1)
        }
        .boxed()
    }

    fn held<'a>(&'a self, keys: &'a [ThreadKey]) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "SELECT scope, agent, thread_id FROM agui_thread_leases \
                     WHERE (scope, agent, thread_id) IN \
                     (SELECT * FROM unnest($1::text[], $2::text[], $3::text[])) \
                     AND expires_at > now()",
                )
                .await
                .map_err(pg)?;
            let column =
                |part: fn(&ThreadKey) -> &str| -> Vec<&str> { keys.iter().map(part).collect() };
            let (scopes, agents, ids) = (
                column(|key| &key.scope),
                column(|key| &key.agent),
                column(|key| &key.thread_id),
            );
            let rows = client
                .query(&statement, &[&scopes, &agents, &ids])
                .await
                .map_err(pg)?;
            let held: std::collections::HashSet<(String, String, String)> = rows
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect();
            Ok(keys
                .iter()
                .map(|key| {
                    held.contains(&(key.scope.clone(), key.agent.clone(), key.thread_id.clone()))
                })
                .collect())
        }
        .boxed()
    }

    fn release<'a>(&'a self, key: &'a ThreadKey, token: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let released = async {
                let client = self.pool.get().await.map_err(pool_error)?;
                client
                    .execute(
                        "DELETE FROM agui_thread_leases WHERE scope = $1 AND agent = $2 \
                         AND thread_id = $3 AND token = $4",
                        &[&key.scope, &key.agent, &key.thread_id, &token],
                    )
                    .await
                    .map_err(pg)
            }
            .await;
            if let Err(error) = released {
                // The lease's expiry frees it soon anyway.
                tracing::warn!(%error, "could not release a thread lease");
            }
        }
        .boxed()
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }
}
