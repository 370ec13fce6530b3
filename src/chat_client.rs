//! The terminal client: an interactive AG-UI consumer for a person trying a deployed server
//! without a frontend (`agui-host chat <url>`).
//!
//! This module owns the client side of the protocol, and nothing of the server: it builds 1.0
//! `RunAgentInput`s, reads the SSE response incrementally, and keeps the thread (history and
//! shared state) the way the reference client's reducer (`@ag-ui/client` 1.0
//! `defaultApplyEvents`, protocol digest §4.4) keeps it, so that what it sends back is what a
//! real frontend would send. It prints as it goes: text deltas as they arrive, `[tool]` and
//! `[result]` lines, `[state]` notices, `[thinking]` reasoning, `[error code] message`. It
//! answers interrupts with y/n (protocol digest §7) and frontend tools with a typed result.
//!
//! The input and output are plain `BufRead`/`Write`, so the CLI passes stdin/stdout and the
//! tests a scripted `Cursor` and a `Vec<u8>`. Input is read only between runs, never while a
//! stream is open, so a blocking reader (stdin) holds nothing up.
//!
//! Server input never panics the client: a frame that is not an AG-UI event is reported with a
//! `[warning]` line and skipped, a patch that does not apply keeps the previous state (as the
//! reference client does), and an HTTP error status is printed and the session goes on.

use std::fmt;
use std::io::{BufRead, Write};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT};
use reqwest::Url;
use serde_json::{json, Value};

use crate::protocol::{
    AssistantMessage, Content, EncryptedValueSubtype, EventBody, FunctionCall, Interrupt, Message,
    ReasoningEncryptedValue, ReasoningMessage, ReasoningMessageChunk, ResumeEntry, ResumeStatus,
    RunAgentInput, RunOutcome, TextMessage, TextMessageChunk, TextRole, Tool, ToolCall,
    ToolCallChunk, ToolCallResult, ToolMessage, ToolResultContent, UserMessage,
};

/// How to reach the server and what the person at the terminal plays.
#[derive(Clone, Default)]
pub struct ChatOptions {
    /// The agent's endpoint, e.g. `http://127.0.0.1:8080/banking`.
    pub url: String,
    /// The thread to talk on; a fresh one when `None`.
    pub thread_id: Option<String>,
    /// Names of frontend tools the user answers by typing their result.
    pub client_tools: Vec<String>,
    /// Extra request headers, e.g. `("Authorization", "Bearer ...")`.
    pub headers: Vec<(String, String)>,
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
            .finish()
    }
}

/// What ends a session early. Everything the *server* does wrong is printed instead.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
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
pub async fn run<R: BufRead, W: Write>(
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

const HELP: &str = "\
Type a message and press Enter to start a run. Commands:
  :state     print the shared state
  :messages  print the conversation as the client holds it (JSON)
  :help      this help
  :quit      leave (so does end of input)";

/// How much of a tool result (or of a call's arguments) a line shows.
const PREVIEW_CHARS: usize = 300;

/// The reference client caps its SSE buffer at 10 MB; a frame larger than that is not a real
/// event but a server that never ends its frame.
const MAX_FRAME_BYTES: usize = 10 * 1024 * 1024;

/// The schema declared for every frontend tool: any object, since the person reads the
/// arguments and decides what they mean.
fn open_object_schema() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": true})
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

// ---- Input lines --------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

#[derive(Debug, PartialEq, Eq)]
enum Command<'a> {
    Nothing,
    Quit,
    Help,
    State,
    Messages,
    Unknown(&'a str),
    Say(&'a str),
}

impl<'a> Command<'a> {
    fn parse(line: &'a str) -> Command<'a> {
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

fn parse_yes_no(answer: &str) -> Option<bool> {
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(true),
        "n" | "no" => Some(false),
        _ => None,
    }
}

// ---- Output -------------------------------------------------------------------------------

/// The output, and whether the cursor sits in the middle of streamed text: a notice must start
/// on a line of its own, but text deltas must not each get one.
struct Transcript<W> {
    out: W,
    mid_line: bool,
}

impl<W: Write> Transcript<W> {
    /// Streamed text: written and flushed at once, so the person sees it as it arrives.
    fn text(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        self.mid_line = !text.ends_with('\n');
        Ok(())
    }

    fn end_line(&mut self) -> std::io::Result<()> {
        if self.mid_line {
            self.out.write_all(b"\n")?;
            self.mid_line = false;
        }
        self.out.flush()
    }

    /// A whole line of its own.
    fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "{line}")?;
        self.out.flush()
    }

    /// A line that streamed text will continue (`[thinking] ...`).
    fn start_line(&mut self, prefix: &str) -> std::io::Result<()> {
        self.end_line()?;
        self.text(prefix)
    }

    /// A question on a line of its own, the cursor left after it. The person's Enter ends the
    /// line, so the next output starts on a fresh one.
    fn prompt(&mut self, prompt: &str) -> std::io::Result<()> {
        self.end_line()?;
        self.out.write_all(prompt.as_bytes())?;
        self.out.flush()
    }
}

/// At most `max` characters of `text`, with `…` when cut (never inside a character).
fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn result_text(content: &ToolResultContent) -> String {
    match content {
        ToolResultContent::Text(text) => text.clone(),
        ToolResultContent::Parts(parts) => Content::Parts(parts.clone()).text(),
    }
}

/// `op path value` of each patch operation (the value cut short), read through its JSON form
/// since the op types differ: enough to see the state move without printing all of it.
fn describe_patch(ops: &[json_patch::PatchOperation]) -> String {
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
                Some(value) => format!("{name} {path} {}", preview(&value.to_string(), 80)),
                None => format!("{name} {path}"),
            }
        })
        .collect();
    if described.is_empty() {
        "no change".to_owned()
    } else {
        preview(&described.join(", "), PREVIEW_CHARS)
    }
}

/// The error and its causes: reqwest's own message ("error sending request") says little.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

// ---- SSE framing --------------------------------------------------------------------------

/// Splits an SSE body into frames the way the reference client does: on a blank line (`\n\n`,
/// LF only), keeping the `data:` lines (one optional space stripped, several joined with `\n`)
/// and ignoring comments (`: keep-alive`) and other fields. Bytes are buffered until a frame is
/// complete, so a chunk boundary inside a frame or a UTF-8 character does no harm.
#[derive(Debug, Default)]
struct SseFrames {
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no blank line, so a large frame arriving in small
    /// chunks is scanned once, not once per chunk.
    scanned: usize,
}

