//! Reading a model server's response body into events: SSE through the chunk decoder, or a whole
//! JSON body from a server that ignored `stream: true`, under the idle timeout; and the merging
//! of deltas that arrive in one piece of the body.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

use super::{TimedOut, JSON_BODY_LIMIT};
use crate::llm::anthropic::MessagesParser;
use crate::llm::chunk::{ChunkParser, EventParser, Flow, StreamDecoder};
use crate::llm::error::{LlmError, Redactor, TimeoutPhase};
use crate::llm::responses::ResponsesParser;
use crate::llm::sse::SseEvent;
use crate::llm::LlmEvent;

/// Reads a response body into events under the idle timeout. Generic over the byte stream so
/// tests can feed fragments and pause the clock.
pub(crate) struct BodyReader<S> {
    body: S,
    mode: BodyMode,
    queue: VecDeque<Result<LlmEvent, LlmError>>,
    /// What one read decodes to, before it joins the queue; kept so that its capacity serves
    /// every read rather than growing from nothing on each.
    decoded: Vec<Result<LlmEvent, LlmError>>,
    /// The idle timeout; `None` for no limit.
    idle: Option<IdleTimer>,
    /// Nothing more will be read; the queue may still hold items.
    done: bool,
    /// Whether the deltas of one piece of the body are merged (`llm.merge_deltas`).
    merge_deltas: bool,
}

/// The most bytes of text or arguments merged into one delta: a reply that arrives all at once
/// still streams to the client in pieces it can show as they come, and no event grows without
/// bound.
pub(crate) const MERGED_DELTA_LIMIT: usize = 16 * 1024;

/// Which parser reads the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Streamed chat-completion chunks.
    Chat,
    /// A chat-completions server that ignored `stream: true`: one JSON completion.
    ChatJson,
    /// Anthropic Messages events.
    Messages,
    /// OpenAI Responses events.
    Responses,
}

/// The streaming parsers, one enum so a body reader is one type whatever the provider.
#[derive(Debug)]
pub(crate) enum SseParser {
    Chat(ChunkParser),
    Messages(MessagesParser),
    Responses(ResponsesParser),
}

impl EventParser for SseParser {
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<LlmEvent>) -> Result<Flow, LlmError> {
        match self {
            SseParser::Chat(parser) => parser.on_event(event, out),
            SseParser::Messages(parser) => parser.on_event(event, out),
            SseParser::Responses(parser) => parser.on_event(event, out),
        }
    }

    fn saw_finish(&self) -> bool {
        match self {
            SseParser::Chat(parser) => parser.saw_finish(),
            SseParser::Messages(parser) => parser.saw_finish(),
            SseParser::Responses(parser) => parser.saw_finish(),
        }
    }

    fn on_done(&mut self, out: &mut Vec<LlmEvent>) {
        match self {
            SseParser::Chat(parser) => parser.on_done(out),
            SseParser::Messages(parser) => parser.on_done(out),
            SseParser::Responses(parser) => parser.on_done(out),
        }
    }
}

