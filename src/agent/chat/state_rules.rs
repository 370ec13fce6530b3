//! A tool's result as a state update: the agent's `from = "result"` rules (`state.from_tools`).

use serde_json::Value;

use crate::agent::config::{ResultStateKind, ToolStateRule, ToolStateSource};
use crate::tools::{StateUpdate, ToolError, ToolOutput};

/// Applies the agent's `from = "result"` rules: the tool's content becomes the new state or
/// a patch of it (on top of any update the tool made itself, which then comes second).
pub(super) fn with_result_rules(
    rules: &[ToolStateRule],
    tool: &str,
    output: ToolOutput,
) -> Result<ToolOutput, ToolError> {
    let Some(kind) = rules.iter().find_map(|rule| match &rule.source {
        ToolStateSource::Result { kind } if rule.tool == tool => Some(*kind),
        _ => None,
    }) else {
        return Ok(output);
    };
    // A service may answer JSON as text; a state rule needs the value.
    let value = match &output.content {
        Value::String(text) => {
            serde_json::from_str(text).unwrap_or_else(|_| output.content.clone())
        }
        other => other.clone(),
    };
    let update = match kind {
        ResultStateKind::Snapshot => StateUpdate::Snapshot(value),
        ResultStateKind::Delta => {
            StateUpdate::Delta(serde_json::from_value(value).map_err(|e| {
                ToolError::Failed(format!("the result is not an RFC 6902 patch: {e}"))
            })?)
        }
    };
    if output.state.is_some() {
        return Err(ToolError::Failed(
            "the tool returned its own state update and a result rule also applies".into(),
        ));
    }
    Ok(ToolOutput {
        state: Some(update),
        ..output
    })
}
