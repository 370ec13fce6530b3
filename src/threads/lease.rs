//! One run per thread: a lease a run holds while it streams. In one process it is an entry in
//! a map; a store shared by processes adds its own hold ([`SharedLeases`]; with Redis
//! `SET agui:lease:<digest> <random token> NX PX <ttl>`, renewed and released by scripts that
//! compare the token first, so a run that lost its lease can never extend or free its
//! successor's), which makes it hold across processes. A renewal that fails cancels the run's
//! `lost` token: the run stops rather than go on unguarded. The lease is
//! also the fence on the thread's record: a store saves only while the lease still holds the
//! thread ([`Lease::while_held`] in one process, the same token check inside the Redis save
//! script), so a run superseded on another replica, which hears of it only at its next
//! renewal, can never overwrite its successor's record. Release is an
//! explicit `await` at the end of a run; a dropped lease only schedules it, and the TTL covers
//! a crashed process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{StoreError, ThreadKey};

/// Why a lease was not granted.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("another run is streaming on this thread")]
    Busy,
    #[error(transparent)]
    Backend(#[from] StoreError),
}

/// The hold on a thread that processes sharing a store see: taken with a random token, and
/// renewed and released only by the holder of that token.
pub trait SharedLeases: Send + Sync + std::fmt::Debug + 'static {
    /// Takes `key`'s lease for `token`; with `supersede`, from whoever holds it.
    ///
    /// # Errors
    /// [`LeaseError::Busy`] (another holder, without `supersede`), or the store failed.
    fn take<'a>(
        &'a self,
        key: &'a ThreadKey,
        token: &'a str,
        supersede: bool,
    ) -> BoxFuture<'a, Result<(), LeaseError>>;

    /// Extends `token`'s hold; `Ok(false)` when it no longer holds `key`.
    ///
    /// # Errors
    /// The store failed.
    fn renew<'a>(
        &'a self,
        key: &'a ThreadKey,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Which of `keys` some run holds now, one answer per key in order (the list's `running`).
    ///
    /// # Errors
    /// The store failed.
    fn held<'a>(&'a self, keys: &'a [ThreadKey]) -> BoxFuture<'a, Result<Vec<bool>, StoreError>>;

    /// Frees `key` if `token` still holds it.
    fn release<'a>(&'a self, key: &'a ThreadKey, token: &'a str) -> BoxFuture<'a, ()>;

    /// How long a hold lasts unrenewed: how long a crashed holder blocks its thread.
    fn ttl(&self) -> Duration;
}

/// The leases of this process, and the shared store's when threads live there.
#[derive(Debug, Clone)]
pub struct Leases {
    /// The runs of this process by thread, so a superseding run stops its predecessor at once.
    local: Arc<Mutex<HashMap<ThreadKey, Holder>>>,
    shared: Option<Arc<dyn SharedLeases>>,
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
            shared: None,
        }
    }

    /// Leases that hold across every process sharing `shared`'s store.
    pub fn shared(shared: Arc<dyn SharedLeases>) -> Leases {
        Leases {
            local: Arc::default(),
            shared: Some(shared),
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
        if let Some(shared) = &self.shared {
            shared.take(key, &token, supersede).await?;
        }
        let lost = CancellationToken::new();
        {
            let mut local = self.lock();
            if let Some(holder) = local.get(key) {
                if !supersede && self.shared.is_none() {
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
            .shared
            .clone()
            .map(|shared| spawn_renewal(shared, key.clone(), token.clone(), lost.clone()));
        Ok(Lease {
            key: key.clone(),
            token,
            lost,
            leases: self.clone(),
            renewal,
            released: false,
        })
    }

    /// Which of `keys` a run holds: in this process, or (shared) in any.
    ///
    /// # Errors
    /// The shared store failed.
    pub async fn held(&self, keys: &[ThreadKey]) -> Result<Vec<bool>, StoreError> {
        let here: Vec<bool> = {
            let local = self.lock();
            keys.iter().map(|key| local.contains_key(key)).collect()
        };
        let Some(shared) = self.shared.as_ref().filter(|_| !keys.is_empty()) else {
            return Ok(here);
        };
        let anywhere = shared.held(keys).await?;
        Ok(here
            .into_iter()
            .zip(anywhere)
            .map(|(a, b)| a || b)
            .collect())
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

/// Renews every third of the TTL; a renewal refused (the token changed: superseded or
/// expired) or failed cancels `lost`.
fn spawn_renewal(
    shared: Arc<dyn SharedLeases>,
    key: ThreadKey,
    token: String,
    lost: CancellationToken,
) -> tokio::task::AbortHandle {
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                () = lost.cancelled() => return,
                () = tokio::time::sleep(shared.ttl() / 3) => {}
            }
            let renewed = shared.renew(&key, &token).await;
            if !matches!(renewed, Ok(true)) {
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

impl Lease {
    /// The thread this lease holds.
    pub fn key(&self) -> &ThreadKey {
        &self.key
    }

    /// What identifies this run's hold on the thread (in a shared store, the lease's value).
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
        if let Some(shared) = &self.leases.shared {
            shared.release(&self.key, &self.token).await;
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
        // Never block in Drop: the shared release runs on its own, and the TTL covers the case
        // where there is no runtime left to run it.
        if let (Some(shared), Ok(runtime)) = (
            self.leases.shared.clone(),
            tokio::runtime::Handle::try_current(),
        ) {
            let (key, token) = (self.key.clone(), std::mem::take(&mut self.token));
            runtime.spawn(async move { shared.release(&key, &token).await });
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
