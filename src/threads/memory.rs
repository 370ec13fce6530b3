//! The in-process thread store: bounded by thread count and by bytes, with a time to live,
//! evicting the least recently used thread first; each scope bounded by its own quota, which
//! refuses rather than evicts, so that one scope can never push out another's threads. Records are kept serialized, so the byte
//! bound counts what is really held and a load hands out a private copy. A save is written
//! with the process's leases locked and only while the saving run's lease holds the thread.
//!
//! The list reads a per-(scope, agent) ordered index of the threads' summaries, kept by every
//! save and removal, so a page costs its own threads (and the archived or expired ones it
//! steps over in that scope), never a walk of other scopes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::{
    Lease, ListQuery, ScopeQuota, StoreError, ThreadKey, ThreadPage, ThreadRecord, ThreadStore,
    ThreadSummary,
};

/// See the module docs.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Lru>,
    max_threads: usize,
    max_bytes: usize,
    ttl: Duration,
    quota: ScopeQuota,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<ThreadKey, Entry>,
    /// Use order: the smallest tick is the least recently used thread.
    order: BTreeMap<u64, ThreadKey>,
    next_tick: u64,
    bytes: usize,
    /// What each scope holds, expired threads not yet swept included.
    scopes: HashMap<String, Usage>,
    /// The list's index: each (scope, agent)'s threads in list order.
    listed: HashMap<(String, String), BTreeMap<Place, Listed>>,
}

/// A thread's place in the list's order: newest first, then by thread id.
type Place = (Reverse<i64>, String);

/// What the list shows of a thread, and when it stops being shown.
#[derive(Debug)]
struct Listed {
    summary: ThreadSummary,
    expires_at: Instant,
}

/// Which quota check: a run about to start, or its save.
#[derive(Debug, Clone, Copy)]
enum Check {
    Admit,
    Save,
}

/// One scope's threads and their bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    threads: usize,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    data: Arc<[u8]>,
    expires_at: Instant,
    tick: u64,
    /// Its `updatedAt`: where it is in the list's index.
    updated_at: i64,
}

impl MemoryStore {
    /// A store of at most `max_threads` threads and `max_bytes` bytes of records (0: no
    /// bound), each forgotten `ttl` after its last save.
    pub fn new(max_threads: usize, max_bytes: usize, ttl: Duration) -> MemoryStore {
        MemoryStore {
            inner: Mutex::new(Lru::default()),
            max_threads,
            max_bytes,
            ttl,
            quota: ScopeQuota::default(),
        }
    }

    /// The same store with each scope held to `quota`.
    #[must_use]
    pub fn with_scope_quota(mut self, quota: ScopeQuota) -> MemoryStore {
        self.quota = quota;
        self
    }

    /// How many threads are held, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A panic while holding the lock leaves the maps consistent (every mutation below is
        // completed before anything can panic), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn load_now(&self, key: &ThreadKey) -> Option<Arc<[u8]>> {
        let mut lru = self.lock();
        let now = Instant::now();
        let expired = lru.entries.get(key)?.expires_at <= now;
        if expired {
            lru.remove(key);
            return None;
        }
        let tick = lru.tick();
        let entry = lru.entries.get_mut(key)?;
        let old_tick = std::mem::replace(&mut entry.tick, tick);
        let data = Arc::clone(&entry.data);
        lru.order.remove(&old_tick);
        lru.order.insert(tick, key.clone());
        Some(data)
    }

    fn save_now(
        &self,
        key: &ThreadKey,
        data: Arc<[u8]>,
        summary: ThreadSummary,
    ) -> Result<(), StoreError> {
        if self.max_bytes > 0 && data.len() > self.max_bytes {
            return Err(StoreError::TooLarge {
                size: data.len(),
                limit: self.max_bytes,
            });
        }
        let mut lru = self.lock();
        if lru.within_quota(key, &self.quota, Check::Save).is_err() {
            // Expired threads still count until they are met: sweep them once before refusing.
            lru.drop_expired(Instant::now());
            lru.within_quota(key, &self.quota, Check::Save)?;
        }
        lru.remove(key);
        let tick = lru.tick();
        lru.bytes += data.len();
        let usage = lru.scopes.entry(key.scope.clone()).or_default();
        usage.threads += 1;
        usage.bytes += data.len();
        lru.order.insert(tick, key.clone());
        // A TTL too large to add to an instant is never reached.
        let expires_at = crate::clock::after(Instant::now(), self.ttl);
        let updated_at = summary.updated_at;
        lru.listed
            .entry((key.scope.clone(), key.agent.clone()))
            .or_default()
            .insert(
                (Reverse(updated_at), key.thread_id.clone()),
                Listed {
                    summary,
                    expires_at,
                },
            );
        lru.entries.insert(
            key.clone(),
            Entry {
                data,
                expires_at,
                tick,
                updated_at,
            },
        );
        while (self.max_threads > 0 && lru.entries.len() > self.max_threads)
            || (self.max_bytes > 0 && lru.bytes > self.max_bytes)
        {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.remove(&oldest);
        }
        Ok(())
    }

    fn list_now(&self, query: &ListQuery) -> ThreadPage {
        let mut lru = self.lock();
        let now = Instant::now();
        let (mut found, mut expired) = (Vec::new(), Vec::new());
        if let Some(index) = lru.listed.get(&(query.scope.clone(), query.agent.clone())) {
            let start = query.after.as_ref().map_or(Bound::Unbounded, |after| {
                Bound::Excluded((Reverse(after.updated_at), after.thread_id.clone()))
            });
            for ((_, thread_id), listed) in index.range((start, Bound::Unbounded)) {
                if listed.expires_at <= now {
                    expired.push(thread_id.clone());
                } else if query.archived.admits(listed.summary.archived) {
                    found.push(listed.summary.clone());
                    if found.len() > query.limit {
                        break;
                    }
                }
            }
        }
        for thread_id in expired {
            lru.remove(&ThreadKey {
                scope: query.scope.clone(),
                agent: query.agent.clone(),
                thread_id,
            });
        }
        ThreadPage::from_overfetch(found, query.limit)
    }
}

