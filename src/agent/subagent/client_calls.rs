//! A subagent that called the client's tools: its call waits for the client, and the client's
//! next run, carrying their results, resumes it.
//!
//! A child is offered the client's tools only when the client is shown its work (`attributed`,
//! 1.0): the client must see the call to run it. The child's run ends with the call open; its
//! call ends open too ([`ToolError::AwaitsClient`](crate::tools::ToolError::AwaitsClient)), and
//! the parent's run ends as it does when its own model calls a client tool. The client runs the
//! tool and sends its result with the child's messages, which it keeps attributed.
//!
//! On that run, the parent's call still has no result. Its subagent run id names it (a digest
//! of the call id, `sa_<link>_…`), so the child's messages are found among the client's; once
//! every call of the child has its result, the parent's call is run again from them: the child
//! resumes under the same run id with its conversation and the client's results, as after a
//! question. The child's messages are the client's history, trusted as the parent's own are
//! (checked against the thread's record with `threads.history = "verify"`).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::suspend::Suspended;
use crate::agent::{new_id, DecisionOutcome, RunRequest, ToolDecision};
use crate::protocol::Message;
use crate::tools::InputAnswers;

/// Characters of a call id's digest in the run ids of its subagents.
const LINK_CHARS: usize = 12;

/// A new subagent run id for the parent's call `tool_call_id`, naming the call.
pub(super) fn new_run_id(tool_call_id: &str) -> String {
    new_id(&format!("sa_{}", link(tool_call_id)))
}

fn link(tool_call_id: &str) -> String {
    let mut digest = crate::text::key_digest(&["subagent-call", tool_call_id]);
    digest.truncate(LINK_CHARS);
    digest
}

/// Whether the subagent run `subagent_run_id` is one of the call `tool_call_id`'s.
fn belongs_to(subagent_run_id: &str, tool_call_id: &str) -> bool {
    subagent_run_id
        .strip_prefix("sa_")
        .and_then(|rest| rest.strip_prefix(link(tool_call_id).as_str()))
        .is_some_and(|rest| rest.starts_with('_'))
}

