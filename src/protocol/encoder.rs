//! The run encoder: brackets a run's events with exactly one `RUN_STARTED` and exactly one
//! terminal event, closes whatever is still open before `RUN_FINISHED`, downgrades shapes for
//! 0.x clients, and writes SSE frames.
//!
//! It is the only producer of lifecycle events. It is pure (no I/O, no clock besides the
//! timestamp), so the run's pump drives it from a stream and the tests drive it from vectors.
//! How a frame is spelt (the `id:` line, the `data:` line, a content frame's fast path) is
//! the SSE codec's, `super::sse`.
//!
//! # Version downgrade
//!
//! A request with `protocolVersion` `1.x` gets 1.0 shapes. A request without it comes from a 0.x
//! client (CopilotKit 1.75 ships `@ag-ui/client` 0.0.59), which rejects several 1.0 shapes
//! outright, so for it the encoder:
//! - omits `RUN_STARTED.protocolVersion`;
//! - omits `RUN_FINISHED.outcome` when it is `success` (0.0.59 makes that object strict, so
//!   `pendingToolCallIds` would be fatal; the client derives pending calls from the stream);
//! - omits `outcome` for `cancelled` too (unknown there and fatal): the run reads as a plain
//!   finish with nothing pending, which is what "cancelled" means to a consumer;
//! - keeps `interrupt` outcomes (0.0.59 accepts them);
//! - omits `usage` on `RUN_FINISHED` and `RUN_ERROR`;
//! - flattens array content of `TOOL_CALL_RESULT` into text;
//! - replaces media parts with a `file` source (unknown there) by a text part naming the file.
//!
//! # Event ids
//!
//! With [`RunEncoder::with_event_ids`] every frame starts with `id: <runId>:<seq>` (`seq` counts
//! from 1), the cursor a reconnecting client sends back as `Last-Event-ID`.

use std::sync::Arc;

use super::error::EncodeError;
use super::events::*;
use super::frame::{ContentKind, Fragment, Frame, FrameAt, FrameOut};
use super::input::{ContentPart, Interrupt, Message, PartSource, ToolResultContent};
use super::sse::{event_id_prefix, event_json, now_millis};

/// Which client shapes a run may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolVersion {
    /// `protocolVersion: "1.0"` (or any 1.x) was sent.
    V1,
    /// No `protocolVersion`: a 0.x client.
    Legacy,
}

impl ProtocolVersion {
    /// The producer version announced in `RUN_STARTED` to 1.0 clients.
    pub const CURRENT: &'static str = "1.0";

    pub fn from_request(protocol_version: Option<&str>) -> Self {
        match protocol_version {
            Some(v) if v.trim_start().starts_with('0') => ProtocolVersion::Legacy,
            Some(_) => ProtocolVersion::V1,
            None => ProtocolVersion::Legacy,
        }
    }
}

/// The SSE comment sent on an idle stream so proxies and clients keep the connection.
pub const KEEP_ALIVE_FRAME: &[u8] = b": keep-alive\n\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotStarted,
    Running,
    Ended,
}

/// Per-run encoder state. See the module docs.
#[derive(Debug)]
pub struct RunEncoder {
    version: ProtocolVersion,
    thread_id: String,
    run_id: String,
    /// The run the request names as its parent, echoed in `RUN_STARTED`.
    parent_run_id: Option<String>,
    phase: Phase,
    /// Entities opened and not yet closed, in opening order (closed in that order at the end).
    open_texts: Vec<String>,
    open_tool_calls: Vec<String>,
    open_reasoning_messages: Vec<String>,
    open_reasoning_spans: Vec<String>,
    open_steps: Vec<String>,
    /// Subagents started and not yet finished: each must end before `RUN_FINISHED`.
    open_subagents: Vec<String>,
    /// Tool calls started in this run that got no `TOOL_CALL_RESULT`, in call order: the
    /// frontend calls left for the client (`pendingToolCallIds`), with the subagent each is
    /// attributed to.
    unanswered_tool_calls: Vec<(String, Option<String>)>,
    /// Subagents that ended suspended, with the call that ran each: such a call waits for the
    /// subagent (not the client's to answer), and the subagent's own open calls are the
    /// client's.
    suspended_subagents: Vec<(String, Option<String>)>,
    /// The call that runs each subagent started, by subagent run id.
    subagent_calls: Vec<(String, Option<String>)>,
    usage: Vec<TokenUsage>,
    interrupts: Vec<Interrupt>,
    /// Whether every event carries a `timestamp` (integer milliseconds).
    timestamps: bool,
    /// Events written so far, for metrics and event ids.
    events_written: u64,
    /// `id: <runId>:` when frames carry event ids; shared by every batch of the run.
    id_prefix: Option<Arc<[u8]>>,
}

