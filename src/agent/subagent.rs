//! Subagents: another configured agent offered to a parent as a server tool named after it,
//! taking one `task`. A call runs the child's whole agent (its middlewares, instructions, tools
//! and model) on a run of its own, streams what the child produces onto the parent's stream
//! (through [`ToolContext::events`]) between `SUBAGENT_STARTED` and `SUBAGENT_FINISHED` (or
//! `SUBAGENT_ERROR`), and answers with the child's last text message.
//!
//! Every event of the child is attributed to it (`subagentRunId`), and its tool call ids (and the
//! activity ids made from them) are prefixed with the child's run id: a child's model mints call
//! ids of its own, which may be the parent's too. How much of this a client sees is the parent's
//! `subagent_visibility`, applied above the parent's base agent
//! (`middleware::subagents`). A child's state is one key of the parent's: it starts from the
//! parent's state under that key, and its state events go out as changes under it ([`state`]).
//!
//! The child run is owned by the call's future: the call's timeout (`subagent_timeout_secs`), a
//! stopped run or a client gone drop it, and with it the child's stream and its upstream
//! request. The call may also fail fast: at most `max_parallel` calls of one parent run go at
//! once (the fan-out limit; the others get an error result).
//!
//! A child that stops to ask a person ends with `SUBAGENT_FINISHED` outcome `suspended`, and
//! its call passes the questions up as its own (`suspend`): the parent's run ends with them as
//! interrupts, and the answers call the tool again, which resumes the child under the same
//! `subagentRunId`. A child that called the client's tools ends suspended too, and its call
//! waits for the client's next run (`client_calls`). What a child is told besides its task,
//! and how an `answer_schema` holds its answer to a shape, is `briefing`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{new_id, Agent, AgentError, AgentUpdate, RunRequest};
use crate::protocol::{
    EventBody, Message, OpenEnds, ProtocolVersion, SubagentError, SubagentFinished,
    SubagentOutcome, SubagentStarted, TokenUsage, UserMessage,
};
use crate::telemetry::genai;
use crate::tools::{InputAnswers, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};
use briefing::{AnswerSchema, ParentView};
pub use briefing::{SubagentContext, MAX_CONTEXT_MESSAGES};
use suspend::{Suspended, Transcript};
use tracing::Instrument;

mod briefing;
mod client_calls;
pub mod state;
mod suspend;

/// How much of a subagent's work a client sees (`subagent_visibility`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubagentVisibility {
    /// `SUBAGENT_STARTED`, every event of the child attributed to it, `SUBAGENT_FINISHED` or
    /// `SUBAGENT_ERROR` (1.0 clients; a 0.x client gets `inline` instead).
    #[default]
    Attributed,
    /// The child's text folded into one `agui-host.subagent` activity per call, updated as each of its
    /// messages ends; no subagent events, nothing attributed.
    Inline,
    /// Only the call's result.
    Hidden,
}

impl SubagentVisibility {
    /// What a client of `version` is shown: a 0.x client knows no attribution (and some
    /// releases refuse the `SUBAGENT_*` events), so `attributed` becomes `inline` for it.
    pub fn for_client(self, version: ProtocolVersion) -> SubagentVisibility {
        match (self, version) {
            (SubagentVisibility::Attributed, ProtocolVersion::Legacy) => SubagentVisibility::Inline,
            (visibility, _) => visibility,
        }
    }
}

/// What the subagent tools of one parent share, per run of the parent: how many calls it has
/// going, so a turn that calls more than `limit` children at once gets errors for the rest
/// instead of fanning out without bound (the calls of one turn all run before the next turn
/// starts, so "at once in this run" is "in this turn"); and the children's token usage, which
/// the parent's `SubagentView` takes and reports as the run's own (a run's usage covers its
/// subagents').
#[derive(Debug, Clone)]
pub struct SubagentRuns {
    limit: usize,
    context: SubagentContext,
    /// The children's names (their tools').
    children: Arc<[String]>,
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Calls going, by parent run id.
    running: HashMap<String, usize>,
    /// Children's usage not yet reported, by parent run id.
    usage: HashMap<String, Vec<TokenUsage>>,
    /// What children see of each parent run, by its run id (see `briefing`).
    parents: HashMap<String, Arc<ParentView>>,
}

impl SubagentRuns {
    /// `limit` calls at once per parent run; children shown `context` of it.
    pub fn new(limit: usize, context: SubagentContext) -> Self {
        SubagentRuns {
            limit,
            context,
            children: Arc::new([]),
            shared: Arc::default(),
        }
    }

