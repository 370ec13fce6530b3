//! The `state` tool kind: writes one argument (or all of them) to a key of the shared state and
//! tells the model it is done, e.g. the seeds' `update_recipe` ("Recipe updated.").

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::{Map, Value};

use super::{StateUpdate, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};
use crate::settings::StateWriteUpdate;

#[derive(Debug, Clone)]
pub struct StateWriteTool {
    definition: ToolDefinition,
    /// The state key written.
    key: String,
    /// The argument written, or `*` for the whole arguments object.
    argument: String,
    confirmation: String,
    update: StateWriteUpdate,
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
            update: StateWriteUpdate::Set,
        }
    }

    /// Writes only what changed when the key already holds a value ([`StateWriteUpdate::Diff`]).
    pub fn with_update(mut self, update: StateWriteUpdate) -> Self {
        self.update = update;
        self
    }

    /// The update writing `value` to the key of `state` (the state when the call started).
    fn update_for(&self, state: Option<&Value>, value: Value) -> Option<StateUpdate> {
        if self.update == StateWriteUpdate::Diff {
            if let Some(current) = state.filter(|s| s.get(&self.key).is_some()) {
                let mut next = current.clone();
                next[&self.key] = value;
                let patch = json_patch::diff(current, &next);
                return (!patch.0.is_empty()).then_some(StateUpdate::Delta(patch));
            }
        }
        Some(StateUpdate::Set(Map::from_iter([(
            self.key.clone(),
            value,
        )])))
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
        context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let output = match select_argument(&arguments, &self.argument) {
            None => Err(ToolError::InvalidArguments(format!(
                "the argument `{}` is missing",
                self.argument
            ))),
            Some(value) => Ok(ToolOutput {
                content: Value::String(self.confirmation.clone()),
                state: self.update_for(context.state.as_ref(), value),
                activity: None,
            }),
        };
        futures_util::future::ready(output).boxed()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn context(state: Value) -> ToolContext {
        ToolContext {
            progress: None,
            events: None,
            input: None,
            scope: "s".into(),
            agent: "a".into(),
            thread_id: "t".into(),
            run_id: "r".into(),
            tool_call_id: "c".into(),
            message_id: None,
            state: Some(state),
        }
    }

    #[tokio::test]
    async fn diff_writes_only_what_changed_once_the_key_exists() {
        let tool = StateWriteTool::new("update_steps", "", json!({}), "steps", "steps", "ok")
            .with_update(StateWriteUpdate::Diff);
        let steps = json!([{"status": "pending"}, {"status": "pending"}]);
        let first = tool
            .call(json!({"steps": steps}), context(json!({"other": 1})))
            .await
            .unwrap();
        assert_eq!(
            first.state,
            Some(StateUpdate::Set(Map::from_iter([(
                "steps".into(),
                steps.clone()
            )])))
        );
        let done = json!({"steps": [{"status": "completed"}, {"status": "pending"}]});
        let second = tool
            .call(done.clone(), context(json!({"other": 1, "steps": steps})))
            .await
            .unwrap();
        let expected: json_patch::Patch = serde_json::from_value(
            json!([{"op": "replace", "path": "/steps/0/status", "value": "completed"}]),
        )
        .unwrap();
        assert_eq!(second.state, Some(StateUpdate::Delta(expected)));
        let unchanged = tool
            .call(done.clone(), context(json!({"steps": done["steps"]})))
            .await
            .unwrap();
        assert_eq!(unchanged.state, None);
    }
}
