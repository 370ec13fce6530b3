//! The HTTP backend: any OpenAI-compatible chat-completions server, Azure OpenAI, Anthropic's
//! Messages API and OpenAI's Responses API (their bodies and events are `llm::anthropic`'s and
//! `llm::responses`'; the sending, retries, timeouts and fault codes are the same for every
//! provider).
//!
//! It builds the request body with async-openai's request types, sends it with one shared
//! client (see `transport`), retries what is safe to retry before anything was streamed, and
//! reads the SSE body through [`StreamDecoder`] under an idle timeout. All waits use
//! `tokio::time`, so tests can pause the clock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_openai::types::chat::{
    ChatCompletionStreamOptions, ChatCompletionTools, CreateChatCompletionRequest,
};
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{StatusCode, Url};

use super::error::{LlmError, Redactor, TimeoutPhase, UnreachableCause};
use super::{ChatRequest, LlmEvent};
use crate::retry::RetryPolicy;
use crate::settings::LlmSettings;
use body::BodyReader;
use transport::{SendErrorKind, Transport};
use wire::{wire_message, wire_tool};

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// How much of an error response body we read (for the log and the upstream `message`).
const ERROR_BODY_LIMIT: usize = 4096;
/// How much of it goes into a log line.
const ERROR_LOG_CHARS: usize = 1024;
/// Largest non-streaming JSON body we accept from a server that ignored `stream: true`.
pub(super) const JSON_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Anthropic's "overloaded" status: the service is busy, the request was not processed.
const ANTHROPIC_OVERLOADED: u16 = 529;
/// The waits between attempts when the server names none: 125 ms doubling to 4 s (each with up to
/// as much again of jitter), as many times as `llm.max_retries` allows.
const RETRY_FIRST_WAIT: Duration = Duration::from_millis(125);
const RETRY_MAX_WAIT: Duration = Duration::from_secs(4);
/// A longer `Retry-After` means the server is out for a while: fail now rather than hold the
/// user's run open.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// Which wire dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Azure,
    Anthropic,
    Responses,
}

pub(crate) struct HttpBackend {
    transport: Transport,
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
    /// The Messages API's options (flavor `Anthropic` only).
    anthropic: crate::llm::anthropic::MessagesOptions,
    /// The Responses API's options (flavor `Responses` only).
    responses: crate::llm::responses::ResponsesOptions,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    stream_usage: bool,
    first_byte_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    merge_deltas: bool,
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

/// `llm.base_url`, or OpenAI's for the OpenAI flavor when it is empty; http(s) only.
fn base_url(settings: &LlmSettings, flavor: Flavor) -> Result<Url, LlmError> {
    let base = settings.base_url.trim();
    let base = match (base.is_empty(), flavor) {
        (false, _) => base,
        (true, Flavor::OpenAi | Flavor::Responses) => DEFAULT_BASE_URL,
        (true, Flavor::Anthropic) => ANTHROPIC_BASE_URL,
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
    Ok(base_url)
}

/// The chat-completions endpoint under `base_url`: `/chat/completions`, or Azure's deployment
/// path with its `api-version`.
fn endpoint_url(
    base_url: &Url,
    flavor: Flavor,
    deployment: &str,
    api_version: &str,
) -> Result<Url, LlmError> {
    // A base URL that already ends with the endpoint (a common copy-paste) is kept as is.
    let endpoint = match flavor {
        Flavor::OpenAi => Some("/chat/completions"),
        Flavor::Anthropic => Some("/messages"),
        Flavor::Responses => Some("/responses"),
        Flavor::Azure => None,
    };
    if endpoint.is_some_and(|end| base_url.path().trim_end_matches('/').ends_with(end)) {
        return Ok(base_url.clone());
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
            Flavor::Anthropic => {
                segments.push("messages");
            }
            Flavor::Responses => {
                segments.push("responses");
            }
            // `extend` percent-encodes the deployment name as one path segment.
            Flavor::Azure => {
                segments.extend(["openai", "deployments", deployment, "chat", "completions"]);
            }
        }
    }
    if flavor == Flavor::Azure {
        url.query_pairs_mut()
            .append_pair("api-version", api_version.trim());
    }
    Ok(url)
}

impl HttpBackend {
    pub(crate) fn new(settings: &LlmSettings, flavor: Flavor) -> Result<Self, LlmError> {
        let base_url = base_url(settings, flavor)?;
        let deployment = settings.azure_deployment.trim();
        if flavor == Flavor::Azure && deployment.is_empty() {
            return Err(LlmError::Config(
                "provider azure needs llm.azure_deployment".to_owned(),
            ));
        }
        let url = endpoint_url(&base_url, flavor, deployment, &settings.azure_api_version)?;
        let headers = build_headers(settings, flavor)?;
        let transport = Transport::new(settings, &url)?;
        let log_url = loggable(&url);
        tracing::debug!(client = transport.name(), url = %log_url, "model client");
        let secrets = std::iter::once(settings.api_key.clone())
            .chain(settings.extra_headers.values().cloned());
        Ok(Self {
            transport,
            flavor,
            log_url,
            display_base: loggable(&base_url),
            url,
            headers,
            default_model: match flavor {
                Flavor::OpenAi | Flavor::Anthropic | Flavor::Responses => settings.model.clone(),
                Flavor::Azure => deployment.to_owned(),
            },
            azure_deployment: deployment.to_owned(),
            azure_api_version: settings.azure_api_version.trim().to_owned(),
            anthropic: crate::llm::anthropic::MessagesOptions::from_settings(settings),
            responses: crate::llm::responses::ResponsesOptions::from_settings(settings),
            temperature: settings.temperature,
            max_tokens: settings.max_tokens,
            stream_usage: settings.stream_usage,
            first_byte_timeout: limit(settings.first_byte_timeout_secs),
            idle_timeout: limit(settings.idle_timeout_secs),
            merge_deltas: settings.merge_deltas,
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
            Flavor::Anthropic => format!(
                "anthropic-messages {} model {}",
                self.display_base, self.default_model
            ),
            Flavor::Responses => format!(
                "openai-responses {} model {}",
                self.display_base, self.default_model
            ),
        }
    }

    pub(crate) fn provider_id(&self) -> &'static str {
        match self.flavor {
            Flavor::OpenAi | Flavor::Responses => "openai",
            Flavor::Azure => "azure",
            Flavor::Anthropic => "anthropic",
        }
    }

