//! The ledger of approval decisions the server acted on: one entry per (scope, agent, thread,
//! tool call), claimed atomically just before a decision is carried out, so a decision runs at
//! most once however the client's history looks (truncated, forged, or its thread deleted)
//! and however many runs replay it at once.
//!
//! It is kept apart from the thread's record on purpose: `DELETE` of a thread, a record that
//! expires or is evicted, or a run that saves a shorter history must not forget that a call was
//! carried out. An entry lives at least as long as the approval id that could claim it still
//! verifies (the caller says how long); after that the id is refused as expired anyway.
//!
//! A backend implements one step, "insert if absent, tell me whether it was new", with an
//! expiry: Redis `SET agui:decision:<digest> 1 NX PX <ms>`; in memory a bounded map that, when
//! full, refuses the claim (the run fails) rather than evict an entry, since an evicted entry
//! is a decision that could run again. A SQL store would use `INSERT … ON CONFLICT DO NOTHING`
//! on the digest, with the expiry as a column.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::ConnectionManager;
use tokio::time::Instant;

use super::redis::backend;
use super::{StoreError, ThreadKey};
use crate::text::key_digest;

/// Which decision: the thread (scope, agent, thread id) and the call it is about.
#[derive(Debug, Clone, Copy)]
pub struct DecisionKey<'a> {
    pub thread: &'a ThreadKey,
    pub tool_call_id: &'a str,
    /// The tag of the approval id the decision answers: a call id a model reuses in a thread
    /// is asked about again with another id, and that decision is another.
    pub approval: &'a str,
}

impl DecisionKey<'_> {
    /// A fixed-length digest of the five parts, each length-prefixed, so no two keys collide
    /// by moving a separator.
    pub fn digest(&self) -> String {
        key_digest(&[
            &self.thread.scope,
            &self.thread.agent,
            &self.thread.thread_id,
            self.tool_call_id,
            self.approval,
        ])
    }
}

/// Where carried-out decisions are remembered.
pub trait DecisionLedger: Send + Sync + std::fmt::Debug + 'static {
    /// Records the decision on `key` for `keep`, unless it is recorded already, in one atomic
    /// step: `true` when this call recorded it (act on the decision), `false` when an earlier
    /// claim did (it was carried out, or is being carried out, by another run).
    ///
    /// # Errors
    /// The backend did not answer, or (memory) the ledger is full: the decision must not be
    /// acted on.
    fn claim<'a>(
        &'a self,
        key: DecisionKey<'a>,
        keep: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Whether a decision on `key` is recorded (and not expired), recording nothing: for a
    /// decision that runs nothing itself (a decline), which must not claim the call but must
    /// not deny what an earlier approval did either.
    ///
    /// # Errors
    /// The backend did not answer.
    fn is_claimed<'a>(&'a self, key: DecisionKey<'a>) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// The in-process ledger: at most `max_entries` live entries, expired ones dropped as they come
/// due. See the module docs for why a full ledger refuses rather than evicts.
#[derive(Debug)]
pub struct MemoryLedger {
    inner: Mutex<Entries>,
    max_entries: usize,
}

#[derive(Debug, Default)]
struct Entries {
    /// Digest to the entry's position in `by_expiry`.
    live: HashMap<String, (Instant, u64)>,
    /// Entries by when they expire (then by insertion, to keep equal instants apart).
    by_expiry: BTreeMap<(Instant, u64), String>,
    next_seq: u64,
}

impl MemoryLedger {
    /// A ledger of at most `max_entries` live decisions (0: no bound).
    pub fn new(max_entries: usize) -> MemoryLedger {
        MemoryLedger {
            inner: Mutex::new(Entries::default()),
            max_entries,
        }
    }

    /// Live entries, expired ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.lock().live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Every mutation below completes before anything can panic: a poisoned lock still
        // guards consistent maps.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn claim_now(&self, digest: String, keep: Duration) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.drop_expired(now);
        if entries.live.contains_key(&digest) {
            return Ok(false);
        }
        if self.max_entries > 0 && entries.live.len() >= self.max_entries {
            return Err(StoreError::LedgerFull {
                limit: self.max_entries,
            });
        }
        let seq = entries.next_seq;
        entries.next_seq += 1;
        let position = (crate::clock::after(now, keep), seq);
        entries.by_expiry.insert(position, digest.clone());
        entries.live.insert(digest, position);
        Ok(true)
    }
}

impl Entries {
    fn drop_expired(&mut self, now: Instant) {
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let digest = entry.remove();
            self.live.remove(&digest);
        }
    }
}

impl DecisionLedger for MemoryLedger {
    fn claim<'a>(
        &'a self,
        key: DecisionKey<'a>,
        keep: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        std::future::ready(self.claim_now(key.digest(), keep)).boxed()
    }

    fn is_claimed<'a>(&'a self, key: DecisionKey<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut entries = self.lock();
        entries.drop_expired(Instant::now());
        let claimed = entries.live.contains_key(&key.digest());
        std::future::ready(Ok(claimed)).boxed()
    }
}

