//! The log's bounds, cursors and the replay-then-follow order.

use std::time::Duration;

use super::*;
use crate::protocol::{Frame, FrameAt, FrameOut};

fn limits() -> LogLimits {
    LogLimits {
        max_runs: 3,
        max_run_events: 100,
        max_run_bytes: 1 << 20,
        max_bytes: 1 << 24,
        ttl: Duration::from_secs(60),
    }
}

fn frame(seq: u64) -> String {
    format!("id: r:{seq}\ndata: {{\"n\":{seq}}}\n\n")
}

/// The batch of frames `seqs` of run `r`, each an event whose JSON is `{"n":<seq>}`.
fn batch(seqs: std::ops::RangeInclusive<u64>) -> crate::protocol::Batch {
    let prefix: Arc<[u8]> = Arc::from(crate::protocol::event_id_prefix("r"));
    let mut batch = crate::protocol::Batch::default();
    for seq in seqs {
        let json = Bytes::from(format!("{{\"n\":{seq}}}"));
        let at = FrameAt {
            seq,
            id_prefix: Some(&prefix),
        };
        batch.put(Frame::Event(json), at);
    }
    batch
}

async fn read_all(follower: &mut Follower) -> String {
    let mut text = String::new();
    while let Some(next) = follower.next(Duration::from_millis(50)).await {
        match next {
            Next::Frames { bytes, .. } => text.push_str(std::str::from_utf8(&bytes).unwrap()),
            Next::Idle => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    text
}

#[test]
fn cursors_must_name_this_run() {
    assert_eq!(parse_cursor("r", "r:7"), Some(7));
    assert_eq!(parse_cursor("r", "r:0"), Some(0));
    assert_eq!(parse_cursor("r", "x:7"), None);
    assert_eq!(parse_cursor("r", "r:"), None);
    assert_eq!(parse_cursor("r", "r:+7"), None);
    assert_eq!(parse_cursor("r:1", "r:1:2"), Some(2));
    assert_eq!(
        parse_cursor("r", &format!("r:{}", u64::MAX - 1)),
        Some(u64::MAX - 1)
    );
    assert_eq!(parse_cursor("r", &format!("r:{}", u64::MAX)), None);
    assert_eq!(parse_cursor("r", "r:18446744073709551616"), None);
}

#[tokio::test]
async fn a_reader_gets_what_follows_its_cursor_then_the_live_frames_once() {
    let logs = RunLogs::new(limits());
    let log = logs.open("r", "a", "s").unwrap();
    log.append(batch(1..=4), false);
    let mut follower = log.follow(2).unwrap();
    let replayed = read_all(&mut follower).await;
    assert_eq!(replayed, frame(3) + &frame(4));
    log.append(batch(5..=6), true);
    let live = read_all(&mut follower).await;
    assert_eq!(live, frame(5) + &frame(6));
    assert!(follower.next(Duration::from_millis(10)).await.is_none());
}

#[tokio::test]
async fn a_cursor_before_the_kept_frames_is_too_old_and_one_past_the_head_is_refused() {
    let logs = RunLogs::new(LogLimits {
        max_run_events: 2,
        ..limits()
    });
    let log = logs.open("r", "a", "s").unwrap();
    log.append(batch(1..=5), false);
    assert_eq!(log.follow(2).err(), Some(ReadError::CursorExpired));
    assert!(log.follow(3).is_ok());
    assert_eq!(log.follow(6).err(), Some(ReadError::CursorAhead));
}

#[test]
fn runs_are_found_only_by_their_agent_and_scope_and_live_ids_are_not_reused() {
    let logs = RunLogs::new(limits());
    let log = logs.open("r", "a", "s").unwrap();
    assert!(logs.get("r", "a", "s").is_some());
    assert!(logs.get("r", "a", "other").is_none());
    assert!(logs.get("r", "b", "s").is_none());
    assert!(matches!(
        logs.open("r", "a", "s"),
        Err(OpenError::InProgress)
    ));
    log.append(batch(1..=1), true);
    assert!(logs.open("r", "a", "s").is_ok());
}

#[test]
fn one_run_id_in_two_scopes_or_agents_is_two_runs() {
    let logs = RunLogs::new(limits());
    let mine = logs.open("r", "a", "alice").unwrap();
    // Another user (or another agent) picking the same id neither waits for nor hides mine.
    let theirs = logs.open("r", "a", "bob").unwrap();
    let other_agent = logs.open("r", "b", "alice").unwrap();
    assert!(Arc::ptr_eq(&logs.get("r", "a", "alice").unwrap(), &mine));
    assert!(Arc::ptr_eq(&logs.get("r", "a", "bob").unwrap(), &theirs));
    assert!(Arc::ptr_eq(
        &logs.get("r", "b", "alice").unwrap(),
        &other_agent
    ));
    // Moving a separator between the parts names no other run.
    assert!(logs.get("r", "a", "al").is_none());
    assert!(logs.get("r", "aalice", "").is_none());
}

#[tokio::test]
async fn a_discarded_run_leaves_nothing_behind_and_its_id_opens_again() {
    let logs = RunLogs::new(limits());
    let refused = logs.open("r", "a", "s").unwrap();
    let mut found_meanwhile = logs.get("r", "a", "s").unwrap().follow(0).unwrap();
    logs.discard(&refused);
    assert!(logs.get("r", "a", "s").is_none());
    assert!(logs.is_empty());
    // A reader that found it ends instead of waiting for ever.
    let next = tokio::time::timeout(
        Duration::from_secs(1),
        found_meanwhile.next(Duration::from_secs(30)),
    )
    .await
    .expect("the reader of a discarded run ends at once");
    assert!(matches!(next, Some(Next::Broken)), "{next:?}");
    let retry = logs.open("r", "a", "s").expect("the retry opens");
    // Discarding the old handle again does not forget the retry.
    logs.discard(&refused);
    assert!(Arc::ptr_eq(&logs.get("r", "a", "s").unwrap(), &retry));
}

#[test]
fn the_oldest_runs_are_forgotten_past_the_bound_and_ended_runs_after_their_ttl() {
    let logs = RunLogs::new(limits());
    for id in ["r1", "r2", "r3", "r4"] {
        logs.open(id, "a", "s").unwrap();
    }
    assert_eq!(logs.len(), 3);
    assert!(logs.get("r1", "a", "s").is_none());
    let expiring = RunLogs::new(LogLimits {
        ttl: Duration::ZERO,
        ..limits()
    });
    expiring
        .open("r", "a", "s")
        .unwrap()
        .append(batch(1..=1), true);
    assert!(expiring.get("r", "a", "s").is_none());
}

#[tokio::test]
async fn a_run_is_abandoned_only_after_the_grace_period_without_a_reader() {
    let logs = RunLogs::new(limits());
    let log = logs.open("r", "a", "s").unwrap();
    let reader = log.follow(0).unwrap();
    let grace = Duration::from_millis(100);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), log.abandoned(grace))
            .await
            .is_err(),
        "a run with a reader is not abandoned"
    );
    drop(reader);
    let started = std::time::Instant::now();
    log.abandoned(grace).await;
    assert!(started.elapsed() >= grace);
}

#[tokio::test]
async fn a_log_that_breaks_off_tells_its_readers() {
    let logs = RunLogs::new(limits());
    let log = logs.open("r", "a", "s").unwrap();
    let mut follower = log.follow(0).unwrap();
    log.break_off();
    assert!(matches!(
        follower.next(Duration::from_secs(1)).await,
        Some(Next::Broken)
    ));
}

#[tokio::test]
async fn expired_runs_are_forgotten_while_no_run_opens() {
    let logs = Arc::new(RunLogs::new(LogLimits {
        ttl: Duration::ZERO,
        ..limits()
    }));
    logs.sweep_in_background();
    logs.open("r", "a", "s").unwrap().append(batch(1..=1), true);
    assert_eq!(logs.len(), 1, "kept until a sweep");
    tokio::time::sleep(SWEEP_INTERVAL + Duration::from_millis(300)).await;
    assert_eq!(logs.len(), 0, "the background sweep dropped it");
}
