//! Kept frames read back byte for byte from every cursor, as rows form, grow and are trimmed.

use super::*;
use crate::protocol::{EventBody, ProtocolVersion, RunEncoder};

/// The frames of a run with every kind of row: a long text, calls whose arguments interleave,
/// a content frame alone between others, deltas that need escaping; one frame per entry.
fn run_frames(timestamps: bool) -> Vec<Bytes> {
    let mut encoder =
        RunEncoder::new(ProtocolVersion::V1, "t".into(), "run-1".into()).with_event_ids();
    if !timestamps {
        encoder = encoder.without_timestamps();
    }
    let deltas = [
        "Hello",
        " \"quoted\"",
        " back\\slash",
        " line\nbreak",
        " é😀",
        "",
        " end",
    ];
    let mut events = vec![EventBody::text_start("m1")];
    events.extend((0..30).map(|i| EventBody::text_content("m1", deltas[i % deltas.len()])));
    events.push(EventBody::text_end("m1"));
    events.push(EventBody::tool_call_start("c1", "f", None));
    events.push(EventBody::tool_call_start("c2", "f", None));
    for call in ["c1", "c1", "c2", "c1", "c2", "c2", "c2"] {
        events.push(EventBody::tool_call_args(call, "{\"k\":"));
    }
    events.push(EventBody::tool_call_end("c1"));
    events.push(EventBody::tool_call_end("c2"));
    events.push(EventBody::text_start("m2"));
    events.push(EventBody::text_content("m2", "alone"));
    events.push(EventBody::text_end("m2"));
    let mut out = Vec::new();
    encoder.start(&mut out).unwrap();
    for event in events {
        encoder.push(event, &mut out).unwrap();
    }
    encoder.finish(&mut out).unwrap();
    split_frames(Bytes::from(out)).collect()
}

/// Appends `frames` in batches of varied sizes, trimming to `bounds` (frames, bytes) and
/// calling `check` after each append, as a run's log does.
fn append_in_batches(
    kept: &mut Frames,
    frames: &[Bytes],
    bounds: (usize, usize),
    mut check: impl FnMut(&Frames),
) {
    let sizes = [1, 3, 2, 7, 1, 1, 5];
    let mut at = 0;
    for size in sizes.iter().cycle() {
        if at == frames.len() {
            break;
        }
        let end = (at + size).min(frames.len());
        kept.append(Bytes::from(frames[at..end].concat()));
        kept.trim(bounds.0, bounds.1);
        at = end;
        check(kept);
    }
}

fn new_frames() -> Frames {
    Frames::new(crate::protocol::event_id_prefix("run-1"))
}

/// Everything after `cursor`, read in chunks of at most `max_bytes`.
fn read_all_after(kept: &Frames, mut cursor: u64, max_bytes: usize) -> Vec<u8> {
    let mut read = Vec::new();
    loop {
        let chunk = kept.read_after(cursor, max_bytes).unwrap();
        if chunk.frames == 0 {
            return read;
        }
        assert!(chunk.frames == 1 || chunk.bytes.len() <= max_bytes);
        assert_eq!(
            split_frames(chunk.bytes.clone()).count() as u64,
            chunk.frames
        );
        cursor += chunk.frames;
        read.extend_from_slice(&chunk.bytes);
    }
}

/// After every append, every kept cursor reads exactly the frames written after it.
fn assert_reads_back(kept: &Frames, frames: &[Bytes]) {
    let last = kept.last_seq();
    for cursor in kept.first_seq() - 1..=last {
        let expected = frames[cursor as usize..last as usize].concat();
        for max_bytes in [1, 300, 64 * 1024] {
            assert_eq!(
                String::from_utf8(read_all_after(kept, cursor, max_bytes)).unwrap(),
                String::from_utf8(expected.clone()).unwrap(),
                "cursor {cursor}, chunks of {max_bytes} bytes"
            );
        }
    }
}

