//! [`LlmError`]: what can go wrong talking to a model, with a stable machine code for
//! RUN_ERROR and a message safe to show the end user; plus the redaction helpers that keep the
//! API key and upstream bodies out of both.

use crate::text::truncate_chars;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Which wait ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// Waiting for the response headers (`first_byte_timeout_secs`).
    FirstByte,
    /// Waiting for the next body chunk (`idle_timeout_secs`).
    Idle,
}

/// A failed model call. `Display` is meant for logs (it never contains the key, nor an upstream
/// body); [`LlmError::public_message`] is meant for the end user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// The server answered with an error status before streaming anything.
    #[error("the model server answered HTTP {status}")]
    Http {
        status: u16,
        /// The upstream error `message`, only when it is short and nothing in it looks like a
        /// credential (see `Redactor::public_snippet`).
        upstream_message: Option<String>,
        /// A bounded prefix of the response body for logs, with known secrets redacted.
        body_prefix: String,
    },
    #[error("{}", timeout_text(*.phase, *.secs))]
    Timeout { phase: TimeoutPhase, secs: u64 },
    /// Connect, DNS or TLS failure, or the connection closed before any response.
    #[error("could not reach the model server ({}): {detail}", .cause.as_str())]
    Unreachable {
        cause: UnreachableCause,
        /// The redacted error chain, for logs.
        detail: String,
    },
    /// The body ended (or the connection broke) with neither a `finish_reason` nor `[DONE]`.
    #[error("the model server's reply stopped before it was complete: {detail}")]
    StreamCut { detail: String },
    /// A chunk that is not valid JSON or not a JSON object.
    #[error("the model server sent an invalid stream chunk: {detail}")]
    Malformed { detail: String },
    /// An `{"error": {...}}` object sent as an SSE frame (llama.cpp, vLLM, OpenAI mid-stream).
    #[error("the model server reported an error mid-stream (code {}): {detail}", .code.as_deref().unwrap_or("none"))]
    Upstream {
        /// The upstream `message`, only when safe to show (see `Http::upstream_message`).
        upstream_message: Option<String>,
        code: Option<String>,
        /// A bounded, redacted prefix of the frame for logs.
        detail: String,
    },
    /// The client could not be built or the request could not be made (bad base URL, header...).
    #[error("invalid model client configuration: {0}")]
    Config(String),
}

/// Why the model server could not be reached. One code (`upstream_unreachable`) for all of
/// them, since the alert is the same ("the model server is out of reach"), but the message
/// names the cause, because the fix differs: a host name, a server that is down, a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreachableCause {
    /// The host name did not resolve.
    Dns,
    /// Nothing listens on that address and port.
    Refused,
    /// The TCP connection was not established within `connect_timeout_secs`.
    ConnectTimeout,
    /// The TLS handshake failed: an untrusted or invalid certificate, or a server that does not
    /// speak TLS on that port.
    Tls,
    /// Connected, then the connection closed before any response.
    Closed,
    /// The server answered something that is not HTTP, typically a TLS server behind an
    /// `http://` base URL.
    NotHttp,
    /// Any other network error.
    Other,
}

impl UnreachableCause {
    /// Short words for the message and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            UnreachableCause::Dns => "DNS lookup failed",
            UnreachableCause::Refused => "connection refused",
            UnreachableCause::ConnectTimeout => "connection timed out",
            UnreachableCause::Tls => "TLS handshake failed",
            UnreachableCause::Closed => "connection closed before a response",
            UnreachableCause::NotHttp => "the answer was not HTTP; check http versus https",
            UnreachableCause::Other => "network error",
        }
    }
}

fn timeout_text(phase: TimeoutPhase, secs: u64) -> String {
    match phase {
        TimeoutPhase::FirstByte => {
            format!("the model server did not start answering within {secs} s")
        }
        TimeoutPhase::Idle => format!("the model server sent nothing for {secs} s mid-reply"),
    }
}