impl RunEncoder {
    pub fn new(version: ProtocolVersion, thread_id: String, run_id: String) -> Self {
        RunEncoder {
            version,
            thread_id,
            run_id,
            parent_run_id: None,
            phase: Phase::NotStarted,
            open_texts: Vec::new(),
            open_tool_calls: Vec::new(),
            open_reasoning_messages: Vec::new(),
            open_reasoning_spans: Vec::new(),
            open_steps: Vec::new(),
            open_subagents: Vec::new(),
            unanswered_tool_calls: Vec::new(),
            suspended_subagents: Vec::new(),
            subagent_calls: Vec::new(),
            usage: Vec::new(),
            interrupts: Vec::new(),
            timestamps: true,
            events_written: 0,
            id_prefix: None,
        }
    }

    /// Starts every frame with `id: <runId>:<seq>`. A run id holding CR, LF or NUL would break
    /// the frame (or make clients drop the id), so such a run gets no ids; the input limits
    /// refuse control characters in ids before a run gets here.
    pub fn with_event_ids(mut self) -> Self {
        if !self.run_id.contains(['\r', '\n', '\0']) {
            self.id_prefix = Some(Arc::from(event_id_prefix(&self.run_id)));
        }
        self
    }

    /// Echoes the request's `parentRunId` in `RUN_STARTED`, so a client sees which run this one
    /// continues (a branch, a regenerated answer).
    #[must_use]
    pub fn with_parent_run_id(mut self, parent_run_id: Option<String>) -> Self {
        self.parent_run_id = parent_run_id;
        self
    }

    /// How many events this encoder has written.
    pub fn events_written(&self) -> u64 {
        self.events_written
    }

    /// Leaves `timestamp` out of every event (deterministic output for golden tests).
    pub fn without_timestamps(mut self) -> Self {
        self.timestamps = false;
        self
    }

    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    pub fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// Writes `RUN_STARTED`. Idempotent: later calls write nothing.
    pub fn start(&mut self, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        if self.phase != Phase::NotStarted {
            return Ok(());
        }
        self.phase = Phase::Running;
        let protocol_version = match self.version {
            ProtocolVersion::V1 => Some(ProtocolVersion::CURRENT.to_owned()),
            ProtocolVersion::Legacy => None,
        };
        let parent_run_id = self.parent_run_id.take();
        self.write(
            EventBody::RunStarted(RunStarted {
                thread_id: self.thread_id.clone(),
                run_id: self.run_id.clone(),
                protocol_version,
                parent_run_id,
                input: None,
            }),
            out,
        )
    }

    /// Adds token usage to report at the end, merged per provider and model.
    pub fn add_usage(&mut self, usage: TokenUsage) {
        if let Some(entry) = self
            .usage
            .iter_mut()
            .find(|e| e.provider == usage.provider && e.model == usage.model)
        {
            let add = |a: &mut Option<u64>, b: Option<u64>| {
                if let Some(b) = b {
                    *a = Some(a.unwrap_or(0).saturating_add(b));
                }
            };
            add(&mut entry.input_tokens, usage.input_tokens);
            add(&mut entry.output_tokens, usage.output_tokens);
            add(&mut entry.total_tokens, usage.total_tokens);
            add(&mut entry.reasoning_tokens, usage.reasoning_tokens);
            add(&mut entry.cached_input_tokens, usage.cached_input_tokens);
            add(
                &mut entry.cache_write_input_tokens,
                usage.cache_write_input_tokens,
            );
        } else {
            self.usage.push(usage);
        }
    }

