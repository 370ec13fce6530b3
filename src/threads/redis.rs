//! The Redis (6.2+ or Valkey) thread store, and the one shared connection the service makes to
//! Redis. One key per thread (`agui:thread:<digest>`), written whole with `SET … PX`, so every
//! thread expires by itself and nothing grows without bound. The write is fenced: one script
//! checks that the thread's lease key still holds the saving run's token and only then sets
//! the record, so a run superseded on another replica cannot overwrite its successor's. The connection is a
//! `ConnectionManager` (one multiplexed connection, reconnecting on failure) with explicit
//! timeouts, cloned by whatever else needs Redis (the run leases).
//!
//! Each scope's quota is kept beside its threads: a sorted set of the scope's thread digests
//! scored by their expiry (`agui:scope:<digest>:threads`) and a hash of their sizes
//! (`…:bytes`). The save script drops the members that expired, checks the quota and writes,
//! all in one step, so two replicas saving at once cannot both take the last place.

use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script, ScriptInvocation};

use super::lease::{Lease, LeaseError, SharedLeases};
use super::{Quota, ScopeQuota, StoreError, ThreadKey, ThreadRecord, ThreadStore};

/// Drops a scope's expired members (KEYS[1] the set, KEYS[2] the sizes), then leaves in `now`
/// the time in ms and in `held` and `total` the thread's size (false: not held) and the
/// scope's bytes. Shared by the scripts below.
const SCOPE_USAGE: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('HDEL', KEYS[4], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local held = redis.call('HGET', KEYS[4], ARGV[1])
local total = 0
if tonumber(ARGV[3]) > 0 then
  for _, size in ipairs(redis.call('HVALS', KEYS[4])) do total = total + tonumber(size) end
end
local count = redis.call('ZCARD', KEYS[3])
";

/// KEYS: the thread, its lease, the scope's set and sizes; ARGV: the thread's digest, the most
/// threads and bytes of the scope, the saving run's lease token, the record, its TTL in ms.
/// 1: saved; 0: the lease is lost; -1, -2: the scope's thread count, or bytes, is reached (the
/// bytes as a soft bound, see `ScopeQuota::admit`).
static SAVE_WHILE_LEASED: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(&format!(
        r"
if redis.call('GET', KEYS[2]) ~= ARGV[4] then
  return 0
end
{SCOPE_USAGE}
if not held and tonumber(ARGV[2]) > 0 and count >= tonumber(ARGV[2]) then return -1 end
local size = string.len(ARGV[5])
if tonumber(ARGV[3]) > 0 and total - tonumber(held or 0) > tonumber(ARGV[3]) then
  return -2
end
redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], size)
redis.call('PEXPIRE', KEYS[3], ARGV[6])
redis.call('PEXPIRE', KEYS[4], ARGV[6])
return 1"
    ))
});

/// The same keys and first three arguments: whether a run on the thread may start (1), or
/// the scope's count (-1) or bytes (-2) are reached.
static ADMIT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(&format!(
        r"
{SCOPE_USAGE}
if not held and tonumber(ARGV[2]) > 0 and count >= tonumber(ARGV[2]) then return -1 end
if tonumber(ARGV[3]) > 0 and total > tonumber(ARGV[3]) then return -2 end
return 1"
    ))
});

/// KEYS: the thread, the scope's set and sizes; ARGV: the thread's digest. The number of
/// records removed.
const DELETE: &str = r"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('DEL', KEYS[1])";

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

/// The Redis key holding the token of the run that has `key`'s thread.
fn lease_key(key: &ThreadKey) -> String {
    format!("agui:lease:{}", key.digest())
}

/// Renews a lease if the caller's token still holds it.
static RENEW_LEASE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0",
    )
});

/// Frees a lease if the caller's token still holds it.
static RELEASE_LEASE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0",
    )
});

