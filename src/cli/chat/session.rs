//! The conversation loop: one line of input at a time, each message a run (plus the follow-up
//! runs its interrupts and frontend tool calls need), each run's request and its SSE stream
//! applied to the thread as it arrives.

use std::io::{BufRead, Write};
use std::time::Duration;

use agui_host::protocol::{
    EventBody, Interrupt, Message, ReasoningMessageChunk, ResumeEntry, ResumeStatus, RunOutcome,
    TextMessageChunk, ToolCallChunk, ToolCallResult,
};
use agui_host::text::new_id;
use agui_host::text::truncate_chars;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT};
use reqwest::Url;
use serde_json::{json, Value};

use super::thread::Thread;
use super::transcript::{describe_patch, error_chain, result_text, Transcript};
use super::{parse_yes_no, ChatError, ChatOptions, Command, HELP, PREVIEW_CHARS};

/// What the conversation loop does after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    Quit,
}

/// How a run's stream ended.
#[derive(Debug)]
pub(super) enum RunEnd {
    Finished(Option<RunOutcome>),
    /// `RUN_ERROR`, an HTTP error status, or a stream that broke or ended without a terminal
    /// event: all already printed, nothing to follow up.
    Failed,
}

/// What one run produced that the conversation loop needs.
#[derive(Debug, Default)]
pub(super) struct RunSummary {
    pub(super) end: Option<RunEnd>,
    /// Calls to the user's frontend tools, in call order.
    pub(super) client_calls: Vec<String>,
}

/// `*_CHUNK` events open a stream that the next chunk with another id, or any other event,
/// closes (digest §4.3). These are the ids of the open ones.
#[derive(Debug, Default)]
pub(super) struct OpenChunks {
    pub(super) text: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) reasoning: Option<String>,
}

// ---- The session --------------------------------------------------------------------------

pub(super) struct Session<R, W> {
    pub(super) input: R,
    pub(super) out: Transcript<W>,
    pub(super) http: reqwest::Client,
    pub(super) url: Url,
    pub(super) headers: HeaderMap,
    pub(super) client_tools: Vec<String>,
    pub(super) thread: Thread,
    pub(super) chunks: OpenChunks,
}

