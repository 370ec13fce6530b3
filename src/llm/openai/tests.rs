//! The HTTP backend against scripted servers on loopback: request bodies and URLs, retries and
//! backoff, timeouts, cut connections, and error mapping.

use std::net::SocketAddr;
use std::sync::Mutex;

use futures_util::stream;
use futures_util::TryStreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::llm::{ChatMessage, ToolSpec, UserPart};

use super::super::{ChatToolCall, FinishReason, LlmClient, Usage};
use super::body::Dialect;
use super::*;
use crate::settings::{LlmProvider, Settings};

const KEY: &str = "sk-test-key-0123456789";

/// What the test server does with one connection.
enum Reply {
    /// Writes these bytes, then closes.
    Raw(String),
    /// Writes these bytes, then waits for the client to close and reports it.
    HoldOpen(String),
    /// Reads the request and never answers.
    Silent,
}

struct Captured {
    head: String,
    body: Value,
}

struct TestServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Captured>>>,
    closed: mpsc::UnboundedReceiver<()>,
}

impl TestServer {
    fn count(&self) -> usize {
        self.requests.lock().expect("lock").len()
    }
    fn request(&self, i: usize) -> (String, Value) {
        let requests = self.requests.lock().expect("lock");
        (requests[i].head.clone(), requests[i].body.clone())
    }
}

/// A one-connection-per-reply HTTP/1.1 server on loopback.
/// The client's stream for `hello_request()` is the hello reply, and ends well.
async fn assert_says_hello(client: &LlmClient) {
    let events: Vec<LlmEvent> = client
        .stream_chat(hello_request())
        .try_collect()
        .await
        .expect("ok");
    assert_eq!(events, hello_events());
}

async fn serve(replies: Vec<Reply>) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let captured = Arc::clone(&requests);
    tokio::spawn(async move {
        for reply in replies {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let request = read_request(&mut socket).await;
            captured.lock().expect("lock").push(request);
            match reply {
                Reply::Raw(bytes) => {
                    let _ = socket.write_all(bytes.as_bytes()).await;
                    let _ = socket.shutdown().await;
                }
                Reply::HoldOpen(bytes) => {
                    let _ = socket.write_all(bytes.as_bytes()).await;
                    let mut sink = [0u8; 64];
                    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                    let _ = closed_tx.send(());
                }
                Reply::Silent => {
                    let mut sink = [0u8; 64];
                    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                }
            }
        }
    });
    TestServer {
        addr,
        requests,
        closed,
    }
}

async fn read_request(socket: &mut TcpStream) -> Captured {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            while data.len() < end + 4 + length {
                let n = socket.read(&mut buf).await.expect("read");
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buf[..n]);
            }
            let body = serde_json::from_slice(&data[end + 4..]).unwrap_or(Value::Null);
            return Captured { head, body };
        }
        let n = socket.read(&mut buf).await.expect("read");
        if n == 0 {
            return Captured {
                head: String::from_utf8_lossy(&data).into_owned(),
                body: Value::Null,
            };
        }
        data.extend_from_slice(&buf[..n]);
    }
}

fn sse(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}")
}

fn status(code: u16, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {code} Status\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
}

const HELLO: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n",
    "data: [DONE]\n\n",
);

fn hello_events() -> Vec<LlmEvent> {
    vec![
        LlmEvent::TextDelta("Hello".into()),
        LlmEvent::Finished {
            reason: FinishReason::Stop,
        },
        LlmEvent::Usage(Usage {
            input_tokens: 4,
            output_tokens: 1,
            ..Usage::default()
        }),
    ]
}

