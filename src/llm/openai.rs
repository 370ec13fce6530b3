//! The HTTP backend: any OpenAI-compatible chat-completions server, and Azure OpenAI.
//!
//! It builds the request body with async-openai's request types, sends it with one shared
//! `reqwest::Client`, retries what is safe to retry before anything was streamed, and reads
//! the SSE body through [`StreamDecoder`] under an idle timeout. All waits use `tokio::time`, so
//! tests can pause the clock.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestMessageContentPartImage,
    ChatCompletionRequestMessageContentPartText, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionRequestUserMessageContentPart,
    ChatCompletionStreamOptions, ChatCompletionTool, ChatCompletionTools,
    CreateChatCompletionRequest, FunctionCall, FunctionObject, ImageUrl,
};
use bytes::Bytes;
use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt, TryStreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{StatusCode, Url};

use super::chunk::{ChunkParser, StreamDecoder};
use super::error::{LlmError, Redactor, TimeoutPhase, UnreachableCause};
use super::{ChatMessage, ChatRequest, LlmEvent, ToolSpec, UserPart};
use crate::settings::LlmSettings;

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// How much of an error response body we read (for the log and the upstream `message`).
const ERROR_BODY_LIMIT: usize = 4096;
/// How much of it goes into a log line.
const ERROR_LOG_CHARS: usize = 1024;
/// Largest non-streaming JSON body we accept from a server that ignored `stream: true`.
const JSON_BODY_LIMIT: usize = 16 * 1024 * 1024;
const RETRY_BASE: Duration = Duration::from_millis(250);
const RETRY_CAP: Duration = Duration::from_secs(8);
/// A longer `Retry-After` means the server is out for a while: fail now rather than hold the
/// user's run open.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// Which wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Azure,
}

pub(crate) struct HttpBackend {
    client: reqwest::Client,
    flavor: Flavor,
    /// The full endpoint, query included (Azure's `api-version`).
    url: Url,
    /// The endpoint without user info and query, for logs.
    log_url: String,
    /// The base URL without user info and query, for `describe`.
    display_base: String,
    /// Authorization and extra headers, all marked sensitive.
    headers: HeaderMap,
    default_model: String,
    azure_deployment: String,
    azure_api_version: String,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    stream_usage: bool,
    first_byte_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    max_retries: u32,
    redactor: Redactor,
}

// By hand: the derived one would print the headers, key included.
impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBackend")
            .field("flavor", &self.flavor)
            .field("url", &self.log_url)
            .field("default_model", &self.default_model)
            .finish_non_exhaustive()
    }
}

