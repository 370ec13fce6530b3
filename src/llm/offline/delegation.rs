//! The offline model as a supervisor: an agent with subagents is offered one delegation tool
//! per child (one required string argument, `task`). When the user's text names none of the
//! request's tools, the offline model hands the text to every child at once, each task led by
//! the child's name (`travel flights: plan a trip…`), so that the child's own offline model
//! finds its tool by that name; once per conversation. After a turn of several calls, it
//! quotes each result.

use serde_json::{json, Value};

use super::super::{ChatMessage, ToolSpec};
use crate::text::truncate_chars;

/// How much of each result a summary of several quotes.
const RESULT_CHARS: usize = 160;

/// Whether `tool` hands a task to another agent: its one required argument is a string `task`.
fn delegates(tool: &ToolSpec) -> bool {
    let parameters = tool.parameters.as_ref();
    let required = parameters.get("required").and_then(Value::as_array);
    let task = parameters
        .get("properties")
        .and_then(|p| p.get("task"))
        .and_then(|t| t.get("type"));
    required.is_some_and(|r| r.len() == 1 && r[0] == "task") && task == Some(&json!("string"))
}

/// A call to each delegation tool of `tools`, with `user_text` as the task; `None` when none
/// is offered, or when the conversation (`messages`) delegated already: a supervisor hands out
/// the request once, and answers what follows itself.
pub(super) fn calls(
    messages: &[ChatMessage],
    tools: &[ToolSpec],
    user_text: &str,
) -> Option<Vec<(String, Value)>> {
    let delegated = messages.iter().any(|message| match message {
        ChatMessage::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .any(|call| tools.iter().any(|t| t.name == call.name && delegates(t))),
        _ => false,
    });
    if delegated {
        return None;
    }
    let calls: Vec<(String, Value)> = tools
        .iter()
        .filter(|tool| delegates(tool))
        .map(|tool| {
            let named = tool.name.replace(['_', '-'], " ");
            let task = format!("{named}: {}", user_text.trim());
            (tool.name.clone(), json!({ "task": task }))
        })
        .collect();
    (!calls.is_empty()).then_some(calls)
}

/// A sentence quoting each result of the last turn, when it made several calls.
pub(super) fn after_results(messages: &[ChatMessage]) -> Option<String> {
    let results: Vec<&str> = messages
        .iter()
        .rev()
        .map_while(|message| match message {
            ChatMessage::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    if results.len() < 2 {
        return None;
    }
    let quoted: Vec<String> = results
        .iter()
        .rev()
        .map(|result| format!("\"{}\"", truncate_chars(result.trim(), RESULT_CHARS)))
        .collect();
    Some(format!("The tools returned: {}.", quoted.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: Arc::new(parameters),
        }
    }

    #[test]
    fn each_child_gets_the_text_led_by_its_name_and_other_tools_none() {
        let task = json!({"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]});
        let tools = [
            tool("travel_flights", task.clone()),
            tool(
                "get_weather",
                json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            ),
            tool("travel_hotels", task),
        ];
        let calls = calls(&[], &tools, " Plan a trip ").unwrap();
        assert_eq!(
            calls,
            [
                (
                    "travel_flights".into(),
                    json!({"task": "travel flights: Plan a trip"})
                ),
                (
                    "travel_hotels".into(),
                    json!({"task": "travel hotels: Plan a trip"})
                ),
            ]
        );
        assert!(super::calls(&[], &tools[1..2], "x").is_none());
    }

    #[test]
    fn several_results_are_each_quoted_and_one_is_left_to_the_usual_reply() {
        let result = |content: &str| ChatMessage::Tool {
            tool_call_id: "c".into(),
            content: content.into(),
        };
        let one = [result("a")];
        assert_eq!(after_results(&one), None);
        let two = [result("AF12"), result("Grand Hotel")];
        assert_eq!(
            after_results(&two).as_deref(),
            Some("The tools returned: \"AF12\"; \"Grand Hotel\".")
        );
    }
}
