//! One run per thread: a lease a run holds while it streams. In one process it is an entry in
//! a map; with Redis it is `SET agui:lease:<digest> <random token> NX PX <ttl>`, renewed and
//! released by scripts that compare the token first (so a run that lost its lease can never
//! extend or free its successor's), which makes it hold across processes. A renewal that fails
//! cancels the run's `lost` token: the run stops rather than go on unguarded. The lease is
//! also the fence on the thread's record: a store saves only while the lease still holds the
//! thread ([`Lease::while_held`] in one process, the same token check inside the Redis save
//! script), so a run superseded on another replica, which hears of it only at its next
//! renewal, can never overwrite its successor's record. Release is an
//! explicit `await` at the end of a run; a dropped lease only schedules it, and the TTL covers
//! a crashed process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Script;
use tokio_util::sync::CancellationToken;

use super::{StoreError, ThreadKey};

const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// Why a lease was not granted.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("another run is streaming on this thread")]
    Busy,
    #[error(transparent)]
    Backend(#[from] StoreError),
}

/// The leases of this process, and Redis's when threads live there.
#[derive(Debug, Clone)]
pub struct Leases {
    /// The runs of this process by thread, so a superseding run stops its predecessor at once.
    local: Arc<Mutex<HashMap<ThreadKey, Holder>>>,
    redis: Option<RedisLeases>,
}

#[derive(Clone)]
struct RedisLeases {
    connection: ConnectionManager,
    ttl: Duration,
}

impl std::fmt::Debug for RedisLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeases")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Holder {
    token: String,
    lost: CancellationToken,
}

/// A run's hold on its thread. Release it with [`Lease::release`] when the run ends.
#[derive(Debug)]
pub struct Lease {
    key: ThreadKey,
    token: String,
    lost: CancellationToken,
    leases: Leases,
    renewal: Option<tokio::task::AbortHandle>,
    released: bool,
}

impl Leases {
    /// Leases for one process.
    pub fn local() -> Leases {
        Leases {
            local: Arc::default(),
            redis: None,
        }
    }

    /// Leases that hold across every process sharing this Redis; `ttl` is how long a crashed
    /// holder blocks its thread.
    pub fn redis(connection: ConnectionManager, ttl: Duration) -> Leases {
        Leases {
            local: Arc::default(),
            redis: Some(RedisLeases { connection, ttl }),
        }
    }

