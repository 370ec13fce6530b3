//! An incremental server-sent-events decoder: raw body bytes in, complete events out.
//!
//! It follows the WHATWG event-stream rules that matter for model servers: lines end in `\n`,
//! `\r\n` or a lone `\r`; `data:` lines of one event are joined with `\n`; lines starting with
//! `:` are comments (keep-alives); `event:` names the event; `id:` sets the last event id a
//! reconnecting client sends back (the server's run log ids); a blank line dispatches. Bytes may
//! be split anywhere, even inside a multi-byte UTF-8 character: only complete lines are decoded,
//! and a line terminator is ASCII so it can never sit inside such a character.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the server sent one (`error` from some servers).
    pub event: Option<String>,
    pub data: String,
}

/// The pending line or event grew past [`MAX_EVENT_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseTooLarge;

/// Largest event we buffer: far above any real chunk, low enough that a server streaming bytes
/// without a line break cannot exhaust memory.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// Longest event id kept: a run id and its sequence number fit many times over; a longer one is
/// not an id a client should send back in a header, so it is ignored like one with NUL.
pub const MAX_EVENT_ID_BYTES: usize = 1024;

#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, incomplete line.
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no line terminator (so long lines are scanned once).
    scanned: usize,
    /// Kept apart from `buf` so lines can be processed while borrowing it.
    fields: EventFields,
}

/// The event being assembled from field lines.
#[derive(Debug, Default)]
struct EventFields {
    data: String,
    has_data: bool,
    event: Option<String>,
    first_line_seen: bool,
    /// The SSE "last event ID buffer": set by `id:` lines, kept from event to event.
    id_buffer: Option<String>,
    /// The id of the last dispatched event (the buffer as it was at the event's blank line).
    last_event_id: Option<String>,
    saw_id: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder for a reconnection: events without an `id:` of their own carry `last_event_id`
    /// on, as the SSE rules keep it across connections.
    pub fn resuming(last_event_id: Option<String>) -> Self {
        let mut decoder = Self::default();
        decoder.fields.id_buffer.clone_from(&last_event_id);
        decoder.fields.last_event_id = last_event_id;
        decoder
    }

    /// The id of the last whole event decoded (a frame cut short does not count), if the
    /// stream has ids.
    pub fn last_event_id(&self) -> Option<&str> {
        self.fields.last_event_id.as_deref()
    }

    /// Whether an `id:` line was read, even one of an event not yet whole.
    pub fn saw_id(&self) -> bool {
        self.fields.saw_id
    }

    /// Decodes `bytes`, appending each event completed by them to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseTooLarge> {
        if self.buf.is_empty() {
            // Nothing pending (the usual case: reads end on a frame boundary): the lines are
            // read from `bytes` itself, and only an incomplete last line is kept.
            let (consumed, scanned) = self.fields.process_lines(bytes, 0, out);
            self.buf.extend_from_slice(&bytes[consumed..]);
            self.scanned = scanned - consumed;
        } else {
            self.buf.extend_from_slice(bytes);
            let (consumed, scanned) = self.fields.process_lines(&self.buf, self.scanned, out);
            // Only completed lines are dropped, so a long line arriving in small pieces is not
            // copied again on every call.
            if consumed > 0 {
                self.buf.drain(..consumed);
            }
            self.scanned = scanned - consumed;
        }
        if self.buf.len() + self.fields.data.len() > MAX_EVENT_BYTES {
            return Err(SseTooLarge);
        }
        Ok(())
    }

    /// The body ended: completes a last line without terminator and dispatches a last event
    /// without its blank line. The spec says to drop such an event, but servers do end with
    /// `data: [DONE]\n` (or no newline at all) and dropping it would lose real data.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        let mut line = std::mem::take(&mut self.buf);
        self.scanned = 0;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if !line.is_empty() {
            self.fields.process_line(&line, out);
        }
        self.fields.dispatch(out);
    }
}

impl EventFields {
    /// Processes the complete lines of `buf`, searching for line ends from `search_from` (the
    /// bytes before it are known to hold none). Returns how many bytes the complete lines took,
    /// and how far `buf` is known to hold no line end (a `\r` as its very last byte may be the
    /// first half of `\r\n`, so it is not counted).
    fn process_lines(
        &mut self,
        buf: &[u8],
        mut search_from: usize,
        out: &mut Vec<SseEvent>,
    ) -> (usize, usize) {
        let mut line_start = 0;
        // memchr's vectorized search: every byte of every reply passes through this scan.
        while let Some(offset) = buf
            .get(search_from..)
            .and_then(|rest| memchr::memchr2(b'\n', b'\r', rest))
        {
            let at = search_from + offset;
            let terminator_len = match (buf.get(at), buf.get(at + 1)) {
                (Some(b'\r'), Some(b'\n')) => 2,
                // A `\r` as the very last byte may be the first half of `\r\n`: wait for more.
                (Some(b'\r'), None) => return (line_start, at),
                _ => 1,
            };
            self.process_line(buf.get(line_start..at).unwrap_or_default(), out);
            line_start = at + terminator_len;
            search_from = line_start;
        }
        (line_start, buf.len())
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        // Valid UTF-8 is the rule: check it with the fast validator and borrow; only a broken
        // line pays for the replacement-character copy.
        let decoded = match std::str::from_utf8(line) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        let mut line: &str = &decoded;
        if !self.first_line_seen {
            self.first_line_seen = true;
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return; // a comment, e.g. `: keep-alive` or OpenRouter's `: OPENROUTER PROCESSING`
        }
        // `:` is ASCII, so the byte search finds a char boundary.
        let (field, value) = match memchr::memchr(b':', line.as_bytes()) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // An id with NUL is ignored, as the SSE rules say; an empty one clears it.
            "id" if !value.contains('\0') && value.len() <= MAX_EVENT_ID_BYTES => {
                self.id_buffer = (!value.is_empty()).then(|| value.to_owned());
                self.saw_id = true;
            }
            // `retry` only matters to browsers; unknown fields are ignored.
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        // Model servers send no ids: for them this is one untaken branch per event.
        if self.saw_id && self.last_event_id != self.id_buffer {
            self.last_event_id.clone_from(&self.id_buffer);
        }
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(fragments: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        for fragment in fragments {
            decoder.feed(fragment, &mut out).expect("not too large");
        }
        decoder.finish(&mut out);
        out
    }

    fn data(text: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: text.to_owned(),
        }
    }

