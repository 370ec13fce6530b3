//! The run encoder: brackets a run's events with exactly one `RUN_STARTED` and exactly one
//! terminal event, closes whatever is still open before `RUN_FINISHED`, downgrades shapes for
//! 0.x clients, and writes SSE frames.
//!
//! It is the only producer of lifecycle events. It is pure (no I/O, no clock besides the
//! timestamp), so the HTTP layer drives it from a stream and the tests drive it from vectors.
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

use serde::Serialize;

use super::events::*;
use super::input::{ContentPart, Interrupt, Message, PartSource, ToolResultContent};

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

/// An event the agent produced that would make the stream invalid: a wiring bug, never input.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("protocol violation: {0}")]
    ProtocolViolation(String),
    #[error("event failed to serialize: {0}")]
    Serialize(#[from] serde_json::Error),
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
    phase: Phase,
    /// Entities opened and not yet closed, in opening order (closed in that order at the end).
    open_texts: Vec<String>,
    open_tool_calls: Vec<String>,
    open_reasoning_messages: Vec<String>,
    open_reasoning_spans: Vec<String>,
    open_steps: Vec<String>,
    /// Tool calls started in this run that got no `TOOL_CALL_RESULT`, in call order: the
    /// frontend calls left for the client (`pendingToolCallIds`).
    unanswered_tool_calls: Vec<String>,
    usage: Vec<TokenUsage>,
    interrupts: Vec<Interrupt>,
    /// Whether every event carries a `timestamp` (integer milliseconds).
    timestamps: bool,
    /// Events written so far, for metrics.
    events_written: u64,
}

