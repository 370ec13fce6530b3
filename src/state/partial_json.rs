//! `PartialJson`: an incremental JSON parser fed arbitrary fragments of one document.
//!
//! It keeps a stack of the open containers (with what they hold so far) and the token in
//! progress, so a fragment costs time proportional to its own length. As values take shape it
//! reports [`Event`]s to a [`Sink`], each with the [`Segment`] path of the value it concerns;
//! [`PartialJson::best_effort`] builds the value so far on demand.
//!
//! What "so far" means, and why:
//! - open strings, arrays and objects are shown (closed): a string growing is the point of
//!   predictive state;
//! - a dangling key, colon or comma is left out: a member exists once its value begins;
//! - a number appears only once a delimiter ends it, and a literal only when complete, so `12`
//!   never shows before turning into `123`;
//! - escapes (`\n`, `\uXXXX`, surrogate pairs) may be split anywhere across fragments; a
//!   fragment is a `&str`, so UTF-8 itself always arrives whole.
//!
//! The grammar and its strictness are serde_json's (control characters in strings, lone
//! surrogates, leading zeros and trailing characters are errors; duplicate keys keep the last
//! value), numbers are converted by serde_json itself so the final value equals
//! `serde_json::from_str`'s, and nesting is limited to [`MAX_DEPTH`] as serde_json limits it.
//! The first error stops the parser; it is reported by [`PartialJson::finish`], never by a panic.

use serde_json::{Map, Value};

use super::StateError;

/// Deepest nesting accepted: serde_json refuses deeper documents, and the bound keeps every
/// per-event cost (paths are walked to build patch pointers) independent of the input size.
pub const MAX_DEPTH: usize = 128;

/// One step of a path from the root of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// Something that happened to the value at a path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// A value appeared: a complete scalar, or an empty object or array that later events fill.
    Value(&'a Value),
    /// A string, as far as it has arrived. Reported at the end of every `push` while it is open
    /// (so at most once per fragment), and once more with `closed` when it ends. Its content
    /// only ever grows.
    String {
        content: &'a str,
        /// Bytes of JSON text the string has taken so far, its quotes and escapes included. The
        /// content written back as JSON is never longer: an escape in the output (`\"`,
        /// `\n`, `\u0001`) was at least as long in the input, and `\u00e9` only shrinks.
        raw_len: usize,
        closed: bool,
    },
}

/// Receives the parser's events.
pub trait Sink {
    fn event(&mut self, path: &[Segment], event: Event<'_>);
}

/// Ignores every event (for callers that only want the value).
impl Sink for () {
    fn event(&mut self, _path: &[Segment], _event: Event<'_>) {}
}

/// An incremental parser of one JSON document. See the module docs.
#[derive(Debug, Default)]
pub struct PartialJson {
    /// The open containers, outermost first, each holding the members or items completed so far.
    stack: Vec<Container>,
    /// The path of what is being parsed: for each open container but the root, the segment that
    /// leads to it, plus the segment of the child value in progress, if any.
    path: Vec<Segment>,
    /// A member key that has been read and waits for its colon and value.
    key: Option<String>,
    /// What the grammar allows next (between tokens).
    expect: Expect,
    /// The token in progress; tokens may span fragments.
    token: Token,
    /// The root value, once complete.
    root: Option<Value>,
    /// The first error; input after it is ignored.
    error: Option<StateError>,
    /// Bytes consumed by earlier fragments (for error offsets).
    offset: u64,
    /// Whether anything but whitespace has been seen.
    started: bool,
}

#[derive(Debug)]
enum Container {
    Object(Map<String, Value>),
    Array(Vec<Value>),
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value: at the root, after a colon, after a comma in an array.
    #[default]
    Value,
    /// A value or `]`: right after `[`.
    ValueOrEnd,
    /// A key or `}`: right after `{`.
    KeyOrEnd,
    /// A key: after a comma in an object.
    Key,
    Colon,
    /// `,` or the end of the innermost container, after one of its values.
    CommaOrEnd,
    /// Only whitespace: the root value is complete.
    Nothing,
}

#[derive(Debug, Default)]
enum Token {
    #[default]
    None,
    String {
        text: String,
        /// A member key rather than a value.
        key: bool,
        escape: Escape,
        /// Input bytes taken so far, from the opening quote.
        raw: usize,
    },
    Number(String),
    Literal {
        word: &'static str,
        matched: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// After `\`.
    Backslash,
    /// Inside `\uXXXX`: the digits read so far, and the high surrogate this escape must complete.
    Unicode {
        high: Option<u32>,
        digits: u8,
        code: u32,
    },
    /// A high surrogate was read; `\` must follow.
    High(u32),
    /// A high surrogate and `\` were read; `u` must follow.
    HighBackslash(u32),
}

type Step = Result<usize, &'static str>;

impl PartialJson {
    pub fn new() -> Self {
        PartialJson::default()
    }

