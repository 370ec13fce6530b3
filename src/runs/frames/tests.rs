//! Kept frames read back byte for byte from every cursor, as rows form, grow and are trimmed.

use std::sync::Arc;

use super::*;
use crate::protocol::{Batch, EventBody, FrameAt, FrameOut, ProtocolVersion, RunEncoder};

/// A run's frames as the encoder wrote them, and each one's bytes on the wire.
struct Written {
    frames: Vec<Frame>,
    bytes: Vec<Bytes>,
}

/// The frames of a run with every kind of row: a long text, calls whose arguments interleave,
/// a content frame alone between others, deltas that need escaping.
fn run_frames(timestamps: bool) -> Written {
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
    let mut out = Batch::default();
    encoder.start(&mut out).unwrap();
    for event in events {
        encoder.push(event, &mut out).unwrap();
    }
    encoder.finish(&mut out).unwrap();
    Written {
        bytes: out.frame_bytes(),
        frames: out.into_frames(),
    }
}

/// The batch of `frames`, the first of them seq `first_seq`, as the encoder would have written
/// it.
fn batch_of(frames: &[Frame], first_seq: u64) -> Batch {
    let prefix: Arc<[u8]> = Arc::from(crate::protocol::event_id_prefix("run-1"));
    let mut batch = Batch::default();
    for (seq, frame) in (first_seq..).zip(frames) {
        let at = FrameAt {
            seq,
            id_prefix: Some(&prefix),
        };
        batch.put(frame.clone(), at);
    }
    batch
}

/// How many frames `bytes` holds: each ends in the one blank line a frame has (serde escapes
/// line breaks inside strings).
fn count_frames(bytes: &[u8]) -> u64 {
    bytes.windows(2).filter(|pair| pair == b"\n\n").count() as u64
}

/// Appends `frames` in batches of varied sizes, trimming to `bounds` (frames, bytes) and
/// calling `check` after each append, as a run's log does.
fn append_in_batches(
    kept: &mut Frames,
    frames: &[Frame],
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
        kept.append(batch_of(&frames[at..end], at as u64 + 1));
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
        assert_eq!(count_frames(&chunk.bytes), chunk.frames);
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
        let run = run_frames(timestamps);
        let mut kept = new_frames();
        append_in_batches(&mut kept, &run.frames, (usize::MAX, usize::MAX), |kept| {
            assert_reads_back(kept, &run.bytes)
        });
        assert_eq!(kept.last_seq(), run.frames.len() as u64);
        kept.shrink();
        assert_reads_back(&kept, &run.bytes);
    }
}

#[test]
fn rows_keep_a_fraction_of_the_bytes_written() {
    let run = run_frames(true);
    let mut kept = new_frames();
    append_in_batches(&mut kept, &run.frames, (usize::MAX, usize::MAX), |_| {});
    let written: usize = run.bytes.iter().map(Bytes::len).sum();
    let rows = kept
        .entries
        .iter()
        .filter(|entry| matches!(entry.kept, Kept::Row(_)))
        .count();
    assert_eq!(
        rows, 6,
        "m1's 30; c1's first two, c2, c1, c2's last three; m2's one"
    );
    assert!(
        kept.bytes() * 2 < written,
        "kept {} of {written} bytes",
        kept.bytes()
    );
}

#[test]
fn trimmed_logs_read_back_from_every_kept_cursor_and_refuse_older_ones() {
    let run = run_frames(true);
    let frames = &run.bytes;
    for (max_frames, max_bytes) in [(10, usize::MAX), (1, usize::MAX), (usize::MAX, 400)] {
        let mut kept = new_frames();
        append_in_batches(&mut kept, &run.frames, (max_frames, max_bytes), |kept| {
            let mut kept_bytes = 0;
            for entry in &kept.entries {
                kept_bytes += match &entry.kept {
                    Kept::Event(json) => json.len(),
                    Kept::Row(row) => {
                        row.of.len()
                            + (row.dropped..row.ends.len())
                                .map(|i| Row::piece_bytes(row.frame(i).0.len(), row.stamped))
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
            assert_reads_back(kept, frames);
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
fn a_finished_log_holds_nothing_of_the_batches_it_was_given() {
    for timestamps in [true, false] {
        let run = run_frames(timestamps);
        let mut kept = new_frames();
        for (seq, frame) in (1..).zip(&run.frames) {
            kept.append(batch_of(std::slice::from_ref(frame), seq));
        }
        kept.shrink();
        for frame in &run.frames {
            if let Frame::Event(json) = frame {
                assert!(
                    json.is_unique(),
                    "the log keeps its frames in blocks of its own"
                );
            }
        }
        assert_reads_back(&kept, &run.bytes);
    }
}

/// A row past what two-byte offsets hold (deltas past 64 KiB, timestamps past 65 s after its
/// first) widens them and reads back as written, trimmed or not.
#[test]
fn a_long_row_widens_its_offsets_and_reads_back() {
    let prefix = crate::protocol::event_id_prefix("run-1");
    let frames: Vec<Frame> = (0..300u32)
        .map(|i| {
            Frame::Content(crate::protocol::Fragment {
                kind: crate::protocol::ContentKind::Text,
                id: "m1".into(),
                delta: format!("{i:04}:").repeat(50),
                timestamp: Some(1_764_547_200_000 + i64::from(i) * 300),
            })
        })
        .collect();
    let bytes: Vec<Bytes> = (1..)
        .zip(&frames)
        .map(|(seq, frame)| {
            let mut out = Vec::new();
            frame.write(
                Some(EventId {
                    prefix: &prefix,
                    seq,
                }),
                &mut out,
            );
            Bytes::from(out)
        })
        .collect();
    for bounds in [(usize::MAX, usize::MAX), (120, usize::MAX)] {
        let mut kept = new_frames();
        append_in_batches(&mut kept, &frames, bounds, |_| {});
        let Kept::Row(row) = &kept.entries.back().unwrap().kept else {
            panic!("a row");
        };
        assert!(matches!(row.stamps, Offsets::Wide(_)), "{bounds:?}");
        if bounds.0 == usize::MAX {
            assert!(matches!(row.ends, Offsets::Wide(_)));
        }
        assert_reads_back(&kept, &bytes);
    }
}
