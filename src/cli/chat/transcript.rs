//! What the person sees: streamed text, and notices on lines of their own.

use std::io::Write;

use agui_host::protocol::{Content, ToolResultContent};
use agui_host::text::truncate_chars;
use serde_json::Value;

use super::PREVIEW_CHARS;

/// The output, and whether the cursor sits in the middle of streamed text: a notice must start
/// on a line of its own, but text deltas must not each get one.
pub(super) struct Transcript<W> {
    pub(super) out: W,
    pub(super) mid_line: bool,
    /// The output is a terminal: notices about the connection are dimmed (never escape codes
    /// into a pipe or a file).
    pub(super) styled: bool,
}

impl<W: Write> Transcript<W> {
    /// Streamed text: written and flushed at once, so the person sees it as it arrives.
    pub(super) fn text(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        self.mid_line = !text.ends_with('\n');
        Ok(())
    }

    pub(super) fn end_line(&mut self) -> std::io::Result<()> {
        if self.mid_line {
            self.out.write_all(b"\n")?;
            self.mid_line = false;
        }
        self.out.flush()
    }

    /// A whole line of its own.
    pub(super) fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "{line}")?;
        self.out.flush()
    }

    /// A line about the client itself rather than the conversation (the connection), dimmed
    /// on a terminal so it reads as an aside.
    pub(super) fn notice(&mut self, notice: &str) -> std::io::Result<()> {
        if self.styled {
            self.line(&format!("\x1b[2m{notice}\x1b[0m"))
        } else {
            self.line(notice)
        }
    }

    /// A line that streamed text will continue (`[thinking] ...`).
    pub(super) fn start_line(&mut self, prefix: &str) -> std::io::Result<()> {
        self.end_line()?;
        self.text(prefix)
    }

    /// A question on a line of its own, the cursor left after it. The person's Enter ends the
    /// line, so the next output starts on a fresh one.
    pub(super) fn prompt(&mut self, prompt: &str) -> std::io::Result<()> {
        self.end_line()?;
        self.out.write_all(prompt.as_bytes())?;
        self.out.flush()
    }
}

pub(super) fn result_text(content: &ToolResultContent) -> String {
    match content {
        ToolResultContent::Text(text) => text.clone(),
        ToolResultContent::Parts(parts) => Content::Parts(parts.clone()).text(),
    }
}

/// `op path value` of each patch operation (the value cut short), read through its JSON form
/// since the op types differ: enough to see the state move without printing all of it.
pub(super) fn describe_patch(ops: &[json_patch::PatchOperation]) -> String {
    let described: Vec<String> = ops
        .iter()
        .map(|op| {
            let op = serde_json::to_value(op).unwrap_or(Value::Null);
            let name = op["op"].as_str().unwrap_or("?");
            let path = match op["path"].as_str() {
                Some("") | None => "/",
                Some(path) => path,
            };
            match op.get("value") {
                Some(value) => format!("{name} {path} {}", truncate_chars(&value.to_string(), 80)),
                None => format!("{name} {path}"),
            }
        })
        .collect();
    if described.is_empty() {
        "no change".to_owned()
    } else {
        truncate_chars(&described.join(", "), PREVIEW_CHARS)
    }
}

/// The error and its causes: reqwest's own message ("error sending request") says little.
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
