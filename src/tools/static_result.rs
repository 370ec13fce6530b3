//! The `static` tool kind: returns a configured JSON value, whatever the arguments, and may
//! update the state with a configured update. Enough to serve a `get_weather`-style backend
//! tool, or to initialise a state, in demos and tests without writing code. It may take a
//! configured time to answer, as a slow service would.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::Value;

use super::{StateUpdate, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

#[derive(Debug, Clone)]
pub struct StaticResultTool {
    definition: ToolDefinition,
    result: Value,
    state: Option<StateUpdate>,
    delay: Duration,
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
            delay: Duration::ZERO,
        }
    }

    /// Answers after `delay`, as a slow service would.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
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
        async move {
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            Ok(ToolOutput {
                content: self.result.clone(),
                state: self.state.clone(),
                activity: None,
            })
        }
        .boxed()
    }
}
