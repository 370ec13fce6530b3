//! The frames one run's log keeps, numbered by seq, and how they are read back.
//!
//! Most of a run at a model's pace is content frames in a row: the text, reasoning or
//! argument fragments of one message or call, one per model chunk. They differ only in their
//! seq, their delta and their timestamp, yet each frame spells out the run id, the event type
//! and the message id again (about 150 bytes for a 5-byte token). Such a row is kept as its
//! shared head and each fragment's delta and timestamp, and each frame is written again, byte
//! for byte, when it is read: a 200-token answer keeps about 4 KB of the 31 KB it sent. Every
//! other frame, and a content frame with no neighbour of its message, is kept as it came,
//! copied into blocks of the log's own: a slice of the pump's block would keep the whole block
//! alive, content frames already kept in rows included.
//!
//! The last batch appended is also kept whole until the run ends: a reader that is live (the
//! usual case) reads exactly that batch next, and gets it as the pump wrote it, without
//! writing a frame again.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::ReadError;
use crate::protocol::{split_event_id, write_event_id, ContentFrame};

/// See the module docs.
#[derive(Debug)]
pub(super) struct Frames {
    /// `id: <runId>:`, which starts every frame of the run.
    id_prefix: Box<[u8]>,
    entries: VecDeque<Entry>,
    /// The seq of the first kept frame (seqs count from 1).
    first_seq: u64,
    /// The seq the next appended frame gets.
    next_seq: u64,
    /// The bytes the kept frames take as kept, the bound `runs.log_max_run_bytes` applies to.
    bytes: usize,
    /// The last batch appended, as written, and the seq of its first frame.
    latest: Option<(u64, Bytes)>,
    /// The block frames kept as they came are copied into (see the module docs).
    block: BytesMut,
}

/// The least a block of kept frames holds: a few frames that are not content, so that a
/// finished text run's go into one (about 700 bytes), and its unused end stays small.
const BLOCK_BYTES: usize = 1024;

/// One frame, or a row of content frames, and the seq of its first frame.
#[derive(Debug)]
struct Entry {
    first_seq: u64,
    kept: Kept,
}

#[derive(Debug)]
enum Kept {
    /// A frame as it was appended.
    Frame(Bytes),
    /// Boxed: most entries are frames, and a row is several times a frame's size.
    Row(Box<Row>),
}

/// Content frames in a row of one message or call, each one's delta and timestamp.
#[derive(Debug)]
struct Row {
    /// `data: {"type":…,"messageId":…,"delta":"`, the same in every frame of the row.
    head: Box<[u8]>,
    /// The deltas, as escaped in their frames, one after another.
    deltas: Vec<u8>,
    /// Where each delta ends in `deltas`.
    ends: Vec<u32>,
    /// Each frame's timestamp, when the row's frames carry one, as milliseconds after `base`:
    /// half the bytes of a full timestamp, one per token of a reply.
    stamps: Vec<u32>,
    /// The timestamp the offsets in `stamps` count from: the row's first frame's.
    base: Option<i64>,
    /// Whether they do: a run's frames all carry one, or none does.
    stamped: bool,
    /// Frames dropped from the front by the log's bounds and not yet compacted away.
    dropped: usize,
}

/// What a read gave: the frames after the cursor, in one chunk, and how many.
#[derive(Debug, Default)]
pub(super) struct Read {
    pub(super) bytes: Bytes,
    pub(super) frames: u64,
}

impl Frames {
    pub(super) fn new(id_prefix: Vec<u8>) -> Self {
        Frames {
            id_prefix: id_prefix.into_boxed_slice(),
            entries: VecDeque::new(),
            first_seq: 1,
            next_seq: 1,
            bytes: 0,
            latest: None,
            block: BytesMut::new(),
        }
    }

    pub(super) fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// The seq of the last kept frame (`first_seq - 1` when none is).
    pub(super) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    fn len(&self) -> u64 {
        self.next_seq - self.first_seq
    }