fn settings_for(addr: SocketAddr) -> LlmSettings {
    let mut s = Settings::embedded_default().expect("defaults").llm;
    s.provider = LlmProvider::Openai;
    s.base_url = format!("http://{addr}/v1/");
    s.api_key = KEY.into();
    s.model = "test-model".into();
    s.max_retries = 2;
    s.connect_timeout_secs = 2;
    s.first_byte_timeout_secs = 5;
    s.idle_timeout_secs = 5;
    // The plain-HTTP client; `the_growing_buffer_client_sends_the_same_request` covers reqwest.
    s.read_buffer_bytes = 8192;
    s
}

fn hello_request() -> ChatRequest {
    ChatRequest {
        model: None,
        messages: vec![ChatMessage::user_text("hi")],
        tools: vec![],
        forced_tool: None,
    }
}

async fn collect(client: &LlmClient, request: ChatRequest) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream_chat(request).collect().await
}

fn the_error(items: &[Result<LlmEvent, LlmError>]) -> &LlmError {
    match items.last() {
        Some(Err(error)) => error,
        other => panic!("expected an error last, got {other:?}"),
    }
}

#[test]
fn request_body_uses_the_openai_schema() {
    let mut s = settings_for("127.0.0.1:9".parse().expect("addr"));
    s.temperature = Some(0.5);
    s.max_tokens = Some(256);
    let backend = HttpBackend::new(&s, Flavor::OpenAi).expect("backend");
    let body: Value = serde_json::from_slice(
        &backend
            .request_body(&every_message_kind_request())
            .expect("body"),
    )
    .expect("json");
    assert_eq!(
        body,
        json!({
            "model": "override",
            "stream": true,
            "stream_options": { "include_usage": true },
            "temperature": 0.5,
            "max_tokens": 256,
            "messages": [
                { "role": "system", "content": "sys" },
                { "role": "user", "content": [
                    { "type": "text", "text": "look" },
                    { "type": "image_url", "image_url": { "url": "data:image/png;base64,AAAA" } }
                ] },
                { "role": "assistant", "tool_calls": [
                    { "id": "c1", "type": "function", "function": { "name": "f", "arguments": "{}" } }
                ] },
                { "role": "tool", "tool_call_id": "c1", "content": "42" },
                { "role": "assistant", "content": "done" }
            ],
            "tools": [
                { "type": "function", "function": { "name": "f", "description": "does f",
                  "parameters": {"type":"object","properties":{"a":{"type":"string"}}} } },
                { "type": "function", "function": { "name": "g",
                  "parameters": {"type":"object","properties":{}} } }
            ]
        })
    );
}

#[test]
fn request_body_leaves_out_what_is_not_wanted() {
    // No tools: no `tools` key; no usage wanted: no `stream_options`; default model.
    let mut s = settings_for("127.0.0.1:9".parse().expect("addr"));
    s.stream_usage = false;
    s.temperature = None;
    s.max_tokens = None;
    let backend = HttpBackend::new(&s, Flavor::OpenAi).expect("backend");
    let body: Value =
        serde_json::from_slice(&backend.request_body(&hello_request()).expect("body"))
            .expect("json");
    assert_eq!(
        body,
        json!({
            "model": "test-model",
            "stream": true,
            "messages": [{ "role": "user", "content": "hi" }]
        })
    );
}

