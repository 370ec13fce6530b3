//! Chunks that repeat a chunk already read except for its one string, read without a parser.
//!
//! Past their shared head (see `head`), nearly all the chunks of a reply are one of two or three
//! byte strings that differ only in one JSON string: the text of a content delta, or a fragment
//! of a tool call's arguments. Reading each through serde is most of what a chunk costs. So when
//! a chunk read whole carries exactly one such string, the bytes before and after that string
//! are kept as a [`Shape`]; a later chunk that starts and ends with the same bytes, with one
//! well-formed JSON string between them, carries the same thing with that string in it, and is
//! read by decoding the string alone.
//!
//! A shape is kept only when it is proven to be where the parser reads: the string's key occurs
//! once in the chunk, the string there decodes to the value the parser read, and a probe chunk
//! with another string in its place reads as that other string. A look-alike in a member the
//! parser ignores fails the probe. Everything outside the string is compared byte for byte, so
//! a chunk that differs anywhere else (a `finish_reason`, a usage, an error) is read whole. The
//! one exception is OpenAI's `obfuscation` padding, a member the parser ignores that differs in
//! every chunk: when it is a chunk's last member, it is left out before the shape is compared.

use memchr::{memchr2, memmem};

/// What a chunk's one string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Content,
    Reasoning,
    /// A fragment of a tool call's arguments, with no id or name, at this wire index.
    Arguments {
        wire_index: Option<u64>,
    },
}

/// A chunk's one string, where it sits and what it is: found by the parser in a chunk read
/// whole.
#[derive(Debug)]
pub(super) struct Found {
    pub(super) slot: Slot,
    /// The member that holds it, as it appears in the chunk: `"content":"`.
    pub(super) key: &'static [u8],
    pub(super) value: String,
}

/// The bytes around the one string of a learnt chunk.
#[derive(Debug)]
struct Shape {
    /// Up to and including the string's opening quote.
    prefix: String,
    /// From the string's closing quote on.
    suffix: String,
    slot: Slot,
}

/// At most this many shapes per reply: text, reasoning and one or two tool calls' arguments.
const MAX_SHAPES: usize = 4;

/// How many chunks one reply may try to learn from. A server whose chunks never repeat (a
/// counter or a token's log-probabilities in every chunk) would otherwise pay for a probe on
/// every chunk.
const LEARN_BUDGET: u8 = 16;

/// What a probe puts in place of the string: `\u0001`, which no model writes.
const PROBE: &str = "\\u0001";
const PROBE_VALUE: &str = "\u{1}";

/// The shapes learnt in one reply.
#[derive(Debug)]
pub(super) struct Shapes {
    known: Vec<Shape>,
    budget: u8,
}

impl Default for Shapes {
    fn default() -> Self {
        Self {
            known: Vec::new(),
            budget: LEARN_BUDGET,
        }
    }
}

impl Shapes {
    /// A reply read entirely by the parser (to compare against in tests).
    #[cfg(test)]
    pub(super) fn disabled() -> Self {
        Self {
            known: Vec::new(),
            budget: 0,
        }
    }

    #[cfg(test)]
    pub(super) fn learnt(&self) -> usize {
        self.known.len()
    }

    /// The slot and string of `tail` when it has a learnt shape. `None` sends it to the parser:
    /// no shape fits, or the string between is empty or not well-formed.
    pub(super) fn read(&self, tail: &str) -> Option<(Slot, String)> {
        match without_trailer(tail) {
            Some(main) => self.read_parts(main, "}"),
            None => self.read_parts(tail, ""),
        }
    }

    /// [`Self::read`] of the chunk `main` + `close`, without joining them.
    fn read_parts(&self, main: &str, close: &str) -> Option<(Slot, String)> {
        self.known.iter().find_map(|shape| {
            let suffix = shape.suffix.strip_suffix(close)?;
            let body_end = main.len().checked_sub(suffix.len())?;
            if body_end <= shape.prefix.len()
                || !main.starts_with(&shape.prefix)
                || !main.ends_with(suffix)
            {
                return None;
            }
            decode(main, shape.prefix.len(), body_end).map(|text| (shape.slot, text))
        })
    }

    pub(super) fn is_learning(&self) -> bool {
        self.budget > 0
    }