    /// The children's names.
    #[must_use]
    pub fn with_children(mut self, children: &[String]) -> Self {
        self.children = children.into();
        self
    }

    /// Takes what the children of the run `request` will be shown of it, when they are shown
    /// anything; kept until [`forget_parent`](Self::forget_parent). `client_tools`: the client
    /// is shown the children's work, so they may call its tools.
    pub fn note_parent(&self, request: &RunRequest, client_tools: bool) {
        let client_tools = client_tools && !request.tools.is_empty();
        if self.context.is_empty() && !client_tools {
            return;
        }
        let view = self.context.view(request, client_tools);
        self.lock().parents.insert(request.run_id.clone(), view);
    }

    /// The calls of `request` to children that waited for the client's tools, whose results it
    /// now carries: each to run again (see `client_calls`).
    pub fn resumptions(&self, request: &RunRequest) -> Vec<super::ToolDecision> {
        client_calls::resumptions(request, &self.children)
    }

    pub fn forget_parent(&self, run_id: &str) {
        self.lock().parents.remove(run_id);
    }

    fn parent_view(&self, run_id: &str) -> Option<Arc<ParentView>> {
        self.lock().parents.get(run_id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one call of the run `run_id`, held until dropped; `None` when the run has
    /// `limit` calls going.
    fn enter(&self, run_id: &str) -> Option<CallSlot> {
        let mut shared = self.lock();
        let count = shared.running.entry(run_id.to_owned()).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(CallSlot {
            runs: self.clone(),
            run_id: run_id.to_owned(),
        })
    }

    fn add_usage(&self, run_id: &str, usage: TokenUsage) {
        let mut shared = self.lock();
        shared
            .usage
            .entry(run_id.to_owned())
            .or_default()
            .push(usage);
    }

    /// The children's usage in the run `run_id` since the last take.
    pub fn take_usage(&self, run_id: &str) -> Vec<TokenUsage> {
        self.lock().usage.remove(run_id).unwrap_or_default()
    }
}

struct CallSlot {
    runs: SubagentRuns,
    run_id: String,
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        let mut shared = self.runs.lock();
        if let Some(count) = shared.running.get_mut(&self.run_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                shared.running.remove(&self.run_id);
            }
        }
    }
}

/// A child agent as a server tool of its parent. See the module docs.
pub struct SubagentTool {
    definition: ToolDefinition,
    /// The child's agent name (the tool's name too).
    name: String,
    description: Option<String>,
    child: Arc<dyn Agent>,
    runs: SubagentRuns,
    /// The child's `answer_schema`: its answer must be JSON of this shape.
    answer: Option<AnswerSchema>,
    /// The key of the parent's state that holds the child's ([`state`]).
    state: state::StateKey,
}

impl std::fmt::Debug for SubagentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentTool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SubagentTool {
    /// The child `name` (built with its own pipeline) as a tool; `description` is the child's,
    /// shown to the parent's model and in `SUBAGENT_STARTED`; `answer_schema` the child's, which
    /// its answer must meet.
    ///
    /// # Errors
    /// `answer_schema` is not a valid JSON Schema.
    pub fn new(
        name: &str,
        description: Option<&str>,
        child: Arc<dyn Agent>,
        runs: SubagentRuns,
        answer_schema: Option<Value>,
    ) -> Result<Self, String> {
        let answer = answer_schema
            .map(AnswerSchema::new)
            .transpose()
            .map_err(|why| {
                format!("agents.{name}.answer_schema is not a valid JSON Schema: {why}")
            })?;
        Ok(SubagentTool {
            definition: definition(name, description, runs.context.messages > 0),
            name: name.to_owned(),
            description: description.map(str::to_owned),
            child,
            runs,
            answer,
            state: state::StateKey::new(name),
        })
    }