impl SseFrames {
    /// The `data` of each frame completed by `bytes`.
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut frames = Vec::new();
        loop {
            // One step back: the blank line may straddle the previous chunk's end.
            let from = self.scanned.saturating_sub(1);
            let found = self.buffer[from..]
                .windows(2)
                .position(|pair| pair == b"\n\n");
            let Some(offset) = found else {
                self.scanned = self.buffer.len();
                return frames;
            };
            let end = from + offset;
            let frame: Vec<u8> = self.buffer.drain(..end + 2).collect();
            frames.extend(frame_data(&frame[..end]));
            self.scanned = 0;
        }
    }

    /// The body ended: a last frame without its blank line still counts.
    fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.buffer);
        self.scanned = 0;
        frame_data(&rest)
    }

    fn buffered(&self) -> usize {
        self.buffer.len()
    }
}

fn frame_data(frame: &[u8]) -> Option<String> {
    let frame = String::from_utf8_lossy(frame);
    let data: Vec<&str> = frame
        .split('\n')
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|value| value.strip_prefix(' ').unwrap_or(value))
        .collect();
    (!data.is_empty()).then(|| data.join("\n"))
}

// ---- The thread: history and state, kept as the reference reducer keeps them ---------------

/// One conversation as the client holds it.
#[derive(Debug)]
struct Thread {
    id: String,
    messages: Vec<Message>,
    /// The reference client's default state is `{}`, and the first delta applies to it.
    state: Value,
}

fn assistant_message(id: &str) -> AssistantMessage {
    AssistantMessage {
        id: id.to_owned(),
        content: None,
        tool_calls: Vec::new(),
        name: None,
        encrypted_value: None,
        subagent_run_id: None,
        metadata: None,
    }
}

fn text_message(id: &str) -> TextMessage {
    TextMessage {
        id: id.to_owned(),
        content: String::new(),
        name: None,
        encrypted_value: None,
        subagent_run_id: None,
        metadata: None,
    }
}

fn user_message(id: &str, text: &str) -> UserMessage {
    UserMessage {
        id: id.to_owned(),
        content: Content::Text(text.to_owned()),
        name: None,
        encrypted_value: None,
        subagent_run_id: None,
        metadata: None,
    }
}

fn tool_message(id: &str, tool_call_id: &str, content: Content) -> ToolMessage {
    ToolMessage {
        id: id.to_owned(),
        content,
        tool_call_id: tool_call_id.to_owned(),
        error: None,
        encrypted_value: None,
        subagent_run_id: None,
        metadata: None,
    }
}

impl Thread {
    fn new(id: String) -> Thread {
        Thread {
            id,
            messages: Vec::new(),
            state: json!({}),
        }
    }

    /// The body of the next run: a 1.0 input with the whole history and the current state.
    fn input(&self, client_tools: &[String], resume: Vec<ResumeEntry>) -> RunAgentInput {
        let tools = client_tools
            .iter()
            .map(|name| Tool {
                name: name.clone(),
                description: format!(
                    "The `{name}` tool: the person at the terminal reads the arguments and types \
                     the result."
                ),
                parameters: Some(open_object_schema()),
                metadata: None,
            })
            .collect();
        RunAgentInput {
            thread_id: Some(self.id.clone()),
            run_id: Some(new_id("run")),
            protocol_version: Some("1.0".to_owned()),
            parent_run_id: None,
            state: Some(self.state.clone()),
            messages: self.messages.clone(),
            tools,
            context: Vec::new(),
            forwarded_props: Some(json!({})),
            resume,
        }
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.messages.iter().position(|m| m.id() == id)
    }

    fn push_user(&mut self, text: &str) {
        let id = new_id("user");
        self.messages.push(Message::User(user_message(&id, text)));
    }

    /// A frontend tool's answer, typed by the person: appended, as CopilotKit appends it.
    fn push_tool_answer(&mut self, tool_call_id: &str, text: &str) {
        let id = new_id("tool");
        let message = tool_message(&id, tool_call_id, Content::Text(text.to_owned()));
        self.messages.push(Message::Tool(message));
    }

    /// `TEXT_MESSAGE_START`: a message with this id gets the text appended (it may be the
    /// assistant message a tool call created); otherwise a new, empty one of `role`.
    fn start_text(&mut self, id: &str, role: Option<TextRole>) {
        if self.position(id).is_some() {
            return;
        }
        let message = match role.unwrap_or(TextRole::Assistant) {
            TextRole::Assistant => Message::Assistant(AssistantMessage {
                content: Some(String::new()),
                ..assistant_message(id)
            }),
            TextRole::User => Message::User(user_message(id, "")),
            TextRole::System => Message::System(text_message(id)),
            TextRole::Developer => Message::Developer(text_message(id)),
        };
        self.messages.push(message);
    }

    /// `TEXT_MESSAGE_CONTENT`. Content for an unknown id starts an assistant message: the
    /// reference client would fail the run, but a terminal loses nothing by being lenient.
    fn append_text(&mut self, id: &str, delta: &str) {
        let at = match self.position(id) {
            Some(at) => at,
            None => {
                self.start_text(id, None);
                self.messages.len() - 1
            }
        };
        match &mut self.messages[at] {
            Message::Assistant(m) => m.content.get_or_insert_with(String::new).push_str(delta),
            Message::Developer(m) | Message::System(m) => m.content.push_str(delta),
            Message::Reasoning(m) => m.content.push_str(delta),
            Message::User(m) => match &mut m.content {
                Content::Text(text) => text.push_str(delta),
                Content::Parts(_) => {}
            },
            Message::Tool(_) | Message::Activity(_) => {}
        }
    }

