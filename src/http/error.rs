//! `ApiError`: a refusal before any stream byte, as `{"error": {"code", "message"}}`, and
//! [`Code`], every stable code such a refusal carries with its status, in one table: the
//! public contract `docs/api.md` lists (a test holds the two together).
//!
//! The response carries its code as a [`Rejection`] extension, so the metrics layer counts
//! refusals by code without parsing bodies.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agent::AgentError;
use crate::runs::{ReadError, ReaderRefusal};
use crate::session::Refused;
use crate::threads::verify::HistoryMismatch;

/// Declares [`Code`]: each variant with its status and its wire name.
macro_rules! codes {
    ($($variant:ident => $status:ident $name:literal,)*) => {
        /// The stable code of a refusal before the stream, and its HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            /// Every code, in the order of the table.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The code as clients read it (`error.code`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $name,)*
                }
            }

            /// The status a refusal with this code answers with.
            pub fn status(self) -> StatusCode {
                match self {
                    $(Code::$variant => StatusCode::$status,)*
                }
            }
        }
    };
}

codes! {
    InvalidJson => BAD_REQUEST "invalid_json",
    InvalidRequest => UNPROCESSABLE_ENTITY "invalid_request",
    InvalidBody => BAD_REQUEST "invalid_body",
    PayloadTooLarge => PAYLOAD_TOO_LARGE "payload_too_large",
    TooManyMessages => UNPROCESSABLE_ENTITY "too_many_messages",
    ContentTooLarge => UNPROCESSABLE_ENTITY "content_too_large",
    TooManyTools => UNPROCESSABLE_ENTITY "too_many_tools",
    TooManyContextEntries => UNPROCESSABLE_ENTITY "too_many_context_entries",
    ContextTooLarge => UNPROCESSABLE_ENTITY "context_too_large",
    IdTooLong => UNPROCESSABLE_ENTITY "id_too_long",
    InvalidId => UNPROCESSABLE_ENTITY "invalid_id",
    TooManyToolCalls => UNPROCESSABLE_ENTITY "too_many_tool_calls",
    MetadataTooLarge => UNPROCESSABLE_ENTITY "metadata_too_large",
    ForwardedPropsTooLarge => UNPROCESSABLE_ENTITY "forwarded_props_too_large",
    TooManyResumeEntries => UNPROCESSABLE_ENTITY "too_many_resume_entries",
    ResumeTooLarge => UNPROCESSABLE_ENTITY "resume_too_large",
    UnsupportedMediaType => UNSUPPORTED_MEDIA_TYPE "unsupported_media_type",
    HostNotAllowed => FORBIDDEN "host_not_allowed",
    BodyTimeout => REQUEST_TIMEOUT "body_timeout",
    TooManyMediaParts => UNPROCESSABLE_ENTITY "too_many_media_parts",
    MediaTooLarge => UNPROCESSABLE_ENTITY "media_too_large",
    InvalidMedia => UNPROCESSABLE_ENTITY "invalid_media",
    UnsupportedImageType => UNPROCESSABLE_ENTITY "unsupported_image_type",
    MediaUrlNotAllowed => UNPROCESSABLE_ENTITY "media_url_not_allowed",
    UnknownAgent => NOT_FOUND "unknown_agent",
    NotFound => NOT_FOUND "not_found",
    InvalidTool => UNPROCESSABLE_ENTITY "invalid_tool",
    ToolNameClash => UNPROCESSABLE_ENTITY "tool_name_clash",
    InvalidState => UNPROCESSABLE_ENTITY "invalid_state",
    StateTooLarge => UNPROCESSABLE_ENTITY "state_too_large",
    MissingToken => UNAUTHORIZED "missing_token",
    InvalidToken => UNAUTHORIZED "invalid_token",
    TooManyRuns => SERVICE_UNAVAILABLE "too_many_runs",
    ThreadBusy => CONFLICT "thread_busy",
    ForgedToolResult => UNPROCESSABLE_ENTITY "forged_tool_result",
    ChangedToolResult => UNPROCESSABLE_ENTITY "changed_tool_result",
    UnrecordedToolResult => UNPROCESSABLE_ENTITY "unrecorded_tool_result",
    ThreadStoreUnavailable => SERVICE_UNAVAILABLE "thread_store_unavailable",
    ThreadNotFound => NOT_FOUND "thread_not_found",
    ThreadsOff => NOT_FOUND "threads_off",
    RunInProgress => CONFLICT "run_in_progress",
    RunNotFound => NOT_FOUND "run_not_found",
    CursorExpired => GONE "cursor_expired",
    InvalidLastEventId => BAD_REQUEST "invalid_last_event_id",
    TooManyReaders => TOO_MANY_REQUESTS "too_many_readers",
    ThreadQuotaExceeded => FORBIDDEN "thread_quota_exceeded",
    InvalidQuery => BAD_REQUEST "invalid_query",
    InvalidCursor => BAD_REQUEST "invalid_cursor",
    TitleTooLong => UNPROCESSABLE_ENTITY "title_too_long",
    InternalError => INTERNAL_SERVER_ERROR "internal_error",
}

pub struct ApiError {
    code: Code,
    message: String,
    /// Seconds for `Retry-After` (503 when the server is full).
    retry_after: Option<u64>,
}