/// A zero duration in the settings means "no limit".
fn limit(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// `url` without user info and query: safe to log.
fn loggable(url: &Url) -> String {
    let mut url = url.clone();
    // Both fail only for URLs that cannot have credentials, which is fine to ignore.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.as_str().trim_end_matches('/').to_owned()
}

impl HttpBackend {
    pub(crate) fn new(settings: &LlmSettings, flavor: Flavor) -> Result<Self, LlmError> {
        let base = settings.base_url.trim();
        let base = match (base.is_empty(), flavor) {
            (false, _) => base,
            (true, Flavor::OpenAi) => DEFAULT_BASE_URL,
            (true, Flavor::Azure) => {
                return Err(LlmError::Config(
                    "provider azure needs llm.base_url (https://<resource>.openai.azure.com)"
                        .to_owned(),
                ))
            }
        };
        // The parse error never contains the URL itself, which may hold credentials.
        let base_url = Url::parse(base)
            .map_err(|e| LlmError::Config(format!("llm.base_url is not a valid URL ({e})")))?;
        if !matches!(base_url.scheme(), "http" | "https") {
            return Err(LlmError::Config(
                "llm.base_url must start with http:// or https://".to_owned(),
            ));
        }
        let deployment = settings.azure_deployment.trim();
        if flavor == Flavor::Azure && deployment.is_empty() {
            return Err(LlmError::Config(
                "provider azure needs llm.azure_deployment".to_owned(),
            ));
        }

        let mut url = base_url.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|()| LlmError::Config("llm.base_url cannot take a path".to_owned()))?;
            segments.pop_if_empty();
            match flavor {
                Flavor::OpenAi => {
                    segments.extend(["chat", "completions"]);
                }
                // `extend` percent-encodes the deployment name as one path segment.
                Flavor::Azure => {
                    segments.extend(["openai", "deployments", deployment, "chat", "completions"]);
                }
            }
        }
        // A base URL that already ends with the endpoint (a common copy-paste) is kept as is.
        if flavor == Flavor::OpenAi
            && base_url
                .path()
                .trim_end_matches('/')
                .ends_with("/chat/completions")
        {
            url = base_url.clone();
        }
        if flavor == Flavor::Azure {
            url.query_pairs_mut()
                .append_pair("api-version", settings.azure_api_version.trim());
        }

        let headers = build_headers(settings, flavor)?;
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("agui-host/", env!("CARGO_PKG_VERSION")))
            // A redirected POST loses its body, and custom auth headers (`api-key`, extra
            // headers) would follow it to another host: report the 3xx instead.
            .redirect(reqwest::redirect::Policy::none())
            // Bounded, so memory returns to its baseline after a burst of concurrent runs.
            .pool_max_idle_per_host(settings.pool_max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(settings.pool_idle_timeout_secs));
        if let Some(timeout) = limit(settings.connect_timeout_secs) {
            builder = builder.connect_timeout(timeout);
        }
        // No overall timeout: a streamed reply may legitimately last minutes. The first-byte
        // and idle timeouts below bound the waits instead.
        let client = builder
            .build()
            .map_err(|e| LlmError::Config(format!("could not build the HTTP client: {e}")))?;

        let secrets = std::iter::once(settings.api_key.clone())
            .chain(settings.extra_headers.values().cloned());
        Ok(Self {
            client,
            flavor,
            log_url: loggable(&url),
            display_base: loggable(&base_url),
            url,
            headers,
            default_model: match flavor {
                Flavor::OpenAi => settings.model.clone(),
                Flavor::Azure => deployment.to_owned(),
            },
            azure_deployment: deployment.to_owned(),
            azure_api_version: settings.azure_api_version.trim().to_owned(),
            temperature: settings.temperature,
            max_tokens: settings.max_tokens,
            stream_usage: settings.stream_usage,
            first_byte_timeout: limit(settings.first_byte_timeout_secs),
            idle_timeout: limit(settings.idle_timeout_secs),
            max_retries: settings.max_retries,
            redactor: Redactor::new(secrets),
        })
    }

    pub(crate) fn describe(&self) -> String {
        match self.flavor {
            Flavor::OpenAi => format!(
                "openai-compatible {} model {}",
                self.display_base, self.default_model
            ),
            Flavor::Azure => format!(
                "azure-openai {} deployment {} (api-version {})",
                self.display_base, self.azure_deployment, self.azure_api_version
            ),
        }
    }

    pub(crate) fn provider_id(&self) -> &'static str {
        match self.flavor {
            Flavor::OpenAi => "openai",
            Flavor::Azure => "azure",
        }
    }

    pub(crate) fn default_model(&self) -> &str {
        &self.default_model
    }

    fn model_for(&self, request: &ChatRequest) -> String {
        request
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .unwrap_or(&self.default_model)
            .to_owned()
    }

    /// The JSON body of a streaming chat-completions request.
    pub(crate) fn request_body(&self, request: &ChatRequest) -> Result<Vec<u8>, LlmError> {
        let tools: Vec<ChatCompletionTools> = request.tools.iter().map(wire_tool).collect();
        // `max_tokens` is deprecated by OpenAI in favour of `max_completion_tokens`, but it is
        // the one every OpenAI-compatible server (vLLM, Ollama, llama.cpp, Azure) reads.
        #[allow(deprecated)]
        let body = CreateChatCompletionRequest {
            messages: request.messages.iter().map(wire_message).collect(),
            model: self.model_for(request),
            stream: Some(true),
            stream_options: self.stream_usage.then_some(ChatCompletionStreamOptions {
                include_usage: Some(true),
                include_obfuscation: None,
            }),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            // Omitted entirely when empty: some servers reject `"tools": []`.
            tools: (!tools.is_empty()).then_some(tools),
            ..Default::default()
        };
        let mut value = serde_json::to_value(&body)
            .map_err(|e| LlmError::Config(format!("could not serialize the request: {e}")))?;
        // async-openai's `model` is a required `String`, but Azure's deployment URL already names
        // the model and an Azure body needs none, so it is removed after serialization.
        if self.flavor == Flavor::Azure {
            if let Some(object) = value.as_object_mut() {
                object.remove("model");
            }
        }
        serde_json::to_vec(&value)
            .map_err(|e| LlmError::Config(format!("could not serialize the request: {e}")))
    }

    /// Lazy: the request is sent when the stream is first polled.
    pub(crate) fn stream_chat(
        backend: Arc<Self>,
        request: ChatRequest,
    ) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
        enum State {
            Start(Arc<HttpBackend>, ChatRequest),
            Reading(Box<BodyReader<BoxStream<'static, Result<Bytes, String>>>>),
            Done,
        }
        // The unfold moves this future for every event: the request's future (retries and the
        // HTTP client's send) is boxed, so each event copies 384 bytes rather than 1 KB.
        stream::unfold(State::Start(backend, request), |state| async move {
            let mut reader = match state {
                State::Start(backend, request) => match Box::pin(backend.open(&request)).await {
                    Ok(reader) => reader,
                    Err(error) => return Some((Err(error), State::Done)),
                },
                State::Reading(reader) => reader,
                State::Done => return None,
            };
            let item = reader.next_event().await?;
            Some((item, State::Reading(reader)))
        })
        .boxed()
    }

    /// Sends the request (with retries) and wraps the response body.
    async fn open(
        &self,
        request: &ChatRequest,
    ) -> Result<Box<BodyReader<BoxStream<'static, Result<Bytes, String>>>>, LlmError> {
        let body = Bytes::from(self.request_body(request)?);
        tracing::debug!(
            url = %self.log_url,
            model = %self.model_for(request),
            messages = request.messages.len(),
            tools = request.tools.len(),
            body_bytes = body.len(),
            "model request"
        );
        let response = self.send_with_retries(body).await?;
        let json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
            });
        if json {
            tracing::debug!("the model server answered JSON instead of a stream");
        }
        let body = response
            .bytes_stream()
            .map_err(|e| error_chain(&e.without_url()))
            .boxed();
        Ok(Box::new(BodyReader::new(
            body,
            json,
            self.idle_timeout,
            self.redactor.clone(),
        )))
    }

    async fn send_with_retries(&self, body: Bytes) -> Result<reqwest::Response, LlmError> {
        let mut attempt: u32 = 0;
        loop {
            let failure = match self.send_once(body.clone()).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            if !failure.retryable || attempt >= self.max_retries {
                return Err(failure.error);
            }
            let delay = match failure.retry_after {
                Some(wait) if wait > RETRY_AFTER_CAP => {
                    tracing::warn!(
                        code = failure.error.code(),
                        retry_after_secs = wait.as_secs(),
                        "model server asked to wait longer than 30 s; not retrying"
                    );
                    return Err(failure.error);
                }
                Some(wait) => wait,
                None => backoff(attempt, jitter()),
            };
            attempt += 1;
            tracing::warn!(
                code = failure.error.code(),
                attempt,
                max_retries = self.max_retries,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "model request failed before streaming; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    async fn send_once(&self, body: Bytes) -> Result<reqwest::Response, Failure> {
        // The model call's span is current here: the upstream joins the run's trace.
        let mut trace_context = reqwest::header::HeaderMap::new();
        crate::telemetry::inject_trace_context(&mut trace_context);
        let request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .headers(trace_context)
            // Last, so extra headers may override the two above.
            .headers(self.headers.clone())
            .body(body);
        let response = match with_timeout(self.first_byte_timeout, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(self.send_failure(error)),
            Err(TimedOut) => {
                tracing::warn!(url = %self.log_url, "model server sent no response headers in time");
                // Not retried: the server may be busy generating, and a retry would pay twice.
                return Err(Failure {
                    error: LlmError::Timeout {
                        phase: TimeoutPhase::FirstByte,
                        secs: self.first_byte_timeout.map_or(0, |d| d.as_secs()),
                    },
                    retryable: false,
                    retry_after: None,
                });
            }
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        let body = self.read_error_body(response).await;
        tracing::warn!(
            url = %self.log_url,
            status = status.as_u16(),
            body = %self.redactor.log_prefix(&body, ERROR_LOG_CHARS),
            "model server answered an error"
        );
        Err(Failure {
            error: LlmError::Http {
                status: status.as_u16(),
                upstream_message: upstream_message(&body)
                    .and_then(|m| self.redactor.public_snippet(&m)),
                body_prefix: self.redactor.log_prefix(&body, ERROR_LOG_CHARS),
            },
            retryable: matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS
                    | StatusCode::INTERNAL_SERVER_ERROR
                    | StatusCode::BAD_GATEWAY
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT
            ),
            retry_after,
        })
    }

    fn send_failure(&self, error: reqwest::Error) -> Failure {
        let (is_builder, is_connect, is_request) =
            (error.is_builder(), error.is_connect(), error.is_request());
        let cause = unreachable_cause(&error);
        let detail = self.redactor.redact(&error_chain(&error.without_url()));
        tracing::warn!(url = %self.log_url, cause = cause.as_str(), %detail, "could not reach the model server");
        if is_builder {
            return Failure {
                error: LlmError::Config(format!("could not build the request: {detail}")),
                retryable: false,
                retry_after: None,
            };
        }
        // Connect and DNS errors, and a connection closed before any response (a stale pooled
        // connection): the server never saw the request or never answered, so a retry cannot
        // double anything. A failed TLS handshake, or an answer that is not HTTP, is not
        // retried: a certificate the client rejects, or a port that speaks another protocol,
        // is the same a second later.
        let permanent = matches!(cause, UnreachableCause::Tls | UnreachableCause::NotHttp);
        Failure {
            error: LlmError::Unreachable { cause, detail },
            retryable: (is_connect || is_request) && !permanent,
            retry_after: None,
        }
    }

    /// A bounded prefix of an error body; a slow or broken body just ends it early.
    async fn read_error_body(&self, mut response: reqwest::Response) -> String {
        let mut body = Vec::new();
        while body.len() < ERROR_BODY_LIMIT {
            match with_timeout(self.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(ERROR_BODY_LIMIT);
        String::from_utf8_lossy(&body).into_owned()
    }
}

/// Why one attempt failed, and whether another may be made.
struct Failure {
    error: LlmError,
    retryable: bool,
    retry_after: Option<Duration>,
}

fn build_headers(settings: &LlmSettings, flavor: Flavor) -> Result<HeaderMap, LlmError> {
    let mut headers = HeaderMap::new();
    let key = settings.api_key.trim();
    if !key.is_empty() {
        let (name, value) = match flavor {
            Flavor::OpenAi => (AUTHORIZATION, format!("Bearer {key}")),
            Flavor::Azure => (HeaderName::from_static("api-key"), key.to_owned()),
        };
        // The error names the setting, never the value.
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            LlmError::Config(
                "llm.api_key contains characters not allowed in an HTTP header".to_owned(),
            )
        })?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    for (name, value) in &settings.extra_headers {
        let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            LlmError::Config(format!(
                "llm.extra_headers: `{name}` is not a valid header name"
            ))
        })?;
        let mut value = HeaderValue::from_str(value.trim()).map_err(|_| {
            LlmError::Config(format!(
                "llm.extra_headers.{name}: the value is not a valid header value"
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

fn wire_message(message: &ChatMessage) -> ChatCompletionRequestMessage {
    match message {
        ChatMessage::System { content } => {
            ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
                content: ChatCompletionRequestSystemMessageContent::Text(content.clone()),
                name: None,
            })
        }
        ChatMessage::User { content } => {
            let content = match content.as_slice() {
                // One text part goes as a plain string: older servers reject content arrays.
                [] => ChatCompletionRequestUserMessageContent::Text(String::new()),
                [UserPart::Text(text)] => {
                    ChatCompletionRequestUserMessageContent::Text(text.clone())
                }
                parts => ChatCompletionRequestUserMessageContent::Array(
                    parts.iter().map(wire_user_part).collect(),
                ),
            };
            ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
                content,
                name: None,
            })
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let text = content.as_deref().filter(|c| !c.is_empty());
            // `content` may be absent only when there are tool calls.
            let content = match (text, tool_calls.is_empty()) {
                (Some(text), _) => Some(text.to_owned()),
                (None, true) => Some(String::new()),
                (None, false) => None,
            };
            let tool_calls: Vec<ChatCompletionMessageToolCalls> = tool_calls
                .iter()
                .map(|call| {
                    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                        id: call.id.clone(),
                        function: FunctionCall {
                            name: call.name.clone(),
                            // Servers that template the history parse the arguments; "" is not
                            // JSON, "{}" is what a call without arguments means.
                            arguments: if call.arguments.trim().is_empty() {
                                "{}".to_owned()
                            } else {
                                call.arguments.clone()
                            },
                        },
                    })
                })
                .collect();
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: content.map(ChatCompletionRequestAssistantMessageContent::Text),
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                ..Default::default()
            })
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
            content: ChatCompletionRequestToolMessageContent::Text(content.clone()),
            tool_call_id: tool_call_id.clone(),
        }),
    }
}