pub(super) fn parse_url(url: &str) -> Result<Url, ChatError> {
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

pub(super) fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, ChatError> {
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
    pub(super) fn new(options: ChatOptions, input: R, output: W) -> Result<Self, ChatError> {
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
                styled: options.styled,
            },
            http,
            url,
            headers,
            client_tools: options.client_tools,
            thread: Thread::new(thread_id),
            chunks: OpenChunks::default(),
        })
    }

    pub(super) fn banner(&mut self) -> std::io::Result<()> {
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
    pub(super) fn read_line(&mut self, prompt: &str) -> Result<Option<String>, ChatError> {
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
    pub(super) async fn handle_line(&mut self, line: &str) -> Result<Flow, ChatError> {
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

    pub(super) fn show_state(&mut self) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.thread.state)
            .unwrap_or_else(|e| format!("[warning] cannot print the state: {e}"));
        self.out.line(&text)
    }

    pub(super) fn show_messages(&mut self) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.thread.messages)
            .unwrap_or_else(|e| format!("[warning] cannot print the messages: {e}"));
        self.out.line(&text)
    }

    /// One user message: the run it starts, then as many follow-up runs as its interrupts
    /// and frontend tool calls need, each waiting for the person's answer.
    pub(super) async fn converse(&mut self, text: &str) -> Result<Flow, ChatError> {
        self.thread.push_user(text);
        self.follow_through(Vec::new()).await
    }

    /// `--thread ID`: a run with no messages, which a server that keeps threads answers with
    /// the stored conversation (without calling the model). Shows it, then answers whatever
    /// the thread was waiting on, as after any run.
    pub(super) async fn pick_up(&mut self) -> Result<Flow, ChatError> {
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
                Message::Tool(tool) => format!(
                    "tool result: {}",
                    truncate_chars(&tool.content.text(), PREVIEW_CHARS)
                ),
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
    pub(super) fn answer_interrupts(
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

    pub(super) fn ask_yes_no(&mut self) -> Result<Option<bool>, ChatError> {
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
    pub(super) fn answer_client_tools(
        &mut self,
        pending: &[(String, String)],
    ) -> Result<Flow, ChatError> {
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
    pub(super) async fn run_once(
        &mut self,
        resume: Vec<ResumeEntry>,
    ) -> Result<RunSummary, ChatError> {
        let body = self.thread.input(&self.client_tools, resume);
        let run_id = body.run_id.clone().unwrap_or_default();
        let response = self
            .http
            .post(self.url.clone())
            .json(&body)
            .header(ACCEPT, "text/event-stream")
            // This client reconnects to a run cut off mid-stream, so the run should go on
            // meanwhile (a standard client's disconnect stops it).
            .header(agui_host::http::ON_DISCONNECT_HEADER, "continue")
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
        self.read_stream(response, &run_id).await
    }

    /// An HTTP error before the stream: the status and the server's `{"error": ...}` body.
    pub(super) async fn show_refusal(
        &mut self,
        response: reqwest::Response,
    ) -> std::io::Result<()> {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let detail = match serde_json::from_str::<Value>(&body) {
            Ok(json) => json.to_string(),
            Err(_) => body.trim().to_owned(),
        };
        self.out.line(&format!(
            "[http {status}] {}",
            truncate_chars(&detail, 1000)
        ))
    }

    /// One frame's data: an AG-UI event, or a warning when it is not one.
    pub(super) fn handle_data(
        &mut self,
        data: &str,
        summary: &mut RunSummary,
    ) -> std::io::Result<()> {
        match serde_json::from_str::<agui_host::protocol::Event>(data) {
            Ok(event) => self.apply(event.body, summary),
            Err(error) => self.out.line(&format!(
                "[warning] skipped a frame that is not an AG-UI event ({error}): {}",
                truncate_chars(data, 200)
            )),
        }
    }

    /// Applies one event to the thread and shows it.
    pub(super) fn apply(
        &mut self,
        event: EventBody,
        summary: &mut RunSummary,
    ) -> std::io::Result<()> {
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
            EventBody::TextMessageEnd(_) | EventBody::ReasoningMessageEnd(_) => {
                self.out.end_line()?;
            }
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
            EventBody::ToolCallResult(result) => self.show_result(&result)?,
            EventBody::StateSnapshot(snapshot) => {
                self.thread.state = snapshot.snapshot;
                self.out.line("[state] snapshot (:state shows it)")?;
            }
            EventBody::StateDelta(delta) => self.apply_state_delta(&delta.delta.0)?,
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

    fn show_result(&mut self, result: &ToolCallResult) -> std::io::Result<()> {
        self.thread.add_result(result);
        let text = result_text(&result.content);
        self.out.line(&format!(
            "[result] {}",
            truncate_chars(&text, PREVIEW_CHARS)
        ))
    }

    /// A patch that does not apply keeps the previous state, as the reference client does.
    fn apply_state_delta(&mut self, ops: &[json_patch::PatchOperation]) -> std::io::Result<()> {
        match self.thread.apply_delta(ops) {
            Ok(()) => self.out.line(&format!("[state] {}", describe_patch(ops))),
            Err(error) => self.out.line(&format!(
                "[warning] a state patch did not apply ({error}); keeping the previous state"
            )),
        }
    }

    pub(super) fn start_call(
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
    pub(super) fn show_call(&mut self, call_id: &str) -> std::io::Result<()> {
        let line = match self.thread.call(call_id) {
            Some(call) => format!(
                "[tool] {} {}",
                call.function.name,
                truncate_chars(&call.function.arguments, PREVIEW_CHARS)
            ),
            None => format!("[tool] {call_id} (a call that never started)"),
        };
        self.out.line(&line)
    }

    /// Closes the chunk streams `next` does not continue (all of them at the end of a stream).
    pub(super) fn close_chunks(&mut self, next: Option<&EventBody>) -> std::io::Result<()> {
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
    pub(super) fn text_chunk(&mut self, chunk: TextMessageChunk) -> std::io::Result<()> {
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
    pub(super) fn reasoning_chunk(&mut self, chunk: ReasoningMessageChunk) -> std::io::Result<()> {
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
    pub(super) fn tool_chunk(
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
