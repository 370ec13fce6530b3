//! Server-side tools: the [`Tool`] trait, the per-agent [`ToolRegistry`], and the declarative
//! tool kinds that configuration can create: `static`, `state`, `http`, `input` and `a2ui`.
//!
//! A tool receives arguments the *model* wrote from a conversation the *client* sent: both are
//! untrusted. The registry validates arguments against the tool's JSON Schema before the tool
//! runs; tools report failures as [`ToolError`], which the agent hands back to the model as a
//! tool result it can react to; a tool never ends the process.
//!
//! A tool answers with a [`ToolOutput`]: the content the model (and the UI) sees, and optionally
//! a [`StateUpdate`] for the shared state, like a LangGraph `Command(update=...)`.

pub mod a2ui;
pub mod background;
mod http_post;
mod input_request;
pub mod mcp;
mod state_write;
mod static_result;
mod user_input;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::protocol::EventBody;
use crate::settings::{ToolKindSettings, ToolSettings};
pub use http_post::HttpPostTool;
pub use input_request::{
    ForwardedQuestion, InputAnswers, InputQuestion, InputRequired, MAX_CARRIED_BYTES,
};
pub(crate) use state_write::select_argument;
pub use state_write::StateWriteTool;
pub use static_result::StaticResultTool;
pub use user_input::UserInputTool;

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The result for the model and the UI: a JSON string is sent as is, anything else as
    /// compact JSON text.
    pub content: Value,
    /// An update of the shared state, if the tool makes one.
    pub state: Option<StateUpdate>,
    /// An activity the client shows after the result (an MCP App: `mcp/apps.rs`), if any.
    pub activity: Option<Box<ToolActivity>>,
}

impl From<Value> for ToolOutput {
    fn from(content: Value) -> Self {
        ToolOutput {
            content,
            state: None,
            activity: None,
        }
    }
}

/// An AG-UI activity that comes with a tool's result: the agent sends it as an
/// `ACTIVITY_SNAPSHOT` of its own right after the call's `TOOL_CALL_RESULT`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolActivity {
    pub activity_type: String,
    pub content: serde_json::Map<String, Value>,
}

/// A change a tool makes to the shared state.
#[derive(Debug, Clone, PartialEq)]
pub enum StateUpdate {
    /// The whole new state.
    Snapshot(Value),
    /// An RFC 6902 patch of the current state; a patch that does not apply is a tool error.
    Delta(json_patch::Patch),
    /// Top-level keys set to new values, every other key kept.
    Set(serde_json::Map<String, Value>),
    /// Top-level keys set only where the state does not have them yet (initial values that
    /// must not overwrite what the user already chose).
    SetIfAbsent(serde_json::Map<String, Value>),
    /// Several updates, applied in order, all or none.
    Many(Vec<StateUpdate>),
}

impl StateUpdate {
    /// Reads the envelope form: `{"snapshot": v}`, or `{"delta": [...]}`, or one or both of
    /// `{"set": {...}, "set_if_absent": {...}}` (`set` applied first).
    ///
    /// # Errors
    /// A message naming what is wrong, for the model (or the operator) to read.
    pub fn from_envelope(value: Value) -> Result<Self, ToolError> {
        const SHAPE: &str = "`state` must be {\"snapshot\": ...}, {\"delta\": [...]}, or \
                             {\"set\": {...}} and/or {\"set_if_absent\": {...}}";
        let Value::Object(mut map) = value else {
            return Err(ToolError::Failed(SHAPE.into()));
        };
        let single = map.len() == 1;
        if let Some(snapshot) = map.remove("snapshot") {
            return if single {
                Ok(StateUpdate::Snapshot(snapshot))
            } else {
                Err(ToolError::Failed(SHAPE.into()))
            };
        }
        if let Some(delta) = map.remove("delta") {
            if !single {
                return Err(ToolError::Failed(SHAPE.into()));
            }
            return serde_json::from_value(delta)
                .map(StateUpdate::Delta)
                .map_err(|e| {
                    ToolError::Failed(format!("`state.delta` is not an RFC 6902 patch: {e}"))
                });
        }
        let mut updates = Vec::new();
        match map.remove("set") {
            Some(Value::Object(set)) => updates.push(StateUpdate::Set(set)),
            Some(_) => return Err(ToolError::Failed(SHAPE.into())),
            None => {}
        }
        match map.remove("set_if_absent") {
            Some(Value::Object(set)) => updates.push(StateUpdate::SetIfAbsent(set)),
            Some(_) => return Err(ToolError::Failed(SHAPE.into())),
            None => {}
        }
        if updates.is_empty() || !map.is_empty() {
            return Err(ToolError::Failed(SHAPE.into()));
        }
        Ok(if updates.len() == 1 {
            updates.remove(0)
        } else {
            StateUpdate::Many(updates)
        })
    }
}