    /// Whether anything but whitespace has been pushed.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the document is already known to be invalid.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// Parses the next fragment, reporting events to `sink`. After an error the rest of the
    /// input is ignored (the error comes out of [`finish`](Self::finish)).
    pub fn push<S: Sink + ?Sized>(&mut self, fragment: &str, sink: &mut S) {
        if self.error.is_some() {
            return;
        }
        let mut at = 0;
        while at < fragment.len() {
            match self.step(fragment, at, sink) {
                Ok(next) => {
                    if let Token::String { raw, .. } = &mut self.token {
                        *raw += next - at;
                    }
                    at = next;
                }
                Err(reason) => {
                    self.error = Some(StateError::InvalidJson {
                        offset: self.offset + at as u64,
                        reason,
                    });
                    return;
                }
            }
        }
        self.offset += fragment.len() as u64;
        if let Token::String {
            text,
            key: false,
            raw,
            ..
        } = &self.token
        {
            sink.event(
                &self.path,
                Event::String {
                    content: text,
                    raw_len: *raw,
                    closed: false,
                },
            );
        }
    }

    /// Ends the document: completes a number at the very end (reporting it to `sink`) and
    /// returns the whole value.
    ///
    /// # Errors
    /// The first syntax error, or [`StateError::Incomplete`] when the document is unfinished
    /// (empty input included).
    pub fn finish<S: Sink + ?Sized>(&mut self, sink: &mut S) -> Result<Value, StateError> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        if matches!(self.token, Token::Number(_)) {
            if let Err(reason) = self.end_number(sink) {
                let error = StateError::InvalidJson {
                    offset: self.offset,
                    reason,
                };
                self.error = Some(error.clone());
                return Err(error);
            }
        }
        match self.root.take() {
            Some(value) => Ok(value),
            None => Err(StateError::Incomplete),
        }
    }

    /// The value so far: open strings and containers closed, dangling keys and unfinished
    /// numbers or literals left out; `None` when no value has begun. Costs the size of the value
    /// (it is built on demand, not kept).
    pub fn best_effort(&self) -> Option<Value> {
        if let Some(root) = &self.root {
            return Some(root.clone());
        }
        let mut child = match &self.token {
            Token::String {
                text, key: false, ..
            } => Some(Value::String(text.clone())),
            _ => None,
        };
        for (depth, container) in self.stack.iter().enumerate().rev() {
            let mut value = match container {
                Container::Object(map) => Value::Object(map.clone()),
                Container::Array(items) => Value::Array(items.clone()),
            };
            if let Some(child) = child.take() {
                match (&mut value, self.path.get(depth)) {
                    (Value::Object(map), Some(Segment::Key(key))) => {
                        map.insert(key.clone(), child);
                    }
                    (Value::Array(items), Some(Segment::Index(_))) => items.push(child),
                    _ => {}
                }
            }
            child = Some(value);
        }
        child
    }

    /// Consumes input from `at`; returns where the next step starts.
    fn step<S: Sink + ?Sized>(&mut self, s: &str, at: usize, sink: &mut S) -> Step {
        let b = s.as_bytes()[at];
        match &mut self.token {
            Token::None => self.structural(b, at, sink),
            Token::String { text, escape, .. } => match string_step(text, escape, s, at)? {
                StringStep::Closed => {
                    self.end_string(sink);
                    Ok(at + 1)
                }
                StringStep::Next(next) => Ok(next),
            },
            Token::Number(text) => {
                if is_number_byte(b) {
                    let end = run_end(s, at, |c| !is_number_byte(c));
                    text.push_str(&s[at..end]);
                    Ok(end)
                } else {
                    // The delimiter is not consumed: the grammar handles it next.
                    self.end_number(sink)?;
                    Ok(at)
                }
            }
            Token::Literal { word, matched } => {
                if word.as_bytes()[*matched] != b {
                    return Err("invalid literal");
                }
                *matched += 1;
                if *matched == word.len() {
                    let value = match *word {
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => Value::Null,
                    };
                    self.token = Token::None;
                    sink.event(&self.path, Event::Value(&value));
                    self.insert(value);
                }
                Ok(at + 1)
            }
        }
    }

