//! The `state` tool kind: writes one argument (or all of them) to a key of the shared state and
//! tells the model it is done, e.g. the seeds' `update_recipe` ("Recipe updated.").

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::{Map, Value};

use super::{StateUpdate, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

#[derive(Debug, Clone)]
pub struct StateWriteTool {
    definition: ToolDefinition,
    /// The state key written.
    key: String,
    /// The argument written, or `*` for the whole arguments object.
    argument: String,
    confirmation: String,
}

impl StateWriteTool {
    pub fn new(
        name: &str,
        description: &str,
        parameters: Value,
        key: &str,
        argument: &str,
        confirmation: &str,
    ) -> Self {
        StateWriteTool {
            definition: ToolDefinition::new(name, description, parameters),
            key: key.to_owned(),
            argument: argument.to_owned(),
            confirmation: confirmation.to_owned(),
        }
    }
}

/// The value a state rule takes from a call's arguments: one member, or all of them for `*`.
pub(crate) fn select_argument(arguments: &Value, argument: &str) -> Option<Value> {
    if argument == "*" {
        Some(arguments.clone())
    } else {
        arguments.get(argument).cloned()
    }
}

impl Tool for StateWriteTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        _context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let output = match select_argument(&arguments, &self.argument) {
            None => Err(ToolError::InvalidArguments(format!(
                "the argument `{}` is missing",
                self.argument
            ))),
            Some(value) => Ok(ToolOutput {
                content: Value::String(self.confirmation.clone()),
                state: Some(StateUpdate::Set(Map::from_iter([(
                    self.key.clone(),
                    value,
                )]))),
            }),
        };
        futures_util::future::ready(output).boxed()
    }
}
