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
//!
//! The list has an index per (scope, agent): a sorted set whose members are the threads'
//! places in the list's order (`agui:list:<digest>`, all scored 0 and read by lex range: 16
//! hex digits of `i64::MAX - updatedAt`, then the thread id, so byte order is newest first,
//! then by thread id), and a hash from thread id to its entry (`…:entries`: the place, the
//! expiry and the summary). The save and delete scripts keep both; a read drops the members it
//! finds expired, and bounds its own work ([`LIST_BUDGET`]).

use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script, ScriptInvocation};

use super::lease::{Lease, LeaseError, SharedLeases};
use super::{
    ListCursor, ListQuery, Quota, ScopeQuota, StoreError, ThreadKey, ThreadPage, ThreadRecord,
    ThreadStore, ThreadSummary,
};
use crate::threads::ArchivedFilter;

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

/// KEYS: the thread, its lease, the scope's set and sizes, the list's set and entries; ARGV:
/// the thread's digest, the most threads and bytes of the scope, the saving run's lease token,
/// the record, its TTL in ms, the thread id, its place in the list, its list entry (a JSON
/// object, which the script prefixes with its expiry).
/// 1: saved; 0: the lease is lost; -1, -2: the scope's thread count, or bytes, is reached (the
/// bytes as a soft bound, see `ScopeQuota::admit`).
static SAVE_WHILE_LEASED: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(&format!(
        r#"
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
local old = redis.call('HGET', KEYS[6], ARGV[7])
if old then redis.call('ZREM', KEYS[5], cjson.decode(old).place) end
redis.call('ZADD', KEYS[5], 0, ARGV[8])
local expires = string.format('%.0f', now + tonumber(ARGV[6]))
redis.call('HSET', KEYS[6], ARGV[7], '{{"expiresAt":' .. expires .. ',' .. string.sub(ARGV[9], 2))
redis.call('PEXPIRE', KEYS[5], ARGV[6])
redis.call('PEXPIRE', KEYS[6], ARGV[6])
return 1"#
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

/// KEYS: the thread, the scope's set and sizes, the list's set and entries; ARGV: the thread's
/// digest, its id. The number of records removed.
const DELETE: &str = r"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local old = redis.call('HGET', KEYS[5], ARGV[2])
if old then redis.call('ZREM', KEYS[4], cjson.decode(old).place) end
redis.call('HDEL', KEYS[5], ARGV[2])
return redis.call('DEL', KEYS[1])";

/// Most index members one list call looks at: a scope with many archived or expired threads
/// in a row answers a short page with a cursor rather than hold Redis for long.
const LIST_BUDGET: usize = 1_000;

/// KEYS: the list's set and entries; ARGV: where to start (`-`, or `(` and the place after
/// which), how many threads to find, the archived filter (`false`, `true`, `all`), the most
/// members to look at. The place to resume from when the budget ran out first (else ``),
/// then the entries found, in order. Expired and stale members are dropped on the way.
static LIST: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local want, budget = tonumber(ARGV[2]), tonumber(ARGV[4])
local found, seen, start, resume = {}, 0, ARGV[1], ''
while #found < want do
  if seen >= budget then break end
  local batch = redis.call('ZRANGE', KEYS[1], start, '+', 'BYLEX', 'LIMIT', 0, 100)
  if #batch == 0 then break end
  for _, place in ipairs(batch) do
    seen = seen + 1
    start = '(' .. place
    local id = string.sub(place, 17)
    local value = redis.call('HGET', KEYS[2], id)
    local entry = value and cjson.decode(value)
    if not entry or entry.place ~= place then
      redis.call('ZREM', KEYS[1], place)
    elseif entry.expiresAt <= now then
      redis.call('ZREM', KEYS[1], place)
      redis.call('HDEL', KEYS[2], id)
    elseif ARGV[3] == 'all' or tostring(entry.archived) == ARGV[3] then
      table.insert(found, value)
    end
    if #found >= want or seen >= budget then break end
  end
end
if #found < want and seen >= budget then resume = string.sub(start, 2) end
table.insert(found, 1, resume)
return found",
    )
});

/// A thread's place in the list's index (see the module docs).
fn list_place(updated_at: i64, thread_id: &str) -> String {
    let age = u64::try_from(i64::MAX.saturating_sub(updated_at.max(0))).unwrap_or(0);
    format!("{age:016x}{thread_id}")
}