    /// Appends a batch as the pump wrote it (whole frames); returns how many frames it held.
    pub(super) fn append(&mut self, batch: Bytes) -> u64 {
        let first_seq = self.next_seq;
        for frame in frame_ranges(&batch) {
            self.push(&batch[frame]);
        }
        let appended = self.next_seq - first_seq;
        // Whole frames only, so that it reads as the frames kept do.
        if appended > 0 && batch.ends_with(b"\n\n") {
            self.latest = Some((first_seq, batch));
        }
        appended
    }

    fn push(&mut self, frame: &[u8]) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.extend_row(frame, seq) {
            return;
        }
        if let Some(Entry {
            kept: Kept::Row(row),
            ..
        }) = self.entries.back_mut()
        {
            // The row is complete: kept as long as the run, without its growth's spare room.
            row.shrink();
        }
        self.bytes += frame.len();
        let frame = self.copy_into_block(frame);
        self.entries.push_back(Entry {
            first_seq: seq,
            kept: Kept::Frame(frame),
        });
    }

    fn copy_into_block(&mut self, frame: &[u8]) -> Bytes {
        if self.block.capacity() < frame.len() {
            // The frames already split off keep the full block; this starts the next one.
            self.block = BytesMut::with_capacity(frame.len().max(BLOCK_BYTES));
        }
        self.block.extend_from_slice(frame);
        self.block.split().freeze()
    }

    /// Adds `frame` to the row the last entry is or starts with it, when both are content
    /// frames of one message or call; false when `frame` is to be kept as it is.
    fn extend_row(&mut self, frame: &[u8], seq: u64) -> bool {
        let Some(data) = data_of(&self.id_prefix, frame, seq) else {
            return false;
        };
        let Some(last) = self.entries.back_mut() else {
            return false;
        };
        match &mut last.kept {
            Kept::Row(row) => {
                let Some(content) = ContentFrame::parse_continuing(data, &row.head) else {
                    return false;
                };
                if !row.takes(&content) {
                    return false;
                }
                self.bytes += row.push(&content);
            }
            Kept::Frame(previous) => {
                let Some(content) = ContentFrame::parse(data) else {
                    return false;
                };
                let previous_seq = last.first_seq;
                let Some(first) = data_of(&self.id_prefix, previous, previous_seq)
                    .and_then(|data| ContentFrame::parse_continuing(data, content.head))
                else {
                    return false;
                };
                let mut row = Row::new(first.head, first.timestamp.is_some());
                let mut added = row.push(&first) + row.head.len();
                if !row.takes(&content) {
                    return false;
                }
                added += row.push(&content);
                self.bytes = self.bytes - previous.len() + added;
                last.kept = Kept::Row(Box::new(row));
            }
        }
        true
    }

    /// Drops frames from the front until at most `max_frames` and `max_bytes` are kept (the
    /// last frame stays, whatever its size).
    pub(super) fn trim(&mut self, max_frames: usize, max_bytes: usize) {
        while self.len() > max_frames as u64 || (self.bytes > max_bytes && self.len() > 1) {
            let Some(front) = self.entries.front_mut() else {
                break;
            };
            self.first_seq += 1;
            match &mut front.kept {
                Kept::Frame(frame) => {
                    self.bytes -= frame.len();
                    self.entries.pop_front();
                }
                Kept::Row(row) => {
                    self.bytes -= row.drop_first();
                    front.first_seq += 1;
                    if row.is_empty() {
                        self.bytes -= row.head.len();
                        self.entries.pop_front();
                    }
                }
            }
        }
        if self
            .latest
            .as_ref()
            .is_some_and(|(latest_seq, _)| *latest_seq < self.first_seq)
        {
            // Its first frames are gone: no reader can start at it, and it would hold its block.
            self.latest = None;
        }
    }

    /// Gives back the room a finished run no longer needs; live readers read the last batch
    /// from the kept frames from here on.
    pub(super) fn shrink(&mut self) {
        self.latest = None;
        self.block = BytesMut::new();
        if let Some(Entry {
            kept: Kept::Row(row),
            ..
        }) = self.entries.back_mut()
        {
            row.shrink();
        }
        self.entries.shrink_to_fit();
    }

    /// The frames after `cursor`, as one chunk of at most `max_bytes` (at least one frame).
    pub(super) fn read_after(&self, cursor: u64, max_bytes: usize) -> Result<Read, ReadError> {
        if cursor + 1 < self.first_seq {
            return Err(ReadError::CursorExpired);
        }
        let from = cursor + 1;
        if from >= self.next_seq {
            return Ok(Read::default());
        }
        if let Some((latest_seq, batch)) = &self.latest {
            if *latest_seq == from && batch.len() <= max_bytes {
                return Ok(Read {
                    bytes: batch.clone(),
                    frames: self.next_seq - from,
                });
            }
        }
        let at = self
            .entries
            .partition_point(|entry| entry.first_seq <= from)
            - 1;
        let mut chunk = Chunk::new(max_bytes);
        for entry in self.entries.range(at..) {
            match &entry.kept {
                Kept::Frame(frame) => {
                    if !chunk.push_frame(frame) {
                        break;
                    }
                }
                Kept::Row(row) => {
                    let skip = from.saturating_sub(entry.first_seq) as usize;
                    for (index, seq) in
                        (row.dropped + skip..row.ends.len()).zip(entry.first_seq + skip as u64..)
                    {
                        let written = chunk.write_frame(|out| {
                            write_event_id(&self.id_prefix, seq, out);
                            row.frame(index).write(out);
                        });
                        if !written {
                            return Ok(chunk.finish());
                        }
                    }
                }
            }
        }
        Ok(chunk.finish())
    }
}

