//! Connecting to a thread: "give me this thread, then follow its live run if one is running",
//! as one stream a reloaded page (or a second tab) reads once.
//!
//! A run on a thread notes, in its log, the part of the conversation its request brought that
//! the thread's record does not hold yet (its new messages, its state when it differs): the
//! run's [`Context`]. A connect reads the thread's record first and then the thread's latest
//! run. When that run is newer than the record (it streams still, or it ended so recently that
//! its save is not read yet), the stream is the run's `RUN_STARTED`, a `MESSAGES_SNAPSHOT` of
//! the record's messages and the run's new ones, a `STATE_SNAPSHOT`, then the run's own frames
//! after its `RUN_STARTED`, live until its terminal event: every message once. Otherwise the
//! stream is the record as a finished run, the updates a hydrate answers with too
//! ([`record_updates`]).

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{logged, Refused, RunBody, Sessions};
use crate::agent::AgentUpdate;
use crate::protocol::{
    write_frame, Event, EventBody, Message, MessagesSnapshot, ProtocolVersion, RunEncoder,
    RunStarted,
};
use crate::runs::{OnThread, ThreadRef};
use crate::threads::{ThreadKey, ThreadRecord};

/// What a client connecting to a run's thread needs of the run besides its frames.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Context {
    pub(super) run_id: String,
    /// The request's messages the thread's record did not hold.
    #[serde(default)]
    pub(super) messages: Vec<Message>,
    /// The request's state, when it was not the record's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) state: Option<Value>,
}

impl Context {
    /// The context of run `run_id`, whose request brought `messages` and `state` to a thread
    /// whose record was `previous`.
    pub(super) fn of(
        run_id: &str,
        previous: Option<&ThreadRecord>,
        messages: &[Message],
        state: Option<&Value>,
    ) -> Bytes {
        let known: std::collections::HashSet<&str> = previous
            .map(|record| record.messages.iter().map(Message::id).collect())
            .unwrap_or_default();
        let context = Context {
            run_id: run_id.to_owned(),
            messages: messages
                .iter()
                .filter(|message| !known.contains(message.id()))
                .cloned()
                .collect(),
            state: state
                .filter(|state| previous.and_then(|record| record.state.as_ref()) != Some(*state))
                .cloned(),
        };
        // A context that cannot be written only costs a connecting client the run's new
        // messages; it is never a reason to refuse the run. Fitted: the log keeps it for the
        // run's stream and after, and the writer's doubling leaves up to as much spare.
        serde_json::to_vec(&context).map_or_else(
            |_| Bytes::new(),
            |mut json| {
                json.shrink_to_fit();
                Bytes::from(json)
            },
        )
    }
}

impl Sessions {
    /// Connects to thread `thread_id` of `agent` for `scope` (see the module docs); `version`:
    /// the shapes of the frames this stream makes (a live run's own frames are as its client
    /// got them).
    ///
    /// # Errors
    /// No threads are kept, the thread is unknown to this scope (and no run streams on it), or
    /// a store is not answering.
    pub async fn connect(
        &self,
        (agent, thread_id): (&str, &str),
        scope: Option<&str>,
        version: ProtocolVersion,
    ) -> Result<RunBody, Refused> {
        let (Some(threads), Some(scope)) = (self.threads.as_deref(), scope) else {
            return Err(Refused::ThreadNotFound);
        };
        let key = ThreadKey {
            scope: scope.to_owned(),
            agent: agent.to_owned(),
            thread_id: thread_id.to_owned(),
        };
        // The record first: a run that ends between the two reads is then replayed whole
        // over the record from before it, rather than missed.
        let record = threads
            .load(&key)
            .await
            .map_err(|_| Refused::StoreUnavailable)?;
        let thread = ThreadRef {
            scope,
            agent,
            thread_id,
        };
        let latest = match self.runs.as_deref() {
            Some(runs) => logged::latest_on_thread(runs, thread).await?,
            None => None,
        };
        let live = latest.and_then(|latest| {
            let context: Context = serde_json::from_slice(&latest.context).ok()?;
            let saved = record.as_ref().is_some_and(|record| {
                record.last_run_id == context.run_id && latest.run.is_ended()
            });
            (!saved).then_some((latest, context))
        });
        match (live, record) {
            (Some((latest, context)), record) => {
                self.join(thread_id, latest, context, record).await
            }
            (None, Some(record)) => Ok(record_as_run(thread_id, record, version)),
            (None, None) => Err(Refused::ThreadNotFound),
        }
    }

