//! Request decoding: the body's bytes to a `RunAgentInput`, or the 4xx that refuses them.
//!
//! Before any handler, [`read_body_in_time`] refuses a POST that is not
//! `Content-Type: application/json` with 415 (a web page can send a cross-origin `text/plain`
//! POST without a preflight; a JSON one needs a preflight, which a server without CORS refuses,
//! so no page can start a run). That holds for a POST without a body too
//! (`/<agent>/runs/<runId>/stop`): a body-less POST is a "simple request" a page on any origin
//! may send, and could stop anyone's run. It then reads the whole body within
//! `server.body_read_timeout_secs` (408 `body_timeout` otherwise), so a client dribbling its body
//! cannot hold a connection and a task for ever. A JSON syntax error is 400 `invalid_json`, a
//! well-formed body of the wrong shape 422
//! `invalid_request`, a body over `server.body_limit_bytes` 413, and a valid input over one of
//! `server.input_limits` 422 with a code naming that limit, media parts included (the checks
//! are `protocol::check_input`'s; this maps their refusal to its code).
//!
//! The input limits are checked here, on the decoded input, rather than in `RunRequest`
//! construction or in the agents: they hold for every agent alike, they come before the run
//! takes a concurrency slot (a refused request never holds one), and before any middleware does
//! work in proportion to the input (state validation, history repair, prompt building).
//! `RunRequest::from` stays an infallible conversion. The body limit already bounds the parse
//! itself, and serde_json's recursion limit (128) bounds nesting, so decoding a hostile body is
//! linear in its size.
//!
//! [`decode_run_input`] is a pure function of the bytes, so the property test below
//! (`decode/tests.rs`) can feed it generated inputs by the thousand.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, Code};
use crate::protocol::{check_input, InputCode, InputLimits, InputRefusal, RunAgentInput};

#[cfg(test)]
mod tests;

/// The refusal of a body that could not even be read (too large, or a broken transfer).
pub(super) fn body_rejection(rejection: &BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            Code::PayloadTooLarge,
            "the request body is larger than server.body_limit_bytes",
        )
    } else {
        ApiError::new(Code::InvalidBody, rejection.body_text())
    }
}

/// How long a request's body may take to arrive (`server.body_read_timeout_secs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyReadTimeout(pub(super) Duration);

/// The middleware: the content-type check, then the whole body read within the timeout (and
/// within the body limit, which the layer outside this one set). The handler then reads the
/// body from memory.
pub(super) async fn read_body_in_time(
    State(BodyReadTimeout(timeout)): State<BodyReadTimeout>,
    request: Request,
    next: Next,
) -> Response {
    // Every POST, with or without a body: the content type is what makes a browser ask first.
    if request.method() == Method::POST {
        if let Err(refusal) = require_json(request.headers()) {
            return refusal.into_response();
        }
    }
    let (parts, body) = request.into_parts();
    let reading = Bytes::from_request(Request::from_parts(parts.clone(), body), &());
    let bytes = match tokio::time::timeout(timeout, reading).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(rejection)) => return body_rejection(&rejection).into_response(),
        Err(_elapsed) => {
            return ApiError::new(
                Code::BodyTimeout,
                format!(
                    "the request body did not arrive within {} s (server.body_read_timeout_secs)",
                    timeout.as_secs_f64()
                ),
            )
            .into_response()
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A POST must be declared JSON: `application/json`, parameters (`charset=utf-8`) and letter
/// case aside; a stop without a body too.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    let essence = declared
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    if essence.is_some_and(|essence| essence.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    Err(ApiError::new(
        Code::UnsupportedMediaType,
        match declared {
            Some(declared) => format!(
                "POST with `Content-Type: application/json` (a RunAgentInput, or nothing to \
                 stop a run), not `{}`",
                declared.chars().take(64).collect::<String>()
            ),
            None => "POST with `Content-Type: application/json` (a RunAgentInput, or nothing \
                     to stop a run)"
                .to_owned(),
        },
    ))
}

/// Decodes a body and checks it against the input limits.
pub(super) fn decode_run_input(
    bytes: &[u8],
    limits: &InputLimits,
) -> Result<RunAgentInput, ApiError> {
    let input: RunAgentInput = serde_json::from_slice(bytes).map_err(|error| {
        use serde_json::error::Category;
        match error.classify() {
            Category::Syntax | Category::Eof | Category::Io => ApiError::new(
                Code::InvalidJson,
                format!("the body is not valid JSON: {error}"),
            ),
            Category::Data => ApiError::new(
                Code::InvalidRequest,
                format!("the body is not a valid RunAgentInput: {error}"),
            ),
        }
    })?;
    check_input(&input, limits)?;
    Ok(input)
}

impl From<InputRefusal> for ApiError {
    fn from(refusal: InputRefusal) -> Self {
        let code = match refusal.code {
            InputCode::TooManyMessages => Code::TooManyMessages,
            InputCode::ContentTooLarge => Code::ContentTooLarge,
            InputCode::TooManyTools => Code::TooManyTools,
            InputCode::TooManyContextEntries => Code::TooManyContextEntries,
            InputCode::ContextTooLarge => Code::ContextTooLarge,
            InputCode::IdTooLong => Code::IdTooLong,
            InputCode::InvalidId => Code::InvalidId,
            InputCode::TooManyToolCalls => Code::TooManyToolCalls,
            InputCode::MetadataTooLarge => Code::MetadataTooLarge,
            InputCode::ForwardedPropsTooLarge => Code::ForwardedPropsTooLarge,
            InputCode::TooManyResumeEntries => Code::TooManyResumeEntries,
            InputCode::ResumeTooLarge => Code::ResumeTooLarge,
            InputCode::TooManyMediaParts => Code::TooManyMediaParts,
            InputCode::MediaTooLarge => Code::MediaTooLarge,
            InputCode::InvalidMedia => Code::InvalidMedia,
            InputCode::UnsupportedImageType => Code::UnsupportedImageType,
            InputCode::MediaUrlNotAllowed => Code::MediaUrlNotAllowed,
        };
        ApiError::new(code, refusal.message)
    }
}