/// A request with a message of every kind, a model override and a tool with no parameters.
fn every_message_kind_request() -> ChatRequest {
    ChatRequest {
        model: Some("override".into()),
        messages: vec![
            ChatMessage::System {
                content: "sys".into(),
            },
            ChatMessage::User {
                content: vec![
                    UserPart::Text("look".into()),
                    UserPart::ImageUrl {
                        url: "data:image/png;base64,AAAA".into(),
                    },
                ],
            },
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: None,
                tool_calls: vec![ChatToolCall {
                    id: "c1".into(),
                    name: "f".into(),
                    arguments: String::new(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                content: "42".into(),
            },
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: Some("done".into()),
                tool_calls: vec![],
            },
        ],
        tools: vec![
            ToolSpec {
                name: "f".into(),
                description: "does f".into(),
                parameters: json!({"type":"object","properties":{"a":{"type":"string"}}}).into(),
            },
            ToolSpec {
                name: "g".into(),
                description: String::new(),
                parameters: Value::Null.into(),
            },
        ],
        forced_tool: None,
    }
}

#[test]
fn endpoint_urls() {
    let mut s = settings_for("127.0.0.1:9".parse().expect("addr"));
    for (base, expected) in [
        ("http://h:1/v1", "http://h:1/v1/chat/completions"),
        ("http://h:1/v1/", "http://h:1/v1/chat/completions"),
        (
            "http://h:1/v1/chat/completions",
            "http://h:1/v1/chat/completions",
        ),
        ("", "https://api.openai.com/v1/chat/completions"),
    ] {
        s.base_url = base.into();
        let backend = HttpBackend::new(&s, Flavor::OpenAi).expect("backend");
        assert_eq!(backend.url.as_str(), expected, "{base}");
    }
    s.base_url = "https://res.openai.azure.com/".into();
    s.azure_deployment = "my deploy".into();
    let backend = HttpBackend::new(&s, Flavor::Azure).expect("backend");
    assert_eq!(
        backend.url.as_str(),
        "https://res.openai.azure.com/openai/deployments/my%20deploy/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        backend.log_url,
        "https://res.openai.azure.com/openai/deployments/my%20deploy/chat/completions"
    );
}

#[test]
fn retries_wait_125_ms_doubling_to_4_s_and_stop_at_max_retries() {
    let mut s = settings_for("127.0.0.1:9".parse().expect("addr"));
    s.max_retries = 7;
    let backend = HttpBackend::new(&s, Flavor::OpenAi).expect("backend");
    let waits: Vec<Duration> = backend.retry_policy().waits().collect();
    assert_eq!(waits.len(), 7);
    for (wait, base_ms) in waits.iter().zip([125, 250, 500, 1000, 2000, 4000, 4000]) {
        let base = Duration::from_millis(base_ms);
        assert!(*wait >= base && *wait < 2 * base, "{wait:?} for {base:?}");
    }
}

#[test]
fn retry_after_headers() {
    let mut headers = HeaderMap::new();
    assert_eq!(retry_after(&headers), None);
    headers.insert("retry-after", HeaderValue::from_static("3"));
    assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
    headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
    assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
    let mut headers = HeaderMap::new();
    headers.insert(
        "retry-after",
        HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
    );
    assert_eq!(retry_after(&headers), None);
    headers.insert("retry-after", HeaderValue::from_static("-1"));
    assert_eq!(retry_after(&headers), None);
}

#[test]
fn upstream_messages_are_found() {
    assert_eq!(
        upstream_message(r#"{"error":{"message":"m1","type":"x"}}"#).as_deref(),
        Some("m1")
    );
    assert_eq!(upstream_message(r#"{"error":"m2"}"#).as_deref(), Some("m2"));
    assert_eq!(
        upstream_message(r#"{"detail":"m3"}"#).as_deref(),
        Some("m3")
    );
    assert_eq!(upstream_message("<html>"), None);
}

#[tokio::test]
async fn openai_request_and_stream() {
    let mut server = serve(vec![Reply::Raw(sse(HELLO))]).await;
    let mut s = settings_for(server.addr);
    s.extra_headers
        .insert("X-Gateway".into(), "gateway-value".into());
    let client = LlmClient::new(&s).expect("client");
    let items = collect(&client, hello_request()).await;
    let events: Vec<LlmEvent> = items.into_iter().map(|i| i.expect("ok")).collect();
    assert_eq!(events, hello_events());
    let (head, body) = server.request(0);
    let lower = head.to_ascii_lowercase();
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{head}"
    );
    assert!(
        lower.contains(&format!(
            "authorization: bearer {}",
            KEY.to_ascii_lowercase()
        )),
        "{head}"
    );
    assert!(lower.contains("x-gateway: gateway-value"), "{head}");
    assert!(lower.contains("content-type: application/json"), "{head}");
    assert!(lower.contains("accept: text/event-stream"), "{head}");
    assert!(lower.contains("user-agent: agui-host/"), "{head}");
    assert!(lower.contains(&format!("host: {}", server.addr)), "{head}");
    assert!(
        lower.contains(&format!(
            "content-length: {}",
            serde_json::to_vec(&body).expect("json").len()
        )),
        "{head}"
    );
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert!(server.closed.try_recv().is_err());
}

#[tokio::test]
async fn extra_headers_replace_the_defaults_they_name() {
    let server = serve(vec![Reply::Raw(sse(HELLO))]).await;
    let mut s = settings_for(server.addr);
    s.extra_headers
        .insert("Accept".into(), "text/event-stream; charset=utf-8".into());
    s.extra_headers
        .insert("User-Agent".into(), "gateway-client/2".into());
    assert_says_hello(&LlmClient::new(&s).expect("client")).await;
    let (head, _) = server.request(0);
    let lower = head.to_ascii_lowercase();
    assert_eq!(lower.matches("\r\naccept:").count(), 1, "{head}");
    assert!(
        lower.contains("accept: text/event-stream; charset=utf-8"),
        "{head}"
    );
    assert_eq!(lower.matches("\r\nuser-agent:").count(), 1, "{head}");
    assert!(lower.contains("user-agent: gateway-client/2"), "{head}");
}

#[tokio::test]
async fn azure_request() {
    let server = serve(vec![Reply::Raw(sse(HELLO))]).await;
    let mut s = settings_for(server.addr);
    s.provider = LlmProvider::Azure;
    s.base_url = format!("http://{}", server.addr);
    s.azure_deployment = "gpt4o".into();
    s.azure_api_version = "2024-10-21".into();
    assert_says_hello(&LlmClient::new(&s).expect("client")).await;
    let (head, body) = server.request(0);
    let lower = head.to_ascii_lowercase();
    assert!(
        head.starts_with(
            "POST /openai/deployments/gpt4o/chat/completions?api-version=2024-10-21 HTTP/1.1"
        ),
        "{head}"
    );
    assert!(
        lower.contains(&format!("api-key: {}", KEY.to_ascii_lowercase())),
        "{head}"
    );
    assert!(!lower.contains("authorization"), "{head}");
    assert!(body.get("model").is_none(), "{body}");
}

#[tokio::test]
async fn retries_rate_limits_and_overload_then_streams() {
    let server = serve(vec![
        Reply::Raw(status(
            429,
            "retry-after: 0\r\n",
            r#"{"error":{"message":"slow down"}}"#,
        )),
        Reply::Raw(status(503, "retry-after-ms: 10\r\n", "{}")),
        Reply::Raw(sse(HELLO)),
    ])
    .await;
    assert_says_hello(&LlmClient::new(&settings_for(server.addr)).expect("client")).await;
    assert_eq!(server.count(), 3);
}

#[tokio::test]
async fn gives_up_after_max_retries() {
    let server = serve(vec![
        Reply::Raw(status(500, "", "{}")),
        Reply::Raw(status(502, "", "{}")),
        Reply::Raw(sse(HELLO)),
    ])
    .await;
    let mut s = settings_for(server.addr);
    s.max_retries = 1;
    let client = LlmClient::new(&s).expect("client");
    let started = Instant::now();
    let items = collect(&client, hello_request()).await;
    assert_eq!(items.len(), 1);
    assert_eq!(the_error(&items).code(), "upstream_http_502");
    assert_eq!(server.count(), 2);
    // One backoff of 125..250 ms.
    assert!(started.elapsed() >= Duration::from_millis(120));
}

#[tokio::test]
async fn long_retry_after_and_client_errors_are_not_retried() {
    let server = serve(vec![
        Reply::Raw(status(429, "retry-after: 120\r\n", "{}")),
        Reply::Raw(status(
            401,
            "",
            &format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
        )),
        Reply::Raw(status(
            404,
            "",
            r#"{"error":{"message":"The model `nope` does not exist"}}"#,
        )),
    ])
    .await;
    let client = LlmClient::new(&settings_for(server.addr)).expect("client");

    let items = collect(&client, hello_request()).await;
    assert_eq!(the_error(&items).code(), "upstream_http_429");
    assert_eq!(server.count(), 1);

    let items = collect(&client, hello_request()).await;
    let error = the_error(&items);
    assert_eq!(error.code(), "upstream_auth");
    assert_eq!(server.count(), 2);
    let shown = format!("{} {} {error:?}", error.public_message(), error);
    assert!(!shown.contains(KEY), "{shown}");
    assert_eq!(
        error.public_message(),
        "the model server answered HTTP 401 (authentication failed: check the API key)"
    );

    let items = collect(&client, hello_request()).await;
    let error = the_error(&items);
    assert_eq!(error.code(), "upstream_http_404");
    assert_eq!(
        error.public_message(),
        "the model server answered HTTP 404 (not found: check the base URL and the model or deployment name): The model `nope` does not exist"
    );
    assert_eq!(server.count(), 3);
}

#[tokio::test]
async fn unreachable_server() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let mut s = settings_for(addr);
    s.max_retries = 1;
    let client = LlmClient::new(&s).expect("client");
    let items = collect(&client, hello_request()).await;
    assert_eq!(items.len(), 1);
    let error = the_error(&items);
    assert_eq!(error.code(), "upstream_unreachable");
    assert_eq!(
        error.public_message(),
        "could not reach the model server (connection refused)"
    );
    assert!(!error.to_string().contains(KEY));
}

#[tokio::test]
async fn first_byte_timeout() {
    let server = serve(vec![Reply::Silent]).await;
    let mut s = settings_for(server.addr);
    s.first_byte_timeout_secs = 1;
    let client = LlmClient::new(&s).expect("client");
    let items = collect(&client, hello_request()).await;
    let error = the_error(&items);
    assert_eq!(error.code(), "upstream_timeout");
    assert_eq!(
        error,
        &LlmError::Timeout {
            phase: TimeoutPhase::FirstByte,
            secs: 1
        }
    );
    assert_eq!(server.count(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn connection_cut_mid_body() {
    let server = serve(vec![Reply::Raw(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 5000\r\n\r\n{}",
        "data: {\"choices\":[{\"delta\":{\"content\":\"partial\"}}]}\n\n"
    ))])
    .await;
    let client = LlmClient::new(&settings_for(server.addr)).expect("client");
    let items = collect(&client, hello_request()).await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(LlmEvent::TextDelta("partial".into())));
    assert_eq!(the_error(&items).code(), "upstream_stream_cut");
    assert_eq!(server.count(), 1, "never retried once streaming began");
}

#[tokio::test]
async fn json_body_instead_of_a_stream() {
    let server = serve(vec![Reply::Raw(status(
        200,
        "",
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":1}}"#,
    ))])
    .await;
    assert_says_hello(&LlmClient::new(&settings_for(server.addr)).expect("client")).await;
}

#[tokio::test]
async fn lazy_and_dropping_closes_the_connection() {
    let mut server = serve(vec![Reply::HoldOpen(sse(
        "data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n",
    ))])
    .await;
    let client = LlmClient::new(&settings_for(server.addr)).expect("client");
    let mut stream = client.stream_chat(hello_request());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        server.count(),
        0,
        "nothing is sent before the stream is polled"
    );

    let first = stream.next().await;
    assert_eq!(first, Some(Ok(LlmEvent::TextDelta("first".into()))));
    drop(stream);
    let closed = tokio::time::timeout(Duration::from_secs(5), server.closed.recv()).await;
    assert_eq!(
        closed,
        Ok(Some(())),
        "the upstream connection closes on drop"
    );
}

fn reader(
    fragments: Vec<&'static str>,
    idle: u64,
) -> BodyReader<BoxStream<'static, Result<Bytes, String>>> {
    let body = stream::iter(
        fragments
            .into_iter()
            .map(|f| Ok::<_, String>(Bytes::from_static(f.as_bytes()))),
    )
    .chain(stream::pending())
    .boxed();
    BodyReader::new(
        body,
        Dialect::Chat,
        Some(Duration::from_secs(idle)),
        Redactor::default(),
    )
}

/// The error a reader gives when the reply went silent for `secs`.
fn idle_timeout(secs: u64) -> LlmError {
    LlmError::Timeout {
        phase: TimeoutPhase::Idle,
        secs,
    }
}

#[tokio::test(start_paused = true)]
async fn idle_timeout_mid_stream() {
    let mut reader = reader(
        vec!["data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"],
        30,
    );
    let started = Instant::now();
    assert_eq!(
        reader.next_event().await,
        Some(Ok(LlmEvent::TextDelta("a".into())))
    );
    assert_eq!(reader.next_event().await, Some(Err(idle_timeout(30))));
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(reader.next_event().await, None);
}

#[tokio::test(start_paused = true)]
async fn silence_after_finish_reason_ends_normally() {
    let mut reader = reader(
        vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}\n\n",
        ],
        10,
    );
    let mut events = Vec::new();
    while let Some(item) = reader.next_event().await {
        events.push(item.expect("no error"));
    }
    assert_eq!(
        events,
        vec![
            LlmEvent::TextDelta("a".into()),
            LlmEvent::Finished {
                reason: FinishReason::Stop
            },
            LlmEvent::Usage(Usage {
                input_tokens: 2,
                output_tokens: 1,
                ..Usage::default()
            })
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn broken_body_is_a_stream_cut() {
    let body = stream::iter(vec![
        Ok(Bytes::from_static(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        )),
        Err("connection reset by peer".to_owned()),
    ])
    .boxed();
    let mut reader = BodyReader::new(body, Dialect::Chat, None, Redactor::default());
    assert_eq!(
        reader.next_event().await,
        Some(Ok(LlmEvent::TextDelta("a".into())))
    );
    let Some(Err(error)) = reader.next_event().await else {
        panic!("expected an error");
    };
    assert_eq!(error.code(), "upstream_stream_cut");
    assert!(error.to_string().contains("connection reset by peer"));
    assert_eq!(reader.next_event().await, None);
}

/// The idle limit counts from the last chunk, however long the reply has been streaming: chunks
/// 20 s apart under a 30 s limit go on for 100 s, and only the silence after the last one ends
/// the reply, 30 s after it.
#[tokio::test(start_paused = true)]
async fn the_idle_limit_counts_from_the_last_chunk() {
    const CHUNK: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    let body = stream::unfold(0, |sent| async move {
        if sent == 5 {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(20)).await;
        Some((
            Ok::<_, String>(Bytes::from_static(CHUNK.as_bytes())),
            sent + 1,
        ))
    })
    .chain(stream::pending())
    .boxed();
    let mut reader = BodyReader::new(
        body,
        Dialect::Chat,
        Some(Duration::from_secs(30)),
        Redactor::default(),
    );
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(
            reader.next_event().await,
            Some(Ok(LlmEvent::TextDelta("a".into())))
        );
    }
    assert_eq!(started.elapsed(), Duration::from_secs(100));
    assert_eq!(reader.next_event().await, Some(Err(idle_timeout(30))));
    assert_eq!(started.elapsed(), Duration::from_secs(130));
}

/// With `llm.read_buffer_bytes = 0` a plain-HTTP server is reached through reqwest, which must
/// send the request the fixed-buffer client sends.
#[tokio::test]
async fn the_growing_buffer_client_sends_the_same_request() {
    let mut heads = Vec::new();
    for read_buffer_bytes in [8192, 0] {
        let server = serve(vec![Reply::Raw(sse(HELLO))]).await;
        let mut s = settings_for(server.addr);
        s.read_buffer_bytes = read_buffer_bytes;
        s.extra_headers
            .insert("X-Gateway".into(), "gateway-value".into());
        assert_says_hello(&LlmClient::new(&s).expect("client")).await;
        let (head, body) = server.request(0);
        let mut lines: Vec<String> = head
            .to_ascii_lowercase()
            .lines()
            .filter(|line| !line.starts_with("host:"))
            .map(str::to_owned)
            .collect();
        lines.sort();
        heads.push((lines, body));
    }
    assert_eq!(heads[0], heads[1]);
}

/// An idle limit too large to add to an instant is no limit, not a panic.
#[tokio::test(start_paused = true)]
async fn an_idle_limit_too_large_to_add_is_no_limit() {
    let body = stream::iter(vec![Ok::<_, String>(Bytes::from_static(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
    ))])
    .boxed();
    let mut reader = BodyReader::new(
        body,
        Dialect::Chat,
        Some(Duration::from_secs(u64::MAX)),
        Redactor::default(),
    );
    assert_eq!(
        reader.next_event().await,
        Some(Ok(LlmEvent::TextDelta("a".into())))
    );
    let end = reader.next_event().await;
    assert!(
        matches!(end, Some(Err(LlmError::StreamCut { .. }))),
        "{end:?}"
    );
}

/// `data:` lines of chunks carrying one delta each, as a server writes them.
fn chunk(delta: &Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta}]})
    )
}

