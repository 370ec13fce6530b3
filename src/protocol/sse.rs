//! The SSE frame codec: how one AG-UI event is spelt on the wire (an optional `id:` line, one
//! `data: <json>` line, a blank line), the fast path for content events (their frames differ
//! only in id, delta and timestamp, so they are written without serde), and the reverse for
//! those frames ([`ContentFrame`], [`split_event_id`]), which the run log uses to keep a row of
//! them as their deltas. The encoder decides what to write; this file only how.

use bytes::BufMut;
use serde::Serialize;

use super::error::EncodeError;
use super::events::EventBody;

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

/// The seq of a frame that starts with an `id:` line of `prefix`, and what follows the line;
/// `None` when the frame has no such line.
pub fn split_event_id<'f>(frame: &'f [u8], prefix: &[u8]) -> Option<(u64, &'f [u8])> {
    let rest = frame.strip_prefix(prefix)?;
    let end = memchr::memchr(b'\n', rest)?;
    let seq = parse_integer(&rest[..end])?;
    Some((u64::try_from(seq).ok()?, &rest[end + 1..]))
}

/// The integer `digits` spell exactly as itoa writes it (no sign but `-`, no leading zero,
/// not `-0`), so that what is parsed writes back as the same bytes; at most 18 digits, which
/// no overflow reaches and every timestamp and seq fits.
fn parse_integer(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    let canonical = match digits {
        [] => false,
        [b'0'] => !negative,
        [first, ..] => *first != b'0' && digits.len() <= 18,
    };
    if !canonical || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0i64, |value, digit| value * 10 + i64::from(digit - b'0'));
    Some(if negative { -value } else { value })
}

/// How each content event's frame starts, up to its id's value.
const CONTENT_HEADS: [&[u8]; 3] = [
    b"data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":",
    b"data: {\"type\":\"REASONING_MESSAGE_CONTENT\",\"messageId\":",
    b"data: {\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":",
];

/// Writes the frame of a content event (a text, reasoning or argument fragment), the events a
/// run is mostly made of, without serde's flattening of the body into [`Event`], which goes
/// through a map serializer field by field. The bytes are exactly those of [`write_frame`]
/// (the tests compare them). False, writing nothing, for every other event.
pub(super) fn write_content_frame(
    body: &EventBody,
    timestamp: Option<i64>,
    out: &mut Vec<u8>,
) -> Result<bool, EncodeError> {
    let (head, id, delta): (&[u8], &str, &str) = match body {
        EventBody::TextMessageContent(e) if e.subagent_run_id.is_none() => {
            (CONTENT_HEADS[0], &e.message_id, &e.delta)
        }
        EventBody::ReasoningMessageContent(e) if e.subagent_run_id.is_none() => {
            (CONTENT_HEADS[1], &e.message_id, &e.delta)
        }
        EventBody::ToolCallArgs(e) if e.subagent_run_id.is_none() => {
            (CONTENT_HEADS[2], &e.tool_call_id, &e.delta)
        }
        _ => return Ok(false),
    };
    out.extend_from_slice(head);
    write_json_string(id, out)?;
    out.extend_from_slice(b",\"delta\":");
    write_json_string(delta, out)?;
    write_content_tail(timestamp, out);
    Ok(true)
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

/// A content frame (without its `id:` line) taken apart: `head` is all it shares with the
/// other fragments of its message or call (`data: {"type":…,"messageId":…,"delta":"`), `delta`
/// the fragment as escaped in the frame. A run's log keeps a row of such frames as one head
/// and their deltas, and writes each frame again byte for byte ([`ContentFrame::write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentFrame<'a> {
    pub head: &'a [u8],
    pub delta: &'a [u8],
    pub timestamp: Option<i64>,
}

impl<'a> ContentFrame<'a> {
    /// The parts of `data` when it is exactly a frame [`write_content_frame`] wrote (`None`
    /// for every other frame, so whatever is parsed writes back the same bytes).
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let after_head = CONTENT_HEADS
            .iter()
            .find_map(|head| data.strip_prefix(*head))?;
        let after_id = after_head
            .get(json_string_len(after_head)?..)?
            .strip_prefix(b",\"delta\":")?;
        let head_len = data.len() - after_id.len() + 1;
        Self::parse_with_head(data, head_len)
    }

    /// [`ContentFrame::parse`] for a frame expected to continue a row of `head` (a head this
    /// parser gave): `None` when `data` does not start with it. The head is compared rather than
    /// read again.
    pub fn parse_continuing(data: &'a [u8], head: &[u8]) -> Option<Self> {
        if !data.starts_with(head) {
            return None;
        }
        Self::parse_with_head(data, head.len())
    }

    /// The frame whose head (up to and including the delta's opening quote) is
    /// `data[..head_len]`.
    fn parse_with_head(data: &'a [u8], head_len: usize) -> Option<Self> {
        let delta_len = json_string_len(data.get(head_len.checked_sub(1)?..)?)?;
        let (head, rest) = data.split_at(head_len);
        let (delta, tail) = rest.split_at(delta_len - 2);
        // After the delta's closing quote.
        let tail = &tail[1..];
        let timestamp = if tail == CONTENT_END {
            None
        } else {
            let digits = tail
                .strip_prefix(TIMESTAMP_FIELD)?
                .strip_suffix(CONTENT_END)?;
            Some(parse_integer(digits)?)
        };
        Some(ContentFrame {
            head,
            delta,
            timestamp,
        })
    }

    /// Writes the frame back, exactly as it was parsed.
    pub fn write(&self, out: &mut impl BufMut) {
        out.put_slice(self.head);
        out.put_slice(self.delta);
        out.put_u8(b'"');
        write_content_tail(self.timestamp, out);
    }
}

/// The length of the JSON string `text` starts with, quotes included; `None` when it does not
/// start with one. Inside an escaped string a quote or a backslash only ever follows a
/// backslash, so skipping the byte after each backslash finds the closing quote.
fn json_string_len(text: &[u8]) -> Option<usize> {
    if text.first() != Some(&b'"') {
        return None;
    }
    let mut at = 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', text.get(at..)?)?;
        if text[at] == b'"' {
            return Some(at + 1);
        }
        at += 2;
    }
}

/// Writes `text` as a JSON string, exactly as serde_json does. Ids and most fragments need no
/// escape (serde_json escapes only `"`, `\\` and control characters), and are then copied
/// between quotes without going through the serializer.
pub(super) fn write_json_string(text: &str, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let plain = text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if !plain {
        serde_json::to_writer(&mut *out, text)?;
        return Ok(());
    }
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
    Ok(())
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