impl Lru {
    /// Whether the scope of `key` is within its quota for a run on it, or for its save.
    fn within_quota(
        &self,
        key: &ThreadKey,
        quota: &ScopeQuota,
        check: Check,
    ) -> Result<(), StoreError> {
        let usage = self.scopes.get(&key.scope).copied().unwrap_or_default();
        let held = self.entries.get(key).map(|entry| entry.data.len());
        match check {
            Check::Admit => quota.admit(usage.threads, usage.bytes, held.is_some()),
            Check::Save => quota.save(
                usage.threads,
                usage.bytes - held.unwrap_or(0),
                held.is_some(),
            ),
        }
    }

    fn drop_expired(&mut self, now: Instant) {
        let expired: Vec<ThreadKey> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.expires_at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
    }

    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }

    fn remove(&mut self, key: &ThreadKey) -> bool {
        let Some(entry) = self.entries.remove(key) else {
            return false;
        };
        self.order.remove(&entry.tick);
        self.bytes -= entry.data.len();
        let list = (key.scope.clone(), key.agent.clone());
        if let Some(index) = self.listed.get_mut(&list) {
            index.remove(&(Reverse(entry.updated_at), key.thread_id.clone()));
            if index.is_empty() {
                self.listed.remove(&list);
            }
        }
        if let Some(usage) = self.scopes.get_mut(&key.scope) {
            usage.threads -= 1;
            usage.bytes -= entry.data.len();
            if usage.threads == 0 {
                self.scopes.remove(&key.scope);
            }
        }
        true
    }
}