fn text(text: &str) -> String {
    chunk(&json!({"content": text}))
}

fn reasoning(text: &str) -> String {
    chunk(&json!({"reasoning_content": text}))
}

fn call(index: u64, start: Option<(&str, &str)>, arguments: &str) -> String {
    let mut function = json!({"arguments": arguments});
    let mut call = json!({"index": index});
    if let Some((id, name)) = start {
        call["id"] = json!(id);
        function["name"] = json!(name);
    }
    call["function"] = function;
    chunk(&json!({"tool_calls": [call]}))
}

const FINISH: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// Every event a reader gives for a body that arrives in these pieces.
async fn read_pieces(pieces: Vec<String>, merge: bool) -> Vec<LlmEvent> {
    let body = stream::iter(
        pieces
            .into_iter()
            .map(|piece| Ok::<_, String>(Bytes::from(piece))),
    )
    .boxed();
    let mut reader =
        BodyReader::new(body, Dialect::Chat, None, Redactor::default()).merging_deltas(merge);
    let mut events = Vec::new();
    while let Some(item) = reader.next_event().await {
        events.push(item.expect("no error"));
    }
    events
}

fn delta(index: usize, start: Option<(&str, &str)>, arguments: &str) -> LlmEvent {
    LlmEvent::ToolCallDelta {
        index,
        id: start.map(|(id, _)| id.to_owned()),
        name: start.map(|(_, name)| name.to_owned()),
        arguments: arguments.to_owned(),
    }
}

