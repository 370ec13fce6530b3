//! A fake OpenAI-compatible upstream, served by a small axum app inside the test process.
//!
//! Every request to `POST /v1/chat/completions` (or the Azure path
//! `POST /openai/deployments/{deployment}/chat/completions`, or Anthropic's `POST /v1/messages`
//! and OpenAI's `POST /v1/responses`, whose events `fake_messages` and `fake_responses` build) is
//! recorded and answered with the
//! next scripted [`Reply`] from a FIFO queue. An empty queue answers HTTP 500 "no scripted reply",
//! so a run that makes an unexpected extra model call fails loudly instead of hanging.
//!
//! Streaming replies also report whether *the client* (our app) hung up before the reply was
//! over: see [`FakeLlm::wait_for_disconnect`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures_util::stream;
use serde_json::Value;
use tokio::sync::watch;

/// One scripted answer of the fake model server.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// `200 text/event-stream`: each payload is written as `data: <payload>\n\n`.
    /// Include `chunks::done()` explicitly when the stream should end with `[DONE]`.
    Sse(Vec<String>),
    /// Like `Sse`, with a pause before every frame: slow enough to be cancelled mid-stream.
    SlowSse(Vec<String>, Duration),
    /// Like `Sse`, but every frame is written in one piece of the body (one HTTP chunk), as a
    /// fast model or a buffering proxy delivers a burst.
    Burst(Vec<String>),
    /// A plain HTTP error before any byte of a stream: status and body.
    Status(u16, String),
    /// An HTTP error carrying `Retry-After: <seconds>`.
    StatusRetryAfter(u16, String, u64),
    /// `200 text/event-stream` that sends the frames, then aborts the body mid-stream, so the
    /// connection drops with an error (no terminating chunk).
    Cut(Vec<String>),
    /// `200 text/event-stream` that sends the frames, then neither sends nor closes: a stalled
    /// stream.
    Stall(Vec<String>),
    /// Reads the request and sends no response headers for this long (then a 500).
    Silent(Duration),
}

/// What the fake received: enough to assert on the upstream request our app built.
#[derive(Debug, Clone)]
pub(crate) struct RecordedRequest {
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    pub(crate) headers: HeaderMap,
    /// The JSON body (`Value::Null` when the body was not JSON; see `raw_body`).
    pub(crate) body: Value,
    pub(crate) raw_body: String,
}

impl RecordedRequest {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Debug)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// How many streaming replies were dropped by the client before they were over.
    disconnects: watch::Sender<usize>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not hide the fake's state from the next assertion.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Handle on a running fake upstream. The server task lives as long as the test's runtime.
#[derive(Debug, Clone)]
pub(crate) struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeLlm {
    pub(crate) async fn start() -> FakeLlm {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake LLM");
        let addr = listener.local_addr().expect("fake LLM address");
        let shared = Arc::new(Shared {
            replies: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            disconnects: watch::Sender::new(0),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/messages", post(chat_completions))
            .route("/v1/responses", post(chat_completions))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(chat_completions),
            )
            .fallback(unknown_route)
            .with_state(shared.clone());
        tokio::spawn(async move {
            axum::serve(listener, router)
                .await
                .expect("fake LLM server failed");
        });
        FakeLlm { addr, shared }
    }

    /// OpenAI-style base URL including the version path: `http://127.0.0.1:PORT/v1`.
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bare origin, as an Azure resource endpoint: `http://127.0.0.1:PORT`.
    pub(crate) fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues the answer to the next request.
    pub(crate) fn push(&self, reply: Reply) {
        lock(&self.shared.replies).push_back(reply);
    }

    /// The most common script: one tool call, then (after its result) a text reply.
    pub(crate) fn push_call_then_text(&self, call: chunks::Call<'_>, text: &str) {
        self.push(Reply::Sse(chunks::tool_calls(&[call], false)));
        self.push(Reply::Sse(chunks::text_reply(&[text])));
    }

    /// Every request received so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The JSON bodies of every request received so far.
    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.requests().into_iter().map(|r| r.body).collect()
    }

    /// Scripted replies not consumed yet.
    pub(crate) fn unused_replies(&self) -> usize {
        lock(&self.shared.replies).len()
    }

    /// How many streaming replies the client abandoned before they were over.
    pub(crate) fn disconnects(&self) -> usize {
        *self.shared.disconnects.borrow()
    }

    /// Waits (at most `timeout`) until the client has closed a streaming reply before its end.
    pub(crate) async fn wait_for_disconnect(&self, timeout: Duration) -> bool {
        let mut rx = self.shared.disconnects.subscribe();
        let waited =
            tokio::time::timeout(timeout, async { rx.wait_for(|n| *n > 0).await.is_ok() }).await;
        waited == Ok(true)
    }
}