    pub(crate) fn default_model(&self) -> &str {
        &self.default_model
    }

    pub(crate) fn call_target(&self) -> super::CallTarget {
        super::CallTarget {
            // Without an IPv6 address's brackets.
            server_address: self.url.host_str().map(|host| {
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned()
            }),
            server_port: self.url.port_or_known_default(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
        }
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
        let (model, temperature, max_tokens) =
            (self.model_for(request), self.temperature, self.max_tokens);
        let own_body = match self.flavor {
            Flavor::Anthropic => {
                Some(
                    self.anthropic
                        .request_body(request, model, temperature, max_tokens),
                )
            }
            Flavor::Responses => {
                Some(
                    self.responses
                        .request_body(request, model, temperature, max_tokens),
                )
            }
            Flavor::OpenAi | Flavor::Azure => None,
        };
        if let Some(body) = own_body {
            return serde_json::to_vec(&body)
                .map_err(|e| LlmError::Config(format!("could not serialize the request: {e}")));
        }
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
        if let (Some(name), Some(object)) = (&request.forced_tool, value.as_object_mut()) {
            object.insert(
                "tool_choice".into(),
                serde_json::json!({"type": "function", "function": {"name": name}}),
            );
        }
        serde_json::to_vec(&value)
            .map_err(|e| LlmError::Config(format!("could not serialize the request: {e}")))
    }

    /// Lazy: the request is sent when the stream is first polled.
    pub(crate) fn stream_chat(
        backend: Arc<Self>,
        request: ChatRequest,
    ) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
        let opening = Box::pin(async move { backend.open(&request).await });
        Box::pin(ChatStream::Opening(opening))
    }

    /// Sends the request (with retries) and wraps the response body.
    async fn open(&self, request: &ChatRequest) -> Result<Box<BodyReader<Body>>, LlmError> {
        let body = Bytes::from(self.request_body(request)?);
        tracing::debug!(
            provider = self.provider_id(),
            url = %self.log_url,
            model = %self.model_for(request),
            messages = request.messages.len(),
            tools = request.tools.len(),
            body_bytes = body.len(),
            "model request"
        );
        let response = self.send_with_retries(body).await?;
        let json = response
            .headers
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
        Ok(Box::new(
            BodyReader::new(
                response.body,
                self.dialect(json),
                self.idle_timeout,
                self.redactor.clone(),
            )
            .merging_deltas(self.merge_deltas),
        ))
    }

    /// How the body is read: a JSON body from a chat-completions server that ignored
    /// `stream: true` is one completion; the Messages API always streams.
    fn dialect(&self, json: bool) -> body::Dialect {
        match (self.flavor, json) {
            (Flavor::Anthropic, _) => body::Dialect::Messages,
            (Flavor::Responses, _) => body::Dialect::Responses,
            (_, true) => body::Dialect::ChatJson,
            (_, false) => body::Dialect::Chat,
        }
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(RETRY_FIRST_WAIT, RETRY_MAX_WAIT)
            .with_max_retries(usize::try_from(self.max_retries).unwrap_or(usize::MAX))
    }