/// One piece of a body carrying several chunks of each stream gives one delta per stream: the
/// reasoning, the answer and each call (its first delta, which names it, taking the arguments
/// that follow). With merging off, the same piece gives one delta per chunk.
#[tokio::test]
async fn deltas_that_arrive_in_one_piece_are_merged_per_message_and_call() {
    let chunks = [
        reasoning("Thin"),
        reasoning("king"),
        text("Hel"),
        text("lo"),
        call(0, Some(("call_a", "find")), "{\"q\""),
        call(0, None, ":1"),
        call(0, None, "}"),
        call(1, Some(("call_b", "show")), ""),
        call(1, None, "{}"),
        FINISH.to_owned(),
    ];
    let finished = LlmEvent::Finished {
        reason: FinishReason::Stop,
    };
    assert_eq!(
        read_pieces(vec![chunks.concat()], true).await,
        [
            LlmEvent::ReasoningDelta("Thinking".into()),
            LlmEvent::TextDelta("Hello".into()),
            delta(0, Some(("call_a", "find")), "{\"q\":1}"),
            delta(1, Some(("call_b", "show")), "{}"),
            finished.clone(),
        ]
    );
    assert_eq!(
        read_pieces(vec![chunks.concat()], false).await,
        [
            LlmEvent::ReasoningDelta("Thin".into()),
            LlmEvent::ReasoningDelta("king".into()),
            LlmEvent::TextDelta("Hel".into()),
            LlmEvent::TextDelta("lo".into()),
            delta(0, Some(("call_a", "find")), "{\"q\""),
            delta(0, None, ":1"),
            delta(0, None, "}"),
            delta(1, Some(("call_b", "show")), ""),
            delta(1, None, "{}"),
            finished,
        ]
    );
}