fn wire_user_part(part: &UserPart) -> ChatCompletionRequestUserMessageContentPart {
    match part {
        UserPart::Text(text) => ChatCompletionRequestUserMessageContentPart::Text(
            ChatCompletionRequestMessageContentPartText {
                text: text.clone(),
                prompt_cache_breakpoint: None,
            },
        ),
        UserPart::ImageUrl { url } => ChatCompletionRequestUserMessageContentPart::ImageUrl(
            ChatCompletionRequestMessageContentPartImage {
                image_url: ImageUrl {
                    url: url.clone(),
                    detail: None,
                },
                prompt_cache_breakpoint: None,
            },
        ),
    }
}

fn wire_tool(tool: &ToolSpec) -> ChatCompletionTools {
    // Several servers require `parameters`; an empty object schema is what "none" means.
    let parameters = if tool.parameters.is_null() {
        serde_json::json!({ "type": "object", "properties": {} })
    } else {
        tool.parameters.clone()
    };
    ChatCompletionTools::Function(ChatCompletionTool {
        function: FunctionObject {
            name: tool.name.clone(),
            description: (!tool.description.is_empty()).then(|| tool.description.clone()),
            parameters: Some(parameters),
            strict: None,
        },
    })
}

/// The upstream error `message` of an error body, in the shapes servers use.
fn upstream_message(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let candidates = [
        value.pointer("/error/message"),
        value.get("error"),
        value.get("message"),
        value.get("detail"),
    ];
    let message = candidates
        .into_iter()
        .flatten()
        .find_map(|v| v.as_str().map(str::to_owned));
    message
}