/// What follows the `id:` line of `frame`, when it is the line of `seq`.
fn data_of<'f>(id_prefix: &[u8], frame: &'f [u8], seq: u64) -> Option<&'f [u8]> {
    let (frame_seq, data) = split_event_id(frame, id_prefix)?;
    (frame_seq == seq).then_some(data)
}

impl Row {
    fn new(head: &[u8], stamped: bool) -> Self {
        Row {
            head: head.into(),
            deltas: Vec::new(),
            ends: Vec::new(),
            stamps: Vec::new(),
            base: None,
            stamped,
            dropped: 0,
        }
    }

    /// Whether `content`, of this row's head, continues it: stamped alike, room left in the
    /// `u32` offsets, and a timestamp no earlier than the row's first (a clock set back starts
    /// a new row) and within a `u32` of milliseconds of it.
    fn takes(&self, content: &ContentFrame<'_>) -> bool {
        let stamp_fits = match (content.timestamp, self.base) {
            (Some(timestamp), Some(base)) => timestamp
                .checked_sub(base)
                .is_some_and(|offset| u32::try_from(offset).is_ok()),
            _ => true,
        };
        self.stamped == content.timestamp.is_some()
            && stamp_fits
            && u32::try_from(self.deltas.len() + content.delta.len()).is_ok()
    }

    /// Appends `content`'s delta and timestamp; returns the bytes that takes.
    fn push(&mut self, content: &ContentFrame<'_>) -> usize {
        self.deltas.extend_from_slice(content.delta);
        // `takes` checked the offset fits (a row's first delta is one frame's, far below it).
        self.ends.push(self.deltas.len() as u32);
        if let Some(timestamp) = content.timestamp {
            let base = *self.base.get_or_insert(timestamp);
            // `takes` checked the offset fits (a row's first stamp is its base).
            self.stamps
                .push(u32::try_from(timestamp - base).unwrap_or(u32::MAX));
        }
        Self::piece_bytes(content.delta.len(), content.timestamp.is_some())
    }

    fn piece_bytes(delta: usize, stamped: bool) -> usize {
        delta + size_of::<u32>() + if stamped { size_of::<u32>() } else { 0 }
    }

    fn is_empty(&self) -> bool {
        self.dropped == self.ends.len()
    }