    /// `TOOL_CALL_START`: the call goes into the assistant message `parentMessageId` names,
    /// created if unknown; without a parent, into a new assistant message whose id is the
    /// call's id (digest §3.3).
    fn start_call(&mut self, call_id: &str, name: &str, parent: Option<&str>) {
        let owner = parent.unwrap_or(call_id);
        let at = match self.position(owner) {
            Some(at) if matches!(self.messages[at], Message::Assistant(_)) => at,
            // An id that names a non-assistant message cannot own a call: give the call its own.
            Some(_) => {
                self.messages
                    .push(Message::Assistant(assistant_message(call_id)));
                self.messages.len() - 1
            }
            None => {
                self.messages
                    .push(Message::Assistant(assistant_message(owner)));
                self.messages.len() - 1
            }
        };
        if let Message::Assistant(message) = &mut self.messages[at] {
            message.tool_calls.push(ToolCall {
                id: call_id.to_owned(),
                call_type: "function".to_owned(),
                function: FunctionCall {
                    name: name.to_owned(),
                    arguments: String::new(),
                },
                encrypted_value: None,
                metadata: None,
            });
        }
    }

    /// The assistant message holding the call, and the call's index in it (latest first, as
    /// ids are reused only by broken servers).
    fn call_position(&self, call_id: &str) -> Option<(usize, usize)> {
        self.messages
            .iter()
            .enumerate()
            .rev()
            .find_map(|(at, m)| match m {
                Message::Assistant(a) => a
                    .tool_calls
                    .iter()
                    .position(|c| c.id == call_id)
                    .map(|index| (at, index)),
                _ => None,
            })
    }

    fn call(&self, call_id: &str) -> Option<&ToolCall> {
        let (at, index) = self.call_position(call_id)?;
        match &self.messages[at] {
            Message::Assistant(a) => a.tool_calls.get(index),
            _ => None,
        }
    }

    fn call_mut(&mut self, call_id: &str) -> Option<&mut ToolCall> {
        let (at, index) = self.call_position(call_id)?;
        match &mut self.messages[at] {
            Message::Assistant(a) => a.tool_calls.get_mut(index),
            _ => None,
        }
    }

    fn append_args(&mut self, call_id: &str, delta: &str) {
        if let Some(call) = self.call_mut(call_id) {
            call.function.arguments.push_str(delta);
        }
    }

    /// `TOOL_CALL_RESULT` mints a tool message, placed right after the assistant message that
    /// owns the call and the tool results already there; appended when no message owns it.
    fn add_result(&mut self, result: &ToolCallResult) {
        let content = match &result.content {
            ToolResultContent::Text(text) => Content::Text(text.clone()),
            ToolResultContent::Parts(parts) => Content::Parts(parts.clone()),
        };
        let message = Message::Tool(tool_message(
            &result.message_id,
            &result.tool_call_id,
            content,
        ));
        match self.call_position(&result.tool_call_id) {
            Some((owner, _)) => {
                let mut at = owner + 1;
                while matches!(self.messages.get(at), Some(Message::Tool(_))) {
                    at += 1;
                }
                self.messages.insert(at, message);
            }
            None => self.messages.push(message),
        }
    }

    /// `REASONING_MESSAGE_START` materializes a `reasoning` message.
    fn start_reasoning(&mut self, id: &str) {
        if self.position(id).is_none() {
            self.messages.push(Message::Reasoning(ReasoningMessage {
                id: id.to_owned(),
                content: String::new(),
                encrypted_value: None,
                subagent_run_id: None,
                metadata: None,
            }));
        }
    }

    fn append_reasoning(&mut self, id: &str, delta: &str) {
        self.start_reasoning(id);
        self.append_text(id, delta);
    }

    /// Opaque provider artefacts are kept on their message or call and sent back on later runs.
    fn store_encrypted(&mut self, event: &ReasoningEncryptedValue) {
        let value = Some(event.encrypted_value.clone());
        match event.subtype {
            EncryptedValueSubtype::ToolCall => {
                if let Some(call) = self.call_mut(&event.entity_id) {
                    call.encrypted_value = value;
                }
            }
            EncryptedValueSubtype::Message => {
                let Some(at) = self.position(&event.entity_id) else {
                    return;
                };
                match &mut self.messages[at] {
                    Message::Assistant(m) => m.encrypted_value = value,
                    Message::Developer(m) | Message::System(m) => m.encrypted_value = value,
                    Message::User(m) => m.encrypted_value = value,
                    Message::Tool(m) => m.encrypted_value = value,
                    Message::Reasoning(m) => m.encrypted_value = value,
                    Message::Activity(_) => {}
                }
            }
        }
    }

    /// `RUN_STARTED.input.messages`: merged by id, new ones appended.
    fn merge_input(&mut self, messages: Vec<Message>) {
        for message in messages {
            if self.position(message.id()).is_none() {
                self.messages.push(message);
            }
        }
    }

    /// `MESSAGES_SNAPSHOT` (digest §3.4): known ids are replaced in place, new ones appended,
    /// and messages missing from the snapshot removed, except activity and reasoning messages
    /// when the snapshot carries none of their kind.
    fn merge_snapshot(&mut self, snapshot: Vec<Message>) {
        let has_activity = snapshot.iter().any(|m| matches!(m, Message::Activity(_)));
        let has_reasoning = snapshot.iter().any(|m| matches!(m, Message::Reasoning(_)));
        let mut incoming: Vec<Option<Message>> = snapshot.into_iter().map(Some).collect();
        let mut merged = Vec::with_capacity(incoming.len());
        for message in std::mem::take(&mut self.messages) {
            let replacement = incoming
                .iter_mut()
                .find(|m| m.as_ref().is_some_and(|m| m.id() == message.id()))
                .and_then(Option::take);
            match (replacement, &message) {
                (Some(newer), _) => merged.push(newer),
                (None, Message::Activity(_)) if !has_activity => merged.push(message),
                (None, Message::Reasoning(_)) if !has_reasoning => merged.push(message),
                (None, _) => {}
            }
        }
        merged.extend(incoming.into_iter().flatten());
        self.messages = merged;
    }

    /// `STATE_DELTA`: all or nothing, on a copy, so a failing operation leaves the state as it
    /// was (the reference client applies to a clone and keeps the old state on any failure).
    fn apply_delta(&mut self, ops: &[json_patch::PatchOperation]) -> Result<(), String> {
        let mut next = self.state.clone();
        json_patch::patch(&mut next, ops).map_err(|e| e.to_string())?;
        self.state = next;
        Ok(())
    }