/// `retry-after-ms` (Azure, OpenAI) or `Retry-After` in seconds. An HTTP-date is ignored (the
/// backoff applies), as is anything negative or not a number.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(1e6)));
    }
    number("retry-after").map(|secs| Duration::from_secs_f64(secs.min(1e6)))
}

/// Exponential backoff (250 ms × 2^attempt, capped at 8 s) with "equal jitter": half of the
/// delay is fixed, half random, so simultaneous clients spread out. `unit` is in [0, 1).
pub(crate) fn backoff(attempt: u32, unit: f64) -> Duration {
    let exponential = RETRY_BASE
        .checked_mul(1u32 << attempt.min(16))
        .unwrap_or(RETRY_CAP)
        .min(RETRY_CAP);
    let half = exponential / 2;
    // `mul_f64` panics on NaN; a NaN unit means no jitter.
    let unit = if unit.is_nan() {
        0.0
    } else {
        unit.clamp(0.0, 1.0)
    };
    half + half.mul_f64(unit)
}

/// A random number in [0, 1) from a v4 UUID (no `rand` dependency needed for jitter).
fn jitter() -> f64 {
    let bits = (uuid::Uuid::new_v4().as_u128() >> 75) as u64; // 53 random bits
    bits as f64 / (1u64 << 53) as f64
}