    /// The frame at `index` (counting the dropped ones).
    fn frame(&self, index: usize) -> ContentFrame<'_> {
        let start = match index {
            0 => 0,
            _ => self.ends[index - 1] as usize,
        };
        ContentFrame {
            head: &self.head,
            delta: &self.deltas[start..self.ends[index] as usize],
            timestamp: self
                .stamps
                .get(index)
                .zip(self.base)
                .map(|(offset, base)| base + i64::from(*offset)),
        }
    }

    /// Drops the first kept frame; returns the bytes it took. What it held goes once half the
    /// row is dropped, so a row trimmed frame by frame costs amortized constant time.
    fn drop_first(&mut self) -> usize {
        let delta = self.frame(self.dropped).delta.len();
        let bytes = Self::piece_bytes(delta, self.stamped);
        self.dropped += 1;
        if self.dropped * 2 >= self.ends.len() && !self.is_empty() {
            self.compact();
        }
        bytes
    }

    /// Removes the dropped frames' deltas, offsets and timestamps.
    fn compact(&mut self) {
        let cut = self.ends[self.dropped - 1];
        self.deltas.drain(..cut as usize);
        self.ends.drain(..self.dropped);
        for end in &mut self.ends {
            *end -= cut;
        }
        if self.stamped {
            self.stamps.drain(..self.dropped);
        }
        self.dropped = 0;
    }

    fn shrink(&mut self) {
        if self.dropped > 0 {
            self.compact();
        }
        self.deltas.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.stamps.shrink_to_fit();
    }
}

/// A read's frames, at most `max_bytes` of them but at least one: the first one as its slice
/// when it is a kept frame, and once another joins, all of them copied into one buffer.
#[derive(Debug)]
struct Chunk {
    single: Option<Bytes>,
    joined: BytesMut,
    frames: u64,
    max_bytes: usize,
}

impl Chunk {
    fn new(max_bytes: usize) -> Self {
        Chunk {
            single: None,
            joined: BytesMut::new(),
            frames: 0,
            max_bytes,
        }
    }

    fn len(&self) -> usize {
        self.single.as_ref().map_or(self.joined.len(), Bytes::len)
    }

    /// Adds a kept frame; false, adding nothing, when it would take the chunk past
    /// `max_bytes`.
    fn push_frame(&mut self, frame: &Bytes) -> bool {
        if self.frames == 0 {
            self.single = Some(frame.clone());
            self.frames = 1;
            return true;
        }
        self.len() + frame.len() <= self.max_bytes
            && self.write_frame(|out| out.extend_from_slice(frame))
    }

    /// Adds the frame `write` writes; false, keeping none of it, when it takes the chunk past
    /// `max_bytes` (never the first frame). Written before it is measured: only a read that
    /// fills its chunk writes one frame in vain.
    fn write_frame(&mut self, write: impl FnOnce(&mut BytesMut)) -> bool {
        let before = self.len();
        if let Some(single) = self.single.take() {
            self.joined.extend_from_slice(&single);
        }
        write(&mut self.joined);
        if self.frames > 0 && self.joined.len() > self.max_bytes {
            self.joined.truncate(before);
            return false;
        }
        self.frames += 1;
        true
    }

    fn finish(self) -> Read {
        Read {
            bytes: self.single.unwrap_or_else(|| self.joined.freeze()),
            frames: self.frames,
        }
    }
}

/// Splits a batch into its frames, as slices of it.
pub(super) fn split_frames(batch: Bytes) -> impl Iterator<Item = Bytes> {
    let mut start = 0;
    std::iter::from_fn(move || {
        let end = frame_end(&batch, start)?;
        let frame = batch.slice(start..end);
        start = end;
        Some(frame)
    })
}

/// Where each frame of `batch` is.
fn frame_ranges(batch: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        let end = frame_end(batch, start)?;
        let frame = start..end;
        start = end;
        Some(frame)
    })
}

/// The end of the frame of `batch` that starts at `start`: past the blank line that ends each
/// frame. serde_json escapes newlines inside strings, so `\n\n` only ever ends a frame.
fn frame_end(batch: &[u8], start: usize) -> Option<usize> {
    // Built once: `memmem::find` builds a searcher on every call, and this runs per frame.
    static FRAME_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\n"));
    Some(FRAME_END.find(batch.get(start..)?)? + start + 2)
}

#[cfg(test)]
mod tests;