/// What a tool knows about the run that called it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Who asked: the request's scope (a user, a token's digest, or the development scope).
    /// With `agent`, `thread_id` and `tool_call_id` it names one call unambiguously, as the
    /// `http` kind's `Idempotency-Key` does ([`ToolContext::idempotency_key`]).
    pub scope: String,
    /// The agent the call belongs to.
    pub agent: String,
    pub thread_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    /// The assistant message the call belongs to, when the agent knows it.
    pub message_id: Option<String>,
    /// The client's state at the start of the run, if it sent one.
    pub state: Option<Value>,
    /// Where the tool may report progress while it runs (shown as status updates when the agent
    /// has status enabled). Reports that do not fit are dropped: progress is advisory.
    pub progress: Option<tokio::sync::mpsc::Sender<ToolProgress>>,
    /// The user's answers, when the call is retried after it asked ([`ToolError::NeedsInput`]).
    pub input: Option<Box<InputAnswers>>,
    /// Where the tool may put AG-UI events of its own on the run's stream while it runs (an
    /// inner model call's tool call, a child agent's events), in the order sent and before the
    /// call's result. Bounded: a send waits while the stream is behind, so a tool that talks
    /// faster than the client reads is slowed, not buffered. Closed once the run is over.
    pub events: Option<tokio::sync::mpsc::Sender<EventBody>>,
}

impl ToolContext {
    /// A fixed-length key naming this call for a service that dedupes deliveries: a digest of
    /// the scope, the agent, the thread id and the tool call id, each length-prefixed. Two
    /// users on one client-chosen thread id whose model reuses a call id get different keys,
    /// and no separator inside an id can make two calls share one (`a:b` + `c` is not `a` +
    /// `b:c`). The same call delivered again (a lost response, a replay) gets the same key.
    pub fn idempotency_key(&self) -> String {
        crate::text::key_digest(&[
            &self.scope,
            &self.agent,
            &self.thread_id,
            &self.tool_call_id,
        ])
    }
}

/// One run's channel for the progress reports of its running tools, yielded between their
/// results. Bounded: reports that do not fit are dropped, since progress is advisory.
#[derive(Debug)]
pub struct ProgressChannel {
    pub sender: tokio::sync::mpsc::Sender<ToolProgress>,
    pub receiver: tokio::sync::mpsc::Receiver<ToolProgress>,
}

impl ProgressChannel {
    /// Reports held before new ones are dropped.
    const BACKLOG: usize = 64;

    pub fn new() -> Self {
        let (sender, receiver) = tokio::sync::mpsc::channel(Self::BACKLOG);
        ProgressChannel { sender, receiver }
    }
}

impl Default for ProgressChannel {
    fn default() -> Self {
        ProgressChannel::new()
    }
}

/// One run's channel for the events its running tools put on the stream ([`ToolContext::events`]).
#[derive(Debug)]
pub struct ToolEventChannel {
    pub sender: tokio::sync::mpsc::Sender<EventBody>,
    pub receiver: tokio::sync::mpsc::Receiver<EventBody>,
}

impl ToolEventChannel {
    /// Events held before a sending tool waits for the stream.
    const BACKLOG: usize = 32;

    pub fn new() -> Self {
        let (sender, receiver) = tokio::sync::mpsc::channel(Self::BACKLOG);
        ToolEventChannel { sender, receiver }
    }
}

impl Default for ToolEventChannel {
    fn default() -> Self {
        ToolEventChannel::new()
    }
}

/// How far a running tool call has got.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    pub tool_call_id: String,
    pub tool_name: String,
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Why a tool call produced no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Failed(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("the tool panicked")]
    Panicked,
    #[error("no tool named `{0}` exists")]
    Unknown(String),
    /// Not a failure: the call stopped to ask the user, and is called again with the answers.
    #[error("the tool is waiting for the user's input")]
    NeedsInput(Box<InputRequired>),
    /// Not a failure: the call waits for the client to run tools of its own (a subagent that
    /// called the client's tools); it has no result in this run, and a later run that carries
    /// their results goes on with it.
    #[error("the tool is waiting for the client's tools")]
    AwaitsClient,
}