    /// The calls among `call_ids` that no tool message answers yet: `(id, tool name)`.
    fn unanswered(&self, call_ids: &[String]) -> Vec<(String, String)> {
        let answered = |id: &str| {
            self.messages
                .iter()
                .any(|m| matches!(m, Message::Tool(t) if t.tool_call_id == id))
        };
        call_ids
            .iter()
            .filter(|id| !answered(id))
            .filter_map(|id| Some((id.clone(), self.call(id)?.function.name.clone())))
            .collect()
    }
}

// ---- One run ------------------------------------------------------------------------------

/// How a run's stream ended.
#[derive(Debug)]
enum RunEnd {
    Finished(Option<RunOutcome>),
    /// `RUN_ERROR`, an HTTP error status, or a stream that broke or ended without a terminal
    /// event: all already printed, nothing to follow up.
    Failed,
}

/// What one run produced that the conversation loop needs.
#[derive(Debug, Default)]
struct RunSummary {
    end: Option<RunEnd>,
    /// Calls to the user's frontend tools, in call order.
    client_calls: Vec<String>,
}

/// `*_CHUNK` events open a stream that the next chunk with another id, or any other event,
/// closes (digest §4.3). These are the ids of the open ones.
#[derive(Debug, Default)]
struct OpenChunks {
    text: Option<String>,
    tool: Option<String>,
    reasoning: Option<String>,
}

// ---- The session --------------------------------------------------------------------------

struct Session<R, W> {
    input: R,
    out: Transcript<W>,
    http: reqwest::Client,
    url: Url,
    headers: HeaderMap,
    client_tools: Vec<String>,
    thread: Thread,
    chunks: OpenChunks,
}

fn parse_url(url: &str) -> Result<Url, ChatError> {
    let invalid = |reason: String| ChatError::InvalidUrl {
        url: url.to_owned(),
        reason,
    };
    let parsed = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(invalid(format!(
            "the scheme must be http or https, not `{other}`"
        ))),
    }
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, ChatError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let invalid = |reason: String| ChatError::InvalidHeader {
            name: name.clone(),
            reason,
        };
        let header_name =
            HeaderName::from_bytes(name.trim().as_bytes()).map_err(|e| invalid(e.to_string()))?;
        let mut header_value =
            HeaderValue::from_str(value.trim()).map_err(|e| invalid(e.to_string()))?;
        header_value.set_sensitive(true);
        map.append(header_name, header_value);
    }
    Ok(map)
}