    /// Learns the shape of `tail` (a chunk's bytes after `head`, just read whole into `found`),
    /// if it proves out. `read_whole` reads a whole chunk the way the parser does.
    pub(super) fn learn(
        &mut self,
        head: &str,
        tail: &str,
        found: &Found,
        read_whole: impl FnOnce(&str) -> Option<Found>,
    ) {
        if self.budget == 0 || found.value.is_empty() || found.value == PROBE_VALUE {
            return;
        }
        self.budget -= 1;
        // Learnt without the trailer that differs in every chunk, as `read` matches.
        let owned;
        let tail = match without_trailer(tail) {
            Some(main) => {
                owned = format!("{main}}}");
                owned.as_str()
            }
            None => tail,
        };
        let bytes = tail.as_bytes();
        let mut keys = memmem::find_iter(bytes, found.key);
        let (Some(at), None) = (keys.next(), keys.next()) else {
            return;
        };
        let start = at + found.key.len();
        let Some(end) = closing_quote(bytes, start) else {
            return;
        };
        if decode(tail, start, end).as_deref() != Some(found.value.as_str()) {
            return;
        }
        let probe = format!("{head}{}{PROBE}{}", &tail[..start], &tail[end..]);
        let proven = read_whole(&probe)
            .is_some_and(|probed| probed.slot == found.slot && probed.value == PROBE_VALUE);
        if !proven {
            return;
        }
        if self.known.len() == MAX_SHAPES {
            self.known.remove(0);
        }
        self.known.push(Shape {
            prefix: tail[..start].to_owned(),
            suffix: tail[end..].to_owned(),
            slot: found.slot,
        });
    }
}

/// The member OpenAI appends to every chunk: random padding, so that a chunk's size does not
/// give its text away. The parser ignores it, and it differs in every chunk.
const OBFUSCATION: &str = ",\"obfuscation\":\"";

/// `tail` without its last member and closing brace, when that member is an `obfuscation`
/// padding: a plain string (no escapes) as the last thing in the chunk. What is left, closed
/// with `}`, is the chunk without that member, which reads the same.
fn without_trailer(tail: &str) -> Option<&str> {
    let before_close = tail.strip_suffix("\"}")?;
    let at = before_close.rfind(OBFUSCATION)?;
    let padding = &before_close[at + OBFUSCATION.len()..];
    let plain = padding
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    plain.then_some(&tail[..at])
}

/// The index of the unescaped quote that closes the string whose text starts at `start`.
fn closing_quote(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start;
    loop {
        at += memchr2(b'"', b'\\', bytes.get(at..)?)?;
        if bytes[at] == b'"' {
            return Some(at);
        }
        at += 2; // a backslash and the byte it escapes
    }
}

/// The string whose text is `tail[start..end]` (between its quotes), if it is one well-formed,
/// non-empty JSON string.
fn decode(tail: &str, start: usize, end: usize) -> Option<String> {
    let text = tail.get(start..end).filter(|text| !text.is_empty())?;
    let bytes = text.as_bytes();
    if memchr2(b'"', b'\\', bytes).is_none() {
        // No escapes: the text is the string, unless it holds a raw control character.
        return (!bytes.iter().any(|&b| b < 0x20)).then(|| text.to_owned());
    }
    // Escapes, or a quote that would end the string early: the JSON parser decides, on the
    // text with its quotes (a quote inside leaves trailing characters, which it refuses).
    let quoted = tail.get(start.checked_sub(1)?..end + 1)?;
    serde_json::from_str::<String>(quoted)
        .ok()
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_decoded_only_when_it_is_well_formed_and_not_empty() {
        let cases: [(&str, Option<&str>); 9] = [
            (r#""abc""#, Some("abc")),
            (r#""a\"b""#, Some("a\"b")),
            (r#""\u00e9\n""#, Some("é\n")),
            (r#""é😀""#, Some("é😀")),
            (r#""""#, None),
            (r#""a"b""#, None),
            ("\"a\u{1}b\"", None),
            (r#""a\x""#, None),
            (r#""a\""#, None),
        ];
        for (quoted, expected) in cases {
            assert_eq!(
                decode(quoted, 1, quoted.len() - 1).as_deref(),
                expected,
                "{quoted}"
            );
        }
    }

    #[test]
    fn the_closing_quote_skips_escaped_ones() {
        let bytes = br#"a\"b\\"c"#;
        assert_eq!(closing_quote(bytes, 0), Some(6));
        assert_eq!(closing_quote(br#"ab\"#, 0), None);
        assert_eq!(closing_quote(br#"ab"#, 0), None);
    }
}