impl ToolError {
    /// A stable name for the kind of failure (for traces and metrics; the message has details).
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments(_) => "invalid_arguments",
            ToolError::Failed(_) => "tool_error",
            ToolError::Timeout(_) => "timeout",
            ToolError::Panicked => "panicked",
            ToolError::Unknown(_) => "unknown_tool",
            ToolError::NeedsInput(_) => "input_required",
            ToolError::AwaitsClient => "awaits_client",
        }
    }
}

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// 1 to 64 of `[A-Za-z0-9_-]`.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolDefinition {
    pub fn new(name: &str, description: &str, parameters: Value) -> Self {
        ToolDefinition {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
        }
    }
}

/// A server-side tool the model can call.
pub trait Tool: Send + Sync + 'static {
    fn definition(&self) -> &ToolDefinition;
    /// Runs the tool with arguments that already satisfy its definition's `parameters`.
    fn call<'a>(
        &'a self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// A registered tool with its compiled argument validator.
#[derive(Clone)]
pub struct RegisteredTool {
    pub tool: Arc<dyn Tool>,
    validator: Option<Arc<jsonschema::Validator>>,
    /// The definition's parameters, copied once here so that every run offers the model the
    /// same schema without a deep copy of its own.
    parameters: Arc<Value>,
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.tool.definition().name)
            .field("validated", &self.validator.is_some())
            .finish()
    }
}

impl RegisteredTool {
    /// Compiles the tool's argument validator.
    ///
    /// # Errors
    /// The tool's parameters are not a valid JSON Schema.
    pub fn new(tool: Arc<dyn Tool>) -> Result<Self, ToolSetupError> {
        let definition = tool.definition();
        let schema = &definition.parameters;
        // An empty schema accepts everything: nothing to compile.
        let validator = if schema.as_object().is_some_and(|o| o.is_empty()) {
            None
        } else {
            let validator =
                jsonschema::validator_for(schema).map_err(|e| ToolSetupError::InvalidSchema {
                    tool: definition.name.clone(),
                    message: e.to_string(),
                })?;
            Some(Arc::new(validator))
        };
        let parameters = Arc::new(schema.clone());
        Ok(RegisteredTool {
            tool,
            validator,
            parameters,
        })
    }

    /// The tool's parameters, shared.
    pub fn parameters(&self) -> &Arc<Value> {
        &self.parameters
    }

    /// Checks the arguments against the tool's schema.
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] naming the first failing paths, for the model to fix.
    pub fn validate(&self, arguments: &Value) -> Result<(), ToolError> {
        match self
            .validator
            .as_deref()
            .and_then(|v| schema_violations(v, arguments))
        {
            None => Ok(()),
            Some(problems) => Err(ToolError::InvalidArguments(problems)),
        }
    }
}

/// The first few ways `instance` fails `validator`, each as `at /path: message`, joined by
/// `; `; `None` when it passes.
pub fn schema_violations(validator: &jsonschema::Validator, instance: &Value) -> Option<String> {
    let problems: Vec<String> = validator
        .iter_errors(instance)
        .take(5)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                format!("at the top level: {error}")
            } else {
                format!("at {path}: {error}")
            }
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// Tools whose list changes while the service runs (an MCP server's): the registry asks for
/// the current list once per run, so a run sees one consistent set.
pub trait ToolSource: Send + Sync + 'static {
    /// The tools available now, by name.
    fn current_tools(&self) -> Arc<BTreeMap<String, RegisteredTool>>;
}

/// The server-side tools of one agent, by name. Cheap to clone: every run of the agent takes
/// a registry of its own ([`ToolRegistry::for_run`]), and the map is shared until one changes.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Arc<BTreeMap<String, RegisteredTool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("sources", &self.sources.len())
            .finish()
    }
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum ToolSetupError {
    #[error("tool `{tool}`: the parameters are not a valid JSON Schema: {message}")]
    InvalidSchema { tool: String, message: String },
    #[error("tool `{tool}`: {message}")]
    Invalid { tool: String, message: String },
}