    /// Records an interrupt: the run will end with an `interrupt` outcome.
    pub fn add_interrupt(&mut self, interrupt: Interrupt) {
        self.interrupts.push(interrupt);
    }

    /// Checks one agent event against the run's open entities, records it, and writes it.
    ///
    /// # Errors
    /// [`EncodeError::ProtocolViolation`] for a lifecycle or chunk event, or an event that does
    /// not fit what is open (content for a closed message, a second start of an open call).
    /// Nothing is written then; the caller ends the run with `RUN_ERROR`.
    pub fn push(&mut self, body: EventBody, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        if self.phase == Phase::Ended {
            return Err(violation("event after the terminal event"));
        }
        self.start(out)?;
        if self.track(&body)? == Track::Skip {
            return Ok(());
        }
        let body = self.downgrade(body);
        self.write(body, out)
    }

    /// Checks `body` against the run's open entities and records what it opens or closes.
    #[inline]
    fn track(&mut self, body: &EventBody) -> Result<Track, EncodeError> {
        match body {
            EventBody::RunStarted(_) | EventBody::RunFinished(_) | EventBody::RunError(_) => Err(
                violation("lifecycle events are the encoder's alone to emit"),
            ),
            EventBody::TextMessageChunk(_)
            | EventBody::ToolCallChunk(_)
            | EventBody::ReasoningMessageChunk(_) => Err(violation(
                "chunk events are not emitted; use START/CONTENT/END",
            )),
            EventBody::TextMessageStart(e) => {
                open(&mut self.open_texts, &e.message_id, "text message").map(|()| Track::Write)
            }
            EventBody::TextMessageContent(e) => {
                require_open(&self.open_texts, &e.message_id, "text message")?;
                Ok(Track::unless_empty(&e.delta))
            }
            EventBody::TextMessageEnd(e) => {
                close(&mut self.open_texts, &e.message_id, "text message").map(|()| Track::Write)
            }
            EventBody::ToolCallStart(_)
            | EventBody::ToolCallArgs(_)
            | EventBody::ToolCallEnd(_)
            | EventBody::ToolCallResult(_) => self.track_tool_call(body).map(|()| Track::Write),
            EventBody::ReasoningStart(_)
            | EventBody::ReasoningEnd(_)
            | EventBody::ReasoningMessageStart(_)
            | EventBody::ReasoningMessageContent(_)
            | EventBody::ReasoningMessageEnd(_) => self.track_reasoning(body),
            EventBody::StepStarted(e) => {
                open(&mut self.open_steps, &e.step_name, "step").map(|()| Track::Write)
            }
            EventBody::StepFinished(e) => {
                close(&mut self.open_steps, &e.step_name, "step").map(|()| Track::Write)
            }
            EventBody::StateSnapshot(_)
            | EventBody::StateDelta(_)
            | EventBody::MessagesSnapshot(_)
            | EventBody::ActivitySnapshot(_)
            | EventBody::ActivityDelta(_)
            | EventBody::Raw(_)
            | EventBody::Custom(_)
            | EventBody::ReasoningEncryptedValue(_) => Ok(Track::Write),
            EventBody::SubagentStarted(e) => {
                self.subagent_calls
                    .push((e.subagent_run_id.clone(), e.parent_tool_call_id.clone()));
                open(&mut self.open_subagents, &e.subagent_run_id, "subagent")
                    .map(|()| Track::Write)
            }
            EventBody::SubagentFinished(e) => {
                if matches!(e.outcome, Some(SubagentOutcome::Suspended { .. })) {
                    let call = self
                        .subagent_calls
                        .iter()
                        .find(|(id, _)| *id == e.subagent_run_id)
                        .and_then(|(_, call)| call.clone());
                    self.suspended_subagents
                        .push((e.subagent_run_id.clone(), call));
                }
                close(&mut self.open_subagents, &e.subagent_run_id, "subagent")
                    .map(|()| Track::Write)
            }
            EventBody::SubagentError(e) => {
                close(&mut self.open_subagents, &e.subagent_run_id, "subagent")
                    .map(|()| Track::Write)
            }
        }
    }