async fn chat_completions(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    record(&shared, request).await;
    let next = lock(&shared.replies).pop_front();
    match next {
        None => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":{"message":"fake LLM: no scripted reply for this request","type":"test_harness"}}"#
                .to_string(),
            None,
        ),
        Some(Reply::Status(status, body)) => error_response(status_code(status), body, None),
        Some(Reply::StatusRetryAfter(status, body, secs)) => {
            error_response(status_code(status), body, Some(secs))
        }
        Some(Reply::Sse(frames)) => sse_response(&shared, frames, Duration::ZERO, false),
        Some(Reply::SlowSse(frames, delay)) => sse_response(&shared, frames, delay, false),
        Some(Reply::Burst(frames)) => {
            let whole: String = frames
                .iter()
                .map(|frame| sse_frame(frame.as_str()))
                .collect();
            event_stream_response(stream::iter([Ok(Bytes::from(whole))]))
        }
        Some(Reply::Cut(frames)) => sse_response(&shared, frames, Duration::ZERO, true),
        Some(Reply::Stall(frames)) => stalling_sse_response(&shared, frames),
        Some(Reply::Silent(wait)) => {
            tokio::time::sleep(wait).await;
            error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                r#"{"error":{"message":"fake LLM: silent too long"}}"#.to_string(),
                None,
            )
        }
    }
}

async fn unknown_route(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    // Recorded too, so a test that asserts on the path sees where the app really went.
    let path = request.uri().path().to_string();
    record(&shared, request).await;
    (
        StatusCode::NOT_FOUND,
        format!("fake LLM: no route for {path}"),
    )
        .into_response()
}

async fn record(shared: &Shared, request: Request) {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let raw_body = String::from_utf8_lossy(&bytes).into_owned();
    lock(&shared.requests).push(RecordedRequest {
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        raw_body,
    });
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).expect("a valid HTTP status in a scripted reply")
}

fn error_response(status: StatusCode, body: String, retry_after: Option<u64>) -> Response {
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain"
    };
    let mut response = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, secs.to_string().parse().unwrap());
    }
    response
}

/// Counts a disconnect when dropped before the stream was over: hyper drops the response body
/// when the peer goes away, which drops this guard with the stream.
#[derive(Debug)]
struct DisconnectGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.disconnects.send_modify(|n| *n += 1);
        }
    }
}

#[derive(Debug)]
struct SseState {
    frames: VecDeque<String>,
    delay: Duration,
    cut: bool,
    guard: DisconnectGuard,
}

fn sse_response(shared: &Arc<Shared>, frames: Vec<String>, delay: Duration, cut: bool) -> Response {
    let state = SseState {
        frames: frames.into(),
        delay,
        cut,
        guard: DisconnectGuard {
            shared: shared.clone(),
            finished: false,
        },
    };
    let body = stream::unfold(state, |mut state| async move {
        if let Some(frame) = state.frames.pop_front() {
            if !state.delay.is_zero() {
                tokio::time::sleep(state.delay).await;
            }
            let bytes = Bytes::from(sse_frame(&frame));
            return Some((Ok::<Bytes, std::io::Error>(bytes), state));
        }
        // The script is over: whatever happens next is not the client hanging up.
        state.guard.finished = true;
        if state.cut {
            state.cut = false;
            // Pending for a moment makes hyper flush the status line and the frames first, so
            // the client sees a stream that began and then broke, not a failed request.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let error = std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "fake LLM cut the stream",
            );
            return Some((Err(error), state));
        }
        None
    });
    event_stream_response(body)
}