impl<R: BufRead, W: Write> Session<R, W> {
    fn new(options: ChatOptions, input: R, output: W) -> Result<Self, ChatError> {
        let url = parse_url(&options.url)?;
        let headers = header_map(&options.headers)?;
        // No overall timeout: a run streams for as long as the agent works, and the server
        // sends keep-alive comments while it does.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("agui-host-chat/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| ChatError::Connection {
                url: url.to_string(),
                detail: error_chain(&source),
                source,
            })?;
        let thread_id = options.thread_id.unwrap_or_else(|| new_id("thread"));
        Ok(Session {
            input,
            out: Transcript {
                out: output,
                mid_line: false,
            },
            http,
            url,
            headers,
            client_tools: options.client_tools,
            thread: Thread::new(thread_id),
            chunks: OpenChunks::default(),
        })
    }

    fn banner(&mut self) -> std::io::Result<()> {
        let mut banner = format!("AG-UI chat with {} on thread {}", self.url, self.thread.id);
        if !self.client_tools.is_empty() {
            banner.push_str(&format!(
                "; you answer the tools {}",
                self.client_tools.join(", ")
            ));
        }
        banner.push_str(". Type a message, or :help.");
        self.out.line(&banner)
    }

    /// The next input line without its line ending, or `None` at the end of input.
    fn read_line(&mut self, prompt: &str) -> Result<Option<String>, ChatError> {
        self.out.prompt(prompt)?;
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let trimmed = line.trim_end_matches(['\n', '\r']).len();
        line.truncate(trimmed);
        Ok(Some(line))
    }

    /// A command, or a message and the runs it takes.
    async fn handle_line(&mut self, line: &str) -> Result<Flow, ChatError> {
        match Command::parse(line) {
            Command::Nothing => {}
            Command::Quit => return Ok(Flow::Quit),
            Command::Help => self.out.line(HELP)?,
            Command::State => self.show_state()?,
            Command::Messages => self.show_messages()?,
            Command::Unknown(command) => self
                .out
                .line(&format!("unknown command `{command}`; :help lists them"))?,
            Command::Say(text) => return self.converse(text).await,
        }
        Ok(Flow::Continue)
    }

    fn show_state(&mut self) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.thread.state)
            .unwrap_or_else(|e| format!("[warning] cannot print the state: {e}"));
        self.out.line(&text)
    }

    fn show_messages(&mut self) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.thread.messages)
            .unwrap_or_else(|e| format!("[warning] cannot print the messages: {e}"));
        self.out.line(&text)
    }

    /// One user message: the run it starts, then as many follow-up runs as its interrupts
    /// and frontend tool calls need, each waiting for the person's answer.
    async fn converse(&mut self, text: &str) -> Result<Flow, ChatError> {
        self.thread.push_user(text);
        self.follow_through(Vec::new()).await
    }

    /// `--thread ID`: a run with no messages, which a server that keeps threads answers with
    /// the stored conversation (without calling the model). Shows it, then answers whatever
    /// the thread was waiting on, as after any run.
    async fn pick_up(&mut self) -> Result<Flow, ChatError> {
        let summary = self.run_once(Vec::new()).await?;
        self.show_conversation()?;
        match summary.end {
            Some(RunEnd::Finished(Some(RunOutcome::Interrupt { interrupts }))) => {
                match self.answer_interrupts(&interrupts)? {
                    Some(answers) => self.follow_through(answers).await,
                    None => Ok(Flow::Quit),
                }
            }
            _ => Ok(Flow::Continue),
        }
    }

    /// The conversation as text lines: who said what, which tools were called and answered.
    fn show_conversation(&mut self) -> std::io::Result<()> {
        if self.thread.messages.is_empty() {
            return self.out.line("(no stored conversation on this thread)");
        }
        self.out.line("[conversation so far]")?;
        for message in &self.thread.messages {
            let line = match message {
                Message::User(user) => format!("you: {}", user.content.text()),
                Message::Assistant(assistant) => {
                    let calls: Vec<&str> = assistant
                        .tool_calls
                        .iter()
                        .map(|call| call.function.name.as_str())
                        .collect();
                    match (assistant.content.as_deref(), calls.is_empty()) {
                        (Some(text), true) => format!("agent: {text}"),
                        (text, _) => {
                            format!("agent: {} [calls {}]", text.unwrap_or(""), calls.join(", "))
                        }
                    }
                }
                Message::Tool(tool) => {
                    format!(
                        "tool result: {}",
                        preview(&tool.content.text(), PREVIEW_CHARS)
                    )
                }
                _ => continue,
            };
            self.out.line(&line)?;
        }
        Ok(())
    }

    /// The run for what the thread holds now (answering `resume`), then as many follow-up runs
    /// as its interrupts and frontend tool calls need.
    async fn follow_through(&mut self, mut resume: Vec<ResumeEntry>) -> Result<Flow, ChatError> {
        // Calls to the user's tools made in any run of this exchange: a run that ends with an
        // interrupt may also have left a frontend call, answered once the interrupts are.
        let mut client_calls: Vec<String> = Vec::new();
        loop {
            let summary = self.run_once(std::mem::take(&mut resume)).await?;
            client_calls.extend(summary.client_calls);
            match summary.end {
                Some(RunEnd::Finished(Some(RunOutcome::Interrupt { interrupts }))) => {
                    match self.answer_interrupts(&interrupts)? {
                        Some(answers) => resume = answers,
                        None => return Ok(Flow::Quit),
                    }
                }
                Some(RunEnd::Finished(None | Some(RunOutcome::Success { .. }))) => {
                    let pending = self.thread.unanswered(&client_calls);
                    if pending.is_empty() {
                        return Ok(Flow::Continue);
                    }
                    if self.answer_client_tools(&pending)? == Flow::Quit {
                        return Ok(Flow::Quit);
                    }
                }
                Some(RunEnd::Finished(Some(RunOutcome::Cancelled)))
                | Some(RunEnd::Failed)
                | None => return Ok(Flow::Continue),
            }
        }
    }

    /// Asks about each interrupt; `None` when the person quit instead of answering.
    fn answer_interrupts(
        &mut self,
        interrupts: &[Interrupt],
    ) -> Result<Option<Vec<ResumeEntry>>, ChatError> {
        let mut answers = Vec::with_capacity(interrupts.len());
        for interrupt in interrupts {
            let question = match (&interrupt.message, &interrupt.tool_call_id) {
                (Some(message), _) => message.clone(),
                (None, Some(call)) => format!("{} (call {call})", interrupt.reason),
                (None, None) => interrupt.reason.clone(),
            };
            self.out.line(&format!("[interrupt] {question}"))?;
            let Some(approved) = self.ask_yes_no()? else {
                return Ok(None);
            };
            // A denial is an answer, not an abandonment: it goes in the payload (digest §7).
            answers.push(ResumeEntry {
                interrupt_id: interrupt.id.clone(),
                status: ResumeStatus::Resolved,
                payload: Some(json!({"approved": approved})),
                metadata: None,
            });
        }
        Ok(Some(answers))
    }

    fn ask_yes_no(&mut self) -> Result<Option<bool>, ChatError> {
        loop {
            let Some(answer) = self.read_line("approve? [y/n] ")? else {
                return Ok(None);
            };
            if Command::parse(&answer) == Command::Quit {
                return Ok(None);
            }
            match parse_yes_no(&answer) {
                Some(approved) => return Ok(Some(approved)),
                None => self.out.line("please answer y or n (or :quit)")?,
            }
        }
    }

    /// Asks for each pending frontend call's result and files it as a tool message.
    fn answer_client_tools(&mut self, pending: &[(String, String)]) -> Result<Flow, ChatError> {
        for (call_id, name) in pending {
            let Some(answer) = self.read_line(&format!("result for {name}? "))? else {
                return Ok(Flow::Quit);
            };
            if Command::parse(&answer) == Command::Quit {
                return Ok(Flow::Quit);
            }
            self.thread.push_tool_answer(call_id, &answer);
        }
        Ok(Flow::Continue)
    }

    /// POSTs one run and applies its stream.
    async fn run_once(&mut self, resume: Vec<ResumeEntry>) -> Result<RunSummary, ChatError> {
        let body = self.thread.input(&self.client_tools, resume);
        let response = self
            .http
            .post(self.url.clone())
            .json(&body)
            .header(ACCEPT, "text/event-stream")
            .headers(self.headers.clone())
            .send()
            .await
            .map_err(|source| ChatError::Connection {
                url: self.url.to_string(),
                detail: error_chain(&source),
                source,
            })?;
        if !response.status().is_success() {
            self.show_refusal(response).await?;
            return Ok(RunSummary {
                end: Some(RunEnd::Failed),
                ..RunSummary::default()
            });
        }
        self.read_stream(response).await
    }

    /// An HTTP error before the stream: the status and the server's `{"error": ...}` body.
    async fn show_refusal(&mut self, response: reqwest::Response) -> std::io::Result<()> {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let detail = match serde_json::from_str::<Value>(&body) {
            Ok(json) => json.to_string(),
            Err(_) => body.trim().to_owned(),
        };
        self.out
            .line(&format!("[http {status}] {}", preview(&detail, 1000)))
    }

    async fn read_stream(
        &mut self,
        mut response: reqwest::Response,
    ) -> Result<RunSummary, ChatError> {
        let mut summary = RunSummary::default();
        let mut frames = SseFrames::default();
        self.chunks = OpenChunks::default();
        loop {
            let bytes = match response.chunk().await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(error) => {
                    self.out.line(&format!(
                        "[error] the stream broke: {}",
                        error_chain(&error)
                    ))?;
                    summary.end.get_or_insert(RunEnd::Failed);
                    break;
                }
            };
            for data in frames.feed(&bytes) {
                self.handle_data(&data, &mut summary)?;
            }
            if frames.buffered() > MAX_FRAME_BYTES {
                self.out
                    .line("[error] a frame is over 10 MB; giving up on this stream")?;
                summary.end.get_or_insert(RunEnd::Failed);
                frames = SseFrames::default();
                break;
            }
        }
        if let Some(data) = frames.finish() {
            self.handle_data(&data, &mut summary)?;
        }
        self.close_chunks(None)?;
        self.out.end_line()?;
        if summary.end.is_none() {
            self.out
                .line("[warning] the stream ended without RUN_FINISHED or RUN_ERROR")?;
            summary.end = Some(RunEnd::Failed);
        }
        Ok(summary)
    }

    /// One frame's data: an AG-UI event, or a warning when it is not one.
    fn handle_data(&mut self, data: &str, summary: &mut RunSummary) -> std::io::Result<()> {
        match serde_json::from_str::<crate::protocol::Event>(data) {
            Ok(event) => self.apply(event.body, summary),
            Err(error) => self.out.line(&format!(
                "[warning] skipped a frame that is not an AG-UI event ({error}): {}",
                preview(data, 200)
            )),
        }
    }

    /// Applies one event to the thread and shows it.
    fn apply(&mut self, event: EventBody, summary: &mut RunSummary) -> std::io::Result<()> {
        self.close_chunks(Some(&event))?;
        match event {
            EventBody::RunStarted(started) => {
                if let Some(input) = started.input {
                    self.thread.merge_input(input.messages);
                }
            }
            EventBody::RunFinished(finished) => {
                summary.end = Some(RunEnd::Finished(finished.outcome));
            }
            EventBody::RunError(error) => {
                let code = error.code.map(|c| format!(" {c}")).unwrap_or_default();
                self.out.line(&format!("[error{code}] {}", error.message))?;
                summary.end = Some(RunEnd::Failed);
            }
            EventBody::TextMessageStart(start) => {
                self.thread.start_text(&start.message_id, start.role)
            }
            EventBody::TextMessageContent(content) => {
                self.thread.append_text(&content.message_id, &content.delta);
                self.out.text(&content.delta)?;
            }
            EventBody::TextMessageEnd(_) => self.out.end_line()?,
            EventBody::TextMessageChunk(chunk) => self.text_chunk(chunk)?,
            EventBody::ToolCallStart(start) => self.start_call(
                &start.tool_call_id,
                &start.tool_call_name,
                start.parent_message_id.as_deref(),
                summary,
            ),
            EventBody::ToolCallArgs(args) => {
                self.thread.append_args(&args.tool_call_id, &args.delta)
            }
            EventBody::ToolCallEnd(end) => self.show_call(&end.tool_call_id)?,
            EventBody::ToolCallChunk(chunk) => self.tool_chunk(chunk, summary)?,
            EventBody::ToolCallResult(result) => {
                self.thread.add_result(&result);
                let text = result_text(&result.content);
                self.out
                    .line(&format!("[result] {}", preview(&text, PREVIEW_CHARS)))?;
            }
            EventBody::StateSnapshot(snapshot) => {
                self.thread.state = snapshot.snapshot;
                self.out.line("[state] snapshot (:state shows it)")?;
            }
            EventBody::StateDelta(delta) => match self.thread.apply_delta(&delta.delta.0) {
                Ok(()) => self
                    .out
                    .line(&format!("[state] {}", describe_patch(&delta.delta.0)))?,
                Err(error) => self.out.line(&format!(
                    "[warning] a state patch did not apply ({error}); keeping the previous state"
                ))?,
            },
            EventBody::MessagesSnapshot(snapshot) => self.thread.merge_snapshot(snapshot.messages),
            EventBody::ReasoningMessageStart(start) => {
                self.thread.start_reasoning(&start.message_id);
                self.out.start_line("[thinking] ")?;
            }
            EventBody::ReasoningMessageContent(content) => {
                self.thread
                    .append_reasoning(&content.message_id, &content.delta);
                self.out.text(&content.delta)?;
            }
            EventBody::ReasoningMessageEnd(_) => self.out.end_line()?,
            EventBody::ReasoningMessageChunk(chunk) => self.reasoning_chunk(chunk)?,
            EventBody::ReasoningEncryptedValue(value) => self.thread.store_encrypted(&value),
            // Steps, activity, raw and custom events, subagent lifecycle and reasoning spans
            // change nothing a terminal shows or sends back.
            EventBody::StepStarted(_)
            | EventBody::StepFinished(_)
            | EventBody::ActivitySnapshot(_)
            | EventBody::ActivityDelta(_)
            | EventBody::Raw(_)
            | EventBody::Custom(_)
            | EventBody::ReasoningStart(_)
            | EventBody::ReasoningEnd(_)
            | EventBody::SubagentStarted(_)
            | EventBody::SubagentFinished(_)
            | EventBody::SubagentError(_) => {}
        }
        Ok(())
    }

    fn start_call(
        &mut self,
        call_id: &str,
        name: &str,
        parent: Option<&str>,
        summary: &mut RunSummary,
    ) {
        self.thread.start_call(call_id, name, parent);
        if self.client_tools.iter().any(|tool| tool == name) {
            summary.client_calls.push(call_id.to_owned());
        }
    }

    /// `[tool] name {args}` once the call is complete: arguments are not final before END.
    fn show_call(&mut self, call_id: &str) -> std::io::Result<()> {
        let line = match self.thread.call(call_id) {
            Some(call) => format!(
                "[tool] {} {}",
                call.function.name,
                preview(&call.function.arguments, PREVIEW_CHARS)
            ),
            None => format!("[tool] {call_id} (a call that never started)"),
        };
        self.out.line(&line)
    }

    /// Closes the chunk streams `next` does not continue (all of them at the end of a stream).
    fn close_chunks(&mut self, next: Option<&EventBody>) -> std::io::Result<()> {
        let continues = |kind: fn(&EventBody) -> bool| next.is_some_and(kind);
        if !continues(|e| matches!(e, EventBody::TextMessageChunk(_)))
            && self.chunks.text.take().is_some()
        {
            self.out.end_line()?;
        }
        if !continues(|e| matches!(e, EventBody::ReasoningMessageChunk(_)))
            && self.chunks.reasoning.take().is_some()
        {
            self.out.end_line()?;
        }
        if !continues(|e| matches!(e, EventBody::ToolCallChunk(_))) {
            if let Some(call_id) = self.chunks.tool.take() {
                self.show_call(&call_id)?;
            }
        }
        Ok(())
    }

    /// `TEXT_MESSAGE_CHUNK`: a new id ends the open text and starts one; the delta appends.
    fn text_chunk(&mut self, chunk: TextMessageChunk) -> std::io::Result<()> {
        let Some(id) = chunk.message_id.or_else(|| self.chunks.text.clone()) else {
            return self.out.line("[warning] a text chunk without a message id");
        };
        if self.chunks.text.as_deref() != Some(&id) {
            self.out.end_line()?;
            self.thread.start_text(&id, chunk.role);
            self.chunks.text = Some(id.clone());
        }
        if let Some(delta) = chunk.delta {
            self.thread.append_text(&id, &delta);
            self.out.text(&delta)?;
        }
        Ok(())
    }

    /// `REASONING_MESSAGE_CHUNK`: like a text chunk, on a `[thinking]` line.
    fn reasoning_chunk(&mut self, chunk: ReasoningMessageChunk) -> std::io::Result<()> {
        let Some(id) = chunk.message_id.or_else(|| self.chunks.reasoning.clone()) else {
            return self
                .out
                .line("[warning] a reasoning chunk without a message id");
        };
        if self.chunks.reasoning.as_deref() != Some(&id) {
            self.out.start_line("[thinking] ")?;
            self.chunks.reasoning = Some(id.clone());
        }
        if let Some(delta) = chunk.delta {
            self.thread.append_reasoning(&id, &delta);
            self.out.text(&delta)?;
        }
        Ok(())
    }

    /// `TOOL_CALL_CHUNK`: a new id (with its name) ends the open call and starts one.
    fn tool_chunk(
        &mut self,
        chunk: ToolCallChunk,
        summary: &mut RunSummary,
    ) -> std::io::Result<()> {
        let Some(id) = chunk.tool_call_id.or_else(|| self.chunks.tool.clone()) else {
            return self
                .out
                .line("[warning] a tool call chunk without a call id");
        };
        if self.chunks.tool.as_deref() != Some(&id) {
            if let Some(open) = self.chunks.tool.take() {
                self.show_call(&open)?;
            }
            let Some(name) = chunk.tool_call_name else {
                return self
                    .out
                    .line("[warning] a new tool call chunk without a tool name");
            };
            self.start_call(&id, &name, chunk.parent_message_id.as_deref(), summary);
            self.chunks.tool = Some(id.clone());
        }
        if let Some(delta) = chunk.delta {
            self.thread.append_args(&id, &delta);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Event;

    fn session(client_tools: &[&str]) -> Session<std::io::Empty, Vec<u8>> {
        let options = ChatOptions {
            url: "http://127.0.0.1:9/agent".into(),
            client_tools: client_tools.iter().map(|t| t.to_string()).collect(),
            ..ChatOptions::default()
        };
        Session::new(options, std::io::empty(), Vec::new()).expect("a valid session")
    }

    /// Feeds events (as JSON) through the session and returns what it printed.
    fn feed(session: &mut Session<std::io::Empty, Vec<u8>>, events: &[Value]) -> RunSummary {
        let mut summary = RunSummary::default();
        for event in events {
            session
                .handle_data(&event.to_string(), &mut summary)
                .expect("writing to a Vec");
        }
        session.close_chunks(None).expect("writing to a Vec");
        summary
    }

    fn printed(session: &Session<std::io::Empty, Vec<u8>>) -> String {
        String::from_utf8_lossy(&session.out.out).into_owned()
    }

    fn history(session: &Session<std::io::Empty, Vec<u8>>) -> Value {
        serde_json::to_value(&session.thread.messages).expect("messages serialize")
    }

    #[test]
    fn frames_split_on_blank_lines_across_chunks_and_skip_comments() {
        let mut frames = SseFrames::default();
        assert!(frames.feed(b": keep-alive\n\ndata: {\"a\"").is_empty());
        assert_eq!(
            frames.feed(b":1}\n\ndata:x\ndata: y\n\n"),
            vec!["{\"a\":1}", "x\ny"]
        );
        // A UTF-8 character split between chunks survives.
        let text = "data: \u{00e9}\n\n".as_bytes();
        assert!(frames.feed(&text[..7]).is_empty());
        assert_eq!(frames.feed(&text[7..]), vec!["\u{00e9}"]);
        assert!(frames.feed(b"data: last").is_empty());
        assert_eq!(frames.finish().as_deref(), Some("last"));
    }

    #[test]
    fn calls_and_results_are_filed_as_the_reference_reducer_files_them() {
        let mut session = session(&[]);
        feed(
            &mut session,
            &[
                json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Let me look."}),
                json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
                json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "a", "parentMessageId": "m1"}),
                json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"x\":"}),
                json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "1}"}),
                json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
                json!({"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "b", "parentMessageId": "m1"}),
                json!({"type": "TOOL_CALL_END", "toolCallId": "c2"}),
                json!({"type": "TOOL_CALL_START", "toolCallId": "c3", "toolCallName": "c"}),
                json!({"type": "TOOL_CALL_END", "toolCallId": "c3"}),
                json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "content": "one"}),
                json!({"type": "TOOL_CALL_RESULT", "messageId": "t2", "toolCallId": "c2", "content": "two"}),
                json!({"type": "TOOL_CALL_RESULT", "messageId": "t9", "toolCallId": "nobody", "content": "?"}),
            ],
        );
        let ids: Vec<String> = session
            .thread
            .messages
            .iter()
            .map(|m| m.id().to_owned())
            .collect();
        // Results right after their call's message, in arrival order; an orphan at the end; a
        // call without a parent gets a message named after itself.
        assert_eq!(ids, ["m1", "t1", "t2", "c3", "t9"]);
        let messages = history(&session);
        assert_eq!(messages[0]["content"], "Let me look.");
        assert_eq!(
            messages[0]["toolCalls"][0]["function"],
            json!({"name": "a", "arguments": "{\"x\":1}"})
        );
        assert_eq!(messages[0]["toolCalls"][1]["id"], "c2");
        assert_eq!(messages[1]["toolCallId"], "c1");
        let out = printed(&session);
        assert!(
            out.starts_with("Let me look.\n[tool] a {\"x\":1}\n[tool] b \n"),
            "{out}"
        );
        assert!(out.contains("[result] one\n[result] two\n"), "{out}");
    }

    #[test]
    fn a_failing_patch_keeps_the_state_and_warns() {
        let mut session = session(&[]);
        feed(
            &mut session,
            &[
                json!({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}}),
                json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 2}]}),
                // The first op would apply; the second fails: neither is kept.
                json!({"type": "STATE_DELTA", "delta": [
                    {"op": "replace", "path": "/a", "value": 5},
                    {"op": "remove", "path": "/missing"},
                ]}),
            ],
        );
        assert_eq!(session.thread.state, json!({"a": 1, "b": 2}));
        let out = printed(&session);
        assert!(out.contains("[state] add /b 2\n"), "{out}");
        assert!(
            out.contains("[warning] a state patch did not apply"),
            "{out}"
        );
    }

    #[test]
    fn a_frame_that_is_not_an_event_is_reported_and_skipped() {
        let mut session = session(&[]);
        let mut summary = RunSummary::default();
        session.handle_data("{not json", &mut summary).unwrap();
        session
            .handle_data(r#"{"type":"NO_SUCH_EVENT"}"#, &mut summary)
            .unwrap();
        let finished = json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"});
        session
            .handle_data(&finished.to_string(), &mut summary)
            .unwrap();
        assert_eq!(
            printed(&session)
                .matches("[warning] skipped a frame")
                .count(),
            2
        );
        assert!(matches!(summary.end, Some(RunEnd::Finished(None))));
    }

    #[test]
    fn chunks_expand_like_start_content_end() {
        let mut session = session(&["ask"]);
        let summary = feed(
            &mut session,
            &[
                json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "Hi "}),
                json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "there"}),
                json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "ask", "parentMessageId": "m1", "delta": "{}"}),
            ],
        );
        assert_eq!(printed(&session), "Hi there\n[tool] ask {}\n");
        assert_eq!(summary.client_calls, ["c1"]);
        assert_eq!(session.thread.unanswered(&summary.client_calls).len(), 1);
        let messages = history(&session);
        assert_eq!(messages[0]["content"], "Hi there");
        assert_eq!(messages[0]["toolCalls"][0]["id"], "c1");
    }

    #[test]
    fn reasoning_is_a_thinking_line_and_an_error_ends_the_run() {
        let mut session = session(&[]);
        let summary = feed(
            &mut session,
            &[
                json!({"type": "REASONING_START", "messageId": "r1"}),
                json!({"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"}),
                json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "Hmm, "}),
                json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "weather."}),
                json!({"type": "REASONING_MESSAGE_END", "messageId": "r1"}),
                json!({"type": "REASONING_END", "messageId": "r1"}),
                json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
                json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Half"}),
                json!({"type": "RUN_ERROR", "message": "the model went away", "code": "upstream_stream_cut"}),
            ],
        );
        assert_eq!(
            printed(&session),
            "[thinking] Hmm, weather.\nHalf\n[error upstream_stream_cut] the model went away\n"
        );
        assert!(matches!(summary.end, Some(RunEnd::Failed)));
        let messages = history(&session);
        assert_eq!(
            messages[0],
            json!({"id": "r1", "role": "reasoning", "content": "Hmm, weather."})
        );
    }

    #[test]
    fn a_messages_snapshot_replaces_appends_and_removes() {
        let mut thread = Thread::new("t".into());
        thread.push_user("old");
        thread.start_reasoning("r1");
        thread.start_text("a1", None);
        let snapshot: Vec<Message> = serde_json::from_value(json!([
            {"id": "a1", "role": "assistant", "content": "new"},
            {"id": "u2", "role": "user", "content": "next"},
        ]))
        .unwrap();
        thread.merge_snapshot(snapshot);
        let ids: Vec<&str> = thread.messages.iter().map(Message::id).collect();
        // The user message is gone; reasoning stays, as the snapshot carries none.
        assert_eq!(ids, ["r1", "a1", "u2"]);
    }

    #[test]
    fn commands_and_answers_parse() {
        assert_eq!(Command::parse("  :state "), Command::State);
        assert_eq!(Command::parse(":nope"), Command::Unknown(":nope"));
        assert_eq!(Command::parse(" hello "), Command::Say("hello"));
        assert_eq!(Command::parse("   "), Command::Nothing);
        assert_eq!(parse_yes_no("Y"), Some(true));
        assert_eq!(parse_yes_no("no"), Some(false));
        assert_eq!(parse_yes_no("maybe"), None);
        assert_eq!(preview("abcdef", 3), "abc…");
        assert_eq!(preview("ééé", 3), "ééé");
    }

    #[test]
    fn bad_urls_and_headers_are_refused_up_front() {
        let options = |url: &str, headers: Vec<(String, String)>| ChatOptions {
            url: url.into(),
            headers,
            ..ChatOptions::default()
        };
        let refused =
            |options: ChatOptions| Session::new(options, std::io::empty(), Vec::new()).err();
        assert!(matches!(
            refused(options("not a url", vec![])),
            Some(ChatError::InvalidUrl { .. })
        ));
        assert!(matches!(
            refused(options("ftp://host/", vec![])),
            Some(ChatError::InvalidUrl { .. })
        ));
        let bad_header = vec![("Bad Name".to_owned(), "v".to_owned())];
        assert!(matches!(
            refused(options("http://host/", bad_header)),
            Some(ChatError::InvalidHeader { .. })
        ));
        let secret = options(
            "http://host/",
            vec![("Authorization".into(), "Bearer s3cret".into())],
        );
        assert!(!format!("{secret:?}").contains("s3cret"));
    }

    #[test]
    fn the_input_is_a_1_0_run_with_history_state_and_tools() {
        let mut thread = Thread::new("t1".into());
        thread.push_user("hi");
        thread.state = json!({"k": 1});
        let input = thread.input(&["pick".to_owned()], Vec::new());
        let body = serde_json::to_value(&input).unwrap();
        assert_eq!(body["protocolVersion"], "1.0");
        assert_eq!(body["threadId"], "t1");
        assert_eq!(body["state"], json!({"k": 1}));
        assert_eq!(body["tools"][0]["name"], "pick");
        assert_eq!(body["tools"][0]["parameters"]["type"], "object");
        assert_eq!(body["context"], json!([]));
        assert!(body.get("resume").is_none());
        let again = thread.input(&[], Vec::new());
        assert_ne!(input.run_id, again.run_id, "a fresh run id per run");
        // What we send parses back as what the server reads.
        let _: Event = serde_json::from_value(json!({
            "type": "RUN_STARTED", "threadId": "t1", "runId": "r", "input": body,
        }))
        .unwrap();
    }
}