    /// A byte between tokens.
    fn structural<S: Sink + ?Sized>(&mut self, b: u8, at: usize, sink: &mut S) -> Step {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            return Ok(at + 1);
        }
        self.started = true;
        match (self.expect, b) {
            (Expect::ValueOrEnd, b']') | (Expect::KeyOrEnd, b'}') => {
                self.close();
                Ok(at + 1)
            }
            (Expect::Value | Expect::ValueOrEnd, _) => self.begin_value(b, at, sink),
            (Expect::KeyOrEnd | Expect::Key, b'"') => {
                self.token = Token::String {
                    text: String::new(),
                    key: true,
                    escape: Escape::None,
                    raw: 0,
                };
                Ok(at + 1)
            }
            (Expect::KeyOrEnd | Expect::Key, _) => Err("expected a member key"),
            (Expect::Colon, b':') => {
                self.expect = Expect::Value;
                Ok(at + 1)
            }
            (Expect::Colon, _) => Err("expected `:`"),
            (Expect::CommaOrEnd, _) => {
                match (self.stack.last(), b) {
                    (Some(Container::Object(_)), b',') => self.expect = Expect::Key,
                    (Some(Container::Array(_)), b',') => self.expect = Expect::Value,
                    (Some(Container::Object(_)), b'}') | (Some(Container::Array(_)), b']') => {
                        self.close();
                    }
                    _ => return Err("expected `,` or the end of the container"),
                }
                Ok(at + 1)
            }
            (Expect::Nothing, _) => Err("trailing characters after the value"),
        }
    }

    fn begin_value<S: Sink + ?Sized>(&mut self, b: u8, at: usize, sink: &mut S) -> Step {
        if !matches!(
            b,
            b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
        ) {
            return Err("expected a value");
        }
        match self.stack.last() {
            None => {}
            Some(Container::Object(_)) => {
                let key = self.key.take().ok_or("expected a member key")?;
                self.path.push(Segment::Key(key));
            }
            Some(Container::Array(items)) => self.path.push(Segment::Index(items.len())),
        }
        match b {
            b'{' | b'[' => {
                if self.stack.len() >= MAX_DEPTH {
                    return Err("nested too deeply");
                }
                let (container, empty, expect) = if b == b'{' {
                    (
                        Container::Object(Map::new()),
                        Value::Object(Map::new()),
                        Expect::KeyOrEnd,
                    )
                } else {
                    (
                        Container::Array(Vec::new()),
                        Value::Array(Vec::new()),
                        Expect::ValueOrEnd,
                    )
                };
                sink.event(&self.path, Event::Value(&empty));
                self.stack.push(container);
                self.expect = expect;
                Ok(at + 1)
            }
            b'"' => {
                self.token = Token::String {
                    text: String::new(),
                    key: false,
                    escape: Escape::None,
                    raw: 0,
                };
                Ok(at + 1)
            }
            b't' | b'f' | b'n' => {
                let word = match b {
                    b't' => "true",
                    b'f' => "false",
                    _ => "null",
                };
                self.token = Token::Literal { word, matched: 0 };
                Ok(at)
            }
            _ => {
                self.token = Token::Number(String::new());
                Ok(at)
            }
        }
    }

    fn end_string<S: Sink + ?Sized>(&mut self, sink: &mut S) {
        let Token::String { text, key, raw, .. } = std::mem::take(&mut self.token) else {
            return;
        };
        if key {
            self.key = Some(text);
            self.expect = Expect::Colon;
            return;
        }
        sink.event(
            &self.path,
            Event::String {
                content: &text,
                raw_len: raw + 1,
                closed: true,
            },
        );
        self.insert(Value::String(text));
    }

    fn end_number<S: Sink + ?Sized>(&mut self, sink: &mut S) -> Result<(), &'static str> {
        let Token::Number(text) = std::mem::take(&mut self.token) else {
            return Ok(());
        };
        // serde_json converts the digits, so the value is exactly the one it would produce.
        let Ok(value @ Value::Number(_)) = serde_json::from_str::<Value>(&text) else {
            return Err("invalid number");
        };
        sink.event(&self.path, Event::Value(&value));
        self.insert(value);
        Ok(())
    }