impl LlmError {
    /// Stable machine code for RUN_ERROR.code: `upstream_auth` (401 and 403),
    /// `upstream_http_<status>` (any other status), `upstream_timeout`, `upstream_unreachable`,
    /// `upstream_stream_cut`, `upstream_malformed`, `upstream_error` or `upstream_config`.
    pub fn code(&self) -> &'static str {
        match self {
            // Its own code: the fix is in the configuration (key, deployment, permissions), and
            // operators alert on it differently from a server that is failing.
            LlmError::Http {
                status: 401 | 403, ..
            } => "upstream_auth",
            LlmError::Http { status, .. } => http_code(*status),
            LlmError::Timeout { .. } => "upstream_timeout",
            LlmError::Unreachable { .. } => "upstream_unreachable",
            LlmError::StreamCut { .. } => "upstream_stream_cut",
            LlmError::Malformed { .. } => "upstream_malformed",
            LlmError::Upstream { .. } => "upstream_error",
            LlmError::Config(_) => "upstream_config",
        }
    }

    /// A message safe to show the end user: no API key, no upstream body, no URL.
    pub fn public_message(&self) -> String {
        match self {
            LlmError::Http {
                status,
                upstream_message,
                ..
            } => {
                let mut text = format!(
                    "the model server answered HTTP {status} ({})",
                    status_meaning(*status)
                );
                // Auth failures often echo part of the key: never add their message.
                if let (Some(message), false) = (upstream_message, matches!(status, 401 | 403)) {
                    text.push_str(": ");
                    text.push_str(message);
                }
                text
            }
            LlmError::Timeout { phase, secs } => timeout_text(*phase, *secs),
            LlmError::Unreachable { cause, .. } => {
                format!("could not reach the model server ({})", cause.as_str())
            }
            LlmError::StreamCut { .. } => {
                "the model server's reply stopped before it was complete".to_owned()
            }
            LlmError::Malformed { .. } => {
                "the model server sent a reply that could not be understood".to_owned()
            }
            LlmError::Upstream {
                upstream_message, ..
            } => match upstream_message {
                Some(message) => {
                    format!("the model server reported an error while answering: {message}")
                }
                None => "the model server reported an error while answering".to_owned(),
            },
            LlmError::Config(_) => {
                "the model client is misconfigured (see the server log)".to_owned()
            }
        }
    }

    /// The HTTP status of an [`LlmError::Http`].
    pub fn http_status(&self) -> Option<u16> {
        match self {
            LlmError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `upstream_http_<status>` as a `&'static str`: one table of every three-digit status, built
/// once, so no string is leaked per error.
fn http_code(status: u16) -> &'static str {
    static CODES: OnceLock<Vec<String>> = OnceLock::new();
    let table = CODES.get_or_init(|| {
        (100..=999u16)
            .map(|s| format!("upstream_http_{s}"))
            .collect()
    });
    status
        .checked_sub(100)
        .and_then(|i| table.get(usize::from(i)))
        .map_or("upstream_http_error", String::as_str)
}

fn status_meaning(status: u16) -> &'static str {
    let exact = match status {
        400 => Some("bad request"),
        401 => Some("authentication failed: check the API key"),
        402 => Some("payment required"),
        403 => Some("access denied: check the API key's permissions and the model or deployment"),
        404 => Some("not found: check the base URL and the model or deployment name"),
        408 => Some("request timeout"),
        409 => Some("conflict"),
        413 => Some("request too large"),
        422 => Some("request rejected"),
        429 => Some("rate limited"),
        500 => Some("internal server error"),
        502 => Some("bad gateway"),
        503 => Some("service unavailable or overloaded"),
        504 => Some("gateway timeout"),
        529 => Some("overloaded"),
        _ => None,
    };
    exact.unwrap_or(match status / 100 {
        3 => "a redirect: check the base URL, e.g. http versus https",
        4 => "request rejected",
        5 => "server error",
        _ => "unexpected status",
    })
}

/// Knows the configured secrets (API key, extra header values) and keeps them out of text that
/// goes to logs or to the end user.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Arc<[String]>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// Longest upstream message shown to the end user.
const PUBLIC_SNIPPET_MAX_CHARS: usize = 200;

