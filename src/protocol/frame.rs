//! Typed frames: what the encoder hands on for each event it writes, and a step's [`Batch`] of
//! them. A content event (a text, reasoning or argument fragment, most of a run) stays a
//! [`Fragment`] frame, its id and delta as the agent gave them; every other event is its JSON
//! object, written once. Bytes with the SSE framing (`id:` line, `data:` line, blank line) are
//! made only where frames leave: at the client's socket, at a reader of a run's log, at Redis
//! (`Batch::write`, `Frame::write`). A run's log keeps content frames as rows of deltas without
//! ever parsing a frame back.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::sse::{content_len, event_id_len, write_content, write_event_id, write_json_frame};
pub use super::sse::{ContentKind, EventId};
use super::KEEP_ALIVE_FRAME;

/// A content event: one fragment of a message or call, and its timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub kind: ContentKind,
    /// The message's or call's id.
    pub id: String,
    pub delta: String,
    pub timestamp: Option<i64>,
}

/// One event as the encoder wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Content(Fragment),
    /// Any other event: its JSON object, compact, on one line.
    Event(Bytes),
}

impl Frame {
    /// Writes the frame's SSE bytes, after its `id:` line when it has one.
    pub fn write(&self, id: Option<EventId<'_>>, out: &mut impl BufMut) {
        match self {
            Frame::Content(content) => write_content_frame(
                id,
                (content.kind, &content.id),
                &content.delta,
                content.timestamp,
                out,
            ),
            Frame::Event(json) => write_event_frame(id, json, out),
        }
    }

    /// How many bytes [`Frame::write`] writes.
    pub fn len(&self, id: Option<EventId<'_>>) -> usize {
        let id_len = id.map_or(0, event_id_len);
        id_len
            + match self {
                Frame::Content(content) => {
                    content_len(content.kind, &content.id, &content.delta, content.timestamp)
                }
                Frame::Event(json) => b"data: ".len() + json.len() + b"\n\n".len(),
            }
    }
}

/// Writes a content frame from its parts (what a log keeps of it): the content event of `kind`
/// for the message or call `of`, its `delta` and timestamp, after the `id:` line when it has one.
pub fn write_content_frame(
    id: Option<EventId<'_>>,
    (kind, of): (ContentKind, &str),
    delta: &str,
    timestamp: Option<i64>,
    out: &mut impl BufMut,
) {
    if let Some(id) = id {
        write_event_id(id.prefix, id.seq, out);
    }
    write_content(kind, of, delta, timestamp, out);
}

/// Writes the frame of an event kept as its JSON object, after the `id:` line when it has one.
pub fn write_event_frame(id: Option<EventId<'_>>, json: &[u8], out: &mut impl BufMut) {
    if let Some(id) = id {
        write_event_id(id.prefix, id.seq, out);
    }
    write_json_frame(json, out);
}

/// Where a frame stands in its run: its seq (counting from 1), and the run's `id:` prefix when
/// its frames carry event ids.
#[derive(Debug, Clone, Copy)]
pub struct FrameAt<'a> {
    pub seq: u64,
    /// Shared, so that a batch holds the run's prefix without copying it.
    pub id_prefix: Option<&'a Arc<[u8]>>,
}

impl<'a> FrameAt<'a> {
    /// The frame's `id:` line, when it has one.
    pub fn event_id(self) -> Option<EventId<'a>> {
        self.id_prefix.map(|prefix| EventId {
            prefix: prefix.as_ref(),
            seq: self.seq,
        })
    }
}

/// Where the encoder puts the frames it writes: a [`Batch`] on a run's way out, or a byte
/// buffer (the frames' SSE bytes at once) where nothing else needs them typed.
pub trait FrameOut {
    fn put(&mut self, frame: Frame, at: FrameAt<'_>);
}

impl FrameOut for Vec<u8> {
    fn put(&mut self, frame: Frame, at: FrameAt<'_>) {
        frame.write(at.event_id(), self);
    }
}

/// One step of a run on its way out: the frames it wrote, numbered from `first_seq`, or a
/// keep-alive comment.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    frames: Vec<Frame>,
    first_seq: u64,
    /// `id: <runId>:` when the run's frames carry event ids.
    id_prefix: Option<Arc<[u8]>>,
    /// The bytes the batch writes.
    len: usize,
    keep_alive: bool,
}

impl FrameOut for Batch {
    fn put(&mut self, frame: Frame, at: FrameAt<'_>) {
        if self.frames.is_empty() {
            self.first_seq = at.seq;
            if self.id_prefix.is_none() {
                self.id_prefix = at.id_prefix.cloned();
            }
        }
        self.len += frame.len(at.event_id());
        self.frames.push(frame);
    }
}

impl Batch {
    /// The keep-alive comment an idle stream gets.
    pub fn keep_alive() -> Batch {
        Batch {
            len: KEEP_ALIVE_FRAME.len(),
            keep_alive: true,
            ..Batch::default()
        }
    }

    pub fn is_keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// How many bytes the batch writes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it writes nothing (a step that only added token usage, say).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many frames (events) it holds.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// The seq of its first frame (0 when it has none).
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The frames, for a store that keeps them as they are.
    pub fn into_frames(self) -> Vec<Frame> {
        self.frames
    }

    /// The `id:` line of the frame at `index`, when frames carry event ids.
    fn id_of(&self, index: usize) -> Option<EventId<'_>> {
        self.id_prefix.as_deref().map(|prefix| EventId {
            prefix,
            seq: self.first_seq + index as u64,
        })
    }

    /// Writes the batch's SSE bytes.
    pub fn write(&self, out: &mut impl BufMut) {
        if self.keep_alive {
            out.put_slice(KEEP_ALIVE_FRAME);
        }
        for (index, frame) in self.frames.iter().enumerate() {
            frame.write(self.id_of(index), out);
        }
    }

    /// The batch's SSE bytes, in one allocation of exactly their size.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.len);
        self.write(&mut out);
        out.freeze()
    }

    /// Each frame's SSE bytes, as slices of one allocation (a log that keeps frames one by one).
    pub fn frame_bytes(&self) -> Vec<Bytes> {
        let mut out = BytesMut::with_capacity(self.len);
        let mut frames = Vec::with_capacity(self.frames.len());
        for (index, frame) in self.frames.iter().enumerate() {
            frame.write(self.id_of(index), &mut out);
            frames.push(out.split().freeze());
        }
        frames
    }
}
