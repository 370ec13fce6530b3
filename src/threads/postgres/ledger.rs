//! The Postgres decision ledger (see `crate::threads::ledger`): one row per decision in
//! `agui_decisions`, claimed with `INSERT … ON CONFLICT DO UPDATE … WHERE` the row has expired,
//! so the first claim of a live decision wins on every replica and an expired one can be
//! claimed anew. Expired rows are never counted and are swept with the threads.

use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::future::{BoxFuture, FutureExt};

use super::{millis, pg, pool_error};
use crate::threads::{DecisionKey, DecisionLedger, StoreError};

/// See the module docs.
#[derive(Clone)]
pub struct PostgresLedger {
    pool: Pool,
}

impl std::fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLedger").finish_non_exhaustive()
    }
}

impl PostgresLedger {
    pub fn new(pool: Pool) -> PostgresLedger {
        PostgresLedger { pool }
    }
}

impl DecisionLedger for PostgresLedger {
    fn claim<'a>(
        &'a self,
        key: DecisionKey<'a>,
        keep: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "INSERT INTO agui_decisions (digest, expires_at) \
                     VALUES ($1, now() + $2::bigint * interval '1 millisecond') \
                     ON CONFLICT (digest) DO UPDATE SET expires_at = EXCLUDED.expires_at \
                     WHERE agui_decisions.expires_at <= now() RETURNING 1",
                )
                .await
                .map_err(pg)?;
            // The shortest entry is a millisecond, as in the other ledgers.
            let keep_ms = millis(keep).max(1);
            let claimed = client
                .query_opt(&statement, &[&key.digest(), &keep_ms])
                .await
                .map_err(pg)?;
            Ok(claimed.is_some())
        }
        .boxed()
    }

    fn is_claimed<'a>(&'a self, key: DecisionKey<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client
                .prepare_cached(
                    "SELECT 1 FROM agui_decisions WHERE digest = $1 AND expires_at > now()",
                )
                .await
                .map_err(pg)?;
            let found = client
                .query_opt(&statement, &[&key.digest()])
                .await
                .map_err(pg)?;
            Ok(found.is_some())
        }
        .boxed()
    }
}
