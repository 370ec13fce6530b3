//! Stream verification: a port of the reference client's ordering rules (`verifyEvents` in
//! `@ag-ui/client`, protocol digest §4.2) plus the stricter wire rules this server promises
//! (integer timestamps, no stray nulls, one run per response, ...).
//!
//! `check_*` return the first violation as text; `assert_*` panic with it and the stream.

use std::collections::HashSet;

use serde_json::Value;

/// The 31 event types of `@ag-ui/core` 1.0 (`EventType`). 0.0.59 knows all of them too.
pub(crate) const KNOWN_EVENT_TYPES: [&str; 31] = [
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_ERROR",
    "STEP_STARTED",
    "STEP_FINISHED",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "TEXT_MESSAGE_CHUNK",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_CHUNK",
    "TOOL_CALL_RESULT",
    "STATE_SNAPSHOT",
    "STATE_DELTA",
    "MESSAGES_SNAPSHOT",
    "ACTIVITY_SNAPSHOT",
    "ACTIVITY_DELTA",
    "RAW",
    "CUSTOM",
    "REASONING_START",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT",
    "REASONING_MESSAGE_END",
    "REASONING_MESSAGE_CHUNK",
    "REASONING_END",
    "REASONING_ENCRYPTED_VALUE",
    "SUBAGENT_STARTED",
    "SUBAGENT_FINISHED",
    "SUBAGENT_ERROR",
];

const MESSAGE_ROLES: [&str; 7] = [
    "developer",
    "system",
    "assistant",
    "user",
    "tool",
    "activity",
    "reasoning",
];

pub(crate) fn assert_well_formed(events: &[Value]) {
    if let Err(violation) = check_well_formed(events) {
        panic!(
            "the stream breaks the AG-UI rules: {violation}\nstream:\n{}",
            listing(events)
        );
    }
}

pub(crate) fn assert_0x_compatible(events: &[Value]) {
    if let Err(violation) = check_0x_compatible(events) {
        panic!(
            "the stream would be rejected by a 0.0.59 client (CopilotKit): {violation}\nstream:\n{}",
            listing(events)
        );
    }
}

fn listing(events: &[Value]) -> String {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| format!("  #{i} {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Open entities of one run, by id.
#[derive(Default)]
struct Open {
    texts: HashSet<String>,
    tool_calls: HashSet<String>,
    reasoning_messages: HashSet<String>,
    reasoning_spans: HashSet<String>,
    steps: HashSet<String>,
    subagents: HashSet<String>,
}

impl Open {
    fn describe(&self) -> Option<String> {
        let groups = [
            ("text messages", &self.texts),
            ("tool calls", &self.tool_calls),
            ("reasoning messages", &self.reasoning_messages),
            ("reasoning spans", &self.reasoning_spans),
            ("steps", &self.steps),
            ("subagents", &self.subagents),
        ];
        let open: Vec<String> = groups
            .iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(what, ids)| {
                let mut ids: Vec<&String> = ids.iter().collect();
                ids.sort();
                format!("{what} {ids:?}")
            })
            .collect();
        (!open.is_empty()).then(|| open.join(", "))
    }
}

fn field<'a>(event: &'a Value, name: &str) -> Option<&'a Value> {
    event.get(name)
}

/// A required string field (non-empty: every id and name this server sends means something).
fn required_str<'a>(at: &str, event: &'a Value, name: &str) -> Result<&'a str, String> {
    match field(event, name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("{at}: `{name}` is empty")),
        Some(other) => Err(format!("{at}: `{name}` must be a string, got {other}")),
        None => Err(format!("{at}: required `{name}` is missing")),
    }
}

fn optional_str<'a>(at: &str, event: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match field(event, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{at}: `{name}` must be a string, got {other}")),
    }
}

fn start(at: &str, set: &mut HashSet<String>, id: &str, what: &str) -> Result<(), String> {
    if set.insert(id.to_string()) {
        Ok(())
    } else {
        Err(format!("{at}: {what} `{id}` is already in progress"))
    }
}

fn require_open(at: &str, set: &HashSet<String>, id: &str, what: &str) -> Result<(), String> {
    if set.contains(id) {
        Ok(())
    } else {
        Err(format!("{at}: no active {what} with id `{id}`"))
    }
}

fn close(at: &str, set: &mut HashSet<String>, id: &str, what: &str) -> Result<(), String> {
    if set.remove(id) {
        Ok(())
    } else {
        Err(format!("{at}: no active {what} with id `{id}`"))
    }
}