    /// The run's start, the conversation and state it started from, then its frames.
    async fn join(
        &self,
        thread_id: &str,
        latest: OnThread,
        context: Context,
        record: Option<ThreadRecord>,
    ) -> Result<RunBody, Refused> {
        let (mut messages, recorded_state) =
            record.map_or((Vec::new(), None), |record| (record.messages, record.state));
        messages.extend(context.messages);
        let state = context.state.or(recorded_state);
        let mut head = Vec::new();
        let start = EventBody::RunStarted(RunStarted {
            thread_id: thread_id.to_owned(),
            run_id: context.run_id,
            protocol_version: None,
            parent_run_id: None,
            input: None,
        });
        let snapshot = EventBody::MessagesSnapshot(MessagesSnapshot { messages });
        let mut events = vec![start, snapshot];
        events.extend(state.map(EventBody::state_snapshot));
        for body in events {
            let event = Event {
                body,
                timestamp: Some(crate::protocol::now_millis()),
                raw_event: None,
                metadata: None,
            };
            write_frame(&event, &mut head).map_err(|_| Refused::RunLogUnavailable)?;
        }
        let Some(runs) = self.runs.as_deref() else {
            return Err(Refused::RunNotFound);
        };
        // After the run's own RUN_STARTED (seq 1), which the head stands for.
        let body = logged::follow(runs, latest.run, 1, self.keep_alive).await?;
        Ok(Box::pin(
            stream::once(async move { Ok(Bytes::from(head)) }).chain(body),
        ))
    }
}

/// The thread's record as a run that has finished, as a hydrate answers it: its conversation,
/// state and the interrupts it waits on.
fn record_as_run(thread_id: &str, record: ThreadRecord, version: ProtocolVersion) -> RunBody {
    let mut encoder = RunEncoder::new(version, thread_id.to_owned(), record.last_run_id.clone());
    let mut out = Vec::new();
    let write = || -> Result<(), crate::protocol::EncodeError> {
        encoder.start(&mut out)?;
        for update in record_updates(record) {
            match update {
                AgentUpdate::Event(body) => encoder.push(body, &mut out)?,
                AgentUpdate::Interrupt(interrupt) => encoder.add_interrupt(*interrupt),
                // A record says nothing else.
                AgentUpdate::Usage(_)
                | AgentUpdate::ToolProgress(_)
                | AgentUpdate::ApprovalRequest(_) => {}
            }
        }
        encoder.finish(&mut out)
    };
    let chunk = match write() {
        Ok(()) => Ok(Bytes::from(out)),
        Err(error) => {
            tracing::error!(%error, "could not encode a thread's record");
            Err(std::io::Error::other("the thread could not be encoded"))
        }
    };
    Box::pin(stream::once(async move { chunk }))
}

/// What a thread's record says as a run's updates (a hydrate, a connect with no live run).
pub(super) fn record_updates(record: ThreadRecord) -> Vec<AgentUpdate> {
    let mut updates = vec![AgentUpdate::Event(EventBody::MessagesSnapshot(
        MessagesSnapshot {
            messages: record.messages,
        },
    ))];
    if let Some(snapshot) = record.state {
        updates.push(AgentUpdate::Event(EventBody::state_snapshot(snapshot)));
    }
    updates.extend(
        record
            .interrupts
            .into_iter()
            .map(|interrupt| AgentUpdate::Interrupt(Box::new(interrupt))),
    );
    updates
}
