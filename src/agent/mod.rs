//! Agents: the [`Agent`] trait every run goes through, the updates a run produces, and the base
//! [`ChatAgent`] that talks to the model.
//!
//! # Shape
//! An agent turns a [`RunRequest`] into a lazy stream of [`AgentUpdate`]s. Middlewares (later
//! modules) are decorators holding an `inner: Arc<dyn Agent>`; the app's pipeline
//! (`app::pipeline`) is the one place that orders them, each with its own configuration
//! ([`config`]). Nothing runs until the stream is polled, and dropping the stream
//! (client disconnect, Stop) drops everything below it, the upstream HTTP request included:
//! no run is ever spawned detached from its response (a logged run's driver task owns its
//! stream instead: see `session`).
//!
//! [`AgentUpdate`] carries the protocol's own event bodies rather than a parallel enum: the
//! protocol types are already ours, and the encoder refuses lifecycle events, so only it can
//! start or end a run. Two extra variants carry what only the end of a run reports: token usage
//! and interrupts.
//!
//! # Error policy
//! | when | type | the client sees |
//! | --- | --- | --- |
//! | `Agent::run` returns `Err` (the request cannot run: a tool name clash, a bad tool name) | [`AgentError::InvalidInput`] | HTTP 4xx JSON, no stream |
//! | a stream item is `Err` (upstream failure, iteration limit, a wiring bug) | any other [`AgentError`] | `RUN_ERROR { code, message }`, then the stream ends |
//! | a server tool fails, times out or panics | not an error: [`crate::tools::ToolError`] | a tool result describing the failure, which the model sees and can react to |
//!
//! Messages sent to clients come from [`AgentError::public_message`] and never contain upstream
//! bodies or secrets; details go to the logs.

pub mod approval;
pub mod approval_id;
mod chat;
pub mod config;
pub mod elicitation;
mod history;
pub mod input;
pub mod ledger;
mod mapper;
pub mod mcp_apps;
pub mod middleware;
mod state_view;
pub mod subagent;
mod trace;

use std::collections::BTreeSet;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use serde_json::Value;

use crate::llm::LlmError;
use crate::protocol::{
    self, Context, EventBody, Interrupt, Message, ProtocolVersion, ResumeEntry, RunAgentInput,
    TokenUsage,
};

pub use chat::{
    agent_model, AgentModel, ChatAgent, ChatAgentConfig, BACKGROUND_RESULT_TOOL, GENERATE_A2UI_TOOL,
};
pub use history::{to_chat_messages, SYNTHETIC_MISSING_RESULT};
pub use ledger::{ClaimError, DecisionClaims};
#[cfg(test)]
pub(crate) use mapper::testing;
pub use mapper::{map_updates, UpdateMapper, Updates};
pub use state_view::{add_member, apply_update};

/// The updates of one run, in order. `'static` so it outlives the handler; boxed so `Agent`
/// stays dyn-compatible.
pub type AgentStream = BoxStream<'static, Result<AgentUpdate, AgentError>>;

/// Something that can perform an AG-UI run: the base `ChatAgent` and every middleware.
pub trait Agent: Send + Sync + 'static {
    /// Prepares a run and returns it as a lazy stream.
    ///
    /// # Errors
    /// `Err` here means the run never started (bad input): the HTTP layer answers 4xx. A started
    /// run that fails yields an `Err` item instead, which becomes `RUN_ERROR`.
    fn run(&self, request: RunRequest) -> Result<AgentStream, AgentError>;
}

/// What a run was asked to do: the validated form of `RunAgentInput`.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// Who is asking, as the HTTP layer knows it (the thread store's scope, the token's, or
    /// the development scope): bound into approval ids and tools' idempotency keys, so one
    /// caller's never stand for another's on the same client-chosen thread id.
    pub scope: String,
    pub thread_id: String,
    pub run_id: String,
    pub parent_run_id: Option<String>,
    pub version: ProtocolVersion,
    pub messages: Vec<Message>,
    /// Client-side (frontend) tools.
    pub tools: Vec<protocol::Tool>,
    pub context: Vec<Context>,
    /// The client's state; `None` when it sent none (or `null`).
    pub state: Option<Value>,
    pub forwarded_props: Option<Value>,
    pub resume: Vec<ResumeEntry>,
    /// System prompt sections added by middlewares (e.g. the shared state), placed after the
    /// agent's instructions.
    pub prompt_sections: Vec<String>,
    /// What a person decided on calls of an earlier run (verified by the approval gate).
    pub decisions: Vec<ToolDecision>,
    /// Calls whose result the server produced in an earlier run, by the thread's record (empty
    /// without a thread store or with `history = "trust_client"`; declines aside, which a
    /// client may drop and answer again): a decision about one of them was already acted on,
    /// whatever the client's history looked like.
    pub recorded_results: BTreeSet<String>,
    /// Where the approval gate claims each decision before it is acted on, so it is acted on
    /// once whatever the history says; `None` (no thread store, or no scope): the history
    /// alone decides, and a lost response can run a call again.
    pub decision_claims: Option<Arc<dyn DecisionClaims>>,
    /// The run is a subagent's, run by its parent's call (not a client's request).
    pub delegated: bool,
}

/// A person's decision on a tool call that waited for approval.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDecision {
    pub tool_call_id: String,
    pub tool_name: String,
    pub outcome: DecisionOutcome,
}

/// A confirmation of predicted state carried by an approval id: what to put back on rejection.
pub type RestoreState = Vec<(String, Option<Value>)>;