impl ToolRegistry {
    /// Builds the declarative tools of an agent's configuration.
    ///
    /// # Errors
    /// A tool whose parameters are not a valid JSON Schema, or whose kind is misconfigured.
    pub fn from_settings(tools: &[ToolSettings]) -> Result<Self, ToolSetupError> {
        let mut registry = ToolRegistry::default();
        for tool in tools {
            let parameters = tool.parameters.clone().unwrap_or_else(empty_object_schema);
            let built: Arc<dyn Tool> = match &tool.kind {
                ToolKindSettings::Static {
                    result,
                    state,
                    delay_ms,
                } => {
                    let state = state
                        .clone()
                        .map(StateUpdate::from_envelope)
                        .transpose()
                        .map_err(|e| ToolSetupError::Invalid {
                            tool: tool.name.clone(),
                            message: e.to_string(),
                        })?;
                    Arc::new(
                        StaticResultTool::new(
                            &tool.name,
                            &tool.description,
                            parameters,
                            result.clone(),
                            state,
                        )
                        .with_delay(Duration::from_millis(*delay_ms)),
                    )
                }
                ToolKindSettings::State {
                    key,
                    argument,
                    confirmation,
                    update,
                } => Arc::new(
                    StateWriteTool::new(
                        &tool.name,
                        &tool.description,
                        parameters,
                        key,
                        argument,
                        confirmation,
                    )
                    .with_update(*update),
                ),
                ToolKindSettings::A2ui {
                    surface_id,
                    catalog_id,
                    components,
                } => Arc::new(
                    a2ui::FixedSurfaceTool::new(
                        &tool.name,
                        &tool.description,
                        parameters,
                        surface_id,
                        catalog_id.as_deref(),
                        components.clone(),
                    )
                    .map_err(|message| ToolSetupError::Invalid {
                        tool: tool.name.clone(),
                        message,
                    })?,
                ),
                ToolKindSettings::Input { .. } => Arc::new(UserInputTool::new(
                    &tool.name,
                    &tool.description,
                    parameters,
                )),
                ToolKindSettings::Http {
                    url,
                    headers_from_env,
                    timeout_secs,
                    envelope,
                } => Arc::new(
                    HttpPostTool::new(
                        &tool.name,
                        &tool.description,
                        parameters,
                        url,
                        headers_from_env,
                        Duration::from_secs(*timeout_secs),
                        *envelope,
                    )
                    .map_err(|message| ToolSetupError::Invalid {
                        tool: tool.name.clone(),
                        message,
                    })?,
                ),
            };
            registry.register(built)?;
        }
        Ok(registry)
    }

    /// Adds a tool, replacing any tool of the same name.
    ///
    /// # Errors
    /// The tool's parameters are not a valid JSON Schema.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolSetupError> {
        let registered = RegisteredTool::new(tool)?;
        let name = registered.tool.definition().name.clone();
        Arc::make_mut(&mut self.tools).insert(name, registered);
        Ok(())
    }

    /// Adds a source of tools that may change over time; see [`ToolRegistry::for_run`].
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// The tools one run works with: the registered ones and every source's current tools (a
    /// registered tool wins over a source's tool of the same name).
    pub fn for_run(&self) -> ToolRegistry {
        if self.sources.is_empty() {
            return self.clone();
        }
        let mut tools = BTreeMap::new();
        for source in &self.sources {
            for (name, tool) in source.current_tools().iter() {
                tools.entry(name.clone()).or_insert_with(|| tool.clone());
            }
        }
        tools.extend(self.tools.iter().map(|(k, v)| (k.clone(), v.clone())));
        ToolRegistry {
            tools: Arc::new(tools),
            sources: Vec::new(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values().map(|registered| &registered.tool)
    }

    /// The tools as registered, with what registering them settled (their shared schema).
    pub fn registered(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// This registry without the tool named `name`.
    pub fn without(&self, name: &str) -> ToolRegistry {
        let mut registry = self.clone();
        if registry.tools.contains_key(name) {
            Arc::make_mut(&mut registry.tools).remove(name);
        }
        registry
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The schema of a tool that takes no particular arguments.
pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Tool names OpenAI-compatible servers accept (`^[a-zA-Z0-9_-]{1,64}$`).
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The text a tool result is sent as, to the model and to the client.
pub fn result_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
