//! `agui-host chat`, the terminal client: an interactive AG-UI consumer for a person trying a
//! deployed server without a frontend. Part of the binary only; it uses the library's wire
//! types (`protocol`) and its SSE decoder (`llm::sse`), and nothing of the server.
//!
//! This module owns the client side of the protocol, and nothing of the server: it builds 1.0
//! `RunAgentInput`s, reads the SSE response incrementally, and keeps the thread (history and
//! shared state) the way the reference client's reducer (`@ag-ui/client` 1.0
//! `defaultApplyEvents`, protocol digest §4.4) keeps it, so that what it sends back is what a
//! real frontend would send. It prints as it goes: text deltas as they arrive, `[tool]` and
//! `[result]` lines, `[state]` notices, `[thinking]` reasoning, `[error code] message`. It
//! answers interrupts with y/n (protocol digest §7) and frontend tools with a typed result.
//!
//! The input and output are plain `BufRead`/`Write`, so the command passes stdin/stdout and the
//! unit tests a scripted reader and a `Vec<u8>`. Input is read only between runs, never while a
//! stream is open, so a blocking reader (stdin) holds nothing up.
//!
//! Server input never panics the client: a frame that is not an AG-UI event is reported with a
//! `[warning]` line and skipped, a patch that does not apply keeps the previous state (as the
//! reference client does), and an HTTP error status is printed and the session goes on.

//!
//! A run whose connection drops before its terminal event is picked up again where it broke,
//! when the server gave its events ids (it logs runs): the client reconnects to the run's
//! events route with the last id it read, says so on a line of its own, and the text goes on
//! with nothing missing or repeated.
//!
//! Files: `session` (the conversation loop, one run's request), `stream` (reading a run's
//! stream, reconnecting it), `thread` (history and state as the reference reducer keeps
//! them), `transcript` (what is printed).

mod session;
mod stream;
#[cfg(test)]
mod tests;
mod thread;
mod transcript;

use std::fmt;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use serde_json::{json, Value};

use session::{Flow, Session};

use super::ChatArgs;

/// `agui-host chat`: no settings and no logging, so nothing mixes into the conversation.
pub(crate) async fn chat(args: ChatArgs) -> ExitCode {
    let options = ChatOptions {
        url: args.url,
        thread_id: args.thread,
        client_tools: args.tools,
        headers: args.headers,
        styled: agui_host::telemetry::colours_on(std::io::stdout().is_terminal()),
    };
    match run(options, std::io::stdin().lock(), std::io::stdout()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agui-host chat: {error}");
            ExitCode::FAILURE
        }
    }
}

/// How to reach the server and what the person at the terminal plays.
#[derive(Clone, Default)]
pub(crate) struct ChatOptions {
    /// The agent's endpoint, e.g. `http://127.0.0.1:8080/banking`.
    pub(crate) url: String,
    /// The thread to talk on; a fresh one when `None`.
    pub(crate) thread_id: Option<String>,
    /// Names of frontend tools the user answers by typing their result.
    pub(crate) client_tools: Vec<String>,
    /// Extra request headers, e.g. `("Authorization", "Bearer ...")`.
    pub(crate) headers: Vec<(String, String)>,
    /// The output is a terminal and `NO_COLOR` is not set: asides (connection notices) are
    /// dimmed.
    pub(crate) styled: bool,
}

/// Header values may be secrets (`Authorization`): Debug shows only their names.
impl fmt::Debug for ChatOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("ChatOptions")
            .field("url", &self.url)
            .field("thread_id", &self.thread_id)
            .field("client_tools", &self.client_tools)
            .field("headers", &header_names)
            .field("styled", &self.styled)
            .finish()
    }
}

/// What ends a session early. Everything the *server* does wrong is printed instead.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChatError {
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("invalid header `{name}`: {reason}")]
    InvalidHeader { name: String, reason: String },
    #[error("cannot reach {url}: {detail}")]
    Connection {
        url: String,
        detail: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("terminal I/O failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs an interactive session until `:quit` or the end of `input`.
///
/// Each line of `input` is a user message (one run, plus the follow-up runs its interrupts and
/// frontend tool calls need) or a command: `:state`, `:messages`, `:help`, `:quit`.
pub(crate) async fn run<R: BufRead, W: Write>(
    options: ChatOptions,
    input: R,
    output: W,
) -> Result<(), ChatError> {
    let picking_up = options.thread_id.is_some();
    let mut session = Session::new(options, input, output)?;
    session.banner()?;
    if picking_up && session.pick_up().await? == Flow::Quit {
        session.out.end_line()?;
        return Ok(());
    }
    while let Some(line) = session.read_line("> ")? {
        if session.handle_line(&line).await? == Flow::Quit {
            break;
        }
    }
    session.out.end_line()?;
    Ok(())
}

pub(super) const HELP: &str = "\
Type a message and press Enter to start a run. Commands:
  :state     print the shared state
  :messages  print the conversation as the client holds it (JSON)
  :help      this help
  :quit      leave (so does end of input)";

/// How much of a tool result (or of a call's arguments) a line shows.
pub(super) const PREVIEW_CHARS: usize = 300;

/// The schema declared for every frontend tool: any object, since the person reads the
/// arguments and decides what they mean.
pub(super) fn open_object_schema() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": true})
}

// ---- Input lines --------------------------------------------------------------------------

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Command<'a> {
    Nothing,
    Quit,
    Help,
    State,
    Messages,
    Unknown(&'a str),
    Say(&'a str),
}

impl<'a> Command<'a> {
    pub(super) fn parse(line: &'a str) -> Command<'a> {
        match line.trim() {
            "" => Command::Nothing,
            ":quit" | ":q" | ":exit" => Command::Quit,
            ":help" | ":h" | ":?" => Command::Help,
            ":state" => Command::State,
            ":messages" => Command::Messages,
            command if command.starts_with(':') => Command::Unknown(command),
            text => Command::Say(text),
        }
    }
}

pub(super) fn parse_yes_no(answer: &str) -> Option<bool> {
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(true),
        "n" | "no" => Some(false),
        _ => None,
    }
}