    /// The child's run: the task as its first user message, on a thread of its own named after
    /// the parent's call (never the parent's thread record), with no client tools, and its key of
    /// the parent's state as its state.
    /// A child resumed after it asked a person continues its conversation with the answers.
    fn child_request(
        &self,
        task: &str,
        context: &ToolContext,
        run_id: &str,
        resumed: Option<(&Suspended, &InputAnswers)>,
    ) -> RunRequest {
        let mut messages = vec![Message::User(UserMessage::text(new_id("msg"), task))];
        let mut resume = Vec::new();
        if let Some((suspended, answers)) = resumed {
            messages.extend(suspended.messages.iter().cloned());
            resume = suspended.resume(answers);
        }
        let parent = self.runs.parent_view(&context.run_id).unwrap_or_default();
        let mut prompt_sections: Vec<String> = parent.section.iter().cloned().collect();
        prompt_sections.extend(self.answer.as_ref().map(AnswerSchema::section));
        RunRequest {
            scope: context.scope.clone(),
            thread_id: format!(
                "{}/{}/{}",
                context.thread_id, context.tool_call_id, self.name
            ),
            run_id: run_id.to_owned(),
            parent_run_id: Some(context.run_id.clone()),
            // Attributed: what the parent's client is shown is decided above the parent.
            version: ProtocolVersion::V1,
            messages,
            tools: parent.tools.clone(),
            context: parent.context.clone(),
            state: self.state.input(context),
            forwarded_props: None,
            resume,
            prompt_sections,
            decisions: Vec::new(),
            recorded_results: BTreeSet::new(),
            decision_claims: None,
            delegated: true,
        }
    }

