//! The `static` tool kind: returns a configured JSON value, whatever the arguments, and may
//! update the state with a configured update. Enough to serve a `get_weather`-style backend
//! tool, or to initialise a state, in demos and tests without writing code.

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::Value;

use super::{StateUpdate, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

#[derive(Debug, Clone)]
pub struct StaticResultTool {
    definition: ToolDefinition,
    result: Value,
    state: Option<StateUpdate>,
}

impl StaticResultTool {
    pub fn new(
        name: &str,
        description: &str,
        parameters: Value,
        result: Value,
        state: Option<StateUpdate>,
    ) -> Self {
        StaticResultTool {
            definition: ToolDefinition::new(name, description, parameters),
            result,
            state,
        }
    }
}

impl Tool for StaticResultTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        _arguments: Value,
        _context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        futures_util::future::ready(Ok(ToolOutput {
            content: self.result.clone(),
            state: self.state.clone(),
            activity: None,
        }))
        .boxed()
    }
}