/// The ordering rules of the reference client, the single-run shape of our responses, and the
/// wire rules every event must follow.
pub(crate) fn check_well_formed(events: &[Value]) -> Result<(), String> {
    let Some(first) = events.first() else {
        return Err("the stream is empty: it must start with RUN_STARTED or RUN_ERROR".into());
    };
    let first_type = first.get("type").and_then(Value::as_str).unwrap_or("");
    if first_type != "RUN_STARTED" && first_type != "RUN_ERROR" {
        return Err(format!(
            "#0: first event must be RUN_STARTED (or RUN_ERROR), got {first_type:?}"
        ));
    }
    let mut stream = StreamCheck::default();
    for (index, event) in events.iter().enumerate() {
        stream.event(index, event)?;
    }
    stream.finish()?;
    check_subagent_owners(events)
}

/// The 1.0 client's subagent rules (protocol digest §4.2): a subagent run id is started once
/// (never reused after it closed), names a known parent subagent, and an entity's continuation
/// events and a call's `parentMessageId` message agree with the owner that opened them (an
/// absent tag always agrees).
fn check_subagent_owners(events: &[Value]) -> Result<(), String> {
    use std::collections::HashMap;
    let mut started: HashSet<String> = HashSet::new();
    // (kind, id) -> owner ("" for the parent).
    let mut owners: HashMap<(&str, String), String> = HashMap::new();
    for (index, event) in events.iter().enumerate() {
        let ty = event["type"].as_str().unwrap_or("");
        let at = format!("#{index} {ty}");
        let tag = event.get("subagentRunId").and_then(Value::as_str);
        let owner = tag.unwrap_or("").to_string();
        if ty == "SUBAGENT_STARTED" {
            let id = tag.unwrap_or("").to_string();
            if !started.insert(id.clone()) {
                return Err(format!("{at}: subagent `{id}` started twice"));
            }
            if let Some(parent) = event.get("parentSubagentRunId").and_then(Value::as_str) {
                if !started.contains(parent) {
                    return Err(format!("{at}: unknown parentSubagentRunId `{parent}`"));
                }
            }
            continue;
        }
        if ty.starts_with("SUBAGENT_") || ty.starts_with("RUN_") {
            continue;
        }
        let entity = match ty {
            "TEXT_MESSAGE_START" | "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END" => {
                Some(("message", "messageId"))
            }
            "TOOL_CALL_START" | "TOOL_CALL_ARGS" | "TOOL_CALL_END" => Some(("call", "toolCallId")),
            "ACTIVITY_SNAPSHOT" | "ACTIVITY_DELTA" => Some(("activity", "messageId")),
            _ => None,
        };
        let Some((kind, key)) = entity else { continue };
        let id = event[key].as_str().unwrap_or("").to_string();
        let opens = ty.ends_with("_START") || ty == "ACTIVITY_SNAPSHOT";
        if ty == "TOOL_CALL_START" {
            if let Some(parent) = event.get("parentMessageId").and_then(Value::as_str) {
                if let (Some(parent_owner), Some(tag)) =
                    (owners.get(&("message", parent.to_string())), tag)
                {
                    if parent_owner != tag {
                        return Err(format!(
                            "{at}: attributed to `{tag}`, its message `{parent}` to `{parent_owner}`"
                        ));
                    }
                }
                owners
                    .entry(("message", parent.to_string()))
                    .or_insert_with(|| owner.clone());
            }
        }
        match owners.get(&(kind, id.clone())) {
            Some(opener) if tag.is_some() && *opener != owner && !opens => {
                return Err(format!(
                    "{at}: attributed to `{owner}`, but `{id}` was opened by `{opener}`"
                ));
            }
            Some(_) if !opens => {}
            _ => {
                owners.insert((kind, id), owner);
            }
        }
    }
    Ok(())
}

/// What the check of one stream remembers from event to event.
#[derive(Default)]
struct StreamCheck {
    open: Open,
    run_ids: Option<(String, String)>,
    terminal: Option<(usize, String)>,
    tool_call_ids: HashSet<String>,
    parent_message_ids: Vec<(usize, String)>,
}

