//! Spawning the app against the fake upstream, posting runs, reading SSE, building inputs.

use std::collections::BTreeMap;

use agui_host::settings::{LlmProvider, Settings, ToolKindSettings, ToolSettings};
use serde_json::{json, Value};

use crate::fake_llm::FakeLlm;

/// The API key the app is configured with; it must never show up in what the app sends back.
pub(crate) const API_KEY: &str = "test-key";

#[derive(Debug)]
pub(crate) struct TestApp {
    pub(crate) address: String,
    pub(crate) fake: FakeLlm,
    pub(crate) client: reqwest::Client,
}

/// The embedded defaults on a random loopback port, talking to `fake`, with retries off.
pub(crate) fn test_settings(fake: &FakeLlm) -> Settings {
    let mut settings = Settings::embedded_default().expect("embedded settings");
    settings.server.host = "127.0.0.1".into();
    settings.server.port = 0;
    settings.llm.provider = LlmProvider::Openai;
    settings.llm.base_url = fake.base_url();
    settings.llm.api_key = API_KEY.into();
    settings.llm.max_retries = 0;
    settings
}

/// Starts the app on a random port, talking to a fresh fake upstream, with `configure` applied
/// last. Retries are off unless a test turns them on.
pub(crate) async fn spawn_app(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_until(configure, std::future::pending()).await.0
}

/// Like `spawn_app`, but the server shuts down (gracefully) once `shutdown` completes; the
/// task's result is the server's.
pub(crate) async fn spawn_app_until(
    configure: impl FnOnce(&mut Settings),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (TestApp, tokio::task::JoinHandle<std::io::Result<()>>) {
    let fake = FakeLlm::start().await;
    let mut settings = test_settings(&fake);
    configure(&mut settings);

    let app = agui_host::app::App::build(settings)
        .await
        .expect("the app builds");
    let address = format!("http://{}", app.local_addr());
    let task = tokio::spawn(app.run_until(shutdown));
    let app = TestApp {
        address,
        fake,
        client: reqwest::Client::new(),
    };
    (app, task)
}

/// A static server tool, as `config/default.toml` declares them.
pub(crate) fn static_tool(name: &str, result: Value) -> ToolSettings {
    ToolSettings {
        name: name.into(),
        description: format!("The {name} server tool."),
        parameters: Some(json!({"type": "object", "properties": {}})),
        approval: Default::default(),
        allow_edit: false,
        approval_message: None,
        background: false,
        kind: ToolKindSettings::Static {
            result,
            state: None,
            delay_ms: 0,
        },
    }
}

/// The result of the embedded `get_weather` tool, as configured.
pub(crate) fn default_weather_result() -> Value {
    let settings = Settings::embedded_default().expect("embedded settings");
    let tool = settings.agents[&settings.default_agent]
        .tools
        .iter()
        .find(|t| t.name == "get_weather")
        .expect("the default agent has get_weather");
    match &tool.kind {
        ToolKindSettings::Static { result, .. } => result.clone(),
        other => panic!("get_weather is configured as a static tool, not {other:?}"),
    }
}

impl TestApp {
    /// `GET <path>`.
    pub(crate) async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.address))
            .send()
            .await
            .expect("the app answers")
    }

    /// `DELETE /assistant/threads/<thread_id>`, with a bearer `token` when given; the status.
    pub(crate) async fn delete_thread(&self, thread_id: &str, token: Option<&str>) -> u16 {
        let mut request = self
            .client
            .delete(format!("{}/assistant/threads/{thread_id}", self.address));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request
            .send()
            .await
            .expect("the app answers")
            .status()
            .as_u16()
    }

    /// POSTs a run input the way `HttpAgent` does.
    pub(crate) async fn post_run(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post_raw(path, serde_json::to_vec(body).unwrap()).await
    }

    /// POSTs arbitrary bytes as `application/json` (for malformed input).
    pub(crate) async fn post_raw(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.address))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body)
            .send()
            .await
            .expect("the app answers")
    }

    /// Runs the agent and returns every event of the stream. Checks the transport on the way:
    /// 200, `text/event-stream`, LF-only framing, one `data: <json>` per frame, and that the run
    /// answers the request's thread and run ids.
    pub(crate) async fn run_events(&self, path: &str, body: &Value) -> Vec<Value> {
        let response = self.post_run(path, body).await;
        let status = response.status();
        let content_type = content_type(&response);
        let text = response.text().await.expect("the whole stream");
        assert_eq!(status, 200, "a valid run must stream; body: {text}");
        assert!(
            content_type.starts_with("text/event-stream"),
            "content-type {content_type:?}"
        );
        let events = parse_sse(&text);
        if let Some(started) = events.iter().find(|e| e["type"] == "RUN_STARTED") {
            assert_eq!(
                started["threadId"], body["threadId"],
                "RUN_STARTED.threadId"
            );
            assert_eq!(started["runId"], body["runId"], "RUN_STARTED.runId");
        }
        events
    }

    /// The JSON bodies the app sent upstream, in order.
    pub(crate) fn upstream_bodies(&self) -> Vec<Value> {
        self.fake.bodies()
    }
}

