//! The frames one run's log keeps, numbered by seq, and how they are read back.
//!
//! The log takes the typed frames the encoder wrote ([`protocol::Batch`]) and makes bytes only
//! when a reader reads. Most of a run at a model's pace is content frames in a row: the text,
//! reasoning or argument fragments of one message or call, one per model chunk. On the wire
//! each spells out the run id, the event type and the message id again (about 150 bytes for a
//! 5-byte token); kept, a row is its kind and id once and each fragment's delta and timestamp:
//! a 200-token answer keeps about 4 KB of the 31 KB it sent. Every other frame is kept as its
//! JSON object (without its `id:` and `data:` framing), copied into blocks of the log's own so
//! that a finished run's few such frames share an allocation.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::ReadError;
use crate::protocol::{
    self, write_content_frame, write_event_frame, ContentKind, EventId, Fragment, Frame,
};

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
    /// The block event frames are copied into (see the module docs).
    block: BytesMut,
}

/// The least a block of kept event frames holds: a few of a run's frames that are not content
/// (a text run's start, its message's start and end, its end: about 500 bytes in all), so that
/// the block a live run is filling leaves little unused.
const BLOCK_BYTES: usize = 256;

/// One frame, or a row of content frames, and the seq of its first frame.
#[derive(Debug)]
struct Entry {
    first_seq: u64,
    kept: Kept,
}

#[derive(Debug)]
enum Kept {
    /// An event that is not content, as its JSON object.
    Event(Bytes),
    /// Boxed: a row is several times the size of an event's handle.
    Row(Box<Row>),
}

/// Content frames in a row of one message or call, each one's delta and timestamp.
#[derive(Debug)]
struct Row {
    kind: ContentKind,
    /// The message's or call's id.
    of: Box<str>,
    /// The deltas, one after another.
    deltas: String,
    /// Where each delta ends in `deltas`.
    ends: Offsets,
    /// Each frame's timestamp, when the row's frames carry one, as milliseconds after `base`:
    /// a quarter of the bytes of a full timestamp, one per token of a reply.
    stamps: Offsets,
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

    /// Appends a batch as the encoder wrote it.
    pub(super) fn append(&mut self, batch: protocol::Batch) {
        for frame in batch.into_frames() {
            self.push(frame);
        }
    }