impl StreamCheck {
    /// The rules every event follows, then those of its type.
    fn event(&mut self, index: usize, event: &Value) -> Result<(), String> {
        let Some(object) = event.as_object() else {
            return Err(format!(
                "#{index}: an event must be a JSON object, got {event}"
            ));
        };
        let ty = match object.get("type") {
            Some(Value::String(t)) if !t.is_empty() => t.as_str(),
            _ => return Err(format!("#{index}: `type` must be a non-empty string")),
        };
        let at = format!("#{index} {ty}");
        if !KNOWN_EVENT_TYPES.contains(&ty) {
            return Err(format!("{at}: unknown event type"));
        }
        if let Some((terminal_index, terminal_type)) = &self.terminal {
            return Err(format!(
                "{at}: nothing may follow the terminal {terminal_type} (#{terminal_index})"
            ));
        }
        check_base_fields(&at, event)?;
        check_no_nulls(&at, ty, event)?;
        match ty {
            "RUN_STARTED" | "RUN_FINISHED" | "RUN_ERROR" => self.run(&at, index, ty, event),
            "TEXT_MESSAGE_START" | "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END" => {
                self.text(&at, ty, event)
            }
            "TOOL_CALL_START" | "TOOL_CALL_ARGS" | "TOOL_CALL_END" | "TOOL_CALL_RESULT" => {
                self.tool_call(&at, index, ty, event)
            }
            "REASONING_START"
            | "REASONING_END"
            | "REASONING_MESSAGE_START"
            | "REASONING_MESSAGE_CONTENT"
            | "REASONING_MESSAGE_END" => self.reasoning(&at, ty, event),
            "STEP_STARTED" | "STEP_FINISHED" | "SUBAGENT_STARTED" | "SUBAGENT_FINISHED"
            | "SUBAGENT_ERROR" => self.step_or_subagent(&at, ty, event),
            _ => check_payload(&at, ty, event),
        }
    }

    fn run(&mut self, at: &str, index: usize, ty: &str, event: &Value) -> Result<(), String> {
        match ty {
            "RUN_STARTED" => {
                if index != 0 {
                    return Err(format!(
                        "{at}: a response carries one run; RUN_STARTED must be the first event only"
                    ));
                }
                let thread = required_str(at, event, "threadId")?;
                let run = required_str(at, event, "runId")?;
                optional_str(at, event, "protocolVersion")?;
                self.run_ids = Some((thread.to_string(), run.to_string()));
                return Ok(());
            }
            "RUN_FINISHED" => self.finished(at, event)?,
            _ => {
                required_str(at, event, "message")?;
                optional_str(at, event, "code")?;
                if let Some(usage) = field(event, "usage") {
                    check_usage(at, usage)?;
                }
            }
        }
        self.terminal = Some((index, ty.to_string()));
        Ok(())
    }

    fn finished(&self, at: &str, event: &Value) -> Result<(), String> {
        let thread = required_str(at, event, "threadId")?;
        let run = required_str(at, event, "runId")?;
        let Some((started_thread, started_run)) = &self.run_ids else {
            return Err(format!("{at}: RUN_FINISHED without RUN_STARTED"));
        };
        if (thread, run) != (started_thread.as_str(), started_run.as_str()) {
            return Err(format!(
                "{at}: threadId/runId ({thread}, {run}) differ from RUN_STARTED's \
                 ({started_thread}, {started_run})"
            ));
        }
        if let Some(still_open) = self.open.describe() {
            return Err(format!(
                "{at}: cannot finish while {still_open} are still active"
            ));
        }
        if let Some(outcome) = field(event, "outcome") {
            check_outcome(at, outcome)?;
        }
        if let Some(usage) = field(event, "usage") {
            check_usage(at, usage)?;
        }
        Ok(())
    }

    fn text(&mut self, at: &str, ty: &str, event: &Value) -> Result<(), String> {
        let id = required_str(at, event, "messageId")?;
        match ty {
            "TEXT_MESSAGE_START" => {
                match optional_str(at, event, "role")? {
                    None | Some("developer" | "system" | "assistant" | "user") => {}
                    Some(role) => {
                        return Err(format!("{at}: role {role:?} is not a text message role"))
                    }
                }
                optional_str(at, event, "name")?;
                start(at, &mut self.open.texts, id, "text message")
            }
            "TEXT_MESSAGE_CONTENT" => {
                require_string(at, event, "delta")?;
                require_open(at, &self.open.texts, id, "text message")
            }
            _ => close(at, &mut self.open.texts, id, "text message"),
        }
    }