impl ThreadStore for MemoryStore {
    fn load<'a>(
        &'a self,
        key: &'a ThreadKey,
    ) -> BoxFuture<'a, Result<Option<ThreadRecord>, StoreError>> {
        let result = self
            .load_now(key)
            .map(|data| serde_json::from_slice(&data).map_err(StoreError::Decode))
            .transpose();
        std::future::ready(result).boxed()
    }

    fn save<'a>(
        &'a self,
        lease: &'a Lease,
        record: &'a ThreadRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = serde_json::to_vec(record)
            .map_err(StoreError::Encode)
            .and_then(|data| {
                let summary = record.summary(&lease.key().thread_id);
                lease
                    .while_held(|| self.save_now(lease.key(), data.into(), summary))
                    .unwrap_or(Err(StoreError::LeaseLost))
            });
        std::future::ready(result).boxed()
    }

    fn delete<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        let removed = self.lock().remove(key);
        std::future::ready(Ok(removed)).boxed()
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Result<ThreadPage, StoreError>> {
        std::future::ready(Ok(self.list_now(query))).boxed()
    }

    fn admit<'a>(&'a self, key: &'a ThreadKey) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut lru = self.lock();
        // A run adds at least nothing: a thread the scope holds is admitted while its bytes
        // are within the quota, a new one while its count has room.
        let mut admitted = lru.within_quota(key, &self.quota, Check::Admit);
        if admitted.is_err() {
            lru.drop_expired(Instant::now());
            admitted = lru.within_quota(key, &self.quota, Check::Admit);
        }
        std::future::ready(admitted).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::{Leases, Quota};

    fn key(thread_id: &str) -> ThreadKey {
        ThreadKey {
            scope: "s".into(),
            agent: "a".into(),
            thread_id: thread_id.into(),
        }
    }

    fn record(run: &str) -> ThreadRecord {
        ThreadRecord {
            agent: "a".into(),
            messages: Vec::new(),
            state: Some(serde_json::json!({"run": run})),
            interrupts: Vec::new(),
            server_results: Default::default(),
            last_run_id: run.into(),
            created_at: 1,
            updated_at: 2,
            lineage: Default::default(),
            title: None,
            archived: false,
        }
    }

    /// Saves under a lease of its own, as a run does.
    async fn save(
        store: &MemoryStore,
        thread_id: &str,
        record: &ThreadRecord,
    ) -> Result<(), StoreError> {
        let lease = Leases::local()
            .acquire(&key(thread_id), false)
            .await
            .unwrap();
        store.save(&lease, record).await
    }

    #[tokio::test]
    async fn a_run_whose_lease_was_superseded_saves_nothing() {
        let store = MemoryStore::new(10, 0, Duration::from_secs(60));
        let leases = Leases::local();
        let older = leases.acquire(&key("t"), false).await.unwrap();
        let newer = leases.acquire(&key("t"), true).await.unwrap();
        store.save(&newer, &record("r2")).await.unwrap();
        assert!(matches!(
            store.save(&older, &record("r1")).await,
            Err(StoreError::LeaseLost)
        ));
        assert_eq!(store.load(&key("t")).await.unwrap(), Some(record("r2")));
    }

    #[tokio::test]
    async fn a_ttl_too_large_to_add_keeps_threads_rather_than_panicking() {
        let store = MemoryStore::new(10, 0, Duration::from_secs(u64::MAX));
        save(&store, "t", &record("r1")).await.unwrap();
        assert_eq!(store.load(&key("t")).await.unwrap(), Some(record("r1")));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_thread_is_never_returned() {
        let store = MemoryStore::new(10, 0, Duration::from_secs(60));
        save(&store, "t", &record("r1")).await.unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(store.load(&key("t")).await.unwrap(), Some(record("r1")));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(store.load(&key("t")).await.unwrap(), None);
        assert!(store.is_empty(), "an expired thread is dropped when met");
    }

    #[tokio::test]
    async fn the_least_recently_used_thread_goes_first_when_the_count_is_reached() {
        let store = MemoryStore::new(2, 0, Duration::from_secs(60));
        save(&store, "a", &record("a")).await.unwrap();
        save(&store, "b", &record("b")).await.unwrap();
        // Reading `a` makes `b` the least recently used.
        assert!(store.load(&key("a")).await.unwrap().is_some());
        save(&store, "c", &record("c")).await.unwrap();
        assert_eq!(store.len(), 2);
        assert!(store.load(&key("b")).await.unwrap().is_none());
        assert!(store.load(&key("a")).await.unwrap().is_some());
        assert!(store.load(&key("c")).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_byte_bound_evicts_old_threads_and_refuses_one_too_large_alone() {
        let one = serde_json::to_vec(&record("x")).unwrap().len();
        let store = MemoryStore::new(0, one * 2, Duration::from_secs(60));
        for id in ["x", "y", "z"] {
            save(&store, id, &record(id)).await.unwrap();
        }
        assert_eq!(store.len(), 2);
        assert!(store.load(&key("x")).await.unwrap().is_none());
        let mut big = record("big");
        big.state = Some(serde_json::json!({"blob": "x".repeat(one * 3)}));
        assert!(matches!(
            save(&store, "big", &big).await,
            Err(StoreError::TooLarge { .. })
        ));
        assert_eq!(store.len(), 2, "a refused save evicts nothing");
    }

    fn scoped(scope: &str, thread_id: &str) -> ThreadKey {
        ThreadKey {
            scope: scope.into(),
            ..key(thread_id)
        }
    }

    async fn save_as(
        store: &MemoryStore,
        key: &ThreadKey,
        record: &ThreadRecord,
    ) -> Result<(), StoreError> {
        let lease = Leases::local().acquire(key, false).await.unwrap();
        store.save(&lease, record).await
    }

    #[tokio::test]
    async fn a_scope_at_its_thread_quota_is_refused_and_never_evicts_another_scopes_thread() {
        let quota = ScopeQuota {
            max_threads: 2,
            max_bytes: 0,
        };
        let store = MemoryStore::new(3, 0, Duration::from_secs(60)).with_scope_quota(quota);
        save_as(&store, &scoped("victim", "kept"), &record("v"))
            .await
            .unwrap();
        save_as(&store, &scoped("noisy", "a"), &record("a"))
            .await
            .unwrap();
        save_as(&store, &scoped("noisy", "b"), &record("b"))
            .await
            .unwrap();
        let third = scoped("noisy", "c");
        assert!(matches!(
            store.admit(&third).await,
            Err(StoreError::QuotaExceeded(Quota::Threads { limit: 2 }))
        ));
        assert!(matches!(
            save_as(&store, &third, &record("c")).await,
            Err(StoreError::QuotaExceeded(Quota::Threads { limit: 2 }))
        ));
        // A thread the scope holds still runs and saves.
        store.admit(&scoped("noisy", "a")).await.unwrap();
        save_as(&store, &scoped("noisy", "a"), &record("a2"))
            .await
            .unwrap();
        assert!(store
            .load(&scoped("victim", "kept"))
            .await
            .unwrap()
            .is_some());
        // Deleting one makes room again.
        assert!(store.delete(&scoped("noisy", "b")).await.unwrap());
        save_as(&store, &third, &record("c")).await.unwrap();
    }

    #[tokio::test]
    async fn a_scope_past_its_bytes_by_one_save_runs_no_more() {
        let one = serde_json::to_vec(&record("x")).unwrap().len();
        let quota = ScopeQuota {
            max_threads: 0,
            max_bytes: one * 2,
        };
        let store = MemoryStore::new(0, 0, Duration::from_secs(60)).with_scope_quota(quota);
        for thread in ["x", "y"] {
            save_as(&store, &scoped("s", thread), &record(thread))
                .await
                .unwrap();
        }
        // The save that crosses the bound goes through (the bound is soft by one record)...
        store.admit(&scoped("s", "z")).await.unwrap();
        save_as(&store, &scoped("s", "z"), &record("z"))
            .await
            .unwrap();
        // ...and then no run starts, on a new thread or an old one, and no other save lands.
        for thread in ["w", "x"] {
            assert!(matches!(
                store.admit(&scoped("s", thread)).await,
                Err(StoreError::QuotaExceeded(Quota::Bytes { .. }))
            ));
        }
        assert!(matches!(
            save_as(&store, &scoped("s", "w"), &record("w")).await,
            Err(StoreError::QuotaExceeded(Quota::Bytes { .. }))
        ));
        // Another scope is not held to this one's bytes.
        save_as(&store, &scoped("other", "z"), &record("z"))
            .await
            .unwrap();
        // A thread rewritten in place is judged without its own old bytes.
        assert!(store.delete(&scoped("s", "z")).await.unwrap());
        save_as(&store, &scoped("s", "x"), &record("x"))
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn expired_threads_give_their_quota_back() {
        let quota = ScopeQuota {
            max_threads: 1,
            max_bytes: 0,
        };
        let store = MemoryStore::new(0, 0, Duration::from_secs(60)).with_scope_quota(quota);
        save_as(&store, &scoped("s", "old"), &record("o"))
            .await
            .unwrap();
        assert!(store.admit(&scoped("s", "new")).await.is_err());
        tokio::time::advance(Duration::from_secs(61)).await;
        store.admit(&scoped("s", "new")).await.unwrap();
        save_as(&store, &scoped("s", "new"), &record("n"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn saving_again_replaces_and_delete_forgets() {
        let store = MemoryStore::new(10, 0, Duration::from_secs(60));
        save(&store, "t", &record("r1")).await.unwrap();
        save(&store, "t", &record("r2")).await.unwrap();
        assert_eq!(store.len(), 1);
        assert_eq!(
            store.lock().bytes,
            serde_json::to_vec(&record("r2")).unwrap().len()
        );
        assert_eq!(store.load(&key("t")).await.unwrap(), Some(record("r2")));
        assert!(store.delete(&key("t")).await.unwrap());
        assert!(!store.delete(&key("t")).await.unwrap());
        assert_eq!(store.lock().bytes, 0);
    }
}