/// The cursor a place names; `None` for a place this version did not write.
fn place_cursor(place: &str) -> Option<ListCursor> {
    let (age, thread_id) = (place.get(..16)?, place.get(16..)?);
    let age = i64::try_from(u64::from_str_radix(age, 16).ok()?).ok()?;
    Some(ListCursor {
        updated_at: i64::MAX - age,
        thread_id: thread_id.to_owned(),
    })
}

/// A thread's entry in the list's hash (the save script adds `expiresAt`).
#[derive(serde::Serialize, serde::Deserialize)]
struct ListEntry {
    place: String,
    archived: bool,
    summary: ThreadSummary,
}

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

    fn held<'a>(&'a self, keys: &'a [ThreadKey]) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
        async move {
            let mut connection = self.connection.clone();
            let names: Vec<String> = keys.iter().map(lease_key).collect();
            let tokens: Vec<Option<String>> = redis::cmd("MGET")
                .arg(names)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(tokens.iter().map(Option::is_some).collect())
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

    /// The (scope, agent)'s list index: its set of places and its hash of entries.
    fn list_keys(scope: &str, agent: &str) -> [String; 2] {
        let list = crate::text::key_digest(&[scope, agent]);
        [
            format!("agui:list:{list}"),
            format!("agui:list:{list}:entries"),
        ]
    }

    /// A call of a script that checks the quota: the thread's keys (the thread, its lease, the
    /// scope's set and sizes, the list's set and entries) and the quota's arguments, which a
    /// save follows with its own.
    fn quota_call<'s>(&self, script: &'s Script, key: &ThreadKey) -> ScriptInvocation<'s> {
        let [threads, bytes] = Self::scope_keys(key);
        let [places, entries] = Self::list_keys(&key.scope, &key.agent);
        let mut call = script.prepare_invoke();
        call.key(Self::key(key))
            .key(lease_key(key))
            .key(threads)
            .key(bytes)
            .key(places)
            .key(entries)
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
            let thread_id = &lease.key().thread_id;
            let place = list_place(record.updated_at, thread_id);
            let entry = serde_json::to_vec(&ListEntry {
                place: place.clone(),
                archived: record.archived,
                summary: record.summary(thread_id),
            })
            .map_err(StoreError::Encode)?;
            let mut connection = self.connection.clone();
            let written: i64 = self
                .quota_call(&SAVE_WHILE_LEASED, lease.key())
                .arg(lease.token())
                .arg(data)
                .arg(ttl_ms)
                .arg(thread_id)
                .arg(place)
                .arg(entry)
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
            let [places, entries] = Self::list_keys(&key.scope, &key.agent);
            let removed: u64 = Script::new(DELETE)
                .key(Self::key(key))
                .key(threads)
                .key(bytes)
                .key(places)
                .key(entries)
                .arg(key.digest())
                .arg(&key.thread_id)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(removed > 0)
        }
        .boxed()
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Result<ThreadPage, StoreError>> {
        async move {
            let [places, entries] = Self::list_keys(&query.scope, &query.agent);
            let start = query.after.as_ref().map_or_else(
                || "-".to_owned(),
                |after| format!("({}", list_place(after.updated_at, &after.thread_id)),
            );
            let archived = match query.archived {
                ArchivedFilter::Active => "false",
                ArchivedFilter::Archived => "true",
                ArchivedFilter::All => "all",
            };
            let mut connection = self.connection.clone();
            let answer: Vec<Vec<u8>> = LIST
                .key(places)
                .key(entries)
                .arg(start)
                .arg(query.limit + 1)
                .arg(archived)
                .arg(LIST_BUDGET)
                .invoke_async(&mut connection)
                .await
                .map_err(backend)?;
            let mut answer = answer.into_iter();
            let resume = answer.next().unwrap_or_default();
            let found = answer
                .map(|value| serde_json::from_slice::<ListEntry>(&value))
                .map(|entry| entry.map(|entry| entry.summary))
                .collect::<Result<Vec<_>, _>>()
                .map_err(StoreError::Decode)?;
            let mut page = ThreadPage::from_overfetch(found, query.limit);
            if page.next.is_none() && !resume.is_empty() {
                page.next = std::str::from_utf8(&resume).ok().and_then(place_cursor);
            }
            Ok(page)
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