    fn tool_call(&mut self, at: &str, index: usize, ty: &str, event: &Value) -> Result<(), String> {
        if ty == "TOOL_CALL_RESULT" {
            return check_tool_call_result(at, event);
        }
        let id = required_str(at, event, "toolCallId")?;
        match ty {
            "TOOL_CALL_START" => {
                required_str(at, event, "toolCallName")?;
                if field(event, "parentMessageId").is_some() {
                    let parent = required_str(at, event, "parentMessageId")?;
                    self.parent_message_ids.push((index, parent.to_string()));
                }
                start(at, &mut self.open.tool_calls, id, "tool call")?;
                self.tool_call_ids.insert(id.to_string());
                Ok(())
            }
            "TOOL_CALL_ARGS" => {
                require_string(at, event, "delta")?;
                require_open(at, &self.open.tool_calls, id, "tool call")
            }
            _ => close(at, &mut self.open.tool_calls, id, "tool call"),
        }
    }

    fn reasoning(&mut self, at: &str, ty: &str, event: &Value) -> Result<(), String> {
        let id = required_str(at, event, "messageId")?;
        let (spans, messages) = (
            &mut self.open.reasoning_spans,
            &mut self.open.reasoning_messages,
        );
        match ty {
            "REASONING_START" => start(at, spans, id, "reasoning span"),
            "REASONING_END" => close(at, spans, id, "reasoning span"),
            "REASONING_MESSAGE_START" => {
                if field(event, "role") != Some(&Value::String("reasoning".into())) {
                    return Err(format!("{at}: `role` must be \"reasoning\""));
                }
                start(at, messages, id, "reasoning message")
            }
            "REASONING_MESSAGE_CONTENT" => {
                require_string(at, event, "delta")?;
                require_open(at, messages, id, "reasoning message")
            }
            _ => close(at, messages, id, "reasoning message"),
        }
    }

    fn step_or_subagent(&mut self, at: &str, ty: &str, event: &Value) -> Result<(), String> {
        match ty {
            "STEP_STARTED" => {
                let name = required_str(at, event, "stepName")?;
                start(at, &mut self.open.steps, name, "step")
            }
            "STEP_FINISHED" => {
                let name = required_str(at, event, "stepName")?;
                close(at, &mut self.open.steps, name, "step")
            }
            "SUBAGENT_STARTED" => {
                let id = required_str(at, event, "subagentRunId")?;
                required_str(at, event, "name")?;
                start(at, &mut self.open.subagents, id, "subagent")
            }
            _ => {
                let id = required_str(at, event, "subagentRunId")?;
                close(at, &mut self.open.subagents, id, "subagent")
            }
        }
    }

    /// What only the whole stream shows: a terminal event, and no call filed under a call.
    fn finish(self) -> Result<(), String> {
        for (index, parent) in self.parent_message_ids {
            if self.tool_call_ids.contains(&parent) {
                return Err(format!(
                    "#{index} TOOL_CALL_START: parentMessageId `{parent}` is a tool call id; the \
                     client would file the call under the wrong message"
                ));
            }
        }
        if self.terminal.is_none() {
            return Err(
                "the stream ended without a terminal event (RUN_FINISHED or RUN_ERROR)".into(),
            );
        }
        Ok(())
    }
}

fn check_tool_call_result(at: &str, event: &Value) -> Result<(), String> {
    required_str(at, event, "messageId")?;
    required_str(at, event, "toolCallId")?;
    match field(event, "content") {
        Some(Value::String(_) | Value::Array(_)) => {}
        _ => return Err(format!("{at}: `content` must be a string or parts")),
    }
    if let Some(role) = optional_str(at, event, "role")? {
        if role != "tool" {
            return Err(format!("{at}: role must be \"tool\", got {role:?}"));
        }
    }
    Ok(())
}

