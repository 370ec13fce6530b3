//! The Redis (6.2+ or Valkey) thread store, and the one shared connection the service makes to
//! Redis. One key per thread (`agui:thread:<digest>`), written whole with `SET … PX`, so every
//! thread expires by itself and nothing grows without bound. The write is fenced: one script
//! checks that the thread's lease key still holds the saving run's token and only then sets
//! the record, so a run superseded on another replica cannot overwrite its successor's. The connection is a
//! `ConnectionManager` (one multiplexed connection, reconnecting on failure) with explicit
//! timeouts, cloned by whatever else needs Redis (the run leases).

use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use super::lease::{self, Lease};
use super::{StoreError, ThreadKey, ThreadRecord, ThreadStore};

/// KEYS: the thread, its lease; ARGV: the saving run's lease token, the record, its TTL in ms.
const SAVE_WHILE_LEASED: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1";

/// Opens the shared connection. `timeout` bounds both connecting and every reply: the client
/// crate's own default (500 ms) is too short for a large record on a busy server and too
/// implicit to rely on.
///
/// # Errors
/// A malformed URL, or Redis not answering.
pub async fn connect(url: &str, timeout: Duration) -> Result<ConnectionManager, StoreError> {
    let client = redis::Client::open(url).map_err(backend)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(backend)
}

#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter: it takes what `map_err` gives
pub(super) fn backend(error: redis::RedisError) -> StoreError {
    StoreError::Backend(error.to_string())
}

/// See the module docs.
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    ttl: Duration,
    max_bytes: usize,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("ttl", &self.ttl)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store whose threads expire `ttl` after their last save; a record over `max_bytes`
    /// (0: no limit) is refused rather than stored.
    pub fn new(connection: ConnectionManager, ttl: Duration, max_bytes: usize) -> RedisStore {
        RedisStore {
            connection,
            ttl,
            max_bytes,
        }
    }

    fn key(key: &ThreadKey) -> String {
        format!("agui:thread:{}", key.digest())
    }
}

impl ThreadStore for RedisStore {
    fn load<'a>(
        &'a self,
        key: &'a ThreadKey,
    ) -> BoxFuture<'a, Result<Option<ThreadRecord>, StoreError>> {
        async move {
            let mut connection = self.connection.clone();
            let data: Option<Vec<u8>> = connection.get(Self::key(key)).await.map_err(backend)?;
            data.map(|data| serde_json::from_slice(&data).map_err(StoreError::Decode))
                .transpose()
        }
        .boxed()
    }

    fn save<'a>(
        &'a self,
        lease: &'a Lease,
        record: &'a ThreadRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            let data = serde_json::to_vec(record).map_err(StoreError::Encode)?;
            if self.max_bytes > 0 && data.len() > self.max_bytes {
                return Err(StoreError::TooLarge {
                    size: data.len(),
                    limit: self.max_bytes,
                });
            }
            let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
            let mut connection = self.connection.clone();
            let written: i64 = Script::new(SAVE_WHILE_LEASED)
                .key(Self::key(lease.key()))
                .key(lease::redis_key(lease.key()))
                .arg(lease.token())
                .arg(data)
                .arg(ttl_ms)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            if written == 1 {
                Ok(())
            } else {
                Err(StoreError::LeaseLost)
            }
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let mut connection = self.connection.clone();
            let removed: u64 = connection.del(Self::key(key)).await.map_err(backend)?;
            Ok(removed > 0)
        }
        .boxed()
    }
}