/// The decisions that resume the children (of `children`) whose client calls the request now
/// answers: one per open call of the parent to a child, when the child's messages are in the
/// history and every call of the child has its result.
pub(super) fn resumptions(request: &RunRequest, children: &[String]) -> Vec<ToolDecision> {
    let decided: HashSet<&str> = request
        .decisions
        .iter()
        .map(|d| d.tool_call_id.as_str())
        .collect();
    let answered: HashSet<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(tool) => Some(tool.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for message in &request.messages {
        let Message::Assistant(assistant) = message else {
            continue;
        };
        if assistant.subagent_run_id.is_some() {
            continue;
        }
        for call in &assistant.tool_calls {
            let open = !answered.contains(call.id.as_str()) && !decided.contains(call.id.as_str());
            if !open || !children.contains(&call.function.name) {
                continue;
            }
            let Some(suspended) = waiting_child(&request.messages, &call.id) else {
                continue;
            };
            out.push(ToolDecision {
                tool_call_id: call.id.clone(),
                tool_name: call.function.name.clone(),
                outcome: DecisionOutcome::Elicited {
                    arguments: serde_json::from_str(&call.function.arguments)
                        .unwrap_or(Value::Null),
                    answers: Box::new(InputAnswers {
                        responses: Map::new(),
                        state: Some(suspended.to_string()),
                    }),
                    parent_message_id: Some(assistant.id.clone()),
                },
            });
        }
    }
    out
}

/// The child of the call `tool_call_id` that waits for the client, as the history now holds it:
/// its latest run's messages (its own call ids, unprefixed) with every call answered. `None`
/// when there is none, or a call of it is still open.
fn waiting_child(messages: &[Message], tool_call_id: &str) -> Option<Suspended> {
    let subagent_run_id = messages
        .iter()
        .rev()
        .filter_map(Message::subagent_run_id)
        .find(|id| belongs_to(id, tool_call_id))?
        .to_owned();
    let prefix = format!("{subagent_run_id}.");
    let mut own = Vec::new();
    for message in messages {
        match message {
            Message::Assistant(assistant)
                if assistant.subagent_run_id.as_deref() == Some(&subagent_run_id) =>
            {
                let mut assistant = assistant.clone();
                assistant.subagent_run_id = None;
                for call in &mut assistant.tool_calls {
                    call.id = call.id.strip_prefix(&prefix)?.to_owned();
                }
                own.push(Message::Assistant(assistant));
            }
            // The child's results, whether the client kept them attributed (the server's) or
            // not (its own tools').
            Message::Tool(tool) if tool.tool_call_id.starts_with(&prefix) => {
                let mut tool = tool.clone();
                tool.subagent_run_id = None;
                tool.tool_call_id = tool.tool_call_id[prefix.len()..].to_owned();
                own.push(Message::Tool(tool));
            }
            _ => {}
        }
    }
    let all_answered = !super::has_open_call(&own);
    (all_answered && !own.is_empty()).then(|| Suspended::waiting(subagent_run_id, own))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{AssistantMessage, Content, ToolCall, ToolMessage, UserMessage};

    fn calling(id: &str, owner: Option<&str>, calls: &[(&str, &str)]) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: calls
                .iter()
                .map(|(call, name)| {
                    let mut call = ToolCall::started(call, name);
                    call.function.arguments = "{}".into();
                    call
                })
                .collect(),
            subagent_run_id: owner.map(str::to_owned),
            ..AssistantMessage::empty(id)
        })
    }

    fn answer(call: &str, owner: Option<&str>) -> Message {
        let mut tool = ToolMessage::new(new_id("t"), call, Content::Text("done".into()));
        tool.subagent_run_id = owner.map(str::to_owned);
        Message::Tool(tool)
    }

    #[test]
    fn a_run_id_names_its_call_and_no_other() {
        let id = new_run_id("call_1");
        assert!(belongs_to(&id, "call_1"));
        assert!(!belongs_to(&id, "call_2"));
        assert!(!belongs_to("sa_0123", "call_1"));
    }

    #[test]
    fn a_child_resumes_once_every_call_of_it_has_its_result() {
        let sa = new_run_id("call_1");
        let mut request = RunRequest::from(
            serde_json::from_value::<crate::protocol::RunAgentInput>(
                serde_json::json!({"threadId": "t", "runId": "r", "messages": []}),
            )
            .unwrap(),
        );
        let children = vec!["hotels".to_owned()];
        request.messages = vec![
            Message::User(UserMessage::text("u", "Rome")),
            calling("m1", None, &[("call_1", "hotels")]),
            calling("m2", Some(&sa), &[(&format!("{sa}.c1"), "search")]),
            answer(&format!("{sa}.c1"), Some(&sa)),
            calling("m3", Some(&sa), &[(&format!("{sa}.c2"), "show_map")]),
        ];
        assert!(resumptions(&request, &children).is_empty(), "c2 is open");

        request.messages.push(answer(&format!("{sa}.c2"), None));
        let decisions = resumptions(&request, &children);
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].tool_call_id, "call_1");
        let DecisionOutcome::Elicited { answers, .. } = &decisions[0].outcome else {
            panic!("{decisions:?}")
        };
        let suspended = Suspended::read(answers).unwrap();
        assert_eq!(suspended.subagent_run_id, sa);
        let ids: Vec<String> = suspended
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(t) => Some(t.tool_call_id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["c1", "c2"]);
        assert!(suspended
            .messages
            .iter()
            .all(|m| m.subagent_run_id().is_none()));

        // Answered already, or not a child: nothing to resume.
        request.messages.push(answer("call_1", None));
        assert!(resumptions(&request, &children).is_empty());
    }
}