/// The Redis ledger: one key per decision, `agui:decision:<digest>`, set with `NX PX`, so
/// every replica sees the same claims and each entry expires by itself.
#[derive(Clone)]
pub struct RedisLedger {
    connection: ConnectionManager,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedger").finish_non_exhaustive()
    }
}

impl RedisLedger {
    pub fn new(connection: ConnectionManager) -> RedisLedger {
        RedisLedger { connection }
    }

    fn key(key: DecisionKey<'_>) -> String {
        format!("agui:decision:{}", key.digest())
    }
}

impl DecisionLedger for RedisLedger {
    fn claim<'a>(
        &'a self,
        key: DecisionKey<'a>,
        keep: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            // `PX 0` is an error in Redis: the shortest entry is a millisecond.
            let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
            let mut connection = self.connection.clone();
            let set: Option<String> = redis::cmd("SET")
                .arg(Self::key(key))
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(keep_ms)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(set.is_some())
        }
        .boxed()
    }

    fn is_claimed<'a>(&'a self, key: DecisionKey<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        async move {
            let mut connection = self.connection.clone();
            let found: u64 = redis::cmd("EXISTS")
                .arg(Self::key(key))
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            Ok(found > 0)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn thread(thread_id: &str) -> ThreadKey {
        ThreadKey {
            scope: "s".into(),
            agent: "a".into(),
            thread_id: thread_id.into(),
        }
    }

    async fn claim(ledger: &MemoryLedger, thread_id: &str, call: &str, keep_secs: u64) -> bool {
        let thread = thread(thread_id);
        let key = DecisionKey {
            thread: &thread,
            tool_call_id: call,
            approval: "tag",
        };
        ledger
            .claim(key, Duration::from_secs(keep_secs))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_first_claim_wins_and_every_later_one_is_told_so() {
        let ledger = MemoryLedger::new(10);
        assert!(claim(&ledger, "t", "c1", 60).await);
        assert!(!claim(&ledger, "t", "c1", 60).await);
        assert!(claim(&ledger, "t", "c2", 60).await, "another call");
        assert!(claim(&ledger, "t2", "c1", 60).await, "another thread");
        let thread = thread("t");
        let key = |call| DecisionKey {
            thread: &thread,
            tool_call_id: call,
            approval: "tag",
        };
        assert!(ledger.is_claimed(key("c1")).await.unwrap());
        assert!(!ledger.is_claimed(key("c3")).await.unwrap());
        assert!(
            claim(&ledger, "t", "c3", 60).await,
            "looking claims nothing"
        );
    }

    #[tokio::test]
    async fn a_decision_is_about_one_asking_of_a_call() {
        let ledger = MemoryLedger::new(10);
        let thread = thread("t");
        let asking = |approval| DecisionKey {
            thread: &thread,
            tool_call_id: "c1",
            approval,
        };
        let keep = Duration::from_secs(60);
        assert!(ledger.claim(asking("first"), keep).await.unwrap());
        assert!(!ledger.claim(asking("first"), keep).await.unwrap());
        // The same call id asked about again (a model that reuses ids) is another decision.
        assert!(ledger.claim(asking("second"), keep).await.unwrap());
    }

    #[tokio::test]
    async fn concurrent_claims_of_one_decision_let_exactly_one_through() {
        let ledger = Arc::new(MemoryLedger::new(0));
        let claims = (0..32).map(|_| {
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move { claim(&ledger, "t", "c1", 60).await })
        });
        let mut first = 0;
        for claim in claims {
            first += usize::from(claim.await.unwrap());
        }
        assert_eq!(first, 1);
    }

    #[test]
    fn a_separator_moved_between_parts_is_another_key() {
        let (left, right) = (thread("a:b"), thread("a"));
        let left = DecisionKey {
            thread: &left,
            tool_call_id: "c",
            approval: "tag",
        };
        let right = DecisionKey {
            thread: &right,
            tool_call_id: "b:c",
            approval: "tag",
        };
        assert_ne!(left.digest(), right.digest());
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_is_kept_for_its_time_then_forgotten() {
        let ledger = MemoryLedger::new(10);
        assert!(claim(&ledger, "t", "c1", 60).await);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!claim(&ledger, "t", "c1", 60).await);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            claim(&ledger, "t", "c1", 60).await,
            "expired, then claimed anew"
        );
        assert_eq!(ledger.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_ledger_refuses_rather_than_forgets_until_entries_expire() {
        let ledger = MemoryLedger::new(2);
        assert!(claim(&ledger, "t", "c1", 10).await);
        assert!(claim(&ledger, "t", "c2", 60).await);
        let thread = thread("t");
        let third = DecisionKey {
            thread: &thread,
            tool_call_id: "c3",
            approval: "tag",
        };
        assert!(matches!(
            ledger.claim(third, Duration::from_secs(60)).await,
            Err(StoreError::LedgerFull { limit: 2 })
        ));
        assert!(!claim(&ledger, "t", "c1", 10).await, "nothing was evicted");
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(claim(&ledger, "t", "c3", 60).await, "room once c1 expired");
        assert!(!claim(&ledger, "t", "c2", 60).await);
    }
}