/// Nothing waits to be merged: deltas of separate pieces stay separate, and within a piece only
/// neighbours of one stream merge, so the order across streams is the model's.
#[tokio::test]
async fn only_neighbours_of_one_stream_and_one_piece_merge() {
    let separate = read_pieces(vec![text("Hel"), text("lo"), FINISH.to_owned()], true).await;
    assert_eq!(
        separate[..2],
        [
            LlmEvent::TextDelta("Hel".into()),
            LlmEvent::TextDelta("lo".into())
        ]
    );

    let interleaved = [
        call(0, Some(("call_a", "find")), "{"),
        call(1, Some(("call_b", "show")), "{"),
        call(0, None, "}"),
        call(1, None, "}"),
        reasoning("a"),
        text("b"),
        reasoning("c"),
        FINISH.to_owned(),
    ];
    assert_eq!(
        read_pieces(vec![interleaved.concat()], true).await,
        [
            delta(0, Some(("call_a", "find")), "{"),
            delta(1, Some(("call_b", "show")), "{"),
            delta(0, None, "}"),
            delta(1, None, "}"),
            LlmEvent::ReasoningDelta("a".into()),
            LlmEvent::TextDelta("b".into()),
            LlmEvent::ReasoningDelta("c".into()),
            LlmEvent::Finished {
                reason: FinishReason::Stop
            },
        ]
    );
}