pub(crate) fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Parses a complete SSE body the way the reference client does: frames are split on `\n\n`
/// only (so `\r` anywhere is a bug), `:` comment frames are skipped, and every other frame must
/// be exactly one `data: <json>` line.
pub(crate) fn parse_sse(body: &str) -> Vec<Value> {
    assert!(
        !body.contains('\r'),
        "SSE must be framed with LF only; found CR in {body:?}"
    );
    assert!(
        body.is_empty() || body.ends_with("\n\n"),
        "the stream's last frame is unterminated: {body:?}"
    );
    body.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .filter_map(parse_frame)
        .collect()
}

fn parse_frame(frame: &str) -> Option<Value> {
    parse_frame_with_id(frame).map(|(_, event)| event)
}

/// A frame's event and its `id: <runId>:<seq>` line, when it has one (runs with a thread store).
pub(crate) fn parse_frame_with_id(frame: &str) -> Option<(Option<String>, Value)> {
    if frame.lines().all(|line| line.starts_with(':')) {
        return None;
    }
    let (id, frame) = match frame.strip_prefix("id: ") {
        Some(rest) => {
            let (id, data) = rest
                .split_once('\n')
                .unwrap_or_else(|| panic!("an id line must be followed by data: {frame:?}"));
            assert!(
                id.rsplit_once(':')
                    .is_some_and(|(_, seq)| seq.parse::<u64>().is_ok()),
                "an event id is `<runId>:<seq>`; got {id:?}"
            );
            (Some(id.to_owned()), data)
        }
        None => (None, frame),
    };
    let Some(payload) = frame.strip_prefix("data: ") else {
        panic!("every frame must be `data: <json>`; got {frame:?}");
    };
    assert!(
        !payload.contains('\n'),
        "one event per frame, on one data line; got {frame:?}"
    );
    let event: Value = serde_json::from_str(payload)
        .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {frame:?}"));
    assert!(event.is_object(), "an event is a JSON object: {frame:?}");
    Some((id, event))
}

/// Reads a stream incrementally, event by event (for tests that hang up mid-stream).
#[derive(Debug)]
pub(crate) struct EventReader {
    response: reqwest::Response,
    buffer: String,
}

impl EventReader {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        EventReader {
            response,
            buffer: String::new(),
        }
    }

    /// The next event, or `None` at the end of the stream.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_frame(&frame[..end]) {
                    return Some(event);
                }
                continue;
            }
            let chunk = self.response.chunk().await.expect("read the stream")?;
            let text = std::str::from_utf8(&chunk).expect("UTF-8 stream");
            assert!(!text.contains('\r'), "SSE must be framed with LF only");
            self.buffer.push_str(text);
        }
    }

    /// Hangs up: drops the response and with it the connection.
    pub(crate) fn hang_up(self) {
        drop(self.response);
    }
}

// ---- RunAgentInput builders ---------------------------------------------------------------

/// A RunAgentInput as the 1.0 client sends it (thread `t1`, run `r1`).
pub(crate) fn input(messages: Vec<Value>) -> Value {
    json!({
        "threadId": "t1",
        "runId": "r1",
        "protocolVersion": "1.0",
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    })
}

/// The same input as the 0.0.59 client (CopilotKit) sends it: no `protocolVersion`.
pub(crate) fn input_0x(messages: Vec<Value>) -> Value {
    let mut body = input(messages);
    body.as_object_mut().unwrap().remove("protocolVersion");
    body
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

pub(crate) fn user(text: &str) -> Value {
    json!({"id": new_id("user"), "role": "user", "content": text})
}

pub(crate) fn assistant(text: &str) -> Value {
    json!({"id": new_id("assistant"), "role": "assistant", "content": text})
}

pub(crate) fn developer(text: &str) -> Value {
    json!({"id": new_id("developer"), "role": "developer", "content": text})
}

/// An assistant message that only carries tool calls: `(id, name, arguments)`.
pub(crate) fn assistant_calls(calls: &[(&str, &str, &str)]) -> Value {
    json!({
        "id": new_id("assistant"),
        "role": "assistant",
        "toolCalls": calls.iter().map(|(id, name, arguments)| json!({
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        })).collect::<Vec<_>>(),
    })
}

pub(crate) fn tool_result(tool_call_id: &str, content: &str) -> Value {
    json!({"id": new_id("tool"), "role": "tool", "toolCallId": tool_call_id, "content": content})
}

/// A frontend tool declaration as CopilotKit sends it.
pub(crate) fn client_tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!("The {name} frontend tool."),
        "parameters": {
            "type": "object",
            "properties": {"background": {"type": "string"}},
            "required": ["background"],
        },
    })
}

// ---- Reading streams ----------------------------------------------------------------------

pub(crate) fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("<no type>"))
        .collect()
}