/// Why a request that got no response failed. reqwest says DNS and timeout itself; the rest is
/// read from the `io::Error`s in the chain, including those wrapped inside another `io::Error`
/// (which `source()` skips): the TLS layer reports a rejected certificate or a peer that does
/// not speak TLS as `InvalidData`, and a peer that hangs up mid-handshake as `UnexpectedEof`,
/// neither of which a plain TCP connect produces.
fn unreachable_cause(error: &reqwest::Error) -> UnreachableCause {
    if error.is_dns() {
        return UnreachableCause::Dns;
    }
    if error.is_timeout() {
        return UnreachableCause::ConnectTimeout;
    }
    let mut kinds = Vec::new();
    let mut not_http = false;
    let mut pending: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    if let Some(source) = std::error::Error::source(error) {
        pending.push(source);
    }
    while let Some(cause) = pending.pop() {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>() {
            not_http |= hyper.is_parse();
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            kinds.push(io.kind());
            if let Some(inner) = io.get_ref() {
                pending.push(inner);
            }
        }
        if let Some(next) = cause.source() {
            pending.push(next);
        }
    }
    use std::io::ErrorKind;
    if kinds.contains(&ErrorKind::ConnectionRefused) {
        UnreachableCause::Refused
    } else if not_http {
        UnreachableCause::NotHttp
    } else if !error.is_connect() {
        UnreachableCause::Closed
    } else if kinds
        .iter()
        .any(|kind| matches!(kind, ErrorKind::InvalidData | ErrorKind::UnexpectedEof))
    {
        UnreachableCause::Tls
    } else if kinds.contains(&ErrorKind::TimedOut) {
        UnreachableCause::ConnectTimeout
    } else {
        UnreachableCause::Other
    }
}