    /// Takes the thread for a run. With `supersede`, a run already holding it loses its lease
    /// (at once in this process, at its next renewal in another); otherwise that is
    /// [`LeaseError::Busy`].
    ///
    /// # Errors
    /// Busy, or Redis failed.
    pub async fn acquire(&self, key: &ThreadKey, supersede: bool) -> Result<Lease, LeaseError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        if let Some(redis) = &self.redis {
            redis.take(key, &token, supersede).await?;
        }
        let lost = CancellationToken::new();
        {
            let mut local = self.lock();
            if let Some(holder) = local.get(key) {
                if !supersede && self.redis.is_none() {
                    return Err(LeaseError::Busy);
                }
                holder.lost.cancel();
            }
            local.insert(
                key.clone(),
                Holder {
                    token: token.clone(),
                    lost: lost.clone(),
                },
            );
        }
        let renewal = self
            .redis
            .clone()
            .map(|redis| redis.spawn_renewal(key.clone(), token.clone(), lost.clone()));
        Ok(Lease {
            key: key.clone(),
            token,
            lost,
            leases: self.clone(),
            renewal,
            released: false,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ThreadKey, Holder>> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn forget_local(&self, key: &ThreadKey, token: &str) {
        let mut local = self.lock();
        if local.get(key).is_some_and(|holder| holder.token == token) {
            local.remove(key);
        }
    }
}

/// The Redis key holding the token of the run that has `key`'s thread.
pub(super) fn redis_key(key: &ThreadKey) -> String {
    format!("agui:lease:{}", key.digest())
}

impl RedisLeases {
    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    async fn take(&self, key: &ThreadKey, token: &str, supersede: bool) -> Result<(), LeaseError> {
        let mut command = redis::cmd("SET");
        command.arg(redis_key(key)).arg(token);
        if !supersede {
            command.arg("NX");
        }
        command.arg("PX").arg(self.ttl_ms());
        let mut connection = self.connection.clone();
        let granted: Option<String> = command
            .query_async(&mut connection)
            .await
            .map_err(super::redis::backend)?;
        granted.map(drop).ok_or(LeaseError::Busy)
    }

    /// Renews every third of the TTL; a renewal refused (the token changed: superseded or
    /// expired) or failed cancels `lost`.
    fn spawn_renewal(
        self,
        key: ThreadKey,
        token: String,
        lost: CancellationToken,
    ) -> tokio::task::AbortHandle {
        let task = tokio::spawn(async move {
            let script = Script::new(RENEW);
            let lease_key = redis_key(&key);
            loop {
                tokio::select! {
                    () = lost.cancelled() => return,
                    () = tokio::time::sleep(self.ttl / 3) => {}
                }
                let mut connection = self.connection.clone();
                let renewed: Result<i64, _> = script
                    .key(&lease_key)
                    .arg(&token)
                    .arg(self.ttl_ms())
                    .invoke_async(&mut connection)
                    .await;
                if !matches!(renewed, Ok(1)) {
                    tracing::warn!(
                        thread_id = %key.thread_id,
                        error = renewed.err().map(|e| e.to_string()),
                        "the run lost its thread lease; stopping it"
                    );
                    lost.cancel();
                    return;
                }
            }
        });
        task.abort_handle()
    }

    async fn release(&self, key: &ThreadKey, token: &str) {
        let mut connection = self.connection.clone();
        let released: Result<i64, _> = Script::new(RELEASE)
            .key(redis_key(key))
            .arg(token)
            .invoke_async(&mut connection)
            .await;
        if let Err(error) = released {
            // The TTL frees it soon anyway.
            tracing::warn!(%error, "could not release a thread lease");
        }
    }
}

impl Lease {
    /// The thread this lease holds.
    pub fn key(&self) -> &ThreadKey {
        &self.key
    }

    /// What identifies this run's hold on the thread (in Redis, the lease key's value).
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// Runs `write` only if this lease still holds its thread in this process, with the
    /// process's leases locked, so no run can supersede this one between the check and the
    /// write; `None` when it no longer holds it.
    pub(super) fn while_held<T>(&self, write: impl FnOnce() -> T) -> Option<T> {
        let local = self.leases.lock();
        let held = local
            .get(&self.key)
            .is_some_and(|holder| holder.token == self.token);
        held.then(write)
    }

    /// Cancelled when the run must stop: superseded, or the lease could not be renewed.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Frees the thread for the next run (only if this lease still holds it).
    pub async fn release(mut self) {
        self.released = true;
        self.stop_renewal();
        self.leases.forget_local(&self.key, &self.token);
        if let Some(redis) = &self.leases.redis {
            redis.release(&self.key, &self.token).await;
        }
    }

    fn stop_renewal(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewal();
        self.leases.forget_local(&self.key, &self.token);
        // Never block in Drop: the Redis release runs on its own, and the TTL covers the case
        // where there is no runtime left to run it.
        if let (Some(redis), Ok(runtime)) = (
            self.leases.redis.clone(),
            tokio::runtime::Handle::try_current(),
        ) {
            let (key, token) = (self.key.clone(), std::mem::take(&mut self.token));
            runtime.spawn(async move { redis.release(&key, &token).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ThreadKey {
        ThreadKey {
            scope: "s".into(),
            agent: "a".into(),
            thread_id: "t".into(),
        }
    }

    #[tokio::test]
    async fn a_second_run_is_refused_until_the_first_releases() {
        let leases = Leases::local();
        let first = leases.acquire(&key(), false).await.unwrap();
        assert!(matches!(
            leases.acquire(&key(), false).await,
            Err(LeaseError::Busy)
        ));
        first.release().await;
        assert!(leases.acquire(&key(), false).await.is_ok());
    }

    #[tokio::test]
    async fn superseding_stops_the_first_run_and_its_release_frees_nothing() {
        let leases = Leases::local();
        let first = leases.acquire(&key(), false).await.unwrap();
        let second = leases.acquire(&key(), true).await.unwrap();
        assert!(first.lost().is_cancelled());
        assert!(!second.lost().is_cancelled());
        first.release().await;
        assert!(
            matches!(leases.acquire(&key(), false).await, Err(LeaseError::Busy)),
            "the second run still holds the thread"
        );
        drop(second);
        assert!(leases.acquire(&key(), false).await.is_ok());
    }
}