impl std::fmt::Debug for ApiError {
    /// The code as clients read it, so a log (or a test) shows what they would see.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiError")
            .field("status", &self.code.status())
            .field("code", &self.code.as_str())
            .field("message", &self.message)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

/// The code of a refused request, attached to its response for the metrics.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rejection(pub(super) &'static str);

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 404 `unknown_agent`: the path names no agent of this server (the message lists them).
    pub(super) fn unknown_agent(name: &str, state: &super::AppState) -> Self {
        ApiError::new(
            Code::UnknownAgent,
            format!(
                "no agent named `{}`; this server has: {} (GET /agents lists them)",
                crate::text::truncate_chars(name, 64),
                state.agents.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    }

    /// Tells the client when to try again.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code.as_str();
        let body = json!({"error": {"code": code, "message": self.message}});
        let mut response = (self.code.status(), axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response.extensions_mut().insert(Rejection(code));
        response
    }
}

impl From<AgentError> for ApiError {
    /// The agent's refusals before the stream (`AgentError::InvalidInput`) by their code;
    /// anything else cannot happen before a stream and is an internal error.
    fn from(error: AgentError) -> Self {
        let code = match &error {
            AgentError::InvalidInput { code, .. } => Code::ALL
                .iter()
                .copied()
                .find(|known| known.as_str() == *code),
            _ => None,
        };
        match code {
            Some(code) => ApiError::new(code, error.public_message()),
            None => {
                tracing::error!(code = error.code(), %error, "an agent refused a run with no known code");
                ApiError::new(Code::InternalError, "An internal error occurred.")
            }
        }
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::TooManyRuns { retry_after_secs } => ApiError::new(
                Code::TooManyRuns,
                "the server is running as many runs as it allows; retry later",
            )
            .with_retry_after(retry_after_secs),
            Refused::RunInProgress => ApiError::new(
                Code::RunInProgress,
                "a run with this runId is still streaming; reconnect to it with \
                 GET /<agent>/runs/<runId>/events, or use a new runId",
            ),
            Refused::ThreadBusy => ApiError::new(
                Code::ThreadBusy,
                "another run is still streaming on this thread; wait for it to end or stop it",
            ),
            Refused::ThreadQuotaExceeded(quota) => ApiError::new(
                Code::ThreadQuotaExceeded,
                format!(
                    "this caller's threads are at the server's quota ({quota}); delete threads \
                     (DELETE /<agent>/threads/<threadId>) or wait for old ones to expire"
                ),
            ),
            Refused::StoreUnavailable => ApiError::new(
                Code::ThreadStoreUnavailable,
                "the conversation store is not answering; please retry",
            )
            .with_retry_after(1),
            // The thread store's answer: one Redis, one way of saying it is not answering.
            Refused::RunLogUnavailable => ApiError::new(
                Code::ThreadStoreUnavailable,
                "the store is not answering; please retry",
            )
            .with_retry_after(1),
            Refused::History(mismatch) => {
                let code = match mismatch {
                    HistoryMismatch::ForgedResult(_) => Code::ForgedToolResult,
                    HistoryMismatch::ChangedResult(_) => Code::ChangedToolResult,
                    HistoryMismatch::UnrecordedResult(_) => Code::UnrecordedToolResult,
                };
                ApiError::new(code, mismatch.to_string())
            }
            Refused::Agent(error) => ApiError::from(error),
            Refused::ThreadNotFound => ApiError::new(
                Code::ThreadNotFound,
                "no such thread: it is unknown, expired, or not yours",
            ),
            Refused::RunNotFound => ApiError::new(
                Code::RunNotFound,
                "no such run: it is unknown, expired, or not yours",
            ),
            Refused::Cursor(ReadError::CursorExpired) => ApiError::new(
                Code::CursorExpired,
                "the events after this Last-Event-ID are no longer kept; start a new run",
            ),
            Refused::Cursor(ReadError::CursorAhead) => ApiError::new(
                Code::InvalidLastEventId,
                "Last-Event-ID names an event this run has not produced",
            ),
            // Readers come and go, so the same request may well succeed soon.
            Refused::TooManyReaders(refusal) => ApiError::new(
                Code::TooManyReaders,
                match refusal {
                    ReaderRefusal::RunFull => {
                        "this run already has as many readers as the server allows; close one \
                         and retry"
                    }
                    ReaderRefusal::ServerFull => {
                        "the server is reading as many runs as it allows; please retry"
                    }
                },
            )
            .with_retry_after(1),
        }
    }
}

/// A handler panicked before streaming: answer 500 JSON and keep serving.
pub(super) fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    let code = Code::InternalError;
    let body = json!({"error": {"code": code.as_str(), "message": "An internal error occurred."}});
    let mut response = (
        code.status(),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    response.extensions_mut().insert(Rejection(code.as_str()));
    response
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The refusals table of `docs/api.md`: each code with the status its row gives.
    fn documented_codes() -> BTreeMap<String, u16> {
        let api = include_str!("../../docs/api.md");
        let table = api
            .split("Before the stream starts")
            .nth(1)
            .expect("docs/api.md has the table of refusals before the stream");
        let mut codes = BTreeMap::new();
        for row in table.lines().skip_while(|line| !line.starts_with('|')) {
            if !row.starts_with('|') {
                break;
            }
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let Ok(status) = cells[1].parse::<u16>() else {
                continue; // the header and its rule
            };
            for code in cells[2].split('`').skip(1).step_by(2) {
                codes.insert(code.to_owned(), status);
            }
        }
        codes
    }

    #[test]
    fn every_code_is_documented_with_its_status_and_every_documented_code_exists() {
        let documented = documented_codes();
        let ours: BTreeMap<String, u16> = Code::ALL
            .iter()
            .map(|code| (code.as_str().to_owned(), code.status().as_u16()))
            .collect();
        assert_eq!(ours, documented, "Code and the table in docs/api.md differ");
    }

    #[test]
    fn codes_are_unique() {
        let names: std::collections::BTreeSet<_> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), Code::ALL.len());
    }
}
