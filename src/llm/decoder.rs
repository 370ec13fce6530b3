//! [`StreamDecoder`]: bytes of a streaming SSE body in, [`LlmEvent`]s out, for every dialect
//! (chat-completion chunks, Anthropic Messages events, Responses events), with the rules all of
//! them share: an event too large is malformed, the first error ends the stream, and a body
//! that ends without its dialect's end marker is complete only if the reply had finished.
//!
//! Each dialect is an [`EventParser`]; the decoder is generic over it, so the chat-completions
//! path pays nothing for the others.

use super::error::LlmError;
use super::sse::{SseDecoder, SseEvent};
use super::LlmEvent;

/// What the caller should do after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// The dialect's end marker (`[DONE]`, `message_stop`, `response.completed`) or an error:
    /// stop reading the body.
    Stop,
}

/// One dialect's parser of dispatched SSE events.
pub(crate) trait EventParser {
    /// Appends what `event` completes to `out`; `Err` ends the stream.
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<LlmEvent>) -> Result<Flow, LlmError>;

    /// Whether the reply said it was complete (a finish or stop reason).
    fn saw_finish(&self) -> bool;

    /// The body ended after the reply finished: emits what is still owed (`Finished`, usage).
    fn on_done(&mut self, out: &mut Vec<LlmEvent>);
}

/// Bytes of an SSE body in, events out: [`SseDecoder`] + a dialect's parser, with the
/// end-of-body rules. After it yields an `Err` it yields nothing more.
#[derive(Debug)]
pub(crate) struct StreamDecoder<P> {
    sse: SseDecoder,
    pub(crate) parser: P,
    ended: bool,
    events: Vec<SseEvent>,
    produced: Vec<LlmEvent>,
}

impl<P: EventParser> StreamDecoder<P> {
    pub(crate) fn with_parser(parser: P) -> Self {
        Self {
            sse: SseDecoder::new(),
            parser,
            ended: false,
            // One slot each: a model at its pace sends one event per read, which makes one
            // model event, and a first push would make each four, kept for the whole stream; a
            // burst grows them as it would have.
            events: Vec::with_capacity(1),
            produced: Vec::with_capacity(1),
        }
    }

    /// True once the end marker, an error or the end of the body was handled.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    pub(crate) fn saw_finish(&self) -> bool {
        self.parser.saw_finish()
    }

    /// Decodes a body fragment, appending the resulting items to `out`.
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<Result<LlmEvent, LlmError>>) {
        if self.ended {
            return;
        }
        if self.sse.feed(bytes, &mut self.events).is_err() {
            self.fail(
                LlmError::Malformed {
                    detail: "an SSE event larger than 8 MiB".to_owned(),
                },
                out,
            );
            return;
        }
        self.drain_events(out);
    }

    /// The body ended: normally (`cause` is `None`) or broken (`cause` says how). Without its
    /// end marker the reply counts as complete only if it had finished; otherwise it was cut
    /// (`upstream_stream_cut`).
    pub(crate) fn end_with(
        &mut self,
        cause: Option<String>,
        out: &mut Vec<Result<LlmEvent, LlmError>>,
    ) {
        if self.ended {
            return;
        }
        self.sse.finish(&mut self.events);
        self.drain_events(out);
        if self.ended {
            return;
        }
        self.ended = true;
        if self.parser.saw_finish() {
            self.parser.on_done(&mut self.produced);
            out.extend(self.produced.drain(..).map(Ok));
        } else {
            out.push(Err(LlmError::StreamCut {
                detail: cause.unwrap_or_else(|| {
                    "the body ended before the reply said it was complete".to_owned()
                }),
            }));
        }
    }

    fn drain_events(&mut self, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        // Taken for the loop and put back empty: its capacity serves the next fragment.
        let mut events = std::mem::take(&mut self.events);
        for event in &events {
            let flow = self.parser.on_event(event, &mut self.produced);
            out.extend(self.produced.drain(..).map(Ok));
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Stop) => {
                    self.ended = true;
                    break;
                }
                Err(error) => {
                    self.fail(error, out);
                    break;
                }
            }
        }
        events.clear();
        self.events = events;
    }

    fn fail(&mut self, error: LlmError, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        self.ended = true;
        out.push(Err(error));
    }
}

/// Test helpers shared by the dialects' parser tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::{EventParser, StreamDecoder};
    use crate::llm::{LlmError, LlmEvent};

    /// `body` decoded by `parser` in pieces of `piece` bytes, as a network delivers it, to
    /// its end.
    pub(crate) fn decode_in_pieces<P: EventParser>(
        parser: P,
        body: &str,
        piece: usize,
    ) -> Vec<Result<LlmEvent, LlmError>> {
        let mut decoder = StreamDecoder::with_parser(parser);
        let mut out = Vec::new();
        for bytes in body.as_bytes().chunks(piece) {
            decoder.feed(bytes, &mut out);
        }
        decoder.end_with(None, &mut out);
        out
    }

    /// A tool-call delta as a parser yields it (an item of [`decode_in_pieces`]'s result).
    #[allow(clippy::unnecessary_wraps)]
    pub(crate) fn tool_delta(
        index: usize,
        id: Option<&str>,
        name: Option<&str>,
        arguments: &str,
    ) -> Result<LlmEvent, LlmError> {
        Ok(LlmEvent::ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
        })
    }
}