    #[test]
    fn lf_crlf_and_cr_framing() {
        let expected = vec![data("a"), data("b")];
        assert_eq!(decode(&[b"data: a\n\ndata: b\n\n"]), expected);
        assert_eq!(decode(&[b"data: a\r\n\r\ndata: b\r\n\r\n"]), expected);
        assert_eq!(decode(&[b"data: a\r\rdata: b\r\r"]), expected);
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let body = "data: {\"x\":\"h\u{e9}llo \u{1f600}\"}\r\n\r\n: keep-alive\r\nevent: error\r\ndata: one\r\ndata: two\r\n\r\ndata:[DONE]\r\n\r\n"
            .as_bytes();
        let expected = vec![
            data("{\"x\":\"h\u{e9}llo \u{1f600}\"}"),
            SseEvent {
                event: Some("error".into()),
                data: "one\ntwo".into(),
            },
            data("[DONE]"),
        ];
        for split in 0..=body.len() {
            let (a, b) = body.split_at(split);
            assert_eq!(decode(&[a, b]), expected, "split at {split}");
        }
        // And one byte at a time.
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(decode(&bytes), expected);
    }

    #[test]
    fn comments_bom_and_fields_without_colon() {
        let events = decode(&["\u{feff}: hello\nid: 7\nretry: 10\ndata\ndata:x\n\n".as_bytes()]);
        assert_eq!(events, vec![data("\nx")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert_eq!(decode(&[b"event: ping\n\n: c\n\n"]), vec![]);
    }

    #[test]
    fn last_event_without_blank_line_or_newline_is_kept() {
        assert_eq!(
            decode(&[b"data: a\n\ndata: [DONE]\n"]),
            vec![data("a"), data("[DONE]")]
        );
        assert_eq!(decode(&[b"data: [DONE]"]), vec![data("[DONE]")]);
        assert_eq!(decode(&[b"data: [DONE]\r"]), vec![data("[DONE]")]);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(decode(&[b"data: a\xffb\n\n"]), vec![data("a\u{fffd}b")]);
    }

    #[test]
    fn endless_line_is_refused() {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        let block = vec![b'x'; 1024 * 1024];
        let mut result = Ok(());
        for _ in 0..10 {
            result = decoder.feed(&block, &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseTooLarge));
    }

    fn ids_after(chunks: &[&str]) -> Option<String> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder
                .feed(chunk.as_bytes(), &mut out)
                .expect("not too large");
        }
        decoder.last_event_id().map(str::to_owned)
    }

    #[test]
    fn the_last_event_id_is_that_of_the_last_whole_event_however_the_bytes_are_split() {
        let stream =
            "id: r:1\ndata: {}\n\n: keep-alive\n\nid: r:2\ndata: {}\n\nid: r:3\ndata: {\"half";
        assert_eq!(ids_after(&[stream]).as_deref(), Some("r:2"));
        // Byte by byte: the same answer.
        let bytes: Vec<String> = stream.chars().map(String::from).collect();
        let split: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(ids_after(&split).as_deref(), Some("r:2"));
        // CRLF and lone CR line ends, a CRLF split between chunks (a final `\r` waits for the
        // next byte, which may be its `\n`).
        assert_eq!(
            ids_after(&[
                "id: r:1\r",
                "\ndata: {}\r\n\r",
                "\nid:r:2\rdata: {}\r\r",
                ":\n"
            ])
            .as_deref(),
            Some("r:2")
        );
        // No ids: nothing to resume from.
        assert_eq!(ids_after(&["data: {}\n\ndata: {}\n\n"]), None);
    }

    #[test]
    fn an_id_carries_over_to_later_events_and_a_nul_or_overlong_id_is_ignored() {
        assert_eq!(
            ids_after(&["id: r:1\ndata: {}\n\ndata: {}\n\n"]).as_deref(),
            Some("r:1")
        );
        assert_eq!(
            ids_after(&["id: r:1\ndata: {}\n\nid: r\0:2\ndata: {}\n\n"]).as_deref(),
            Some("r:1")
        );
        let long = format!("id: {}\ndata: {{}}\n\n", "x".repeat(5000));
        assert_eq!(
            ids_after(&["id: r:1\ndata: {}\n\n", &long]).as_deref(),
            Some("r:1")
        );
        // An empty id clears it, as the SSE rules say.
        assert_eq!(ids_after(&["id: r:1\ndata: {}\n\nid\ndata: {}\n\n"]), None);
    }

    #[test]
    fn a_resuming_decoder_carries_the_last_id_and_forgets_an_event_cut_short() {
        let mut out = Vec::new();
        let mut decoder = SseDecoder::new();
        decoder
            .feed(b"id: r:1\ndata: {}\n\nid: r:2\ndata: {\"ha", &mut out)
            .unwrap();
        let mut decoder = SseDecoder::resuming(decoder.last_event_id().map(str::to_owned));
        decoder.feed(b"data: {}\n\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("r:1"));
        decoder.feed(b"id: r:2\ndata: {}\n\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("r:2"));
    }
}