/// The frames, then a body that stays open and silent until the client hangs up (which counts
/// as a disconnect).
fn stalling_sse_response(shared: &Arc<Shared>, frames: Vec<String>) -> Response {
    let guard = DisconnectGuard {
        shared: shared.clone(),
        finished: false,
    };
    let body = stream::unfold(
        (VecDeque::from(frames), guard),
        |(mut frames, guard)| async move {
            let Some(frame) = frames.pop_front() else {
                return std::future::pending().await;
            };
            let bytes = Bytes::from(sse_frame(&frame));
            Some((Ok::<Bytes, std::io::Error>(bytes), (frames, guard)))
        },
    );
    event_stream_response(body)
}

/// One SSE frame: `data: <payload>`, or a frame that names its event (`event: ...` first, as
/// the Messages API sends every one) as it is.
fn sse_frame(frame: &str) -> String {
    if frame.starts_with("event: ") {
        format!("{frame}\n\n")
    } else {
        format!("data: {frame}\n\n")
    }
}

/// A `200 text/event-stream` response streaming `body`.
fn event_stream_response(
    body: impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .expect("SSE response")
}

/// Builders of chat-completion stream payloads shaped like real OpenAI output.
pub(crate) mod chunks {
    use serde_json::{json, Value};

    /// The model named in every chunk; also the default `llm.model`, so "the model" means one
    /// thing whether a test reads it from the request or from the reply.
    pub(crate) const MODEL: &str = "gpt-4o-mini";