pub(crate) fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// The single event of that type; fails when there are none or several.
#[track_caller]
pub(crate) fn the<'a>(events: &'a [Value], ty: &str) -> &'a Value {
    let found = of_type(events, ty);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {ty} in {:?}",
        types(events)
    );
    found[0]
}

#[track_caller]
pub(crate) fn last(events: &[Value]) -> &Value {
    events.last().expect("a non-empty stream")
}

/// The text of each assistant text message, by message id, in order of first appearance.
pub(crate) fn texts(events: &[Value]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for event in of_type(events, "TEXT_MESSAGE_CONTENT") {
        let id = event["messageId"].as_str().unwrap().to_string();
        let delta = event["delta"].as_str().unwrap();
        match out.iter_mut().find(|(known, _)| *known == id) {
            Some((_, text)) => text.push_str(delta),
            None => out.push((id, delta.to_string())),
        }
    }
    out
}

/// The arguments streamed for each tool call id (all `TOOL_CALL_ARGS` deltas concatenated).
pub(crate) fn tool_args(events: &[Value]) -> BTreeMap<String, String> {
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    for event in of_type(events, "TOOL_CALL_ARGS") {
        args.entry(event["toolCallId"].as_str().unwrap().to_string())
            .or_default()
            .push_str(event["delta"].as_str().unwrap());
    }
    args
}

/// The JSON body of an error answer, checked to be `{"error":{"code":..,"message":..}}`.
pub(crate) async fn error_body(response: reqwest::Response) -> Value {
    let content_type = content_type(&response);
    let text = response.text().await.expect("error body");
    assert!(
        content_type.starts_with("application/json"),
        "an error is JSON, not {content_type:?}: {text}"
    );
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {text}"));
    assert!(body["error"]["code"].is_string(), "error.code: {body}");
    assert!(
        body["error"]["message"].is_string(),
        "error.message: {body}"
    );
    body
}

// ---- Reading upstream requests ------------------------------------------------------------

/// The text of an OpenAI message's `content`, whether a string or text parts.
pub(crate) fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

pub(crate) fn roles(upstream_body: &Value) -> Vec<&str> {
    upstream_body["messages"]
        .as_array()
        .expect("upstream messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("<no role>"))
        .collect()
}

/// The names of the tools offered upstream (empty when there is no `tools` key).
pub(crate) fn tool_names(upstream_body: &Value) -> Vec<&str> {
    upstream_body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap_or("<no name>"))
        .collect()
}

/// The invariant every upstream request must keep: each assistant tool call is answered by a
/// tool message before the next non-tool message, and each tool message answers such a call.
/// OpenAI refuses the request otherwise.
#[track_caller]
pub(crate) fn assert_tool_calls_answered(upstream_body: &Value) {
    let messages = upstream_body["messages"].as_array().expect("messages");
    let mut awaiting: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        match message["role"].as_str() {
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or("");
                let position = awaiting.iter().position(|a| a == id);
                assert!(
                    position.is_some(),
                    "message #{i} answers `{id}`, which is not an open call: {upstream_body}"
                );
                awaiting.remove(position.unwrap());
            }
            _ => {
                assert!(
                    awaiting.is_empty(),
                    "message #{i} comes while calls {awaiting:?} are unanswered: {upstream_body}"
                );
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    awaiting.push(call["id"].as_str().expect("tool call id").to_string());
                }
            }
        }
    }
    assert!(
        awaiting.is_empty(),
        "calls {awaiting:?} are unanswered at the end: {upstream_body}"
    );
}

/// The SSE reader is test code too.
mod tests {
    use super::parse_sse;

    #[test]
    fn sse_parser_reads_data_frames_and_skips_comments() {
        let events =
            parse_sse(": keep-alive\n\ndata: {\"type\":\"A\"}\n\n:\n\ndata: {\"type\":\"B\"}\n\n");
        assert_eq!(events.len(), 2);
        assert_eq!(events[1]["type"], "B");
    }

    #[test]
    #[should_panic(expected = "LF only")]
    fn sse_parser_rejects_crlf_framing() {
        parse_sse("data: {\"type\":\"A\"}\r\n\r\n");
    }

    #[test]
    #[should_panic(expected = "`data: <json>`")]
    fn sse_parser_rejects_named_events() {
        parse_sse("event: message\ndata: {\"type\":\"A\"}\n\n");
    }
}

/// Waits (30 s at most) for a server process started with `APP_TELEMETRY__JSON=true` and a piped
/// stdout to log that it listens. Returns that JSON log line, or `None` if it never came, and
/// the lines logged before it.
pub(crate) fn wait_until_listening(
    child: &mut std::process::Child,
) -> (Option<String>, Vec<String>) {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("a piped stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut before = Vec::new();
    loop {
        match lines_rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(line) if line.contains("agui-host listening") => return (Some(line), before),
            Ok(line) => before.push(line),
            Err(_) => return (None, before),
        }
    }
}
