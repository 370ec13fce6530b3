//! How a model request travels: the one pooled HTTP client a backend shares, and what a send
//! gives back (a status, headers and a body stream) or why it failed.
//!
//! Requests go through reqwest (TLS, HTTP/2, proxies from the environment). A plain-HTTP model
//! server (vLLM, Ollama or llama.cpp next to the service, a sidecar gateway) with no proxy
//! variable set can instead be reached through hyper-util's pooled client (the pool reqwest
//! itself wraps) with a read buffer of a fixed size: `llm.read_buffer_bytes`. reqwest lets
//! hyper size each connection's HTTP/1 read buffer adaptively, from 8 KB up to about 400 KB as
//! reads fill it, and a stream keeps it for the whole reply.
//!
//! Which is better depends on the traffic, which is why it is a setting and the growing buffer
//! the default. Measured side by side (`docs/benchmarks.md`): a fixed 8 KB buffer saves 6 to
//! 21 KB per open stream when 2,000 paced streams keep the server behind, and a slow reader's
//! run holds a quarter to a half as much; but every read of a burst becomes one trip through
//! the run's pipeline and one client write, and a 51 KB tool call read 8 KB at a time costs
//! 30–40% more CPU than read in a few large reads.

use std::ffi::OsString;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::{HeaderMap, HeaderValue, USER_AGENT};
use reqwest::{StatusCode, Url};

use super::error_chain;
use crate::llm::error::{LlmError, UnreachableCause};
use crate::settings::LlmSettings;

/// What reqwest sets on its connections, so both clients treat a dead peer alike.
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);
const TCP_KEEPALIVE_RETRIES: u32 = 3;

const USER_AGENT_VALUE: &str = concat!("agui-host/", env!("CARGO_PKG_VERSION"));

/// The environment variables through which reqwest routes a plain-HTTP request to a proxy. When
/// any is set, reqwest carries plain HTTP too, and applies them (with `NO_PROXY`) as before.
const PROXY_VARIABLES: [&str; 4] = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];

/// The HTTP client of one backend.
pub(super) enum Transport {
    Reqwest(reqwest::Client),
    Plain(Box<PlainHttp>),
}

pub(super) struct PlainHttp {
    client: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
    uri: http::Uri,
}

/// A response whose head has arrived.
pub(super) struct Response {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    /// The body's bytes; an error is already described (its sources included, no URL).
    pub(super) body: BoxStream<'static, Result<Bytes, String>>,
}

/// Why a request got no response.
pub(super) struct SendError {
    pub(super) kind: SendErrorKind,
    pub(super) cause: UnreachableCause,
    /// The error and its sources, for the log (not yet redacted).
    pub(super) detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SendErrorKind {
    /// The request could not be built: a configuration error, never retried.
    Builder,
    /// No connection was made (DNS, refused, connect timeout, TLS).
    Connect,
    /// The connection failed or closed before a response head came back.
    Request,
    /// Anything else.
    Other,
}

impl Transport {
    /// The client for requests to `url`.
    pub(super) fn new(settings: &LlmSettings, url: &Url) -> Result<Self, LlmError> {
        let connect_timeout = super::limit(settings.connect_timeout_secs);
        let read_buffer = settings.read_buffer_bytes;
        if read_buffer > 0 && takes_plain_http(url, |name| std::env::var_os(name)) {
            let uri = url.as_str().parse::<http::Uri>().map_err(|e| {
                LlmError::Config(format!("llm.base_url is not a valid request URI: {e}"))
            })?;
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(connect_timeout);
            // Every request is a small JSON body, and a held-back one delays the whole reply.
            connector.set_nodelay(true);
            connector.set_keepalive(Some(TCP_KEEPALIVE));
            connector.set_keepalive_interval(Some(TCP_KEEPALIVE));
            connector.set_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));
            let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                // Bounded, so memory returns to its baseline after a burst of concurrent runs.
                .pool_max_idle_per_host(settings.pool_max_idle_per_host)
                .pool_idle_timeout(Duration::from_secs(settings.pool_idle_timeout_secs))
                .http1_read_buf_exact_size(read_buffer)
                .build(connector);
            return Ok(Self::Plain(Box::new(PlainHttp { client, uri })));
        }
        let mut builder = reqwest::Client::builder()
            .user_agent(USER_AGENT_VALUE)
            // A redirected POST loses its body, and custom auth headers (`api-key`, extra
            // headers) would follow it to another host: report the 3xx instead.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(settings.pool_max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(settings.pool_idle_timeout_secs));
        if let Some(timeout) = connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        // No overall timeout: a streamed reply may legitimately last minutes. The first-byte and
        // idle timeouts bound the waits instead.
        let client = builder
            .build()
            .map_err(|e| LlmError::Config(format!("could not build the HTTP client: {e}")))?;
        Ok(Self::Reqwest(client))
    }

    /// Which client carries the requests, for the startup log.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::Reqwest(_) => "reqwest",
            Self::Plain(_) => "plain-http",
        }
    }

    /// POSTs `body` to `url` with `headers` (the caller's, with the user agent added unless it
    /// names one) and waits for the response head.
    pub(super) async fn post(
        &self,
        url: &Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response, SendError> {
        match self {
            Self::Reqwest(client) => {
                let sent = client.post(url.clone()).headers(headers).body(body).send();
                let mut response = sent.await.map_err(reqwest_failure)?;
                let headers = std::mem::take(response.headers_mut());
                Ok(Response {
                    status: response.status(),
                    headers,
                    body: response
                        .bytes_stream()
                        .map_err(|e| error_chain(&e.without_url()))
                        .boxed(),
                })
            }
            Self::Plain(plain) => plain.post(headers, body).await,
        }
    }
}