    async fn run(&self, arguments: Value, context: ToolContext) -> Result<ToolOutput, ToolError> {
        let task = arguments
            .get("task")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::InvalidArguments("`task` must be a string".into()))?;
        let Some(_slot) = self.runs.enter(&context.run_id) else {
            return Err(ToolError::Failed(format!(
                "at most {} subagent calls run at once; `{}` was not called: call it again once the others have answered",
                self.runs.limit, self.name
            )));
        };
        // A retry with answers is the suspended child's continuation, under its run id.
        let resumed = context.input.as_deref().and_then(|answers| {
            Suspended::read(answers).map(|suspended| (suspended, answers.clone()))
        });
        let subagent_run_id = match &resumed {
            Some((suspended, _)) => suspended.subagent_run_id.clone(),
            None => client_calls::new_run_id(&context.tool_call_id),
        };
        let mut out = Outlet {
            events: context.events.clone(),
            subagent_run_id: subagent_run_id.clone(),
            open: OpenEnds::default(),
            state: self.state.call(&context, &subagent_run_id),
        };
        out.send(EventBody::SubagentStarted(SubagentStarted {
            subagent_run_id: subagent_run_id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            parent_subagent_run_id: None,
            parent_tool_call_id: Some(context.tool_call_id.clone()),
            // Otherwise filled in above the parent's base agent, which saw the call's message.
            parent_message_id: context.message_id.clone(),
        }))
        .await?;
        let resumed = resumed
            .as_ref()
            .map(|(suspended, answers)| (suspended, answers));
        let request = self.child_request(task, &context, &subagent_run_id, resumed);
        // The child's own `invoke_agent` span, under the parent's `execute_tool`: its model
        // calls and tools nest under it, and it carries the child's model and tokens.
        let span = genai::run_span(&self.name, &request.thread_id, &request.run_id);
        let drained = self
            .drain_checked(request, &context, &mut out)
            .instrument(span.clone())
            .await;
        match &drained {
            Ok(Ended::Answered { .. }) => genai::record_run_outcome(&span, "finished", false),
            Ok(Ended::Asked(_) | Ended::AwaitsClient) => {
                genai::record_run_outcome(&span, "interrupt", false)
            }
            Err(failure) => genai::record_run_outcome(&span, failure.code, true),
        }
        match drained {
            Ok(ended @ (Ended::Asked(_) | Ended::AwaitsClient)) => {
                out.send(EventBody::SubagentFinished(SubagentFinished {
                    subagent_run_id,
                    result: None,
                    // The ids are the parent's questions', filled in where they are made (a
                    // child that waits for the client's tools asked no question).
                    outcome: Some(SubagentOutcome::Suspended {
                        interrupt_ids: None,
                    }),
                }))
                .await?;
                match ended {
                    Ended::Asked(asked) => Err(ToolError::NeedsInput(Box::new(asked))),
                    _ => Err(ToolError::AwaitsClient),
                }
            }
            Ok(Ended::Answered { answer, .. }) => {
                out.send(EventBody::SubagentFinished(SubagentFinished {
                    subagent_run_id,
                    result: None,
                    outcome: Some(SubagentOutcome::Success),
                }))
                .await?;
                Ok(ToolOutput::from(answer))
            }
            Err(failure) => {
                // What the child left open closes before it does, as a client expects.
                for end in out.open.take() {
                    out.send(end).await?;
                }
                tracing::warn!(subagent = %self.name, code = failure.code, message = %failure.message, "subagent failed");
                out.send(EventBody::SubagentError(SubagentError {
                    subagent_run_id,
                    message: failure.message.clone(),
                    code: Some(failure.code.to_owned()),
                }))
                .await?;
                Err(ToolError::Failed(format!(
                    "the `{}` agent failed: {}",
                    self.name, failure.message
                )))
            }
        }
    }

    /// Runs the child to its end (see [`Self::drain`]); a child with an `answer_schema` whose
    /// answer does not meet it is told what is wrong and runs once more, on its conversation
    /// so far, and fails the call if its answer still does not.
    async fn drain_checked(
        &self,
        mut request: RunRequest,
        context: &ToolContext,
        out: &mut Outlet,
    ) -> Result<Ended, Failure> {
        let Some(schema) = &self.answer else {
            return self.drain(request, &context.run_id, out).await;
        };
        let mut told = false;
        loop {
            let base = request.clone();
            let (answer, messages) = match self.drain(request, &context.run_id, out).await? {
                Ended::Answered { answer, messages } => (answer, messages),
                asked => return Ok(asked),
            };
            let text = answer.as_str().unwrap_or_default();
            let problem = match schema.read(text) {
                Ok(value) => {
                    return Ok(Ended::Answered {
                        answer: value,
                        messages,
                    })
                }
                Err(problem) => problem,
            };
            if told {
                return Err(Failure {
                    code: "subagent_answer_invalid",
                    message: format!("its answer did not match its answer_schema: {problem}"),
                });
            }
            told = true;
            request = base;
            request.messages.extend(messages);
            request.messages.push(Message::User(UserMessage::text(
                new_id("msg"),
                format!(
                    "Your answer cannot be used: {problem}. Reply again with the JSON value only."
                ),
            )));
            request.resume.clear();
        }
    }

    /// Runs the child to its end, passing its events on: its last text message is the answer,
    /// unless it ended asking a person.
    async fn drain(
        &self,
        request: RunRequest,
        parent_run_id: &str,
        out: &mut Outlet,
    ) -> Result<Ended, Failure> {
        let mut stream = self.child.run(request).map_err(Failure::from)?;
        let mut answer = Answer::default();
        let mut transcript = Transcript::default();
        let mut interrupts = Vec::new();
        while let Some(update) = stream.next().await {
            match update.map_err(Failure::from)? {
                AgentUpdate::Event(body) => {
                    answer.observe(&body);
                    transcript.observe(&body);
                    if let Some(body) = out.shape(body) {
                        out.send(body).await.map_err(|_| Failure::gone())?;
                    }
                }
                AgentUpdate::Interrupt(interrupt) => interrupts.push(*interrupt),
                // The child's own approval gate turns its requests into interrupts.
                AgentUpdate::ApprovalRequest(_) => {
                    return Err(Failure {
                        code: "internal_error",
                        message: "it asked for an approval that was never put to a person".into(),
                    })
                }
                // Reported by the parent's `SubagentView`, with the call's result.
                AgentUpdate::Usage(usage) => self.runs.add_usage(parent_run_id, usage),
                // Not shown: the child's events say what it is doing.
                AgentUpdate::ToolProgress(_) => {}
            }
        }
        if interrupts.is_empty() {
            let messages = transcript.into_messages();
            // A call left open is the client's tool's: the client runs it.
            if has_open_call(&messages) {
                return Ok(Ended::AwaitsClient);
            }
            return Ok(Ended::Answered {
                answer: Value::String(answer.finish()),
                messages,
            });
        }
        let asked = Suspended::ask(
            &self.name,
            &out.subagent_run_id,
            interrupts,
            transcript.into_messages(),
        )?;
        Ok(Ended::Asked(asked))
    }
}

/// The tool a parent's model is offered for the child `name` (described by `description`):
/// the child's name, what it does, and one `task`. `shown_conversation`: the parent shows its
/// children its latest messages (`subagent_context.messages`).
pub fn definition(
    name: &str,
    description: Option<&str>,
    shown_conversation: bool,
) -> ToolDefinition {
    let about = description
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map_or_else(
            || format!("Delegates a task to the `{name}` agent and returns its answer."),
            |d| format!("Delegates a task to the `{name}` agent: {d}"),
        );
    let task = match shown_conversation {
        true => "What the agent should do, with everything it needs to know: it sees only the latest messages of this conversation.",
        false => "What the agent should do, with everything it needs to know: it sees nothing else of this conversation.",
    };
    let parameters = json!({
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "description": task}
        },
        "required": ["task"],
        "additionalProperties": false
    });
    ToolDefinition::new(name, &about, parameters)
}

