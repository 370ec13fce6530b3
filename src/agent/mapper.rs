//! `UpdateMapper`: the per-run, synchronous state machine a middleware uses to rewrite an update
//! stream, and [`map_updates`], the one place that lifts such a mapper onto a stream.
//!
//! Keeping the logic synchronous means a middleware is unit-tested with plain vectors, and the
//! stream plumbing (ordering, errors, end of stream) exists exactly once.

use std::collections::VecDeque;

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};

use super::{AgentError, AgentStream, AgentUpdate};

/// The updates one step hands on: nearly always one, so it is held inline (a heap vector's
/// first block is four updates, about 600 bytes kept for the stream's whole life, in every
/// middleware of the chain).
pub type Updates = smallvec::SmallVec<[AgentUpdate; 1]>;

/// Rewrites the updates of one run.
pub trait UpdateMapper: Send + 'static {
    /// Called for each update of the inner agent, in order; pushes zero or more updates to `out`.
    ///
    /// # Errors
    /// An error ends the run with `RUN_ERROR` after the updates already pushed.
    fn on_update(&mut self, update: AgentUpdate, out: &mut Updates) -> Result<(), AgentError>;

    /// Called once when the inner stream ends normally (not after an inner error); may push
    /// trailing updates.
    ///
    /// # Errors
    /// An error ends the run with `RUN_ERROR` after the updates already pushed.
    fn on_end(&mut self, _out: &mut Updates) -> Result<(), AgentError> {
        Ok(())
    }
}

/// The stream [`map_updates`] returns. Written by hand rather than with `stream::unfold`: unfold
/// moves its whole state into a new future for every item, and a mapper's state (the predictive
/// middleware's parsers and state view) would be copied once per streamed argument fragment.
struct Mapping<M> {
    inner: Option<AgentStream>,
    mapper: M,
    ready: VecDeque<Result<AgentUpdate, AgentError>>,
}

/// Drives `mapper` over `inner`. An inner error passes through and ends the stream; dropping
/// the returned stream drops `inner`.
pub fn map_updates<M: UpdateMapper>(inner: AgentStream, mapper: M) -> AgentStream {
    Box::pin(Mapping {
        inner: Some(inner),
        mapper,
        ready: VecDeque::new(),
    })
}

// Nothing in `Mapping` is pinned: the inner stream is already a `Pin<Box<_>>`, and the mapper
// is only ever used through `&mut`.
impl<M> Unpin for Mapping<M> {}

impl<M: UpdateMapper> Stream for Mapping<M> {
    type Item = Result<AgentUpdate, AgentError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.ready.pop_front() {
                return Poll::Ready(Some(item));
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            // On the stack, not in the stream: an update's slot inline (about 170 bytes) would
            // be held by every open run for each middleware that maps its updates.
            let mut scratch = Updates::new();
            let result = match std::task::ready!(inner.poll_next_unpin(cx)) {
                Some(Ok(update)) => this.mapper.on_update(update, &mut scratch),
                Some(Err(error)) => {
                    this.inner = None;
                    return Poll::Ready(Some(Err(error)));
                }
                None => {
                    this.inner = None;
                    this.mapper.on_end(&mut scratch)
                }
            };
            // `ready` is empty here (it is drained before the inner stream is polled), so one
            // update in, one out (nearly every update of a run) is handed on directly, not moved
            // through the queue as well.
            if result.is_ok() && scratch.len() == 1 {
                if let Some(update) = scratch.pop() {
                    return Poll::Ready(Some(Ok(update)));
                }
            }
            this.ready.extend(scratch.into_iter().map(Ok));
            if let Err(error) = result {
                this.inner = None;
                this.ready.push_back(Err(error));
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A scripted inner agent for middleware tests: it records the request it was given and
    //! replays a fixed list of updates.

    use std::sync::{Arc, Mutex};

    use futures_util::stream::{self, StreamExt};

    use crate::agent::{Agent, AgentError, AgentStream, AgentUpdate, RunRequest};

    #[derive(Clone, Default)]
    pub(crate) struct ScriptedAgent {
        pub(crate) script: Vec<AgentUpdate>,
        pub(crate) received: Arc<Mutex<Vec<RunRequest>>>,
    }

    impl ScriptedAgent {
        pub(crate) fn new(script: Vec<AgentUpdate>) -> Self {
            ScriptedAgent {
                script,
                received: Arc::default(),
            }
        }

        pub(crate) fn last_request(&self) -> RunRequest {
            self.received
                .lock()
                .unwrap()
                .last()
                .cloned()
                .expect("the agent was run")
        }
    }

    impl Agent for ScriptedAgent {
        fn run(&self, request: RunRequest) -> Result<AgentStream, AgentError> {
            self.received.lock().unwrap().push(request);
            Ok(stream::iter(self.script.clone().into_iter().map(Ok)).boxed())
        }
    }

    /// A minimal 1.0 request with one user message and the given state.
    pub(crate) fn request(state: Option<serde_json::Value>) -> RunRequest {
        let input: crate::protocol::RunAgentInput = serde_json::from_value(serde_json::json!({
            "threadId": "t", "runId": "r", "protocolVersion": "1.0",
            "messages": [{"id": "u", "role": "user", "content": "hi"}],
        }))
        .unwrap();
        let mut request = RunRequest::from(input);
        request.state = state;
        request
    }

    /// Collects a stream into its items (errors as `Err` strings with the code).
    pub(crate) async fn collect(stream: AgentStream) -> Vec<Result<AgentUpdate, &'static str>> {
        stream
            .map(|item| item.map_err(|e| e.code()))
            .collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::agent::Agent;
    use crate::protocol::EventBody;

    fn custom(name: &str) -> AgentUpdate {
        AgentUpdate::Event(EventBody::custom(name, serde_json::Value::Null))
    }

    /// Doubles every update and appends one at the end.
    struct Doubler;
    impl UpdateMapper for Doubler {
        fn on_update(&mut self, u: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
            out.push(u.clone());
            out.push(u);
            Ok(())
        }
        fn on_end(&mut self, out: &mut Updates) -> Result<(), AgentError> {
            out.push(custom("end"));
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_mapper_sees_every_update_in_order_and_may_add_at_the_end() {
        let inner = ScriptedAgent::new(vec![custom("a"), custom("b")]);
        let items = collect(map_updates(inner.run(request(None)).unwrap(), Doubler)).await;
        let expected: Vec<Result<AgentUpdate, &str>> = ["a", "a", "b", "b", "end"]
            .iter()
            .map(|n| Ok(custom(n)))
            .collect();
        assert_eq!(items, expected);
    }

    struct FailsOnSecond(u32);
    impl UpdateMapper for FailsOnSecond {
        fn on_update(&mut self, u: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
            self.0 += 1;
            out.push(u);
            if self.0 == 2 {
                return Err(AgentError::Internal("boom".into()));
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_mapper_error_ends_the_stream_after_what_it_pushed() {
        let inner = ScriptedAgent::new(vec![custom("a"), custom("b"), custom("c")]);
        let items = collect(map_updates(
            inner.run(request(None)).unwrap(),
            FailsOnSecond(0),
        ))
        .await;
        assert_eq!(
            items,
            vec![Ok(custom("a")), Ok(custom("b")), Err("internal_error")]
        );
    }
}