    /// Closes the innermost container and puts it in its parent.
    fn close(&mut self) {
        let Some(container) = self.stack.pop() else {
            return;
        };
        let value = match container {
            Container::Object(map) => Value::Object(map),
            Container::Array(items) => Value::Array(items),
        };
        self.insert(value);
    }

    /// Puts a complete value where the path says: in the innermost container, or at the root.
    fn insert(&mut self, value: Value) {
        let Some(container) = self.stack.last_mut() else {
            self.root = Some(value);
            self.expect = Expect::Nothing;
            return;
        };
        match (container, self.path.pop()) {
            (Container::Object(map), Some(Segment::Key(key))) => {
                map.insert(key, value);
            }
            (Container::Array(items), Some(Segment::Index(_))) => items.push(value),
            // Unreachable by construction: a value inside a container always has a segment.
            _ => {}
        }
        self.expect = Expect::CommaOrEnd;
    }
}

/// What one step inside a string did.
enum StringStep {
    /// The closing quote: the string ends (the caller reports it).
    Closed,
    /// Consumed up to here.
    Next(usize),
}

/// One step inside a string: the closing quote, a run of plain text, or one byte of an escape.
#[inline]
fn string_step(
    text: &mut String,
    escape: &mut Escape,
    s: &str,
    at: usize,
) -> Result<StringStep, &'static str> {
    let b = s.as_bytes()[at];
    match *escape {
        Escape::None => match b {
            b'"' => return Ok(StringStep::Closed),
            b'\\' => *escape = Escape::Backslash,
            0..=0x1f => return Err("control character in a string"),
            _ => {
                // A run of plain bytes in one go. It ends at an ASCII byte (or the end), so both
                // ends are character boundaries.
                let end = run_end(s, at, |c| c == b'"' || c == b'\\' || c < 0x20);
                text.push_str(&s[at..end]);
                return Ok(StringStep::Next(end));
            }
        },
        Escape::Backslash => backslash_escape(text, escape, b)?,
        Escape::Unicode { high, digits, code } => {
            unicode_digit(text, escape, high, digits, code * 16 + hex_digit(b)?)?;
        }
        Escape::High(high) if b == b'\\' => *escape = Escape::HighBackslash(high),
        Escape::HighBackslash(high) if b == b'u' => {
            *escape = Escape::Unicode {
                high: Some(high),
                digits: 0,
                code: 0,
            };
        }
        Escape::High(_) | Escape::HighBackslash(_) => {
            return Err("a high surrogate without its low surrogate")
        }
    }
    Ok(StringStep::Next(at + 1))
}

/// The byte after a backslash.
#[inline]
fn backslash_escape(text: &mut String, escape: &mut Escape, b: u8) -> Result<(), &'static str> {
    let c = match b {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            *escape = Escape::Unicode {
                high: None,
                digits: 0,
                code: 0,
            };
            return Ok(());
        }
        _ => return Err("invalid escape"),
    };
    text.push(c);
    *escape = Escape::None;
    Ok(())
}

fn hex_digit(b: u8) -> Result<u32, &'static str> {
    (b as char).to_digit(16).ok_or("invalid \\u escape")
}

/// A `\uXXXX` digit has been read (`digits` before it, `code` with it): waits for the rest, or
/// completes the character, pairing surrogates.
fn unicode_digit(
    text: &mut String,
    escape: &mut Escape,
    high: Option<u32>,
    digits: u8,
    code: u32,
) -> Result<(), &'static str> {
    if digits < 3 {
        *escape = Escape::Unicode {
            high,
            digits: digits + 1,
            code,
        };
        return Ok(());
    }
    *escape = Escape::None;
    let scalar = match (high, code) {
        (Some(high), 0xDC00..=0xDFFF) => 0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00),
        (Some(_), _) => return Err("a high surrogate without its low surrogate"),
        (None, 0xD800..=0xDBFF) => {
            *escape = Escape::High(code);
            return Ok(());
        }
        (None, 0xDC00..=0xDFFF) => return Err("a lone low surrogate"),
        (None, code) => code,
    };
    text.push(char::from_u32(scalar).ok_or("invalid \\u escape")?);
    Ok(())
}

#[inline]
fn is_number_byte(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

/// Where the run that starts at `at` ends: the first byte from `at` that `stops` it, or the end.
#[inline]
fn run_end(s: &str, at: usize, stops: impl Fn(u8) -> bool) -> usize {
    s.as_bytes()[at..]
        .iter()
        .position(|&c| stops(c))
        .map_or(s.len(), |p| at + p)
}

#[cfg(test)]
mod tests;