#[derive(Debug, Clone, PartialEq)]
pub enum DecisionOutcome {
    /// Run the tool with these arguments (the model's, or the person's edit where allowed).
    Approved { arguments: Value },
    /// Never run it; the model is told the person declined (for an input tool: that the user
    /// cancelled the question).
    Declined,
    /// An input tool's question answered: the answer, checked against its response schema, is
    /// the call's result.
    Answered { answer: Value },
    /// Every question a tool asked while it ran (an MCP server's elicitation) answered: the
    /// tool is called again with the call's arguments and the answers, and its result is the
    /// call's result (or it asks again).
    Elicited {
        arguments: Value,
        answers: Box<crate::tools::InputAnswers>,
        /// The assistant message the call belongs to, for a question asked again.
        parent_message_id: Option<String>,
    },
    /// An earlier run acted on this call's decision already (the decision ledger says so,
    /// whatever the history shows): nothing runs, and the model is told
    /// [`ALREADY_DECIDED`].
    AlreadyDecided,
}

/// The tool result a call gets when its decision was acted on in an earlier run but the
/// client's history no longer shows the result: the call must be answered (the provider
/// refuses an unanswered call), and the model should not try again.
pub const ALREADY_DECIDED: &str =
    "This call was already decided on and acted on in an earlier run; nothing was done again.";

/// A server tool call the base agent did not run because a person must approve it first.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub tool_call_id: String,
    pub tool_name: String,
    pub arguments: Value,
    /// The assistant message the call belongs to.
    pub parent_message_id: String,
    /// For a predictive tool: the state keys its prediction changed, with their values before
    /// it (`None`: the key was absent), so a rejection can restore them. Set by the
    /// predictive-state middleware.
    pub restore_state: Option<Vec<(String, Option<Value>)>>,
    /// Set when the call ran and stopped to ask the user (an MCP server's elicitation): its
    /// questions. The call waits for their answers, not for an approval.
    pub input: Option<Box<crate::tools::InputRequired>>,
}

impl From<RunAgentInput> for RunRequest {
    fn from(input: RunAgentInput) -> Self {
        RunRequest {
            scope: String::new(),
            version: ProtocolVersion::from_request(input.protocol_version.as_deref()),
            thread_id: input.thread_id.unwrap_or_else(|| new_id("thread")),
            run_id: input.run_id.unwrap_or_else(|| new_id("run")),
            parent_run_id: input.parent_run_id,
            messages: input.messages,
            tools: input.tools,
            context: input.context,
            state: input.state,
            forwarded_props: input.forwarded_props,
            resume: input.resume,
            prompt_sections: Vec::new(),
            decisions: Vec::new(),
            recorded_results: BTreeSet::new(),
            decision_claims: None,
            delegated: false,
        }
    }
}

/// One client-visible step of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentUpdate {
    /// An event to send as is (never a lifecycle event: the encoder owns those).
    Event(EventBody),
    /// Tokens a model call used; summed into `RUN_FINISHED.usage`.
    Usage(TokenUsage),
    /// A request for input; the run ends with an `interrupt` outcome. Boxed: it is the largest
    /// variant by far and comes once a run at most, while every other update is moved through
    /// each middleware layer.
    Interrupt(Box<Interrupt>),
    /// A call waiting for approval. The approval gate turns it into an interrupt or a client
    /// tool call; one that reaches the encoder is a wiring bug and ends the run.
    ApprovalRequest(ApprovalRequest),
    /// How far a running server tool has got: shown as a status update when the agent has
    /// status enabled, otherwise not sent.
    ToolProgress(crate::tools::ToolProgress),
}

impl From<EventBody> for AgentUpdate {
    fn from(body: EventBody) -> Self {
        AgentUpdate::Event(body)
    }
}

/// Why a run could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The request cannot run as sent (HTTP 4xx before any stream byte).
    #[error("{message}")]
    InvalidInput { code: &'static str, message: String },
    #[error("model request failed: {0}")]
    Llm(#[from] LlmError),
    /// The model's reply made no sense as a chat completion (e.g. a tool call with no name).
    #[error("malformed model output: {0}")]
    MalformedModelOutput(String),
    #[error("the model was still calling tools after {0} model calls")]
    MaxIterations(u32),
    /// A resume that does not match the run's open approvals.
    #[error("{message}")]
    Resume { code: &'static str, message: String },
    /// A decision could not be claimed, so it was not acted on.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl AgentError {
    /// The stable machine-readable code (`RUN_ERROR.code`, or `error.code` of a 4xx body).
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::InvalidInput { code, .. } | AgentError::Resume { code, .. } => code,
            AgentError::Claim(error) => error.code,
            AgentError::Llm(error) => error.code(),
            AgentError::MalformedModelOutput(_) => "upstream_malformed",
            AgentError::MaxIterations(_) => "max_iterations",
            AgentError::Internal(_) => "internal_error",
        }
    }

    /// A message fit for the end user: no upstream bodies, no secrets.
    pub fn public_message(&self) -> String {
        match self {
            AgentError::InvalidInput { message, .. } | AgentError::Resume { message, .. } => {
                message.clone()
            }
            AgentError::Claim(error) => error.message.clone(),
            AgentError::Llm(error) => error.public_message(),
            AgentError::MaxIterations(n) => format!(
                "The agent stopped after {n} model calls without finishing (max_iterations)."
            ),
            AgentError::MalformedModelOutput(_) => {
                "The model sent a reply that could not be understood.".to_owned()
            }
            AgentError::Internal(_) => "An internal error ended the run.".to_owned(),
        }
    }
}

/// The one id helper, here for the agents that mint message and call ids.
pub use crate::text::new_id;

/// Compact JSON with `<`, `>` and `&` as `\u` escapes: still the same JSON value, but no text
/// inside it can close or open a tag around it (the prompt's `<state>` and `<context>` blocks).
pub(crate) fn prompt_safe_json(value: &Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}