impl Tool for SubagentTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.run(arguments, context).boxed()
    }
}

/// How a child's run ended: with its answer (and its conversation since the messages it was
/// given), or asking a person.
enum Ended {
    Answered {
        answer: Value,
        messages: Vec<Message>,
    },
    Asked(crate::tools::InputRequired),
    /// It called the client's tools.
    AwaitsClient,
}

/// Whether a call in `messages` has no result.
fn has_open_call(messages: &[Message]) -> bool {
    let answered: std::collections::HashSet<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(tool) => Some(tool.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    messages.iter().any(|m| match m {
        Message::Assistant(a) => a
            .tool_calls
            .iter()
            .any(|c| !answered.contains(c.id.as_str())),
        _ => false,
    })
}

/// Why a child run failed, as the parent's client and model are told.
struct Failure {
    code: &'static str,
    message: String,
}

impl Failure {
    fn gone() -> Self {
        Failure {
            code: "run_over",
            message: "the parent run is over".into(),
        }
    }
}

impl From<AgentError> for Failure {
    fn from(error: AgentError) -> Self {
        Failure {
            code: error.code(),
            message: error.public_message(),
        }
    }
}

/// Where a child's events go: the parent's stream, attributed to the child.
struct Outlet {
    events: Option<tokio::sync::mpsc::Sender<EventBody>>,
    subagent_run_id: String,
    /// The ends of the child's own messages and calls still open, as sent.
    open: OpenEnds,
    /// The child's state, under its key of the parent's.
    state: state::ChildState,
}

impl Outlet {
    /// Sends one event; without a stream (a caller with none) it goes nowhere.
    ///
    /// # Errors
    /// The parent's stream is closed: its run is over.
    async fn send(&mut self, body: EventBody) -> Result<(), ToolError> {
        match &self.events {
            Some(events) => events
                .send(body)
                .await
                .map_err(|_| ToolError::Failed("the run is over".into())),
            None => Ok(()),
        }
    }

    /// A child's event as the parent's stream carries it: attributed, its own call ids (and
    /// the activity ids made from them) prefixed, its state events moved under its key.
    fn shape(&mut self, body: EventBody) -> Option<EventBody> {
        let mut body = self.state.rebase(body)?;
        let own = body.subagent_run_id().is_none();
        let id = &self.subagent_run_id;
        let prefixed = |call: &mut String| *call = format!("{id}.{call}");
        match &mut body {
            // Lifecycle and snapshots of messages are the child run's.
            EventBody::MessagesSnapshot(_)
            | EventBody::RunStarted(_)
            | EventBody::RunFinished(_)
            | EventBody::RunError(_) => return None,
            EventBody::ToolCallStart(e) if own => prefixed(&mut e.tool_call_id),
            EventBody::ToolCallArgs(e) if own => prefixed(&mut e.tool_call_id),
            EventBody::ToolCallEnd(e) if own => prefixed(&mut e.tool_call_id),
            EventBody::ToolCallResult(e) if own => prefixed(&mut e.tool_call_id),
            EventBody::ActivitySnapshot(e) if own => prefixed(&mut e.message_id),
            EventBody::ActivityDelta(e) if own => prefixed(&mut e.message_id),
            EventBody::SubagentStarted(e) if e.parent_subagent_run_id.is_none() => {
                if let Some(call) = e.parent_tool_call_id.as_mut() {
                    prefixed(call);
                }
            }
            // A grandchild suspended names the child's questions, which the client never sees:
            // the questions they become up here are named where they are made.
            EventBody::SubagentFinished(e) => {
                if let Some(SubagentOutcome::Suspended { interrupt_ids }) = &mut e.outcome {
                    *interrupt_ids = None;
                }
            }
            _ => {}
        }
        body.attribute_to(id);
        if own {
            self.open.observe(&body);
        }
        Some(body)
    }
}

/// The child's own text messages, the last of which is its answer.
#[derive(Default)]
struct Answer {
    last: String,
}

impl Answer {
    fn observe(&mut self, body: &EventBody) {
        match body {
            EventBody::TextMessageStart(e) if e.subagent_run_id.is_none() => self.last.clear(),
            EventBody::TextMessageContent(e) if e.subagent_run_id.is_none() => {
                self.last.push_str(&e.delta)
            }
            _ => {}
        }
    }

    fn finish(self) -> String {
        if self.last.trim().is_empty() {
            "(the agent gave no answer)".to_owned()
        } else {
            self.last
        }
    }
}

#[cfg(test)]
mod tests;
