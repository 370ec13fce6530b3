//! Server-side tools: the [`Tool`] trait, the per-agent [`ToolRegistry`], and the declarative
//! tool kinds that configuration can create (`static` for now).
//!
//! A tool receives arguments the *model* wrote from a conversation the *client* sent: both are
//! untrusted. Tools validate what they use and report failures as [`ToolError`], which the agent
//! hands back to the model as a tool result it can react to; a tool never ends the process.

mod static_result;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::settings::{ToolKindSettings, ToolSettings};
pub use static_result::StaticResultTool;

/// What a tool knows about the run that called it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub thread_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    /// The client's state at the start of the run, if it sent one.
    pub state: Option<Value>,
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
}

/// A server-side tool the model can call.
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> &Value;
    /// Runs the tool. The returned value becomes the tool result: a JSON string is sent as is,
    /// anything else as compact JSON text.
    fn call<'a>(
        &'a self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;
}

/// The server-side tools of one agent, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// Builds the declarative tools of an agent's configuration.
    pub fn from_settings(tools: &[ToolSettings]) -> Self {
        let mut registry = ToolRegistry::default();
        for tool in tools {
            let parameters = tool.parameters.clone().unwrap_or_else(empty_object_schema);
            match &tool.kind {
                ToolKindSettings::Static { result } => {
                    registry.register(Arc::new(StaticResultTool::new(
                        &tool.name,
                        &tool.description,
                        parameters,
                        result.clone(),
                    )))
                }
            }
        }
        registry
    }

    /// Adds a tool, replacing any tool of the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values()
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
