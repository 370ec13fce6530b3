//! A reader of a run's shared log on a replica that does not own the run: `XREAD` after its
//! cursor (the replay and then the live tail, one command for both, so they can neither overlap
//! nor leave a gap), blocking for at most [`READ_BLOCK`] on a connection no other command uses,
//! because a blocked command would hold up everything queued behind it. Each read also refreshes
//! the run's presence key, so the owner does not cancel a run someone is reading elsewhere. When
//! a read comes back empty and the owner's lease is gone with no terminal event in the log, the
//! reader appends `RUN_ERROR` `run_lost` itself (a script, so only one reader does) and reads it
//! like any other event: every reader of the run, now and later, ends the same way.

use std::sync::LazyLock;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use redis::aio::MultiplexedConnection;
use redis::Script;
use tokio::time::Instant;

use super::keys::{backend, parse_entry, LostFrame, RunKeys, StreamEntry};
use crate::runs::{LogError, Next};

/// Longest a read blocks: also how soon a reader notices that a run's owner is gone after its
/// lease expired, and how often its presence is refreshed.
pub(super) const READ_BLOCK: Duration = Duration::from_secs(1);

/// How long a reader's presence outlives its last read.
const PRESENCE: Duration = Duration::from_secs(3);

/// Most entries one read takes.
const READ_COUNT: usize = 512;

/// Ends the log with `run_lost` after the reader's cursor, if the owner's lease is gone and
/// the reader has read everything. 1: appended; 0: nothing to do (the owner is alive, or there
/// is more to read); 2: the log ended at the cursor; -2: it ended before it (the cursor names
/// an event the run never logged); -1: the log is gone (or its owner died before writing). A cursor past the log's last entry is
/// not an error while the owner lives: the owner streams to its own readers before its
/// appender writes to Redis, so a reader elsewhere may hold a cursor Redis has not reached yet.
static LOST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #last == 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  return -1
end
local last_seq = tonumber(string.match(last[1][1], '^(%d+)-'))
local cursor = tonumber(ARGV[1])
local fields = last[1][2]
for i = 1, #fields, 2 do
  if fields[i] == 't' then
    if last_seq < cursor then return -2 end
    if last_seq == cursor then return 2 end
    return 0
  end
end
if last_seq > cursor or redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('XADD', KEYS[2], string.format('%d-0', cursor + 1), 'f', ARGV[2], 't', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1",
    )
});

/// See the module docs.
pub struct SharedFollower {
    connection: MultiplexedConnection,
    keys: RunKeys,
    /// The seq of the last frame handed out.
    cursor: u64,
    log_ttl: Duration,
    lost_frame: LostFrame,
    done: bool,
}

impl std::fmt::Debug for SharedFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFollower")
            .field("run_id", &self.keys.run_id)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl SharedFollower {
    pub(super) fn new(
        connection: MultiplexedConnection,
        keys: RunKeys,
        cursor: u64,
        log_ttl: Duration,
        lost_frame: LostFrame,
        done: bool,
    ) -> Self {
        SharedFollower {
            connection,
            keys,
            cursor,
            log_ttl,
            lost_frame,
            done,
        }
    }

    /// The next frames, waiting up to `idle` for them; `None` once the log has ended.
    pub async fn next(&mut self, idle: Duration) -> Option<Next> {
        if self.done {
            return None;
        }
        let deadline = Instant::now() + idle;
        let next = loop {
            let block = deadline
                .saturating_duration_since(Instant::now())
                .min(READ_BLOCK);
            match self.read(block).await {
                Ok(entries) if !entries.is_empty() => break self.take(&entries),
                Ok(_) => {}
                Err(error) => break self.failed(&error),
            }
            match self.declare_lost_if_owner_gone().await {
                Ok(1 | 0) => {}
                Ok(2) => {
                    self.done = true;
                    return None;
                }
                Ok(_) => {
                    tracing::info!(run_id = %self.keys.run_id, "the run's log is gone or ended before the cursor");
                    break Next::Expired;
                }
                Err(error) => break self.failed(&error),
            }
            if Instant::now() >= deadline {
                return Some(Next::Idle);
            }
        };
        if !matches!(next, Next::Frames { last: false, .. }) {
            self.done = true;
        }
        Some(next)
    }

    fn failed(&self, error: &LogError) -> Next {
        tracing::warn!(run_id = %self.keys.run_id, %error, "could not read the run's log");
        Next::Unavailable
    }

    /// Refreshes this reader's presence, then the entries after the cursor, waiting up to
    /// `block` for the first.
    async fn read(&mut self, block: Duration) -> Result<Vec<StreamEntry>, LogError> {
        type Reply = Option<Vec<(String, Vec<StreamEntry>)>>;
        let block_ms = u64::try_from(block.as_millis()).unwrap_or(1).max(1);
        let (reply,): (Reply,) = redis::pipe()
            .cmd("SET")
            .arg(&self.keys.readers)
            .arg(1)
            .arg("PX")
            .arg(u64::try_from(PRESENCE.as_millis()).unwrap_or(u64::MAX))
            .ignore()
            .cmd("XREAD")
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(&self.keys.log)
            .arg(format!("{}-0", self.cursor))
            .query_async(&mut self.connection)
            .await
            .map_err(backend)?;
        Ok(reply
            .into_iter()
            .flatten()
            .flat_map(|(_, entries)| entries)
            .collect())
    }

    /// The frames of `entries` in one chunk. An entry that does not follow the cursor means
    /// the log dropped events this reader had not read yet.
    fn take(&mut self, entries: &[StreamEntry]) -> Next {
        let mut out = BytesMut::new();
        let mut last = false;
        for entry in entries {
            let entry = match parse_entry(entry) {
                Ok(entry) => entry,
                Err(error) => return self.failed(&error),
            };
            if entry.seq != self.cursor + 1 {
                return Next::Expired;
            }
            self.cursor = entry.seq;
            out.extend_from_slice(&entry.frame);
            if entry.terminal {
                last = true;
                break;
            }
        }
        Next::Frames {
            bytes: out.freeze(),
            last,
        }
    }

    async fn declare_lost_if_owner_gone(&mut self) -> Result<i64, LogError> {
        let frame: Bytes = (self.lost_frame)(&self.keys.run_id, self.cursor + 1);
        LOST.key(&self.keys.owner)
            .key(&self.keys.log)
            .arg(self.cursor)
            .arg(frame.as_ref())
            .arg(
                u64::try_from(self.log_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            )
            .invoke_async(&mut self.connection)
            .await
            .map_err(backend)
    }
}