impl Redactor {
    pub(crate) fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        // Very short values would redact ordinary words; they are not secrets worth the name.
        let secrets: Vec<String> = secrets
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| s.chars().count() >= 4)
            .collect();
        Self {
            secrets: secrets.into(),
        }
    }

    /// `text` with every configured secret replaced by `[redacted]`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in self.secrets.iter() {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "[redacted]");
            }
        }
        text
    }

    /// A redacted, truncated prefix for logs.
    pub(crate) fn log_prefix(&self, text: &str, max_chars: usize) -> String {
        self.redact(&truncate_chars(text, max_chars))
    }

    /// `message` when it is safe to show an end user: short, one line, and with nothing that
    /// looks like a credential. Being conservative costs a less helpful message; being lax
    /// could print a key in a browser.
    pub(crate) fn public_snippet(&self, message: &str) -> Option<String> {
        let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
        if message.is_empty()
            || message.chars().count() > PUBLIC_SNIPPET_MAX_CHARS
            || message.chars().any(char::is_control)
        {
            return None;
        }
        if self
            .secrets
            .iter()
            .any(|secret| message.contains(secret.as_str()))
        {
            return None;
        }
        let lower = message.to_lowercase();
        const KEY_WORDS: [&str; 9] = [
            "key",
            "bearer",
            "secret",
            "password",
            "passwd",
            "authorization",
            "credential",
            "sk-",
            "token=",
        ];
        if KEY_WORDS.iter().any(|word| lower.contains(word)) {
            return None;
        }
        // A long run of letters and digits (with - or _) reads like a key or a token.
        let key_like = message
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .any(|word| {
                word.len() >= 24
                    && word.chars().any(|c| c.is_ascii_digit())
                    && word.chars().any(|c| c.is_ascii_alphabetic())
            });
        if key_like {
            return None;
        }
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        let http = |status| LlmError::Http {
            status,
            upstream_message: None,
            body_prefix: String::new(),
        };
        assert_eq!(http(429).code(), "upstream_http_429");
        assert_eq!(http(401).code(), "upstream_auth");
        assert_eq!(http(403).code(), "upstream_auth");
        assert_eq!(http(404).code(), "upstream_http_404");
        assert_eq!(http(503).code(), "upstream_http_503");
        assert_eq!(http(999).code(), "upstream_http_999");
        assert_eq!(http(42).code(), "upstream_http_error");
        assert_eq!(
            LlmError::Timeout {
                phase: TimeoutPhase::Idle,
                secs: 3
            }
            .code(),
            "upstream_timeout"
        );
        assert_eq!(
            LlmError::Unreachable {
                cause: UnreachableCause::Dns,
                detail: "x".into()
            }
            .code(),
            "upstream_unreachable"
        );
        assert_eq!(
            LlmError::StreamCut { detail: "x".into() }.code(),
            "upstream_stream_cut"
        );
        assert_eq!(
            LlmError::Malformed { detail: "x".into() }.code(),
            "upstream_malformed"
        );
        assert_eq!(
            LlmError::Upstream {
                upstream_message: None,
                code: None,
                detail: String::new()
            }
            .code(),
            "upstream_error"
        );
        assert_eq!(LlmError::Config("x".into()).code(), "upstream_config");
    }

    #[test]
    fn public_messages_describe_the_status() {
        let err = LlmError::Http {
            status: 429,
            upstream_message: None,
            body_prefix: "{\"error\":{\"message\":\"slow down\"}}".into(),
        };
        assert_eq!(
            err.public_message(),
            "the model server answered HTTP 429 (rate limited)"
        );
        let err = LlmError::Http {
            status: 400,
            upstream_message: Some("maximum context length is 8192 tokens".into()),
            body_prefix: String::new(),
        };
        assert_eq!(
            err.public_message(),
            "the model server answered HTTP 400 (bad request): maximum context length is 8192 tokens"
        );
        // Never the message of an auth failure, even if it passed the filter.
        let err = LlmError::Http {
            status: 401,
            upstream_message: Some("nope".into()),
            body_prefix: String::new(),
        };
        assert_eq!(
            err.public_message(),
            "the model server answered HTTP 401 (authentication failed: check the API key)"
        );
    }

    #[test]
    fn unreachable_messages_name_the_cause_and_nothing_else() {
        let err = LlmError::Unreachable {
            cause: UnreachableCause::Tls,
            detail: "invalid peer certificate: UnknownIssuer (https://10.0.0.5/v1)".into(),
        };
        assert_eq!(
            err.public_message(),
            "could not reach the model server (TLS handshake failed)"
        );
        assert!(
            err.to_string().contains("UnknownIssuer"),
            "the log has the detail"
        );
    }

    #[test]
    fn public_snippet_rejects_key_like_text() {
        let redactor = Redactor::new(["my-custom-secret".to_owned()]);
        assert_eq!(
            redactor.public_snippet("  the model  `x` does\nnot exist "),
            Some("the model `x` does not exist".to_owned())
        );
        for bad in [
            "Incorrect API key provided: sk-proj-****abcd",
            "invalid header my-custom-secret",
            "Bearer abc",
            "session a1b2c3d4e5f6a1b2c3d4e5f6a1b2 expired",
            &"long ".repeat(60),
            "",
        ] {
            assert_eq!(redactor.public_snippet(bad), None, "{bad}");
        }
    }

    #[test]
    fn redact_and_truncate() {
        let redactor = Redactor::new(["sk-secret-1".to_owned(), "ab".to_owned()]);
        assert_eq!(
            redactor.redact("key sk-secret-1 and ab"),
            "key [redacted] and ab"
        );
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hé", 2), "hé");
        assert!(!format!("{redactor:?}").contains("sk-secret"));
    }
}