    /// A tool call as the model emits it: id, function name, argument JSON text.
    pub(crate) type Call<'a> = (&'a str, &'a str, &'a str);

    fn chunk(choices: Value) -> Value {
        json!({
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": choices,
        })
    }

    fn delta(delta: Value) -> String {
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}])).to_string()
    }

    /// The first chunk of every OpenAI stream: the role, with empty content.
    pub(crate) fn role() -> String {
        delta(json!({"role": "assistant", "content": ""}))
    }

    pub(crate) fn text(text: &str) -> String {
        delta(json!({"content": text}))
    }

    /// A reasoning delta in `field`: `reasoning_content` (DeepSeek, vLLM, LM Studio) or
    /// `reasoning` (OpenRouter, Ollama).
    pub(crate) fn reasoning(field: &str, text: &str) -> String {
        delta(json!({ field: text }))
    }

    pub(crate) fn finish(reason: &str) -> String {
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": reason}])).to_string()
    }

    /// The final usage chunk (`stream_options.include_usage`): no choices.
    pub(crate) fn usage(prompt_tokens: u64, completion_tokens: u64) -> String {
        let mut usage = chunk(json!([]));
        usage["usage"] = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        });
        usage.to_string()
    }

    pub(crate) fn done() -> String {
        "[DONE]".to_string()
    }

    /// A mid-stream error frame, as OpenAI-compatible servers send when they fail after 200.
    pub(crate) fn error(message: &str) -> String {
        json!({"error": {"message": message, "type": "server_error", "code": null}}).to_string()
    }

    /// Splits `text` into fragments of 1 to 8 characters, pseudo-randomly but reproducibly
    /// (seeded from `seed`), never inside a UTF-8 character.
    pub(crate) fn split(text: &str, seed: &str) -> Vec<String> {
        // FNV-1a of the seed, then xorshift64.
        let mut state = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) | 1;
        let chars: Vec<char> = text.chars().collect();
        let mut fragments = Vec::new();
        let mut at = 0;
        while at < chars.len() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = 1 + (state % 8) as usize;
            let end = (at + len).min(chars.len());
            fragments.push(chars[at..end].iter().collect());
            at = end;
        }
        fragments
    }

    /// The tool-call deltas of one model turn. The first chunk of each call carries `index`,
    /// `id`, `type` and `function.name` with empty arguments; the following ones carry only
    /// `index` and an argument fragment of 1 to 8 characters. With `interleave`, the calls'
    /// chunks alternate round-robin (attribution must go by `index`); without, each call is
    /// sent whole before the next, as OpenAI does.
    pub(crate) fn tool_call_deltas(calls: &[Call<'_>], interleave: bool) -> Vec<String> {
        let per_call: Vec<Vec<String>> = calls
            .iter()
            .enumerate()
            .map(|(index, (id, name, arguments))| {
                let mut frames = vec![delta(json!({"tool_calls": [{
                    "index": index,
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]}))];
                frames.extend(split(arguments, id).into_iter().map(|fragment| {
                    delta(json!({"tool_calls": [{
                        "index": index,
                        "function": {"arguments": fragment},
                    }]}))
                }));
                frames
            })
            .collect();
        if !interleave {
            return per_call.into_iter().flatten().collect();
        }
        let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
        (0..longest)
            .flat_map(|round| per_call.iter().filter_map(move |frames| frames.get(round)))
            .cloned()
            .collect()
    }

    /// A complete text answer: role, one delta per part, `finish_reason: "stop"`, `[DONE]`.
    pub(crate) fn text_reply(parts: &[&str]) -> Vec<String> {
        let mut frames = vec![role()];
        frames.extend(parts.iter().map(|part| text(part)));
        frames.push(finish("stop"));
        frames.push(done());
        frames
    }

    /// A complete tool-calling answer: role, the calls' deltas, `"tool_calls"`, `[DONE]`.
    pub(crate) fn tool_calls(calls: &[Call<'_>], interleave: bool) -> Vec<String> {
        text_then_tool_calls(&[], calls, interleave)
    }

    /// Text followed by tool calls in the same model turn.
    pub(crate) fn text_then_tool_calls(
        parts: &[&str],
        calls: &[Call<'_>],
        interleave: bool,
    ) -> Vec<String> {
        let mut frames = vec![role()];
        frames.extend(parts.iter().map(|part| text(part)));
        frames.extend(tool_call_deltas(calls, interleave));
        frames.push(finish("tool_calls"));
        frames.push(done());
        frames
    }

    /// Inserts a usage chunk before the final `[DONE]`.
    pub(crate) fn with_usage(
        mut frames: Vec<String>,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Vec<String> {
        let at = frames
            .iter()
            .rposition(|f| f == "[DONE]")
            .unwrap_or(frames.len());
        frames.insert(at, usage(prompt_tokens, completion_tokens));
        frames
    }
}

/// The fake itself is test code: these check it behaves as the tests above rely on.
mod tests {
    use super::chunks::{self, Call};
    use super::{FakeLlm, Reply};
    use serde_json::{json, Value};
    use std::collections::BTreeMap;
    use std::time::Duration;

    async fn post(fake: &FakeLlm, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}{path}", fake.root_url()))
            .header("authorization", "Bearer k")
            .json(&json!({"model": "m", "stream": true}))
            .send()
            .await
            .expect("reach the fake")
    }

    fn payloads(body: &str) -> Vec<String> {
        body.split("\n\n")
            .filter(|frame| !frame.is_empty())
            .map(|frame| {
                frame
                    .strip_prefix("data: ")
                    .expect("data frame")
                    .to_string()
            })
            .collect()
    }

    #[tokio::test]
    async fn fake_answers_scripted_replies_in_order_then_500() {
        let fake = FakeLlm::start().await;
        fake.push(Reply::Sse(vec!["one".into(), "[DONE]".into()]));
        fake.push(Reply::StatusRetryAfter(429, "slow down".into(), 3));

        let first = post(&fake, "/v1/chat/completions").await;
        assert_eq!(first.status(), 200);
        assert_eq!(payloads(&first.text().await.unwrap()), ["one", "[DONE]"]);

        let second = post(
            &fake,
            "/openai/deployments/dep/chat/completions?api-version=1",
        )
        .await;
        assert_eq!(second.status(), 429);
        assert_eq!(second.headers()["retry-after"], "3");

        let third = post(&fake, "/v1/chat/completions").await;
        assert_eq!(third.status(), 500);
        assert!(third.text().await.unwrap().contains("no scripted reply"));

        let requests = fake.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[1].path, "/openai/deployments/dep/chat/completions");
        assert_eq!(requests[1].query.as_deref(), Some("api-version=1"));
        assert_eq!(requests[0].header("authorization"), Some("Bearer k"));
        assert_eq!(requests[0].body["model"], "m");
        assert_eq!(requests[0].raw_body, r#"{"model":"m","stream":true}"#);
        assert_eq!(fake.unused_replies(), 0);
        assert_eq!(
            fake.disconnects(),
            0,
            "complete replies are not disconnects"
        );
    }

    #[tokio::test]
    async fn fake_cut_reply_fails_the_body_mid_stream() {
        let fake = FakeLlm::start().await;
        fake.push(Reply::Cut(vec!["one".into()]));
        let mut response = post(&fake, "/v1/chat/completions").await;
        assert_eq!(response.status(), 200, "the stream begins normally");
        let mut received = Vec::new();
        let ending = loop {
            match response.chunk().await {
                Ok(Some(bytes)) => received.extend_from_slice(&bytes),
                other => break other,
            }
        };
        assert_eq!(
            received, b"data: one\n\n",
            "the frames arrive before the cut"
        );
        assert!(
            ending.is_err(),
            "a cut stream ends in an error, got {ending:?}"
        );
        assert_eq!(
            fake.disconnects(),
            0,
            "a cut is the fake's doing, not a disconnect"
        );
    }

    #[tokio::test]
    async fn fake_notices_a_client_that_hangs_up_mid_stream() {
        let fake = FakeLlm::start().await;
        let frames = (0..200).map(|i| i.to_string()).collect();
        fake.push(Reply::SlowSse(frames, Duration::from_millis(20)));
        let mut response = post(&fake, "/v1/chat/completions").await;
        let first = response.chunk().await.unwrap().expect("a first frame");
        assert_eq!(&first[..], b"data: 0\n\n");
        assert!(
            !fake.wait_for_disconnect(Duration::from_millis(100)).await,
            "no disconnect while the client still reads"
        );
        drop(response);
        assert!(fake.wait_for_disconnect(Duration::from_secs(2)).await);
    }

    /// Reassembles the tool calls of a delta stream the way a correct consumer must.
    fn reassemble(frames: &[String]) -> BTreeMap<u64, (String, String, String)> {
        let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
        for frame in frames {
            let chunk: Value = serde_json::from_str(frame).unwrap();
            for call in chunk["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let entry = calls.entry(call["index"].as_u64().unwrap()).or_default();
                if let Some(id) = call["id"].as_str() {
                    assert!(entry.0.is_empty(), "id sent twice for one index");
                    entry.0 = id.to_string();
                    entry.1 = call["function"]["name"].as_str().unwrap().to_string();
                } else {
                    assert!(call.get("type").is_none() && call["function"].get("name").is_none());
                }
                let fragment = call["function"]["arguments"].as_str().unwrap();
                assert!(fragment.chars().count() <= 8);
                entry.2.push_str(fragment);
            }
        }
        calls
    }

    #[test]
    fn tool_call_deltas_split_and_interleave_arguments_by_index() {
        let calls: [Call<'_>; 2] = [
            ("call_a", "get_weather", r#"{"location":"Paris, France"}"#),
            (
                "call_b",
                "get_time",
                r#"{"zone":"Europe/Zürich","format":"24h"}"#,
            ),
        ];
        let frames = chunks::tool_call_deltas(&calls, true);
        let calls_back = reassemble(&frames);
        assert_eq!(calls_back.len(), 2);
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            assert_eq!(
                calls_back[&(index as u64)],
                (id.to_string(), name.to_string(), arguments.to_string())
            );
        }
        // Interleaved: the second call starts before the first one's arguments are over.
        let index_of = |frame: &String| {
            let chunk: Value = serde_json::from_str(frame).unwrap();
            chunk["choices"][0]["delta"]["tool_calls"][0]["index"]
                .as_u64()
                .unwrap()
        };
        let order: Vec<u64> = frames.iter().map(index_of).collect();
        let last_of_first = order.iter().rposition(|i| *i == 0).unwrap();
        let first_of_second = order.iter().position(|i| *i == 1).unwrap();
        assert!(
            first_of_second < last_of_first,
            "not interleaved: {order:?}"
        );
        // Fragment sizes vary (a fixed size would not exercise reassembly).
        assert!(frames.len() > 6);
        // Not interleaved: each call whole, in order.
        let sequential: Vec<u64> = chunks::tool_call_deltas(&calls, false)
            .iter()
            .map(index_of)
            .collect();
        assert!(sequential.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn replies_are_shaped_like_openai_streams() {
        let frames = chunks::with_usage(chunks::text_reply(&["Hel", "lo"]), 3, 2);
        assert_eq!(frames.last().unwrap(), "[DONE]");
        let parsed: Vec<Value> = frames[..frames.len() - 1]
            .iter()
            .map(|f| serde_json::from_str(f).unwrap())
            .collect();
        assert_eq!(
            parsed[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(parsed[1]["choices"][0]["delta"]["content"], "Hel");
        assert_eq!(parsed[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(parsed[4]["choices"], json!([]));
        assert_eq!(parsed[4]["usage"]["total_tokens"], 5);
    }
}