enum BodyMode {
    Sse(StreamDecoder<SseParser>),
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
        dialect: Dialect,
        idle_timeout: Option<Duration>,
        redactor: Redactor,
    ) -> Self {
        let mode = match dialect {
            Dialect::ChatJson => BodyMode::Json {
                buf: Vec::new(),
                parser: ChunkParser::new(redactor),
            },
            Dialect::Chat => BodyMode::Sse(StreamDecoder::with_parser(SseParser::Chat(
                ChunkParser::new(redactor),
            ))),
            Dialect::Messages => BodyMode::Sse(StreamDecoder::with_parser(SseParser::Messages(
                MessagesParser::new(redactor),
            ))),
            Dialect::Responses => BodyMode::Sse(StreamDecoder::with_parser(SseParser::Responses(
                ResponsesParser::new(redactor),
            ))),
        };
        Self {
            body,
            mode,
            queue: VecDeque::new(),
            // One slot: a model at its pace sends one event per read, and a first push would
            // make it four, kept for the whole stream; a burst grows it as it would have.
            decoded: Vec::with_capacity(1),
            idle: idle_timeout.map(IdleTimer::new),
            done: false,
            merge_deltas: false,
        }
    }

    /// Merges the deltas of one message or call that arrive in one piece of the body (one
    /// HTTP chunk or HTTP/2 frame, as far as one read holds it) into one, up to
    /// [`MERGED_DELTA_LIMIT`] bytes each.
    ///
    /// Why: the cost of a run downstream of this reader (the middleware, the encoder, the
    /// run's log, the client's parsing and rendering) is per event, not per byte. A model
    /// writing at its own pace sends one chunk per piece, so nothing changes for it; a reply
    /// that arrives in a burst (a fast model, a proxy that buffers) loses nothing by streaming
    /// one event per piece rather than one per chunk, since all of it was already here.
    pub(crate) fn merging_deltas(mut self, merge: bool) -> Self {
        self.merge_deltas = merge;
        self
    }

    /// The next event, `None` at the end. After an `Err` only `None` follows.
    #[cfg(test)]
    pub(crate) async fn next_event(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        std::future::poll_fn(|cx| self.poll_next_event(cx)).await
    }

    /// Polls for the next event, `None` at the end. After an `Err` only `None` follows. A poll
    /// rather than an async fn: the model stream is polled once per event, and an async fn's
    /// future would be built (and moved into place) for every one.
    pub(crate) fn poll_next_event(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<LlmEvent, LlmError>>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Poll::Ready(Some(item));
            }
            if self.done {
                return Poll::Ready(None);
            }
            let read = match self.body.poll_next_unpin(cx) {
                Poll::Ready(read) => {
                    if let Some(idle) = &mut self.idle {
                        idle.on_read();
                    }
                    Ok(read)
                }
                Poll::Pending => match &mut self.idle {
                    Some(idle) => {
                        std::task::ready!(idle.poll_expired(cx));
                        Err(TimedOut)
                    }
                    None => return Poll::Pending,
                },
            };
            let mut out = std::mem::take(&mut self.decoded);
            match read {
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
            // One event from one read (a model at its own pace: nearly every read) is handed
            // on directly: the queue then never takes a first block of four events that it
            // would keep for the stream's whole life.
            if out.len() == 1 {
                if let Some(item) = out.pop() {
                    self.decoded = out;
                    return Poll::Ready(Some(item));
                }
            }
            // The queue is empty here (reads happen only then), so what merges is one piece's.
            if self.merge_deltas {
                for item in out.drain(..) {
                    push_merged(&mut self.queue, item);
                }
            } else {
                self.queue.extend(out.drain(..));
            }
            self.decoded = out;
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
        let secs = self.idle.as_ref().map_or(0, |idle| idle.limit.as_secs());
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

/// Queues `item`, appended to the delta at the back of the queue when both continue the same
/// text, reasoning or tool call and the result stays within [`MERGED_DELTA_LIMIT`]. A tool-call
/// delta that names a call (its first) is never appended, so every call still starts its own.
fn push_merged(queue: &mut VecDeque<Result<LlmEvent, LlmError>>, item: Result<LlmEvent, LlmError>) {
    if let (Some(Ok(last)), Ok(next)) = (queue.back_mut(), &item) {
        let pair = match (last, next) {
            (LlmEvent::TextDelta(into), LlmEvent::TextDelta(more))
            | (LlmEvent::ReasoningDelta(into), LlmEvent::ReasoningDelta(more)) => {
                Some((into, more))
            }
            (
                LlmEvent::ToolCallDelta {
                    index,
                    arguments: into,
                    ..
                },
                LlmEvent::ToolCallDelta {
                    index: next_index,
                    id: None,
                    name: None,
                    arguments: more,
                },
            ) if index == next_index => Some((into, more)),
            _ => None,
        };
        if let Some((into, more)) = pair {
            if into.len() + more.len() <= MERGED_DELTA_LIMIT {
                into.push_str(more);
                return;
            }
        }
    }
    queue.push_back(item);
}

/// The idle timeout across a reply's reads: one timer, moved lazily. A timeout made per read
/// registered a timer in tokio's shared timer wheel and removed it again for every chunk; now a
/// read only notes the time, and the timer, when it fires before the silence is long enough,
/// is moved to when it will be.
struct IdleTimer {
    limit: Duration,
    last_read: Instant,
    sleep: Pin<Box<Sleep>>,
}

impl IdleTimer {
    fn new(limit: Duration) -> Self {
        let now = Instant::now();
        Self {
            limit,
            last_read: now,
            sleep: Box::pin(tokio::time::sleep_until(crate::clock::after(now, limit))),
        }
    }

    fn on_read(&mut self) {
        self.last_read = Instant::now();
    }

    /// Ready once the reply has been silent for the limit since the last read.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            std::task::ready!(self.sleep.as_mut().poll(cx));
            let due = crate::clock::after(self.last_read, self.limit);
            if Instant::now() >= due {
                return Poll::Ready(());
            }
            self.sleep.as_mut().reset(due);
        }
    }
}