impl PlainHttp {
    async fn post(&self, mut headers: HeaderMap, body: Bytes) -> Result<Response, SendError> {
        if !headers.contains_key(USER_AGENT) {
            headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        }
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = headers;
        let response = self.client.request(request).await.map_err(|error| {
            let is_dns = has_dns_failure(&error);
            SendError {
                kind: if error.is_connect() {
                    SendErrorKind::Connect
                } else {
                    SendErrorKind::Request
                },
                cause: unreachable_cause(&error, is_dns, false, error.is_connect()),
                detail: error_chain(&error),
            }
        })?;
        let (parts, body) = response.into_parts();
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body: body.into_data_stream().map_err(|e| error_chain(&e)).boxed(),
        })
    }
}

/// Whether requests to `url` take the plain-HTTP client: an `http` URL without user info
/// (reqwest turns that into basic authentication), and no variable of `environment` names a
/// proxy that reqwest would send it through.
fn takes_plain_http(url: &Url, environment: impl Fn(&str) -> Option<OsString>) -> bool {
    url.scheme() == "http"
        && url.username().is_empty()
        && url.password().is_none()
        && !PROXY_VARIABLES
            .iter()
            .any(|name| environment(name).is_some_and(|value| !value.is_empty()))
}

fn reqwest_failure(error: reqwest::Error) -> SendError {
    let kind = if error.is_builder() {
        SendErrorKind::Builder
    } else if error.is_connect() {
        SendErrorKind::Connect
    } else if error.is_request() {
        SendErrorKind::Request
    } else {
        SendErrorKind::Other
    };
    let cause = unreachable_cause(
        &error,
        error.is_dns(),
        error.is_timeout(),
        error.is_connect(),
    );
    SendError {
        kind,
        cause,
        detail: error_chain(&error.without_url()),
    }
}

/// hyper-util's connector reports a failed lookup as a connect error whose message is exactly
/// `dns error`; the error's type is not exported, so its message is what can be read.
fn has_dns_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = error.source();
    while let Some(cause) = source {
        if cause.to_string() == "dns error" {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Why a request that got no response failed. The client says DNS and timeout itself; the
/// rest is read from the `io::Error`s in the chain, including those wrapped inside another
/// `io::Error` (which `source()` skips): the TLS layer reports a rejected certificate or a peer
/// that does not speak TLS as `InvalidData`, and a peer that hangs up mid-handshake as
/// `UnexpectedEof`, neither of which a plain TCP connect produces.
fn unreachable_cause(
    error: &(dyn std::error::Error + 'static),
    is_dns: bool,
    is_timeout: bool,
    is_connect: bool,
) -> UnreachableCause {
    if is_dns {
        return UnreachableCause::Dns;
    }
    if is_timeout {
        return UnreachableCause::ConnectTimeout;
    }
    let mut kinds = Vec::new();
    let mut not_http = false;
    let mut pending: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    if let Some(source) = error.source() {
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
    } else if !is_connect {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("a URL")
    }

    #[test]
    fn plain_http_without_a_proxy_takes_the_plain_client() {
        let no_variables = |_: &str| None;
        assert!(takes_plain_http(
            &url("http://127.0.0.1:8000/v1"),
            no_variables
        ));
        assert!(takes_plain_http(
            &url("http://vllm/v1/chat/completions"),
            no_variables
        ));
        assert!(!takes_plain_http(
            &url("https://api.openai.com/v1"),
            no_variables
        ));
        // User info is basic authentication, which reqwest sends.
        assert!(!takes_plain_http(
            &url("http://user:pass@vllm/v1"),
            no_variables
        ));
        assert!(!takes_plain_http(&url("http://user@vllm/v1"), no_variables));
    }

    #[test]
    fn a_proxy_variable_sends_plain_http_through_reqwest() {
        for variable in PROXY_VARIABLES {
            let environment =
                |name: &str| (name == variable).then(|| OsString::from("http://proxy:3128"));
            assert!(
                !takes_plain_http(&url("http://127.0.0.1:8000/v1"), environment),
                "{variable}"
            );
        }
        // Set but empty is unset, as reqwest reads it.
        let empty = |_: &str| Some(OsString::new());
        assert!(takes_plain_http(&url("http://127.0.0.1:8000/v1"), empty));
    }

    #[test]
    fn a_lookup_failure_is_found_in_the_chain() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|inner| inner as _)
            }
        }
        let lookup = Layer(
            "client error (Connect)",
            Some(Box::new(Layer(
                "dns error",
                Some(Box::new(Layer(
                    "failed to lookup address information",
                    None,
                ))),
            ))),
        );
        assert!(has_dns_failure(&lookup));
        let refused = Layer(
            "client error (Connect)",
            Some(Box::new(Layer("tcp connect error", None))),
        );
        assert!(!has_dns_failure(&refused));
        // The outermost error is the client's own, never the connector's.
        assert!(!has_dns_failure(&Layer("dns error", None)));
    }
}
