//! The SSE frame codec: how one AG-UI event is spelt on the wire (an optional `id:` line, one
//! `data: <json>` line, a blank line), and the fast path for content events (their frames
//! differ only in id, delta and timestamp, so they are written without serde). The encoder
//! decides what to write, `super::frame` carries it typed to where it leaves; this file only
//! says how it is spelt.

use bytes::{BufMut, Bytes};
use serde::Serialize;

use super::error::EncodeError;

/// Which content event a content frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentKind {
    /// `TEXT_MESSAGE_CONTENT`, by `messageId`.
    Text,
    /// `REASONING_MESSAGE_CONTENT`, by `messageId`.
    Reasoning,
    /// `TOOL_CALL_ARGS`, by `toolCallId`.
    ToolCallArgs,
}

/// The `id:` line a frame starts with when a run's frames carry event ids: the run's prefix
/// (`id: <runId>:`) and the frame's seq.
#[derive(Debug, Clone, Copy)]
pub struct EventId<'a> {
    pub prefix: &'a [u8],
    pub seq: u64,
}

/// What starts the `id:` line of every frame of run `run_id` when frames carry event ids: the
/// line is this, the event's seq, and `\n` ([`write_event_id`]).
pub fn event_id_prefix(run_id: &str) -> Vec<u8> {
    format!("id: {run_id}:").into_bytes()
}

/// Writes the `id:` line of event `seq`, given its run's [`event_id_prefix`].
pub fn write_event_id(prefix: &[u8], seq: u64, out: &mut impl BufMut) {
    out.put_slice(prefix);
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.put_u8(b'\n');
}

/// How many bytes [`write_event_id`] writes for `id`.
pub(super) fn event_id_len(id: EventId<'_>) -> usize {
    id.prefix.len() + itoa::Buffer::new().format(id.seq).len() + 1
}

/// How each content event's frame starts, up to its id's value.
const CONTENT_HEADS: [&[u8]; 3] = [
    b"data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":",
    b"data: {\"type\":\"REASONING_MESSAGE_CONTENT\",\"messageId\":",
    b"data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":",
];

/// The frame's start for a content event of `kind`, up to its id's value.
fn content_head(kind: ContentKind) -> &'static [u8] {
    match kind {
        ContentKind::Text => CONTENT_HEADS[0],
        ContentKind::Reasoning => CONTENT_HEADS[1],
        ContentKind::ToolCallArgs => CONTENT_HEADS[2],
    }
}

/// What is between a content frame's id and its delta.
const DELTA_FIELD: &[u8] = b",\"delta\":";

/// Writes the frame of a content event (a text, reasoning or argument fragment), the events a
/// run is mostly made of, without serde's flattening of the body into [`super::Event`], which
/// goes through a map serializer field by field. The bytes are exactly serde's (the tests
/// compare them).
pub(super) fn write_content(
    kind: ContentKind,
    id: &str,
    delta: &str,
    timestamp: Option<i64>,
    out: &mut impl BufMut,
) {
    out.put_slice(content_head(kind));
    write_json_string(id, out);
    out.put_slice(DELTA_FIELD);
    write_json_string(delta, out);
    write_content_tail(timestamp, out);
}

/// How many bytes [`write_content`] writes.
pub(super) fn content_len(
    kind: ContentKind,
    id: &str,
    delta: &str,
    timestamp: Option<i64>,
) -> usize {
    let stamp = timestamp.map_or(0, |timestamp| {
        TIMESTAMP_FIELD.len() + itoa::Buffer::new().format(timestamp).len()
    });
    content_head(kind).len()
        + json_string_len(id)
        + DELTA_FIELD.len()
        + json_string_len(delta)
        + stamp
        + CONTENT_END.len()
}

/// Writes the frame of an event already written as JSON (`data: <json>` and the blank line).
pub(super) fn write_json_frame(json: &[u8], out: &mut impl BufMut) {
    out.put_slice(b"data: ");
    out.put_slice(json);
    out.put_slice(b"\n\n");
}

/// `event` as the compact JSON object its frame carries.
pub(super) fn event_json(event: &super::Event) -> Result<Bytes, EncodeError> {
    Ok(Bytes::from(serde_json::to_vec(event)?))
}

/// What a content frame's timestamp, when it has one, follows its delta with.
const TIMESTAMP_FIELD: &[u8] = b",\"timestamp\":";

/// What ends a content frame.
const CONTENT_END: &[u8] = b"}\n\n";

/// What follows a content frame's delta: its timestamp, if it has one, and the frame's end.
fn write_content_tail(timestamp: Option<i64>, out: &mut impl BufMut) {
    if let Some(timestamp) = timestamp {
        out.put_slice(TIMESTAMP_FIELD);
        out.put_slice(itoa::Buffer::new().format(timestamp).as_bytes());
    }
    out.put_slice(CONTENT_END);
}

/// The escape serde_json writes for an ASCII byte, or 0 for a byte written as it is: `"`
/// and `\\` by a backslash, the control characters with a short escape by theirs, the others
/// as `\u00XX`.
fn escape_of(byte: u8) -> u8 {
    match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        0x00..=0x1f => b'u',
        _ => 0,
    }
}

/// How many bytes [`write_json_string`] writes for `text`.
pub(super) fn json_string_len(text: &str) -> usize {
    let extra: usize = text
        .bytes()
        .map(|byte| match escape_of(byte) {
            0 => 0,
            b'u' => 5,
            _ => 1,
        })
        .sum();
    text.len() + extra + 2
}

/// Writes `text` as a JSON string, exactly as serde_json does (the tests compare every ASCII
/// character). Ids and most fragments need no escape (serde_json escapes only `"`, `\\` and
/// control characters), and are then copied between quotes at once.
pub(super) fn write_json_string(text: &str, out: &mut impl BufMut) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put_u8(b'"');
    let bytes = text.as_bytes();
    let mut plain_from = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        let escape = escape_of(byte);
        if escape == 0 {
            continue;
        }
        out.put_slice(&bytes[plain_from..at]);
        plain_from = at + 1;
        if escape == b'u' {
            out.put_slice(b"\\u00");
            out.put_u8(HEX[usize::from(byte >> 4)]);
            out.put_u8(HEX[usize::from(byte & 0xf)]);
        } else {
            out.put_u8(b'\\');
            out.put_u8(escape);
        }
    }
    out.put_slice(&bytes[plain_from..]);
    out.put_u8(b'"');
}

/// Appends one SSE frame, exactly `data: <compact json>\n\n`. serde_json escapes control
/// characters inside strings, so the JSON never spans lines.
pub fn write_frame<T: Serialize>(event: &T, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut *out, event)?;
    out.extend_from_slice(b"\n\n");
    Ok(())
}

/// Now, in milliseconds since the Unix epoch: the AG-UI timestamp unit (an integer, as the
/// clients require).
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
