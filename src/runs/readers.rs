//! The caps on reconnect readers: how many `GET …/runs/<runId>/events` responses may read one
//! run at once, and how many may read any run in this process. Each reader holds a connection
//! and, on Redis, a connection of its own to Redis, so an unbounded number of them is a way to
//! exhaust the server's file descriptors with requests that each cost nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::lock;

/// Why a reader was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReaderRefusal {
    #[error("this run already has as many readers as the server allows")]
    RunFull,
    #[error("the server already has as many run readers as it allows")]
    ServerFull,
}

/// See the module docs. Cheap to clone; every clone counts against the same caps.
#[derive(Debug, Clone)]
pub struct ReaderSlots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_run: usize,
    total: usize,
    /// Readers by run key; a run with none has no entry.
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_run: HashMap<String, usize>,
    total: usize,
}

impl ReaderSlots {
    /// At most `per_run` readers of one run and `total` in all (0: no cap).
    pub fn new(per_run: usize, total: usize) -> Self {
        ReaderSlots {
            inner: Arc::new(Inner {
                per_run,
                total,
                held: Mutex::new(Held::default()),
            }),
        }
    }

    /// A slot for one more reader of the run `run_key`, held until the slot is dropped.
    ///
    /// # Errors
    /// The run, or the server, has as many readers as allowed.
    pub fn acquire(&self, run_key: &str) -> Result<ReaderSlot, ReaderRefusal> {
        let mut held = lock(&self.inner.held);
        if self.inner.total > 0 && held.total >= self.inner.total {
            return Err(ReaderRefusal::ServerFull);
        }
        let of_run = held.by_run.get(run_key).copied().unwrap_or(0);
        if self.inner.per_run > 0 && of_run >= self.inner.per_run {
            return Err(ReaderRefusal::RunFull);
        }
        held.by_run.insert(run_key.to_owned(), of_run + 1);
        held.total += 1;
        Ok(ReaderSlot {
            slots: Arc::clone(&self.inner),
            run_key: run_key.to_owned(),
        })
    }

    /// Readers held now, of all runs.
    pub fn held(&self) -> usize {
        lock(&self.inner.held).total
    }
}

/// One reader's place; given back when dropped.
#[derive(Debug)]
pub struct ReaderSlot {
    slots: Arc<Inner>,
    run_key: String,
}

impl Drop for ReaderSlot {
    fn drop(&mut self) {
        let mut held = lock(&self.slots.held);
        held.total = held.total.saturating_sub(1);
        if let Some(of_run) = held.by_run.get_mut(&self.run_key) {
            *of_run -= 1;
            if *of_run == 0 {
                held.by_run.remove(&self.run_key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_are_capped_per_run_and_in_all_and_give_their_place_back() {
        let slots = ReaderSlots::new(2, 3);
        let a1 = slots.acquire("a").unwrap();
        let _a2 = slots.acquire("a").unwrap();
        assert_eq!(slots.acquire("a").unwrap_err(), ReaderRefusal::RunFull);
        let _b1 = slots.acquire("b").unwrap();
        assert_eq!(slots.acquire("c").unwrap_err(), ReaderRefusal::ServerFull);
        drop(a1);
        assert_eq!(slots.held(), 2);
        let _c1 = slots.acquire("c").expect("a freed place is taken again");
        assert_eq!(slots.acquire("a").unwrap_err(), ReaderRefusal::ServerFull);
    }

    #[test]
    fn zero_means_no_cap() {
        let slots = ReaderSlots::new(0, 0);
        let held: Vec<_> = (0..100).map(|_| slots.acquire("a").unwrap()).collect();
        assert_eq!(slots.held(), 100);
        drop(held);
        assert_eq!(slots.held(), 0);
    }
}