/// A burst bigger than the limit streams in deltas of at most the limit, in order.
#[tokio::test]
async fn a_merged_delta_stops_at_the_limit() {
    let piece = "x".repeat(5000);
    let mut chunks: Vec<String> = (0..5).map(|_| text(&piece)).collect();
    chunks.push(FINISH.to_owned());
    let events = read_pieces(vec![chunks.concat()], true).await;
    let sizes: Vec<usize> = events
        .iter()
        .filter_map(|event| match event {
            LlmEvent::TextDelta(text) => Some(text.len()),
            _ => None,
        })
        .collect();
    // Three pieces fit under the limit, a fourth would not.
    const { assert!(body::MERGED_DELTA_LIMIT >= 15_000 && body::MERGED_DELTA_LIMIT < 20_000) };
    assert_eq!(sizes, [15_000, 10_000]);
}

#[test]
fn a_forced_tool_is_named_in_tool_choice() {
    let backend = HttpBackend::new(
        &settings_for("127.0.0.1:9".parse().expect("addr")),
        Flavor::OpenAi,
    )
    .expect("backend");
    let mut request = every_message_kind_request();
    request.forced_tool = Some("f".into());
    let body: Value =
        serde_json::from_slice(&backend.request_body(&request).expect("body")).expect("json");
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "f"}})
    );
    let unforced: Value = serde_json::from_slice(
        &backend
            .request_body(&every_message_kind_request())
            .expect("body"),
    )
    .expect("json");
    assert!(unforced.get("tool_choice").is_none(), "{unforced}");
}