/// Run leases that hold across every process sharing this Redis (see `super::lease`).
#[derive(Clone)]
pub struct RedisLeases {
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

impl RedisLeases {
    /// Leases on `connection`; `ttl` is how long a crashed holder blocks its thread.
    pub fn new(connection: ConnectionManager, ttl: Duration) -> Self {
        RedisLeases { connection, ttl }
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }
}

impl SharedLeases for RedisLeases {
    fn take<'a>(
        &'a self,
        key: &'a ThreadKey,
        token: &'a str,
        supersede: bool,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        async move {
            let mut command = redis::cmd("SET");
            command.arg(lease_key(key)).arg(token);
            if !supersede {
                command.arg("NX");
            }
            command.arg("PX").arg(self.ttl_ms());
            let mut connection = self.connection.clone();
            let granted: Option<String> = command
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
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
            let mut connection = self.connection.clone();
            let renewed: i64 = RENEW_LEASE
                .key(lease_key(key))
                .arg(token)
                .arg(self.ttl_ms())
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(renewed == 1)
        }
        .boxed()
    }

    fn release<'a>(&'a self, key: &'a ThreadKey, token: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let mut connection = self.connection.clone();
            let released: Result<i64, _> = RELEASE_LEASE
                .key(lease_key(key))
                .arg(token)
                .invoke_async(&mut connection)
                .await;
            if let Err(error) = released {
                // The TTL frees it soon anyway.
                tracing::warn!(%error, "could not release a thread lease");
            }
        }
        .boxed()
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }
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
    quota: ScopeQuota,
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
            quota: ScopeQuota::default(),
        }
    }

    /// The same store with each scope held to `quota`.
    #[must_use]
    pub fn with_scope_quota(mut self, quota: ScopeQuota) -> RedisStore {
        self.quota = quota;
        self
    }

    fn key(key: &ThreadKey) -> String {
        format!("agui:thread:{}", key.digest())
    }

    /// The scope's set of threads and the hash of their sizes.
    fn scope_keys(key: &ThreadKey) -> [String; 2] {
        let scope = crate::text::key_digest(&[&key.scope]);
        [
            format!("agui:scope:{scope}:threads"),
            format!("agui:scope:{scope}:bytes"),
        ]
    }

    /// A call of a script that checks the quota: the thread's keys (the thread, its lease, the
    /// scope's set and sizes) and the quota's arguments, which a save follows with its own.
    fn quota_call<'s>(&self, script: &'s Script, key: &ThreadKey) -> ScriptInvocation<'s> {
        let [threads, bytes] = Self::scope_keys(key);
        let mut call = script.prepare_invoke();
        call.key(Self::key(key))
            .key(lease_key(key))
            .key(threads)
            .key(bytes)
            .arg(key.digest())
            .arg(self.quota.max_threads)
            .arg(self.quota.max_bytes);
        call
    }

    /// What a script's -1 or -2 means.
    fn quota_error(&self, answer: i64) -> Option<StoreError> {
        let quota = match answer {
            -1 => Quota::Threads {
                limit: self.quota.max_threads,
            },
            -2 => Quota::Bytes {
                limit: self.quota.max_bytes,
            },
            _ => return None,
        };
        Some(StoreError::QuotaExceeded(quota))
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
            let written: i64 = self
                .quota_call(&SAVE_WHILE_LEASED, lease.key())
                .arg(lease.token())
                .arg(data)
                .arg(ttl_ms)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            match written {
                1 => Ok(()),
                0 => Err(StoreError::LeaseLost),
                other => Err(self
                    .quota_error(other)
                    .unwrap_or(StoreError::Backend(format!(
                        "unexpected save answer {other}"
                    )))),
            }
        }
        .boxed()
    }

    fn delete<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let mut connection = self.connection.clone();
            let [threads, bytes] = Self::scope_keys(key);
            let removed: u64 = Script::new(DELETE)
                .key(Self::key(key))
                .key(threads)
                .key(bytes)
                .arg(key.digest())
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(removed > 0)
        }
        .boxed()
    }

    fn admit<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<(), StoreError>> {
        async move {
            if self.quota == ScopeQuota::default() {
                return Ok(());
            }
            let mut connection = self.connection.clone();
            let answer: i64 = self
                .quota_call(&ADMIT, key)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            self.quota_error(answer).map_or(Ok(()), Err)
        }
        .boxed()
    }
}