#[test]
fn every_cursor_reads_the_frames_as_written() {
    for timestamps in [true, false] {
        let frames = run_frames(timestamps);
        let mut kept = new_frames();
        append_in_batches(&mut kept, &frames, (usize::MAX, usize::MAX), |kept| {
            assert_reads_back(kept, &frames)
        });
        assert_eq!(kept.last_seq(), frames.len() as u64);
        kept.shrink();
        assert_reads_back(&kept, &frames);
    }
}

#[test]
fn rows_keep_a_fraction_of_the_bytes_written() {
    let frames = run_frames(true);
    let mut kept = new_frames();
    append_in_batches(&mut kept, &frames, (usize::MAX, usize::MAX), |_| {});
    let written: usize = frames.iter().map(Bytes::len).sum();
    // The 30 text frames and the 2 + 4 argument frames in rows; the lone one stays a frame.
    let rows = kept
        .entries
        .iter()
        .filter(|entry| matches!(entry.kept, Kept::Row(_)))
        .count();
    assert_eq!(
        rows, 3,
        "m1, then c1's first two fragments, then c2's last three"
    );
    assert!(
        kept.bytes() * 2 < written,
        "kept {} of {written} bytes",
        kept.bytes()
    );
}

#[test]
fn trimmed_logs_read_back_from_every_kept_cursor_and_refuse_older_ones() {
    let frames = run_frames(true);
    for (max_frames, max_bytes) in [(10, usize::MAX), (1, usize::MAX), (usize::MAX, 400)] {
        let mut kept = new_frames();
        append_in_batches(&mut kept, &frames, (max_frames, max_bytes), |kept| {
            let mut kept_bytes = 0;
            for entry in &kept.entries {
                kept_bytes += match &entry.kept {
                    Kept::Frame(frame) => frame.len(),
                    Kept::Row(row) => {
                        row.head.len()
                            + (row.dropped..row.ends.len())
                                .map(|i| Row::piece_bytes(row.frame(i).delta.len(), row.stamped))
                                .sum::<usize>()
                    }
                };
            }
            assert_eq!(kept.bytes(), kept_bytes, "the count follows what is kept");
            assert!(
                kept.last_seq() - kept.first_seq() < max_frames as u64,
                "{max_frames} frames: {}..={}",
                kept.first_seq(),
                kept.last_seq()
            );
            assert!(kept.bytes() <= max_bytes || kept.first_seq() == kept.last_seq());
            assert_reads_back(kept, &frames);
            if kept.first_seq() > 1 {
                assert_eq!(
                    kept.read_after(kept.first_seq() - 2, 1024).unwrap_err(),
                    ReadError::CursorExpired
                );
            }
        });
        assert!(
            kept.first_seq() > 1,
            "{max_frames} frames, {max_bytes} bytes"
        );
    }
}

#[test]
fn a_live_reader_gets_the_last_batch_as_it_was_appended() {
    let frames = run_frames(true);
    let mut kept = new_frames();
    kept.append(Bytes::from(frames[..5].concat()));
    let batch = Bytes::from(frames[5..9].concat());
    kept.append(batch.clone());
    let read = kept.read_after(5, 64 * 1024).unwrap();
    assert_eq!(read.frames, 4);
    assert_eq!(read.bytes.as_ptr(), batch.as_ptr(), "not copied");
    // One frame kept as it came is not copied either.
    let read = kept.read_after(0, 1).unwrap();
    assert_eq!(read.frames, 1);
    assert_eq!(read.bytes, frames[0]);
}

#[test]
fn a_finished_log_holds_nothing_of_the_batches_it_was_given() {
    for timestamps in [true, false] {
        let frames = run_frames(timestamps);
        // The pump splits its batches off shared blocks: here, one block for the whole run.
        let block = Bytes::from(frames.concat());
        let mut kept = new_frames();
        let mut at = 0;
        for frame in &frames {
            kept.append(block.slice(at..at + frame.len()));
            at += frame.len();
        }
        kept.shrink();
        assert!(
            block.is_unique(),
            "the log keeps its frames in blocks of its own"
        );
        assert_reads_back(&kept, &frames);
    }
}
