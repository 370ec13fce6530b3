//! The names of one run's Redis keys, and the shape of its Stream's entries: what the owner's
//! appender and the readers on other replicas share.

use std::sync::Arc;

use bytes::Bytes;

use crate::runs::LogError;
use crate::text::key_digest;

/// Builds the frame of the `RUN_ERROR` `run_lost` event a reader appends for a lost run, given
/// the run id and the frame's seq. The caller knows the wire protocol; this module does not.
pub type LostFrame = Arc<dyn Fn(&str, u64) -> Bytes + Send + Sync>;

#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter
pub(super) fn backend(error: redis::RedisError) -> LogError {
    LogError::Backend(error.to_string())
}

/// The Redis keys of one run, all with one hash tag so a cluster keeps them on one node.
#[derive(Debug, Clone)]
pub struct RunKeys {
    pub(crate) run_id: String,
    pub(super) digest: String,
    pub(super) log: String,
    pub(super) owner: String,
    pub(super) stop: String,
    pub(super) readers: String,
    /// What a client connecting to the run's thread needs of it (the session's JSON).
    pub(super) context: String,
}

impl RunKeys {
    /// The keys of `run_id` of `agent` in `scope`: another scope or agent names other keys,
    /// so its run is as unknown as one that never existed.
    pub fn new(run_id: &str, agent: &str, scope: &str) -> RunKeys {
        let digest = key_digest(&[scope, agent, run_id]);
        let key = |suffix: &str| format!("agui:run:{{{digest}}}:{suffix}");
        RunKeys {
            run_id: run_id.to_owned(),
            log: key("log"),
            owner: key("owner"),
            stop: key("stop"),
            readers: key("readers"),
            context: key("context"),
            digest,
        }
    }
}

/// The key naming the latest run on thread `thread_id` of `agent` in `scope`.
pub(super) fn thread_key(thread_id: &str, agent: &str, scope: &str) -> String {
    let digest = key_digest(&[scope, agent, thread_id]);
    format!("agui:thread:{{{digest}}}:latest-run")
}

/// A Stream entry as Redis returns it: its id and its field-value pairs.
pub(super) type StreamEntry = (String, Vec<Vec<u8>>);

/// One entry of a run's log.
pub(super) struct Entry {
    pub seq: u64,
    pub frame: Bytes,
    pub terminal: bool,
}

pub(super) fn parse_entry((id, fields): &StreamEntry) -> Result<Entry, LogError> {
    let seq = id
        .split_once('-')
        .and_then(|(seq, _)| seq.parse().ok())
        .ok_or_else(|| LogError::Backend(format!("unexpected entry id {id}")))?;
    let mut entry = Entry {
        seq,
        frame: Bytes::new(),
        terminal: false,
    };
    for pair in fields.chunks_exact(2) {
        match pair[0].as_slice() {
            b"f" => entry.frame = Bytes::copy_from_slice(&pair[1]),
            b"t" => entry.terminal = true,
            _ => {}
        }
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_scope_agent_and_run_and_share_one_hash_tag() {
        let keys = RunKeys::new("r", "a", "s");
        for other in [
            RunKeys::new("r", "a", "s2"),
            RunKeys::new("r", "b", "s"),
            RunKeys::new("r2", "a", "s"),
            // A separator moved between parts is another key.
            RunKeys::new("r", "as", ""),
        ] {
            assert_ne!(keys.log, other.log);
        }
        let tag = |key: &str| key[key.find('{').unwrap()..=key.find('}').unwrap()].to_owned();
        for key in [&keys.owner, &keys.stop, &keys.readers] {
            assert_eq!(tag(key), tag(&keys.log));
        }
        assert!(keys.log.starts_with("agui:run:{") && keys.log.ends_with("}:log"));
    }

    #[test]
    fn an_entry_gives_its_seq_frame_and_terminal_mark() {
        let entry =
            parse_entry(&("42-0".into(), vec![b"f".to_vec(), b"id: r:42\n".to_vec()])).unwrap();
        assert_eq!((entry.seq, entry.terminal), (42, false));
        assert_eq!(entry.frame.as_ref(), b"id: r:42\n");
        let terminal = parse_entry(&(
            "43-0".into(),
            vec![b"f".to_vec(), b"x".to_vec(), b"t".to_vec(), b"1".to_vec()],
        ))
        .unwrap();
        assert!(terminal.terminal);
        assert!(parse_entry(&("nonsense".into(), Vec::new())).is_err());
    }
}