    #[inline]
    fn track_tool_call(&mut self, body: &EventBody) -> Result<(), EncodeError> {
        match body {
            EventBody::ToolCallStart(e) => {
                if e.parent_message_id
                    .as_deref()
                    .is_some_and(|p| p.is_empty() || p == e.tool_call_id)
                {
                    return Err(violation(
                        "parentMessageId must be non-empty and not the tool call id",
                    ));
                }
                open(&mut self.open_tool_calls, &e.tool_call_id, "tool call")?;
                self.unanswered_tool_calls
                    .push((e.tool_call_id.clone(), e.subagent_run_id.clone()));
                Ok(())
            }
            EventBody::ToolCallArgs(e) => {
                require_open(&self.open_tool_calls, &e.tool_call_id, "tool call")
            }
            EventBody::ToolCallEnd(e) => {
                close(&mut self.open_tool_calls, &e.tool_call_id, "tool call")
            }
            EventBody::ToolCallResult(e) => {
                self.unanswered_tool_calls
                    .retain(|(id, _)| *id != e.tool_call_id);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    #[inline]
    fn track_reasoning(&mut self, body: &EventBody) -> Result<Track, EncodeError> {
        let (spans, messages) = (
            &mut self.open_reasoning_spans,
            &mut self.open_reasoning_messages,
        );
        match body {
            EventBody::ReasoningStart(e) => open(spans, &e.message_id, "reasoning span")?,
            EventBody::ReasoningEnd(e) => close(spans, &e.message_id, "reasoning span")?,
            EventBody::ReasoningMessageStart(e) => {
                open(messages, &e.message_id, "reasoning message")?
            }
            EventBody::ReasoningMessageContent(e) => {
                require_open(messages, &e.message_id, "reasoning message")?;
                return Ok(Track::unless_empty(&e.delta));
            }
            EventBody::ReasoningMessageEnd(e) => {
                close(messages, &e.message_id, "reasoning message")?
            }
            _ => {}
        }
        Ok(Track::Write)
    }

    /// Closes everything still open and writes `RUN_FINISHED` with the run's outcome.
    /// Writes nothing if the run already ended.
    pub fn finish(&mut self, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        if self.phase == Phase::Ended {
            return Ok(());
        }
        self.close_run(out)?;
        let outcome = if !self.interrupts.is_empty() {
            Some(RunOutcome::Interrupt {
                interrupts: std::mem::take(&mut self.interrupts),
            })
        } else {
            match self.version {
                ProtocolVersion::V1 => {
                    let pending = self.pending_tool_calls();
                    Some(RunOutcome::Success {
                        pending_tool_call_ids: (!pending.is_empty()).then_some(pending),
                    })
                }
                ProtocolVersion::Legacy => None,
            }
        };
        self.write_finished(outcome, out)
    }

    /// The calls left for the client: the run's own unanswered calls, but for those waiting for
    /// a suspended subagent, and a suspended subagent's unanswered calls (it called the
    /// client's tools); any other subagent's calls are its own business.
    fn pending_tool_calls(&self) -> Vec<String> {
        let suspended = |owner: &str| self.suspended_subagents.iter().any(|(id, _)| id == owner);
        let waits_for_subagent = |call: &str| {
            self.suspended_subagents
                .iter()
                .any(|(_, parent)| parent.as_deref() == Some(call))
        };
        self.unanswered_tool_calls
            .iter()
            .filter(|(call, owner)| match owner {
                Some(owner) => suspended(owner) && !waits_for_subagent(call),
                None => !waits_for_subagent(call),
            })
            .map(|(call, _)| call.clone())
            .collect()
    }

    /// Starts the run if nothing was written yet and closes everything still open: what must
    /// come before `RUN_FINISHED`.
    fn close_run(&mut self, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        self.start(out)?;
        self.close_all(out)?;
        self.phase = Phase::Ended;
        Ok(())
    }

    fn write_finished(
        &mut self,
        outcome: Option<RunOutcome>,
        out: &mut impl FrameOut,
    ) -> Result<(), EncodeError> {
        let usage = self.take_usage();
        self.write(
            EventBody::RunFinished(RunFinished {
                thread_id: self.thread_id.clone(),
                run_id: self.run_id.clone(),
                result: None,
                outcome,
                usage,
            }),
            out,
        )
    }

    /// Writes `RUN_ERROR` (after `RUN_STARTED` if nothing was written yet). Open messages may
    /// stay open: clients allow that after `RUN_ERROR`. Writes nothing if the run already ended.
    pub fn fail(
        &mut self,
        code: &str,
        message: &str,
        out: &mut impl FrameOut,
    ) -> Result<(), EncodeError> {
        if self.phase == Phase::Ended {
            return Ok(());
        }
        self.start(out)?;
        self.phase = Phase::Ended;
        let usage = self.take_usage();
        self.write(
            EventBody::RunError(RunError {
                message: message.to_owned(),
                code: Some(code.to_owned()),
                usage,
            }),
            out,
        )
    }

    /// Ends a run that was stopped: for 1.0 clients everything open is closed and
    /// `RUN_FINISHED` carries the `cancelled` outcome; 0.x clients know no such outcome, so they
    /// get `RUN_ERROR` code `cancelled`. Writes nothing if the run already ended.
    pub fn cancel(&mut self, message: &str, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        if self.phase == Phase::Ended {
            return Ok(());
        }
        if self.version == ProtocolVersion::Legacy {
            return self.fail("cancelled", message, out);
        }
        self.close_run(out)?;
        self.write_finished(Some(RunOutcome::Cancelled), out)
    }

    fn take_usage(&mut self) -> Option<Vec<TokenUsage>> {
        match self.version {
            ProtocolVersion::V1 if !self.usage.is_empty() => Some(std::mem::take(&mut self.usage)),
            _ => None,
        }
    }

    fn close_all(&mut self, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        for id in std::mem::take(&mut self.open_reasoning_messages) {
            self.write(EventBody::ReasoningMessageEnd(message_ref(id)), out)?;
        }
        for id in std::mem::take(&mut self.open_reasoning_spans) {
            self.write(EventBody::ReasoningEnd(message_ref(id)), out)?;
        }
        for id in std::mem::take(&mut self.open_texts) {
            self.write(EventBody::TextMessageEnd(message_ref(id)), out)?;
        }
        for id in std::mem::take(&mut self.open_tool_calls) {
            self.write(EventBody::tool_call_end(id), out)?;
        }
        for name in std::mem::take(&mut self.open_steps) {
            self.write(
                EventBody::StepFinished(Step {
                    step_name: name,
                    subagent_run_id: None,
                }),
                out,
            )?;
        }
        // Last: what a subagent left open is closed above, before the subagent itself. A
        // subagent still open here was cut off (a stopped run, a call that timed out).
        for id in std::mem::take(&mut self.open_subagents) {
            self.write(
                EventBody::SubagentError(SubagentError {
                    subagent_run_id: id,
                    message: "The run ended before the subagent finished.".to_owned(),
                    code: Some("subagent_cut_off".to_owned()),
                }),
                out,
            )?;
        }
        Ok(())
    }

    /// Reshapes a 1.0 event for a 0.x client (see the module docs).
    fn downgrade(&self, body: EventBody) -> EventBody {
        if self.version == ProtocolVersion::V1 {
            return body;
        }
        match body {
            EventBody::ToolCallResult(mut result) => {
                if let ToolResultContent::Parts(parts) = &result.content {
                    result.content = ToolResultContent::Text(flatten_parts(parts));
                }
                EventBody::ToolCallResult(result)
            }
            EventBody::MessagesSnapshot(mut snapshot) => {
                for message in &mut snapshot.messages {
                    let content = match message {
                        Message::User(m) => &mut m.content,
                        Message::Tool(m) => &mut m.content,
                        _ => continue,
                    };
                    if let super::input::Content::Parts(parts) = content {
                        for part in parts.iter_mut() {
                            replace_file_source(part);
                        }
                    }
                }
                EventBody::MessagesSnapshot(snapshot)
            }
            other => other,
        }
    }

    fn write(&mut self, body: EventBody, out: &mut impl FrameOut) -> Result<(), EncodeError> {
        let frame = frame_of(body, self.timestamps.then(now_millis))?;
        self.events_written += 1;
        out.put(
            frame,
            FrameAt {
                seq: self.events_written,
                id_prefix: self.id_prefix.as_ref(),
            },
        );
        Ok(())
    }
}

/// The frame of `body`: a content event as its typed fragment (one a subagent wrote is written
/// as any other event, its attribution included), any other event as its JSON.
fn frame_of(body: EventBody, timestamp: Option<i64>) -> Result<Frame, EncodeError> {
    let (kind, id, delta) = match body {
        EventBody::TextMessageContent(e) if e.subagent_run_id.is_none() => {
            (ContentKind::Text, e.message_id, e.delta)
        }
        EventBody::ReasoningMessageContent(e) if e.subagent_run_id.is_none() => {
            (ContentKind::Reasoning, e.message_id, e.delta)
        }
        EventBody::ToolCallArgs(e) if e.subagent_run_id.is_none() => {
            (ContentKind::ToolCallArgs, e.tool_call_id, e.delta)
        }
        body => {
            let event = Event {
                body,
                timestamp,
                raw_event: None,
                metadata: None,
            };
            return Ok(Frame::Event(event_json(&event)?));
        }
    };
    Ok(Frame::Content(Fragment {
        kind,
        id,
        delta,
        timestamp,
    }))
}

fn violation(what: impl Into<String>) -> EncodeError {
    EncodeError::ProtocolViolation(what.into())
}

/// Whether an event that fits the run goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Track {
    Write,
    /// An empty content delta: it carries nothing, and validators warn on it.
    Skip,
}

impl Track {
    #[inline]
    fn unless_empty(delta: &str) -> Self {
        if delta.is_empty() {
            Track::Skip
        } else {
            Track::Write
        }
    }
}

fn message_ref(message_id: String) -> MessageRef {
    MessageRef::new(message_id)
}

fn open(list: &mut Vec<String>, id: &str, what: &str) -> Result<(), EncodeError> {
    if list.iter().any(|open| open == id) {
        return Err(violation(format!(
            "{what} `{id}` started while already open"
        )));
    }
    // Exactly: a run has one or two entities open at once, and a first push would make room
    // for four, held for the stream's whole life.
    list.reserve_exact(1);
    list.push(id.to_owned());
    Ok(())
}

fn require_open(list: &[String], id: &str, what: &str) -> Result<(), EncodeError> {
    if list.iter().any(|open| open == id) {
        Ok(())
    } else {
        Err(violation(format!("{what} `{id}` is not open")))
    }
}

fn close(list: &mut Vec<String>, id: &str, what: &str) -> Result<(), EncodeError> {
    let position = list
        .iter()
        .position(|open| open == id)
        .ok_or_else(|| violation(format!("{what} `{id}` is not open")))?;
    list.remove(position);
    Ok(())
}

fn flatten_parts(parts: &[ContentPart]) -> String {
    let mut text = String::new();
    for part in parts {
        let piece = match part {
            ContentPart::Text { text, .. } => text.clone(),
            ContentPart::Image(m)
            | ContentPart::Audio(m)
            | ContentPart::Video(m)
            | ContentPart::Document(m) => match &m.source {
                PartSource::Url { value, .. } => format!("[media: {value}]"),
                PartSource::File { value, .. } => format!("[file: {value}]"),
                PartSource::Data { mime_type, .. } => format!("[inline {mime_type} data]"),
            },
            ContentPart::Binary { mime_type, .. } => format!("[inline {mime_type} data]"),
            ContentPart::Unknown => continue,
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&piece);
    }
    text
}

fn replace_file_source(part: &mut ContentPart) {
    let (ContentPart::Image(media)
    | ContentPart::Audio(media)
    | ContentPart::Video(media)
    | ContentPart::Document(media)) = part
    else {
        return;
    };
    if let PartSource::File { value, .. } = &media.source {
        *part = ContentPart::Text {
            text: format!("[file: {value}]"),
            id: media.id.clone(),
            metadata: None,
        };
    }
}

#[cfg(test)]
mod tests;