/// The events that open or close nothing: their payload's shape.
fn check_payload(at: &str, ty: &str, event: &Value) -> Result<(), String> {
    match ty {
        "TEXT_MESSAGE_CHUNK" | "TOOL_CALL_CHUNK" | "REASONING_MESSAGE_CHUNK" => {
            // Valid protocol, but this server promises explicit START/CONTENT/END, and the
            // chunk expansion rules (§4.3) would make this port much larger.
            Err(format!(
                "{at}: chunk events are not part of this server's contract"
            ))
        }
        "STATE_DELTA" if !field(event, "delta").is_some_and(Value::is_array) => {
            Err(format!("{at}: `delta` must be a JSON Patch array"))
        }
        "MESSAGES_SNAPSHOT" if !field(event, "messages").is_some_and(Value::is_array) => {
            Err(format!("{at}: `messages` must be an array"))
        }
        "STATE_SNAPSHOT" if field(event, "snapshot").is_none() => {
            Err(format!("{at}: required `snapshot` is missing"))
        }
        "CUSTOM" => {
            required_str(at, event, "name")?;
            if field(event, "value").is_none() {
                return Err(format!("{at}: required `value` is missing"));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn require_string(at: &str, event: &Value, name: &str) -> Result<(), String> {
    match field(event, name) {
        Some(Value::String(_)) => Ok(()),
        Some(other) => Err(format!("{at}: `{name}` must be a string, got {other}")),
        None => Err(format!("{at}: required `{name}` is missing")),
    }
}

fn check_base_fields(at: &str, event: &Value) -> Result<(), String> {
    if let Some(timestamp) = field(event, "timestamp") {
        if !(timestamp.is_i64() || timestamp.is_u64()) {
            return Err(format!(
                "{at}: `timestamp` must be an integer, got {timestamp}"
            ));
        }
    }
    if let Some(metadata) = field(event, "metadata") {
        if !metadata.is_object() {
            return Err(format!(
                "{at}: `metadata` must be an object, got {metadata}"
            ));
        }
    }
    if let Some(subagent) = field(event, "subagentRunId") {
        if !subagent.is_string() {
            return Err(format!(
                "{at}: `subagentRunId` must be a string, got {subagent}"
            ));
        }
    }
    Ok(())
}

fn check_outcome(at: &str, outcome: &Value) -> Result<(), String> {
    match outcome.get("type").and_then(Value::as_str) {
        Some("success") => {
            if let Some(pending) = outcome.get("pendingToolCallIds") {
                let all_ids = pending.as_array().is_some_and(|ids| {
                    ids.iter()
                        .all(|id| id.as_str().is_some_and(|s| !s.is_empty()))
                });
                if !all_ids {
                    return Err(format!(
                        "{at}: `pendingToolCallIds` must be an array of ids, got {pending}"
                    ));
                }
            }
            Ok(())
        }
        Some("interrupt") => {
            if outcome
                .get("interrupts")
                .and_then(Value::as_array)
                .is_some_and(|list| !list.is_empty())
            {
                Ok(())
            } else {
                Err(format!(
                    "{at}: an interrupt outcome needs at least one interrupt"
                ))
            }
        }
        Some("cancelled") => Ok(()),
        other => Err(format!("{at}: unknown outcome type {other:?}")),
    }
}

fn check_usage(at: &str, usage: &Value) -> Result<(), String> {
    let Some(entries) = usage.as_array() else {
        return Err(format!("{at}: `usage` must be an array, got {usage}"));
    };
    for entry in entries {
        let Some(entry) = entry.as_object() else {
            return Err(format!("{at}: a usage entry must be an object"));
        };
        for (key, value) in entry {
            let ok = match key.as_str() {
                "provider" | "model" => value.is_string(),
                _ => value.is_u64(),
            };
            if !ok {
                return Err(format!("{at}: usage `{key}` has a wrong value {value}"));
            }
        }
    }
    Ok(())
}

/// No JSON `null` outside the places where any JSON value is the payload itself.
fn check_no_nulls(at: &str, ty: &str, event: &Value) -> Result<(), String> {
    let Some(object) = event.as_object() else {
        return Ok(());
    };
    for (key, value) in object {
        let payload = matches!(
            (ty, key.as_str()),
            ("STATE_SNAPSHOT", "snapshot") | ("CUSTOM", "value") | ("RAW", "event")
        );
        if payload {
            continue;
        }
        if value.is_null() {
            return Err(format!(
                "{at}: `{key}` is null; absent optional fields must be omitted"
            ));
        }
        // Containers whose inner values are application data, where nulls are legitimate.
        let opaque_inside = matches!(key.as_str(), "metadata" | "rawEvent" | "result" | "input")
            || (ty, key.as_str()) == ("ACTIVITY_SNAPSHOT", "content");
        if opaque_inside {
            continue;
        }
        let patch = matches!(
            (ty, key.as_str()),
            ("STATE_DELTA", "delta") | ("ACTIVITY_DELTA", "patch")
        );
        if patch {
            for (i, op) in value.as_array().into_iter().flatten().enumerate() {
                for (op_key, op_value) in op.as_object().into_iter().flatten() {
                    if op_key == "value" {
                        continue;
                    }
                    if let Some(path) = find_null(op_value, format!("{key}[{i}].{op_key}")) {
                        return Err(format!("{at}: `{path}` is null"));
                    }
                }
            }
            continue;
        }
        if let Some(path) = find_null(value, key.clone()) {
            return Err(format!("{at}: `{path}` is null"));
        }
    }
    Ok(())
}

fn find_null(value: &Value, path: String) -> Option<String> {
    match value {
        Value::Null => Some(path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_null(item, format!("{path}[{i}]"))),
        Value::Object(members) => members
            .iter()
            .find_map(|(k, v)| find_null(v, format!("{path}.{k}"))),
        _ => None,
    }
}

/// What the 0.0.59 client (pinned by CopilotKit) rejects although 1.0 accepts it (§4.6).
pub(crate) fn check_0x_compatible(events: &[Value]) -> Result<(), String> {
    for (index, event) in events.iter().enumerate() {
        let ty = event.get("type").and_then(Value::as_str).unwrap_or("");
        let at = format!("#{index} {ty}");
        if !KNOWN_EVENT_TYPES.contains(&ty) {
            return Err(format!("{at}: unknown event type (fatal on 0.0.59)"));
        }
        if let Some(outcome) = event.get("outcome") {
            match outcome.get("type").and_then(Value::as_str) {
                Some("success") => {
                    // 0.0.59 makes the success outcome a strict object.
                    let extra: Vec<&String> = outcome
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, _)| k)
                        .filter(|k| *k != "type")
                        .collect();
                    if !extra.is_empty() {
                        return Err(format!("{at}: success outcome carries {extra:?}"));
                    }
                }
                Some("interrupt") => {}
                other => return Err(format!("{at}: outcome type {other:?}")),
            }
        }
        if ty == "TOOL_CALL_RESULT" && !event.get("content").is_some_and(Value::is_string) {
            return Err(format!("{at}: `content` must be a string"));
        }
        if ty == "MESSAGES_SNAPSHOT" {
            for message in event["messages"].as_array().into_iter().flatten() {
                let role = message.get("role").and_then(Value::as_str).unwrap_or("");
                if !MESSAGE_ROLES.contains(&role) {
                    return Err(format!("{at}: unknown message role {role:?}"));
                }
            }
        }
        if let Some(path) = find_file_source(event, "") {
            return Err(format!("{at}: `{path}` is a file source"));
        }
    }
    Ok(())
}

fn find_file_source(value: &Value, path: &str) -> Option<String> {
    match value {
        Value::Object(members) => {
            if members
                .get("source")
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                == Some("file")
            {
                return Some(format!("{path}.source"));
            }
            members
                .iter()
                .find_map(|(k, v)| find_file_source(v, &format!("{path}.{k}")))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_file_source(v, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// The verifier is test code too: each rule is shown to accept a good stream and catch a bad one.
mod tests {
    use super::{check_0x_compatible, check_well_formed};
    use serde_json::{json, Value};

    fn started() -> Value {
        json!({"type":"RUN_STARTED","threadId":"th","runId":"r","protocolVersion":"1.0","timestamp":1_790_000_000_000_i64})
    }

    fn finished() -> Value {
        json!({"type":"RUN_FINISHED","threadId":"th","runId":"r","outcome":{"type":"success"}})
    }

    fn text(id: &str) -> Vec<Value> {
        vec![
            json!({"type":"TEXT_MESSAGE_START","messageId":id,"role":"assistant"}),
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":"hi"}),
            json!({"type":"TEXT_MESSAGE_END","messageId":id}),
        ]
    }

    fn tool(id: &str, parent: &str) -> Vec<Value> {
        vec![
            json!({"type":"TOOL_CALL_START","toolCallId":id,"toolCallName":"f","parentMessageId":parent}),
            json!({"type":"TOOL_CALL_ARGS","toolCallId":id,"delta":"{}"}),
            json!({"type":"TOOL_CALL_END","toolCallId":id}),
        ]
    }

    fn run(body: Vec<Value>) -> Vec<Value> {
        let mut events = vec![started()];
        events.extend(body);
        events.push(finished());
        events
    }

    #[track_caller]
    fn rejected(events: &[Value], because: &str) {
        match check_well_formed(events) {
            Ok(()) => panic!("accepted a bad stream (expected: {because})"),
            Err(violation) => assert!(
                violation.contains(because),
                "rejected for another reason: {violation:?} (expected: {because})"
            ),
        }
    }

    #[test]
    fn verifier_accepts_well_formed_streams() {
        let mut body = text("m1");
        body.extend(tool("c1", "m1"));
        body.push(json!({"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c1","content":"{}","role":"tool"}));
        body.extend([
            json!({"type":"REASONING_START","messageId":"rs"}),
            json!({"type":"REASONING_MESSAGE_START","messageId":"rm","role":"reasoning"}),
            json!({"type":"REASONING_MESSAGE_CONTENT","messageId":"rm","delta":"hmm"}),
            json!({"type":"REASONING_MESSAGE_END","messageId":"rm"}),
            json!({"type":"REASONING_END","messageId":"rs"}),
            json!({"type":"STEP_STARTED","stepName":"s"}),
            json!({"type":"STATE_SNAPSHOT","snapshot":{"a":null}}),
            json!({"type":"STATE_DELTA","delta":[{"op":"replace","path":"/a","value":null}]}),
            json!({"type":"CUSTOM","name":"x","value":null}),
            json!({"type":"STEP_FINISHED","stepName":"s"}),
        ]);
        let mut events = run(body);
        assert_eq!(check_well_formed(&events), Ok(()));
        // A reopened (closed) message id is legal in 1.0.
        events.splice(1..1, text("m1"));
        assert_eq!(check_well_formed(&events), Ok(()));

        // RUN_ERROR may be first, and may leave things open.
        let errored = vec![
            started(),
            json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
            json!({"type":"RUN_ERROR","message":"cut","code":"upstream_stream_cut"}),
        ];
        assert_eq!(check_well_formed(&errored), Ok(()));
        assert_eq!(
            check_well_formed(&[json!({"type":"RUN_ERROR","message":"no"})]),
            Ok(())
        );
    }

    #[test]
    fn verifier_rejects_bad_run_lifecycles() {
        rejected(&[], "empty");
        rejected(&text("m"), "first event must be RUN_STARTED");
        rejected(&[started()], "without a terminal event");
        let mut after_error = vec![started(), json!({"type":"RUN_ERROR","message":"x"})];
        after_error.extend(text("m"));
        rejected(&after_error, "nothing may follow the terminal RUN_ERROR");
        rejected(
            &[
                started(),
                finished(),
                json!({"type":"RUN_ERROR","message":"x"}),
            ],
            "nothing may follow the terminal RUN_FINISHED",
        );
        rejected(&[started(), started(), finished()], "one run");
        let mut other_run = finished();
        other_run["runId"] = json!("r2");
        rejected(&[started(), other_run], "differ from RUN_STARTED");
        rejected(
            &[started(), json!({"type":"NEW_THING"}), finished()],
            "unknown event type",
        );
    }

    #[test]
    fn verifier_rejects_text_messages_out_of_order() {
        rejected(
            &run(vec![
                json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}),
            ]),
            "no active text message",
        );
        let mut twice = text("m");
        twice.insert(1, twice[0].clone());
        rejected(&run(twice), "already in progress");
        let mut unclosed = text("m");
        unclosed.pop();
        rejected(&run(unclosed), "cannot finish while text messages [\"m\"]");
        rejected(
            &run(vec![
                json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"tool"}),
            ]),
            "not a text message role",
        );
    }

    #[test]
    fn verifier_rejects_tool_calls_out_of_order() {
        let mut late_args = tool("c", "m");
        late_args.push(json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"x"}));
        rejected(&run(late_args), "no active tool call");
        let mut unclosed = tool("c", "m");
        unclosed.pop();
        rejected(&run(unclosed), "cannot finish while tool calls");
        rejected(&run(tool("c", "")), "`parentMessageId` is empty");
        let mut parent_is_call = tool("c1", "m");
        parent_is_call.extend(tool("c2", "c1"));
        rejected(&run(parent_is_call), "is a tool call id");
        rejected(
            &run(vec![
                json!({"type":"TOOL_CALL_RESULT","messageId":"t","toolCallId":"c","content":{"a":1}}),
            ]),
            "`content` must be a string or parts",
        );
    }

    #[test]
    fn verifier_holds_the_subagent_rules() {
        let start = |id: &str| json!({"type":"SUBAGENT_STARTED","subagentRunId":id,"name":"n"});
        let end = |id: &str| json!({"type":"SUBAGENT_FINISHED","subagentRunId":id});
        let tagged = |mut events: Vec<Value>, id: &str| {
            for event in &mut events {
                event["subagentRunId"] = json!(id);
            }
            events
        };
        let mut body = vec![start("sa")];
        body.extend(tagged(text("m1"), "sa"));
        body.extend(tagged(tool("c1", "m1"), "sa"));
        body.push(end("sa"));
        assert_eq!(check_well_formed(&run(body)), Ok(()));

        rejected(
            &run(vec![start("sa"), end("sa"), start("sa"), end("sa")]),
            "started twice",
        );
        let mut nested = start("sb");
        nested["parentSubagentRunId"] = json!("nobody");
        rejected(&run(vec![nested, end("sb")]), "unknown parentSubagentRunId");
        let mut body = vec![start("sa")];
        body.extend(text("m1"));
        body.extend(tagged(tool("c1", "m1"), "sa"));
        body.push(end("sa"));
        rejected(&run(body), "its message `m1`");
        let mut body = vec![start("sa")];
        let mut message = tagged(text("m1"), "sa");
        message[1]["subagentRunId"] = json!("sb");
        body.extend(message);
        body.push(end("sa"));
        rejected(&run(body), "was opened by `sa`");
    }

    #[test]
    fn verifier_rejects_reasoning_and_steps_out_of_order() {
        rejected(
            &run(vec![
                json!({"type":"REASONING_MESSAGE_START","messageId":"r"}),
            ]),
            "must be \"reasoning\"",
        );
        rejected(
            &run(vec![json!({"type":"REASONING_END","messageId":"r"})]),
            "no active reasoning span",
        );
        rejected(
            &run(vec![json!({"type":"REASONING_START","messageId":"r"})]),
            "reasoning spans",
        );
        rejected(
            &run(vec![json!({"type":"STEP_FINISHED","stepName":"s"})]),
            "no active step",
        );
        rejected(
            &run(vec![json!({"type":"STEP_STARTED","stepName":"s"})]),
            "steps",
        );
    }

    #[test]
    fn verifier_rejects_wire_format_mistakes() {
        let mut float_time = started();
        float_time["timestamp"] = json!(1.5);
        rejected(&[float_time, finished()], "must be an integer");
        rejected(
            &run(vec![
                json!({"type":"TEXT_MESSAGE_START","messageId":"m","name":null}),
            ]),
            "`name` is null",
        );
        let mut null_code = vec![
            started(),
            json!({"type":"RUN_ERROR","message":"x","code":null}),
        ];
        rejected(&null_code, "`code` is null");
        null_code[1] = json!({"type":"RUN_ERROR","message":"x","usage":[{"model":null}]});
        rejected(&null_code, "`usage[0].model` is null");
        let mut bad_outcome = finished();
        bad_outcome["outcome"] = json!({"type":"interrupt","interrupts":[]});
        rejected(&[started(), bad_outcome], "at least one interrupt");
    }

    #[test]
    fn zero_x_check_catches_what_0_0_59_rejects() {
        let mut plain = run(tool("c", "m"));
        plain.insert(
            4,
            json!({"type":"TOOL_CALL_RESULT","messageId":"t","toolCallId":"c","content":"ok"}),
        );
        assert_eq!(check_0x_compatible(&plain), Ok(()));
        let mut interrupted = finished();
        interrupted["outcome"] =
            json!({"type":"interrupt","interrupts":[{"id":"i","reason":"tool_call"}]});
        assert_eq!(check_0x_compatible(&[started(), interrupted]), Ok(()));

        let mut pending = finished();
        pending["outcome"] = json!({"type":"success","pendingToolCallIds":["c"]});
        assert!(check_0x_compatible(&[started(), pending]).is_err());
        let mut cancelled = finished();
        cancelled["outcome"] = json!({"type":"cancelled"});
        assert!(check_0x_compatible(&[started(), cancelled]).is_err());
        let parts = json!({"type":"TOOL_CALL_RESULT","messageId":"t","toolCallId":"c","content":[{"type":"text","text":"ok"}]});
        assert!(check_0x_compatible(&[started(), parts, finished()]).is_err());
        let file = json!({"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":[{"type":"image","source":{"type":"file","value":"f"}}]}]});
        assert!(check_0x_compatible(&[started(), file, finished()]).is_err());
        assert!(
            check_0x_compatible(&[started(), json!({"type":"NEW_THING"}), finished()]).is_err()
        );
    }
}