impl RunEncoder {
    pub fn new(version: ProtocolVersion, thread_id: String, run_id: String) -> Self {
        RunEncoder {
            version,
            thread_id,
            run_id,
            phase: Phase::NotStarted,
            open_texts: Vec::new(),
            open_tool_calls: Vec::new(),
            open_reasoning_messages: Vec::new(),
            open_reasoning_spans: Vec::new(),
            open_steps: Vec::new(),
            unanswered_tool_calls: Vec::new(),
            usage: Vec::new(),
            interrupts: Vec::new(),
            timestamps: true,
            events_written: 0,
        }
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
    pub fn start(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.phase != Phase::NotStarted {
            return Ok(());
        }
        self.phase = Phase::Running;
        let protocol_version = match self.version {
            ProtocolVersion::V1 => Some(ProtocolVersion::CURRENT.to_owned()),
            ProtocolVersion::Legacy => None,
        };
        self.write(
            EventBody::RunStarted(RunStarted {
                thread_id: self.thread_id.clone(),
                run_id: self.run_id.clone(),
                protocol_version,
                parent_run_id: None,
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
    pub fn push(&mut self, body: EventBody, out: &mut Vec<u8>) -> Result<(), EncodeError> {
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
            | EventBody::ReasoningEncryptedValue(_)
            | EventBody::SubagentStarted(_)
            | EventBody::SubagentFinished(_)
            | EventBody::SubagentError(_) => Ok(Track::Write),
        }
    }

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
                self.unanswered_tool_calls.push(e.tool_call_id.clone());
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
                    .retain(|id| *id != e.tool_call_id);
                Ok(())
            }
            _ => Ok(()),
        }
    }

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
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if self.phase == Phase::Ended {
            return Ok(());
        }
        self.start(out)?;
        self.close_all(out)?;
        self.phase = Phase::Ended;
        let outcome = if !self.interrupts.is_empty() {
            Some(RunOutcome::Interrupt {
                interrupts: std::mem::take(&mut self.interrupts),
            })
        } else {
            match self.version {
                ProtocolVersion::V1 => Some(RunOutcome::Success {
                    pending_tool_call_ids: (!self.unanswered_tool_calls.is_empty())
                        .then(|| self.unanswered_tool_calls.clone()),
                }),
                ProtocolVersion::Legacy => None,
            }
        };
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
        out: &mut Vec<u8>,
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

    fn take_usage(&mut self) -> Option<Vec<TokenUsage>> {
        match self.version {
            ProtocolVersion::V1 if !self.usage.is_empty() => Some(std::mem::take(&mut self.usage)),
            _ => None,
        }
    }

    fn close_all(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
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

    fn write(&mut self, body: EventBody, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let event = Event {
            body,
            timestamp: self.timestamps.then(now_millis),
            raw_event: None,
            metadata: None,
        };
        write_frame(&event, out)?;
        self.events_written += 1;
        Ok(())
    }
}

/// Appends one SSE frame, exactly `data: <compact json>\n\n`. serde_json escapes control
/// characters inside strings, so the JSON never spans lines.
pub fn write_frame<T: Serialize>(event: &T, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut *out, event)?;
    out.extend_from_slice(b"\n\n");
    Ok(())
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
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
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn frames(out: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(out).unwrap();
        assert!(!text.contains('\r'));
        text.split_terminator("\n\n")
            .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    fn encoder(version: ProtocolVersion) -> RunEncoder {
        RunEncoder::new(version, "t".into(), "r".into()).without_timestamps()
    }

    fn text_start(id: &str) -> EventBody {
        EventBody::text_start(id)
    }

    fn tool_start(id: &str, parent: &str) -> EventBody {
        EventBody::tool_call_start(id, "f", Some(parent.into()))
    }

    #[test]
    fn finish_closes_open_entities_and_lists_pending_calls_for_v1() {
        let mut enc = encoder(ProtocolVersion::V1);
        let mut out = Vec::new();
        enc.push(text_start("m1"), &mut out).unwrap();
        enc.push(tool_start("c1", "m1"), &mut out).unwrap();
        enc.finish(&mut out).unwrap();
        let events = frames(&out);
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TOOL_CALL_START",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(events[0]["protocolVersion"], "1.0");
        assert_eq!(
            events[5],
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success","pendingToolCallIds":["c1"]}})
        );
    }

    #[test]
    fn legacy_clients_get_no_outcome_usage_or_protocol_version() {
        let mut enc = encoder(ProtocolVersion::Legacy);
        let mut out = Vec::new();
        enc.add_usage(TokenUsage {
            input_tokens: Some(1),
            ..Default::default()
        });
        enc.push(tool_start("c1", "m1"), &mut out).unwrap();
        enc.finish(&mut out).unwrap();
        let events = frames(&out);
        assert_eq!(
            events[0],
            json!({"type":"RUN_STARTED","threadId":"t","runId":"r"})
        );
        assert_eq!(
            events.last().unwrap(),
            &json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"})
        );
    }

    #[test]
    fn legacy_tool_result_parts_are_flattened() {
        let mut enc = encoder(ProtocolVersion::Legacy);
        let mut out = Vec::new();
        enc.push(
            EventBody::ToolCallResult(ToolCallResult {
                message_id: "tm".into(),
                tool_call_id: "c".into(),
                content: ToolResultContent::Parts(vec![ContentPart::Text {
                    text: "a".into(),
                    id: None,
                    metadata: None,
                }]),
                role: Some(ToolRole::Tool),
                subagent_run_id: None,
            }),
            &mut out,
        )
        .unwrap();
        assert_eq!(frames(&out)[1]["content"], "a");
    }

    #[test]
    fn usage_is_merged_per_model_and_reported_to_v1() {
        let mut enc = encoder(ProtocolVersion::V1);
        let usage = |i, o| TokenUsage {
            provider: Some("openai".into()),
            model: Some("m".into()),
            input_tokens: Some(i),
            output_tokens: Some(o),
            total_tokens: Some(i + o),
            ..Default::default()
        };
        enc.add_usage(usage(3, 4));
        enc.add_usage(usage(10, 1));
        let mut out = Vec::new();
        enc.finish(&mut out).unwrap();
        assert_eq!(
            frames(&out)[1]["usage"],
            json!([{"provider":"openai","model":"m","inputTokens":13,"outputTokens":5,"totalTokens":18}])
        );
    }

    #[test]
    fn violations_are_reported_and_nothing_follows_the_terminal_event() {
        let mut enc = encoder(ProtocolVersion::V1);
        let mut out = Vec::new();
        let args = EventBody::tool_call_args("nope", "{");
        assert!(matches!(
            enc.push(args, &mut out),
            Err(EncodeError::ProtocolViolation(_))
        ));
        enc.push(text_start("m"), &mut out).unwrap();
        assert!(
            enc.push(text_start("m"), &mut out).is_err(),
            "double start of an open message"
        );
        enc.fail("upstream_timeout", "the model timed out", &mut out)
            .unwrap();
        enc.finish(&mut out).unwrap();
        assert!(enc.push(text_start("x"), &mut out).is_err());
        let events = frames(&out);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "RUN_ERROR");
        assert_eq!(last["code"], "upstream_timeout");
        assert_eq!(
            events
                .iter()
                .filter(|e| e["type"] == "RUN_ERROR" || e["type"] == "RUN_FINISHED")
                .count(),
            1
        );
    }

    #[test]
    fn interrupts_make_an_interrupt_outcome_for_both_versions() {
        for version in [ProtocolVersion::V1, ProtocolVersion::Legacy] {
            let mut enc = encoder(version);
            enc.add_interrupt(Interrupt {
                id: "i1".into(),
                reason: "tool_call".into(),
                message: None,
                tool_call_id: Some("c1".into()),
                response_schema: None,
                expires_at: None,
                metadata: None,
                subagent_run_id: None,
            });
            let mut out = Vec::new();
            enc.finish(&mut out).unwrap();
            assert_eq!(
                frames(&out)[1]["outcome"],
                json!({"type":"interrupt","interrupts":[{"id":"i1","reason":"tool_call","toolCallId":"c1"}]})
            );
        }
    }

    #[test]
    fn timestamps_are_integers_and_empty_deltas_are_dropped() {
        let mut enc = RunEncoder::new(ProtocolVersion::V1, "t".into(), "r".into());
        let mut out = Vec::new();
        enc.push(text_start("m"), &mut out).unwrap();
        enc.push(EventBody::text_content("m", ""), &mut out)
            .unwrap();
        let events = frames(&out);
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e["timestamp"].is_i64()));
    }

    #[test]
    fn version_negotiation() {
        assert_eq!(
            ProtocolVersion::from_request(Some("1.0")),
            ProtocolVersion::V1
        );
        assert_eq!(
            ProtocolVersion::from_request(Some("1.2")),
            ProtocolVersion::V1
        );
        assert_eq!(
            ProtocolVersion::from_request(Some("0.0.59")),
            ProtocolVersion::Legacy
        );
        assert_eq!(ProtocolVersion::from_request(None), ProtocolVersion::Legacy);
    }
}