    fn push(&mut self, frame: Frame) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let json = match frame {
            Frame::Content(content) => return self.push_content(&content, seq),
            Frame::Event(json) => json,
        };
        self.shrink_last_row();
        self.bytes += json.len();
        let json = self.copy_into_block(&json);
        self.entries.push_back(Entry {
            first_seq: seq,
            kept: Kept::Event(json),
        });
    }

    /// Adds `content` to the row the last entry is when it continues it, or starts a row.
    fn push_content(&mut self, content: &Fragment, seq: u64) {
        if let Some(Entry {
            kept: Kept::Row(row),
            ..
        }) = self.entries.back_mut()
        {
            if row.takes(content) {
                self.bytes += row.push(content);
                return;
            }
        }
        self.shrink_last_row();
        let mut row = Row::new(content);
        self.bytes += row.of.len() + row.push(content);
        self.entries.push_back(Entry {
            first_seq: seq,
            kept: Kept::Row(Box::new(row)),
        });
    }

    /// A row that another entry follows is complete: kept as long as the run, without its
    /// growth's spare room.
    fn shrink_last_row(&mut self) {
        if let Some(Entry {
            kept: Kept::Row(row),
            ..
        }) = self.entries.back_mut()
        {
            row.shrink();
        }
    }

    fn copy_into_block(&mut self, json: &[u8]) -> Bytes {
        if self.block.capacity() < json.len() {
            // The frames already split off keep the full block; this starts the next one.
            self.block = BytesMut::with_capacity(json.len().max(BLOCK_BYTES));
        }
        self.block.extend_from_slice(json);
        self.block.split().freeze()
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
                Kept::Event(json) => {
                    self.bytes -= json.len();
                    self.entries.pop_front();
                }
                Kept::Row(row) => {
                    self.bytes -= row.drop_first();
                    front.first_seq += 1;
                    if row.is_empty() {
                        self.bytes -= row.of.len();
                        self.entries.pop_front();
                    }
                }
            }
        }
    }

    /// Gives back the room a finished run no longer needs.
    pub(super) fn shrink(&mut self) {
        self.block = BytesMut::new();
        self.shrink_last_row();
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
        let at = self
            .entries
            .partition_point(|entry| entry.first_seq <= from)
            - 1;
        let mut chunk = Chunk::new(max_bytes);
        for entry in self.entries.range(at..) {
            match &entry.kept {
                Kept::Event(json) => {
                    let id = self.event_id(entry.first_seq);
                    if !chunk.write_frame(|out| write_event_frame(Some(id), json, out)) {
                        break;
                    }
                }
                Kept::Row(row) => {
                    let skip = from.saturating_sub(entry.first_seq) as usize;
                    for (index, seq) in
                        (row.dropped + skip..row.ends.len()).zip(entry.first_seq + skip as u64..)
                    {
                        let id = self.event_id(seq);
                        let written = chunk.write_frame(|out| {
                            let (delta, timestamp) = row.frame(index);
                            write_content_frame(
                                Some(id),
                                (row.kind, &row.of),
                                delta,
                                timestamp,
                                out,
                            );
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

    fn event_id(&self, seq: u64) -> EventId<'_> {
        EventId {
            prefix: &self.id_prefix,
            seq,
        }
    }
}

impl Row {
    fn new(first: &Fragment) -> Self {
        Row {
            kind: first.kind,
            of: first.id.as_str().into(),
            deltas: String::new(),
            ends: Offsets::default(),
            stamps: Offsets::default(),
            base: None,
            stamped: first.timestamp.is_some(),
            dropped: 0,
        }
    }

    /// Whether `content` continues this row: of its message or call, stamped alike, room left
    /// in the `u32` offsets, and a timestamp no earlier than the row's first (a clock set back
    /// starts a new row) and within a `u32` of milliseconds of it.
    fn takes(&self, content: &Fragment) -> bool {
        let stamp_fits = match (content.timestamp, self.base) {
            (Some(timestamp), Some(base)) => timestamp
                .checked_sub(base)
                .is_some_and(|offset| u32::try_from(offset).is_ok()),
            _ => true,
        };
        self.kind == content.kind
            && *self.of == content.id
            && self.stamped == content.timestamp.is_some()
            && stamp_fits
            && u32::try_from(self.deltas.len() + content.delta.len()).is_ok()
    }

    /// Appends `content`'s delta and timestamp; returns the bytes that takes.
    fn push(&mut self, content: &Fragment) -> usize {
        crate::text::push_growing(&mut self.deltas, &content.delta);
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

    /// What a frame takes in a row, for the log's bounds: its delta and, at most, a wide
    /// offset for its end and its timestamp.
    fn piece_bytes(delta: usize, stamped: bool) -> usize {
        delta + size_of::<u32>() + if stamped { size_of::<u32>() } else { 0 }
    }

    fn is_empty(&self) -> bool {
        self.dropped == self.ends.len()
    }

    /// The delta and timestamp of the frame at `index` (counting the dropped ones).
    fn frame(&self, index: usize) -> (&str, Option<i64>) {
        let start = match index {
            0 => 0,
            _ => self.ends.at(index - 1) as usize,
        };
        let timestamp = self
            .stamps
            .get(index)
            .zip(self.base)
            .map(|(offset, base)| base + i64::from(offset));
        (&self.deltas[start..self.ends.at(index) as usize], timestamp)
    }

    /// Drops the first kept frame; returns the bytes it took. What it held goes once half the
    /// row is dropped, so a row trimmed frame by frame costs amortized constant time.
    fn drop_first(&mut self) -> usize {
        let delta = self.frame(self.dropped).0.len();
        let bytes = Self::piece_bytes(delta, self.stamped);
        self.dropped += 1;
        if self.dropped * 2 >= self.ends.len() && !self.is_empty() {
            self.compact();
        }
        bytes
    }

    /// Removes the dropped frames' deltas, offsets and timestamps.
    fn compact(&mut self) {
        let cut = self.ends.at(self.dropped - 1);
        self.deltas.drain(..cut as usize);
        self.ends.drop_front(self.dropped, cut);
        if self.stamped {
            self.stamps.drop_front(self.dropped, 0);
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

/// A row's offsets: two bytes each while they fit, four once one does not (deltas past 64 KiB,
/// or timestamps past 65 s after the row's first): half the bookkeeping per token of a reply.
#[derive(Debug)]
enum Offsets {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

/// Appends `value`, growing `offsets` by a quarter when full rather than doubling them (as
/// `crate::text::push_growing` does for the deltas): a live row's offsets, two per token, are
/// held for the whole stream, and doubled they keep up to as many spare as used.
fn push_growing<T>(offsets: &mut Vec<T>, value: T) {
    if offsets.len() == offsets.capacity() {
        offsets.reserve_exact((offsets.len() / 4).max(16));
    }
    offsets.push(value);
}

impl Default for Offsets {
    fn default() -> Self {
        Offsets::Narrow(Vec::new())
    }
}

impl Offsets {
    fn push(&mut self, value: u32) {
        match self {
            Offsets::Narrow(narrow) => match u16::try_from(value) {
                Ok(value) => push_growing(narrow, value),
                Err(_) => {
                    let mut wide: Vec<u32> = narrow.iter().map(|n| u32::from(*n)).collect();
                    wide.push(value);
                    *self = Offsets::Wide(wide);
                }
            },
            Offsets::Wide(wide) => push_growing(wide, value),
        }
    }

    fn get(&self, index: usize) -> Option<u32> {
        match self {
            Offsets::Narrow(narrow) => narrow.get(index).map(|n| u32::from(*n)),
            Offsets::Wide(wide) => wide.get(index).copied(),
        }
    }

    /// The offset at `index`, which the caller knows is there.
    fn at(&self, index: usize) -> u32 {
        self.get(index).unwrap_or_default()
    }

    fn len(&self) -> usize {
        match self {
            Offsets::Narrow(narrow) => narrow.len(),
            Offsets::Wide(wide) => wide.len(),
        }
    }

    /// Removes the first `count` offsets and takes `cut` off each of the others.
    fn drop_front(&mut self, count: usize, cut: u32) {
        match self {
            Offsets::Narrow(narrow) => {
                narrow.drain(..count);
                // Every kept offset is at least `cut`, which is one of them, so it fits.
                let cut = u16::try_from(cut).unwrap_or(u16::MAX);
                narrow.iter_mut().for_each(|n| *n -= cut);
            }
            Offsets::Wide(wide) => {
                wide.drain(..count);
                wide.iter_mut().for_each(|n| *n -= cut);
            }
        }
    }

    fn shrink_to_fit(&mut self) {
        match self {
            Offsets::Narrow(narrow) => narrow.shrink_to_fit(),
            Offsets::Wide(wide) => wide.shrink_to_fit(),
        }
    }
}

/// A read's frames, at most `max_bytes` of them but at least one, written into one buffer.
#[derive(Debug)]
struct Chunk {
    out: BytesMut,
    frames: u64,
    max_bytes: usize,
}

impl Chunk {
    fn new(max_bytes: usize) -> Self {
        Chunk {
            out: BytesMut::new(),
            frames: 0,
            max_bytes,
        }
    }

    /// Adds the frame `write` writes; false, keeping none of it, when it takes the chunk past
    /// `max_bytes` (never the first frame). Written before it is measured: only a read that
    /// fills its chunk writes one frame in vain.
    fn write_frame(&mut self, write: impl FnOnce(&mut BytesMut)) -> bool {
        let before = self.out.len();
        write(&mut self.out);
        if self.frames > 0 && self.out.len() > self.max_bytes {
            self.out.truncate(before);
            return false;
        }
        self.frames += 1;
        true
    }

    fn finish(self) -> Read {
        Read {
            bytes: self.out.freeze(),
            frames: self.frames,
        }
    }
}

#[cfg(test)]
mod tests;
