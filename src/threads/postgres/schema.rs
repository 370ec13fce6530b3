//! The Postgres store's schema and its migrations, run at start-up. Each migration is applied
//! once, in order, and recorded in `agui_schema_migrations` (named for this service, so it
//! never meets another tool's `schema_migrations` in a shared database). The whole run happens
//! in one transaction under a transaction-level advisory lock, so replicas starting together
//! take turns: the first applies what is missing, the others find it applied and do nothing.
//! A migration is never edited once released; a change of schema is a new one at the end.

use deadpool_postgres::Pool;

use super::{pg, pool_error};
use crate::threads::StoreError;

/// The advisory lock migrations are applied under (any fixed number; this one spells "aguimigr").
const MIGRATION_LOCK: i64 = 0x6167_7569_6d69_6772;

/// Every migration, by version.
const MIGRATIONS: &[(i32, &str)] = &[(1, V1_THREADS_LEASES_DECISIONS)];

/// Threads, the run leases that fence their saves, and the approval ledger.
///
/// The record is the JSON the other stores keep, as bytes: JSONB would refuse a message that
/// holds `\u0000`, which a client may send. What the list shows is kept in columns beside it,
/// so a page reads no record. `thread_id` compares bytewise (`COLLATE "C"`), the order every
/// store lists in. Times a row expires at are the database's clock, shared by every replica.
const V1_THREADS_LEASES_DECISIONS: &str = r#"
CREATE TABLE agui_threads (
    scope         text NOT NULL,
    agent         text NOT NULL,
    thread_id     text COLLATE "C" NOT NULL,
    record        bytea NOT NULL,
    bytes         integer NOT NULL,
    title         text,
    archived      boolean NOT NULL DEFAULT false,
    interrupted   boolean NOT NULL DEFAULT false,
    message_count integer NOT NULL,
    last_run_id   text NOT NULL,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, agent, thread_id)
);
CREATE INDEX agui_threads_list
    ON agui_threads (scope, agent, archived, updated_at DESC, thread_id);
CREATE INDEX agui_threads_expiry ON agui_threads (expires_at);

CREATE TABLE agui_thread_leases (
    scope      text NOT NULL,
    agent      text NOT NULL,
    thread_id  text COLLATE "C" NOT NULL,
    token      text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, agent, thread_id)
);

CREATE TABLE agui_decisions (
    digest     text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX agui_decisions_expiry ON agui_decisions (expires_at);
"#;

/// Applies the migrations `pool`'s database lacks; how many it applied (0: up to date).
///
/// # Errors
/// The database is unreachable or refused a migration (nothing of that run is kept).
pub async fn migrate(pool: &Pool) -> Result<usize, StoreError> {
    let mut client = pool.get().await.map_err(pool_error)?;
    let transaction = client.transaction().await.map_err(pg)?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg)?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS agui_schema_migrations (
                version    integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(pg)?;
    let applied: Vec<i32> = transaction
        .query("SELECT version FROM agui_schema_migrations", &[])
        .await
        .map_err(pg)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut count = 0;
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        transaction.batch_execute(sql).await.map_err(pg)?;
        transaction
            .execute(
                "INSERT INTO agui_schema_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .map_err(pg)?;
        tracing::info!(version, "applied a thread store migration");
        count += 1;
    }
    transaction.commit().await.map_err(pg)?;
    Ok(count)
}
