//! The fake OpenAI-compatible upstream the load examples run: every chat completion streams
//! `chunks` text deltas (`word0 word1 …`), the first at once and each next after `delay`, then a
//! finish reason and `[DONE]`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};

/// The upstream's routes (`POST /v1/chat/completions`).
pub(crate) fn router(chunks: usize, delay: Duration) -> Router {
    Router::new().route(
        "/v1/chat/completions",
        post(move || async move { streamed_reply(chunks, delay) }),
    )
}

/// The answer the upstream streams, and so the text every run's deltas must add up to.
#[allow(dead_code)] // used by load_resume's checker, not by load
pub(crate) fn scripted_text(chunks: usize) -> String {
    (0..chunks).map(|i| format!("word{i} ")).collect()
}

fn streamed_reply(chunks: usize, delay: Duration) -> Response {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({
            "id": "chatcmpl-load",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "load",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    frames.extend((0..chunks).map(|i| chunk(json!({"content": format!("word{i} ")}), Value::Null)));
    frames.push(chunk(json!({}), json!("stop")));
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    // Every frame after the first waits `delay`, even a zero one (a yield to the timer): the
    // burst figures in docs/benchmarks.md were measured so.
    let body = stream::iter(frames.into_iter().enumerate()).then(move |(i, frame)| async move {
        if i > 0 {
            tokio::time::sleep(delay).await;
        }
        Ok::<_, Infallible>(frame)
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}
