//! The `input` tool kind's place in the registry: it offers the model the tool (its name,
//! description and parameters) but is never run by the server. Its calls always wait for the
//! user (the agent's approval policies list every input tool; see `crate::agent::input`), and
//! the user's answer is the call's result. Reaching [`Tool::call`] means the wiring skipped
//! that step: the call fails as a tool error rather than inventing an answer.

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::Value;

use super::{Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

#[derive(Debug, Clone)]
pub struct UserInputTool {
    definition: ToolDefinition,
}

impl UserInputTool {
    pub fn new(name: &str, description: &str, parameters: Value) -> Self {
        UserInputTool {
            definition: ToolDefinition::new(name, description, parameters),
        }
    }
}

impl Tool for UserInputTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        _arguments: Value,
        _context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let name = &self.definition.name;
        futures_util::future::ready(Err(ToolError::Failed(format!(
            "`{name}` asks the user and is answered by the user, not run"
        ))))
        .boxed()
    }
}
