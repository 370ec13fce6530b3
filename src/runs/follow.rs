//! A reader attached to a run's log: the frames after its cursor, then the live ones, until the
//! terminal event. It reads from the log itself, not from a channel of its own, so replay and
//! live frames can neither overlap nor leave a gap: the cursor is the only state.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{ReadError, RunLog};

/// Most bytes one read gathers into one body chunk.
const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// What a follower gives next.
#[derive(Debug)]
pub enum Next {
    /// Frames, in order; `last` says the log ends with them.
    Frames { bytes: Bytes, last: bool },
    /// Nothing new for the keep-alive interval.
    Idle,
    /// The log ended without a terminal event (the run's driver went away).
    Broken,
    /// The reader fell behind what the log keeps.
    Expired,
    /// The shared log could not be read (Redis failed).
    Unavailable,
}

/// See the module docs. Counts as an attached reader until dropped.
#[derive(Debug)]
pub struct Follower {
    log: Arc<RunLog>,
    /// The seq of the last frame handed out.
    cursor: u64,
    done: bool,
}

impl Follower {
    pub(super) fn new(log: Arc<RunLog>, cursor: u64) -> Self {
        log.readers.attach();
        Follower {
            log,
            cursor,
            done: false,
        }
    }

    /// The next frames, waiting up to `idle` for them; `None` once the log has ended.
    pub async fn next(&mut self, idle: Duration) -> Option<Next> {
        if self.done {
            return None;
        }
        loop {
            // Registered before reading, so an append after the read still wakes us.
            let appended = self.log.appended.notified();
            tokio::pin!(appended);
            appended.as_mut().enable();
            let batch = match self.log.read_after(self.cursor, MAX_CHUNK_BYTES) {
                Ok(batch) => batch,
                Err(ReadError::CursorExpired | ReadError::CursorAhead) => {
                    self.done = true;
                    return Some(Next::Expired);
                }
            };
            if batch.frames > 0 {
                self.cursor += batch.frames;
                self.done = batch.ended && !batch.broken;
                return Some(Next::Frames {
                    bytes: batch.bytes,
                    last: self.done,
                });
            }
            if batch.ended {
                self.done = true;
                return batch.broken.then_some(Next::Broken);
            }
            if tokio::time::timeout(idle, appended).await.is_err() {
                return Some(Next::Idle);
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.log.readers.detach();
    }
}