/// An error with its sources, for logs.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

struct TimedOut;

/// `future` bounded by `limit`, or unbounded when there is none.
async fn with_timeout<F: Future>(
    limit: Option<Duration>,
    future: F,
) -> Result<F::Output, TimedOut> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, future)
            .await
            .map_err(|_| TimedOut),
        None => Ok(future.await),
    }
}

/// Reads a response body into events under the idle timeout. Generic over the byte stream so
/// tests can feed fragments and pause the clock.
pub(crate) struct BodyReader<S> {
    body: S,
    mode: BodyMode,
    queue: VecDeque<Result<LlmEvent, LlmError>>,
    idle_timeout: Option<Duration>,
    /// Nothing more will be read; the queue may still hold items.
    done: bool,
}

enum BodyMode {
    Sse(StreamDecoder),
    /// A server that ignored `stream: true`: the whole body is one JSON document.
    Json {
        buf: Vec<u8>,
        parser: ChunkParser,
    },
}

impl<S> BodyReader<S>
where
    S: Stream<Item = Result<Bytes, String>> + Unpin,
{
    pub(crate) fn new(
        body: S,
        json: bool,
        idle_timeout: Option<Duration>,
        redactor: Redactor,
    ) -> Self {
        let mode = if json {
            BodyMode::Json {
                buf: Vec::new(),
                parser: ChunkParser::new(redactor),
            }
        } else {
            BodyMode::Sse(StreamDecoder::new(redactor))
        };
        Self {
            body,
            mode,
            queue: VecDeque::new(),
            idle_timeout,
            done: false,
        }
    }

    /// The next event, `None` at the end. After an `Err` only `None` follows.
    pub(crate) async fn next_event(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let mut out = Vec::new();
            match with_timeout(self.idle_timeout, self.body.next()).await {
                Ok(Some(Ok(bytes))) => self.on_bytes(&bytes, &mut out),
                Ok(Some(Err(cause))) => {
                    tracing::debug!(%cause, "model stream broke");
                    self.on_end(
                        Some(format!("the connection broke mid-reply ({cause})")),
                        &mut out,
                    );
                }
                Ok(None) => self.on_end(None, &mut out),
                Err(TimedOut) => self.on_idle(&mut out),
            }
            self.queue.extend(out);
        }
    }

    fn on_bytes(&mut self, bytes: &[u8], out: &mut Vec<Result<LlmEvent, LlmError>>) {
        match &mut self.mode {
            BodyMode::Sse(decoder) => {
                decoder.feed(bytes, out);
                self.done = decoder.is_ended();
            }
            BodyMode::Json { buf, .. } => {
                buf.extend_from_slice(bytes);
                if buf.len() > JSON_BODY_LIMIT {
                    self.done = true;
                    out.push(Err(LlmError::Malformed {
                        detail: "a JSON body larger than 16 MiB".to_owned(),
                    }));
                }
            }
        }
    }

    fn on_end(&mut self, cause: Option<String>, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        self.done = true;
        match &mut self.mode {
            BodyMode::Sse(decoder) => decoder.end_with(cause, out),
            BodyMode::Json { .. } if cause.is_some() => {
                out.push(Err(LlmError::StreamCut {
                    detail: cause.unwrap_or_default(),
                }));
            }
            BodyMode::Json { buf, parser } => {
                let mut events = Vec::new();
                let result = parser.on_json_body(buf, &mut events);
                out.extend(events.into_iter().map(Ok));
                if let Err(error) = result {
                    out.push(Err(error));
                }
            }
        }
    }

    fn on_idle(&mut self, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        self.done = true;
        let secs = self.idle_timeout.map_or(0, |d| d.as_secs());
        match &mut self.mode {
            // The reply is complete; the server just did not close the stream.
            BodyMode::Sse(decoder) if decoder.saw_finish() => {
                tracing::debug!("model stream idle after its finish_reason; ending it");
                decoder.end_with(None, out);
            }
            _ => {
                tracing::warn!(idle_secs = secs, "model stream went silent");
                out.push(Err(LlmError::Timeout {
                    phase: TimeoutPhase::Idle,
                    secs,
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use futures_util::TryStreamExt;
    use serde_json::{json, Value};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::super::{ChatToolCall, FinishReason, LlmClient, Usage};
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
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}"
        )
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
        s
    }

    fn hello_request() -> ChatRequest {
        ChatRequest {
            model: None,
            messages: vec![ChatMessage::user_text("hi")],
            tools: vec![],
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
        let request = ChatRequest {
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
                    content: Some("done".into()),
                    tool_calls: vec![],
                },
            ],
            tools: vec![
                ToolSpec {
                    name: "f".into(),
                    description: "does f".into(),
                    parameters: json!({"type":"object","properties":{"a":{"type":"string"}}}),
                },
                ToolSpec {
                    name: "g".into(),
                    description: String::new(),
                    parameters: Value::Null,
                },
            ],
        };
        let body: Value =
            serde_json::from_slice(&backend.request_body(&request).expect("body")).expect("json");
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

        // No tools: no `tools` key; no usage wanted: no `stream_options`; default model.
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
    fn backoff_doubles_with_jitter_and_caps() {
        assert_eq!(backoff(0, 0.0), Duration::from_millis(125));
        assert_eq!(backoff(0, 1.0), Duration::from_millis(250));
        assert_eq!(backoff(1, 1.0), Duration::from_millis(500));
        assert_eq!(backoff(2, 0.5), Duration::from_millis(750));
        assert_eq!(backoff(5, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(40, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(40, 0.0), Duration::from_secs(4));
        for _ in 0..100 {
            let unit = jitter();
            assert!((0.0..1.0).contains(&unit));
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
        assert_eq!(body["model"], "test-model");
        assert_eq!(body["stream"], true);
        assert!(server.closed.try_recv().is_err());
    }

    #[tokio::test]
    async fn azure_request() {
        let server = serve(vec![Reply::Raw(sse(HELLO))]).await;
        let mut s = settings_for(server.addr);
        s.provider = LlmProvider::Azure;
        s.base_url = format!("http://{}", server.addr);
        s.azure_deployment = "gpt4o".into();
        s.azure_api_version = "2024-10-21".into();
        let client = LlmClient::new(&s).expect("client");
        let events: Vec<LlmEvent> = client
            .stream_chat(hello_request())
            .try_collect()
            .await
            .expect("ok");
        assert_eq!(events, hello_events());
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
        let client = LlmClient::new(&settings_for(server.addr)).expect("client");
        let events: Vec<LlmEvent> = client
            .stream_chat(hello_request())
            .try_collect()
            .await
            .expect("ok");
        assert_eq!(events, hello_events());
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
        let client = LlmClient::new(&settings_for(server.addr)).expect("client");
        let events: Vec<LlmEvent> = client
            .stream_chat(hello_request())
            .try_collect()
            .await
            .expect("ok");
        assert_eq!(events, hello_events());
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
            false,
            Some(Duration::from_secs(idle)),
            Redactor::default(),
        )
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
        assert_eq!(
            reader.next_event().await,
            Some(Err(LlmError::Timeout {
                phase: TimeoutPhase::Idle,
                secs: 30
            }))
        );
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
        let mut reader = BodyReader::new(body, false, None, Redactor::default());
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
}