    async fn send_with_retries(&self, body: Bytes) -> Result<transport::Response, LlmError> {
        let mut waits = self.retry_policy().waits();
        let mut attempt: u32 = 0;
        loop {
            let failure = match self.send_once(body.clone()).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            if !failure.retryable {
                return Err(failure.error);
            }
            // Taken even when the server names its wait, so `max_retries` bounds both.
            let Some(backoff) = waits.next() else {
                return Err(failure.error);
            };
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
                None => backoff,
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

    async fn send_once(&self, body: Bytes) -> Result<transport::Response, Failure> {
        let mut headers = HeaderMap::with_capacity(4 + self.headers.len());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        // The model call's span is current here: the upstream joins the run's trace.
        crate::telemetry::inject_trace_context(&mut headers);
        // Last, so extra headers may override the ones above.
        replace_headers(&mut headers, self.headers.clone());
        let sent = self.transport.post(&self.url, headers, body);
        let response = match with_timeout(self.first_byte_timeout, sent).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(self.send_failure(&error)),
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
        let status = response.status;
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(&response.headers);
        let body = self.read_error_body(response).await;
        tracing::warn!(
            provider = self.provider_id(),
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
            ) || status.as_u16() == ANTHROPIC_OVERLOADED,
            retry_after,
        })
    }

    fn send_failure(&self, error: &transport::SendError) -> Failure {
        let detail = self.redactor.redact(&error.detail);
        let cause = error.cause;
        tracing::warn!(url = %self.log_url, cause = cause.as_str(), %detail, "could not reach the model server");
        if error.kind == SendErrorKind::Builder {
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
            retryable: matches!(error.kind, SendErrorKind::Connect | SendErrorKind::Request)
                && !permanent,
            retry_after: None,
        }
    }

    /// A bounded prefix of an error body; a slow or broken body just ends it early.
    async fn read_error_body(&self, mut response: transport::Response) -> String {
        let mut body = Vec::new();
        while body.len() < ERROR_BODY_LIMIT {
            match with_timeout(self.idle_timeout, response.body.next()).await {
                Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(ERROR_BODY_LIMIT);
        String::from_utf8_lossy(&body).into_owned()
    }
}

type Body = BoxStream<'static, Result<Bytes, String>>;

/// A model reply as a stream of events: the request (lazy: sent when first polled), then the
/// body. Written by hand rather than with `stream::unfold`, which builds a new future, and moves
/// it into place, for every event.
enum ChatStream {
    Opening(futures_util::future::BoxFuture<'static, Result<Box<BodyReader<Body>>, LlmError>>),
    Reading(Box<BodyReader<Body>>),
    Done,
}

impl futures_util::Stream for ChatStream {
    type Item = Result<LlmEvent, LlmError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::{ready, Poll};
        loop {
            match &mut *self {
                ChatStream::Opening(opening) => match ready!(opening.as_mut().poll(cx)) {
                    Ok(reader) => *self = ChatStream::Reading(reader),
                    Err(error) => {
                        *self = ChatStream::Done;
                        return Poll::Ready(Some(Err(error)));
                    }
                },
                ChatStream::Reading(reader) => {
                    let next = ready!(reader.poll_next_event(cx));
                    if next.is_none() {
                        *self = ChatStream::Done;
                    }
                    return Poll::Ready(next);
                }
                ChatStream::Done => return Poll::Ready(None),
            }
        }
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
            Flavor::OpenAi | Flavor::Responses => (AUTHORIZATION, format!("Bearer {key}")),
            Flavor::Azure => (HeaderName::from_static("api-key"), key.to_owned()),
            Flavor::Anthropic => (HeaderName::from_static("x-api-key"), key.to_owned()),
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
    if flavor == Flavor::Anthropic {
        let version = HeaderValue::from_str(settings.anthropic_version.trim()).map_err(|_| {
            LlmError::Config("anthropic_version is not a valid header value".to_owned())
        })?;
        headers.insert(HeaderName::from_static("anthropic-version"), version);
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

/// Adds `extra` to `headers` as reqwest's `RequestBuilder::headers` does: a name in `extra`
/// replaces that name's values in `headers`, and keeps all of its own.
fn replace_headers(headers: &mut HeaderMap, extra: HeaderMap) {
    let mut last_name = None;
    for (name, value) in extra {
        match name {
            Some(name) => {
                headers.insert(name.clone(), value);
                last_name = Some(name);
            }
            None => {
                if let Some(name) = &last_name {
                    headers.append(name.clone(), value);
                }
            }
        }
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

pub(super) struct TimedOut;

/// `future` bounded by `limit`, or unbounded when there is none.
pub(super) async fn with_timeout<F: Future>(
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

mod body;
mod transport;
mod wire;

#[cfg(test)]
mod tests;
