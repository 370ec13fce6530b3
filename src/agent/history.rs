//! Turns the AG-UI history a client sent into the chat messages a model accepts, repairing it on
//! the way so no provider rejects it.
//!
//! Providers answer HTTP 400 to a history in which an assistant tool call is not followed by its
//! result; clients send exactly that (a user who typed instead of answering a client tool, an
//! interrupted run resumed, a peer that split parallel calls into several messages). The rules:
//! - every assistant tool call is followed by one result: a missing one gets
//!   [`SYNTHETIC_MISSING_RESULT`], placed before the next non-tool message;
//! - a tool result whose call id matches no earlier unanswered call is dropped (orphan or
//!   duplicate);
//! - consecutive assistant messages are merged when either carries tool calls (one turn, as the
//!   model produced it; CopilotKit may hold text and calls as separate messages);
//! - `developer` becomes `system` (not every compatible server knows `developer`);
//! - `activity` messages are UI artefacts and are not sent, nor is reasoning, except where it
//!   carries its provider's `encryptedValue` (a signed thinking block): then it goes with the
//!   assistant turn it precedes, for the providers that want it back, and is dropped when no
//!   assistant turn follows it;
//! - media parts become image inputs where they are images, else a short text placeholder.

use std::collections::HashSet;

use crate::llm::{ChatMessage, ChatReasoning, ChatToolCall, UserPart};
use crate::protocol::{AssistantMessage, Content, ContentPart, Message, PartSource, ToolMessage};

/// The result the model sees for a tool call the client never answered.
pub const SYNTHETIC_MISSING_RESULT: &str =
    "No result: this tool call was not completed (the conversation moved on without it).";

/// Converts and repairs `messages`, after an optional leading system prompt. Calls in
/// `answered_later` are left without a result: the caller places theirs.
pub fn to_chat_messages(
    system_prompt: Option<String>,
    messages: &[Message],
    answered_later: &HashSet<String>,
) -> Vec<ChatMessage> {
    let mut repair = Repair {
        out: Vec::with_capacity(messages.len() + 1),
        awaiting: Vec::new(),
        assistant_open: false,
        answered_later,
        reasoning: Vec::new(),
    };
    if let Some(prompt) = system_prompt.filter(|p| !p.is_empty()) {
        repair.out.push(ChatMessage::System { content: prompt });
    }
    for message in messages {
        if message.subagent_run_id().is_some() {
            // A subagent's transcript, kept by the client to show: the parent's model saw only
            // the call's result.
            continue;
        }
        match message {
            Message::Tool(tool) => repair.tool_result(tool),
            Message::Assistant(assistant) => repair.assistant_turn(assistant),
            Message::User(user) => repair.push_after_answers(ChatMessage::User {
                content: user_parts(&user.content),
            }),
            Message::Developer(text) | Message::System(text) => {
                repair.push_after_answers(ChatMessage::System {
                    content: text.content.clone(),
                });
            }
            Message::Reasoning(reasoning) => {
                if let Some(encrypted) =
                    reasoning.encrypted_value.as_ref().filter(|v| !v.is_empty())
                {
                    repair.reasoning.push(ChatReasoning {
                        text: reasoning.content.clone(),
                        encrypted: Some(encrypted.clone()),
                    });
                }
                continue;
            }
            Message::Activity(_) => continue,
        }
        // Reasoning belongs to the assistant turn right after it, or to nothing.
        repair.reasoning.clear();
    }
    close_unanswered(&mut repair.awaiting, &mut repair.out);
    repair.out
}

/// The history being rebuilt, and what the repair rules need to know about its end.
struct Repair<'a> {
    out: Vec<ChatMessage>,
    /// Calls of the latest assistant turn still waiting for a result, in call order.
    awaiting: Vec<String>,
    /// Whether the last pushed message is an assistant turn that may absorb the next one.
    assistant_open: bool,
    answered_later: &'a HashSet<String>,
    /// Sealed reasoning waiting for the assistant turn it precedes.
    reasoning: Vec<ChatReasoning>,
}

impl Repair<'_> {
    /// A tool result: kept when it answers a waiting call, dropped as an orphan otherwise.
    fn tool_result(&mut self, tool: &ToolMessage) {
        let Some(position) = self.awaiting.iter().position(|id| *id == tool.tool_call_id) else {
            tracing::debug!(tool_call_id = %tool.tool_call_id, "dropping a tool result with no pending call");
            return;
        };
        self.awaiting.remove(position);
        let mut content = tool.content.text();
        if let Some(error) = &tool.error {
            content = if content.is_empty() {
                format!("Error: {error}")
            } else {
                format!("{content}\nError: {error}")
            };
        }
        self.out.push(ChatMessage::Tool {
            tool_call_id: tool.tool_call_id.clone(),
            content,
        });
        self.assistant_open = false;
    }

    /// An assistant message: merged into the open turn when either carries tool calls, else a
    /// new turn (after the previous one's calls are answered).
    fn assistant_turn(&mut self, assistant: &AssistantMessage) {
        let content = assistant.content.clone().filter(|c| !c.is_empty());
        let calls: Vec<ChatToolCall> = assistant
            .tool_calls
            .iter()
            .map(|call| ChatToolCall {
                id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
            })
            .collect();
        if content.is_none() && calls.is_empty() {
            return; // an empty shell (e.g. a placeholder the UI created) says nothing
        }
        let (content, calls) = match self.merge_into_open_turn(content, calls) {
            Ok(()) => return,
            Err(unmerged) => unmerged,
        };
        close_unanswered(&mut self.awaiting, &mut self.out);
        self.await_calls(&calls);
        self.out.push(ChatMessage::Assistant {
            reasoning: std::mem::take(&mut self.reasoning),
            content,
            tool_calls: calls,
        });
        self.assistant_open = true;
    }

    /// Adds `content` and `calls` to the open assistant turn (one turn, as the model produced
    /// it) when either side carries tool calls; gives them back otherwise.
    fn merge_into_open_turn(
        &mut self,
        content: Option<String>,
        calls: Vec<ChatToolCall>,
    ) -> Result<(), (Option<String>, Vec<ChatToolCall>)> {
        if !self.assistant_open {
            return Err((content, calls));
        }
        let Some(ChatMessage::Assistant {
            content: previous_content,
            tool_calls,
            reasoning,
        }) = self.out.last_mut()
        else {
            return Err((content, calls));
        };
        if tool_calls.is_empty() && calls.is_empty() {
            return Err((content, calls));
        }
        // A turn already answered cannot absorb more; only merge while no result has been
        // placed (assistant_open guarantees that).
        if let Some(text) = content {
            match previous_content {
                Some(previous) => {
                    previous.push('\n');
                    previous.push_str(&text);
                }
                None => *previous_content = Some(text),
            }
        }
        let awaited: Vec<String> = calls
            .iter()
            .filter(|c| !self.answered_later.contains(&c.id))
            .map(|c| c.id.clone())
            .collect();
        tool_calls.extend(calls);
        reasoning.append(&mut self.reasoning);
        self.awaiting.extend(awaited);
        Ok(())
    }

    fn await_calls(&mut self, calls: &[ChatToolCall]) {
        self.awaiting.extend(
            calls
                .iter()
                .filter(|c| !self.answered_later.contains(&c.id))
                .map(|c| c.id.clone()),
        );
    }

    /// A user or system message: every waiting call is answered before it.
    fn push_after_answers(&mut self, message: ChatMessage) {
        close_unanswered(&mut self.awaiting, &mut self.out);
        self.out.push(message);
        self.assistant_open = false;
    }
}

/// Answers every call still waiting with the synthetic result, in call order.
fn close_unanswered(awaiting: &mut Vec<String>, out: &mut Vec<ChatMessage>) {
    for tool_call_id in awaiting.drain(..) {
        out.push(ChatMessage::Tool {
            tool_call_id,
            content: SYNTHETIC_MISSING_RESULT.to_owned(),
        });
    }
}

fn user_parts(content: &Content) -> Vec<UserPart> {
    match content {
        Content::Text(text) => vec![UserPart::Text(text.clone())],
        Content::Parts(parts) => parts.iter().filter_map(user_part).collect(),
    }
}

fn user_part(part: &ContentPart) -> Option<UserPart> {
    match part {
        ContentPart::Text { text, .. } => Some(UserPart::Text(text.clone())),
        ContentPart::Image(media) => Some(match &media.source {
            PartSource::Data { value, mime_type } => UserPart::ImageUrl {
                url: format!("data:{mime_type};base64,{value}"),
            },
            PartSource::Url { value, .. } => UserPart::ImageUrl { url: value.clone() },
            PartSource::File { value, .. } => UserPart::Text(format!("[image file: {value}]")),
        }),
        ContentPart::Audio(media) => Some(placeholder("audio", &media.source)),
        ContentPart::Video(media) => Some(placeholder("video", &media.source)),
        ContentPart::Document(media) => Some(placeholder("document", &media.source)),
        ContentPart::Binary {
            mime_type,
            data,
            url,
            filename,
            ..
        } => {
            if mime_type.starts_with("image/") {
                if let Some(data) = data {
                    return Some(UserPart::ImageUrl {
                        url: format!("data:{mime_type};base64,{data}"),
                    });
                }
                if let Some(url) = url {
                    return Some(UserPart::ImageUrl { url: url.clone() });
                }
            }
            let name = filename
                .as_deref()
                .or(url.as_deref())
                .unwrap_or("inline data");
            Some(UserPart::Text(format!("[{mime_type} attachment: {name}]")))
        }
        ContentPart::Unknown => None,
    }
}

fn placeholder(kind: &str, source: &PartSource) -> UserPart {
    UserPart::Text(match source {
        PartSource::Url { value, .. } => format!("[{kind} attachment: {value}]"),
        PartSource::File { value, .. } => format!("[{kind} file: {value}]"),
        PartSource::Data { mime_type, .. } => format!("[{kind} attachment: inline {mime_type}]"),
    })
}

/// Places a tool result after the assistant turn holding the call and any results already
/// there, so a result for a call of an earlier run lands where the provider expects it.
pub(super) fn insert_tool_result(
    history: &mut Vec<ChatMessage>,
    tool_call_id: String,
    content: String,
) {
    let owner = history.iter().rposition(|message| {
        matches!(message, ChatMessage::Assistant { tool_calls, .. }
            if tool_calls.iter().any(|call| call.id == tool_call_id))
    });
    let position = match owner {
        Some(owner) => {
            let mut position = owner + 1;
            while matches!(history.get(position), Some(ChatMessage::Tool { .. })) {
                position += 1;
            }
            position
        }
        None => history.len(),
    };
    history.insert(
        position,
        ChatMessage::Tool {
            tool_call_id,
            content,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history(messages: serde_json::Value) -> Vec<ChatMessage> {
        let messages: Vec<Message> = serde_json::from_value(messages).unwrap();
        to_chat_messages(Some("sys".into()), &messages, &HashSet::new())
    }

    fn call(id: &str) -> serde_json::Value {
        json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
    }

    fn tool_result(id: &str) -> ChatMessage {
        ChatMessage::Tool {
            tool_call_id: id.into(),
            content: "ok".into(),
        }
    }

    #[test]
    fn a_dangling_call_gets_a_synthetic_result_before_the_next_user_message() {
        let out = history(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "a1", "role": "assistant", "toolCalls": [call("c1")]},
            {"id": "u2", "role": "user", "content": "never mind"}
        ]));
        assert!(
            matches!(&out[3], ChatMessage::Tool { tool_call_id, content } if tool_call_id == "c1" && content == SYNTHETIC_MISSING_RESULT)
        );
        assert!(matches!(&out[4], ChatMessage::User { .. }));
    }

    #[test]
    fn orphan_and_duplicate_results_are_dropped() {
        let out = history(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "t0", "role": "tool", "toolCallId": "nobody", "content": "x"},
            {"id": "a1", "role": "assistant", "toolCalls": [call("c1")]},
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"},
            {"id": "t2", "role": "tool", "toolCallId": "c1", "content": "again"}
        ]));
        assert_eq!(out.len(), 4);
        assert_eq!(out[3], tool_result("c1"));
    }

    #[test]
    fn consecutive_tool_call_messages_merge_into_one_turn() {
        let out = history(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "a1", "role": "assistant", "content": "Let me check."},
            {"id": "a2", "role": "assistant", "toolCalls": [call("c1")]},
            {"id": "a3", "role": "assistant", "toolCalls": [call("c2")]},
            {"id": "t2", "role": "tool", "toolCallId": "c2", "content": "ok"},
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"}
        ]));
        assert_eq!(out.len(), 5, "{out:?}");
        let ChatMessage::Assistant {
            content,
            tool_calls,
            ..
        } = &out[2]
        else {
            panic!("{out:?}")
        };
        assert_eq!(content.as_deref(), Some("Let me check."));
        assert_eq!(
            tool_calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["c1", "c2"]
        );
        assert_eq!(out[3], tool_result("c2"));
        assert_eq!(out[4], tool_result("c1"));
    }

    #[test]
    fn roles_map_and_ui_artefacts_are_skipped() {
        let out = history(json!([
            {"id": "d", "role": "developer", "content": "dev"},
            {"id": "r", "role": "reasoning", "content": "hmm"},
            {"id": "act", "role": "activity", "activityType": "x", "content": {}},
            {"id": "u", "role": "user", "content": [
                {"type": "text", "text": "see"},
                {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}},
                {"type": "binary", "mimeType": "application/pdf", "filename": "a.pdf"}
            ]}
        ]));
        assert_eq!(
            out[1],
            ChatMessage::System {
                content: "dev".into()
            }
        );
        assert_eq!(
            out[2],
            ChatMessage::User {
                content: vec![
                    UserPart::Text("see".into()),
                    UserPart::ImageUrl {
                        url: "data:image/png;base64,AAAA".into()
                    },
                    UserPart::Text("[application/pdf attachment: a.pdf]".into()),
                ]
            }
        );
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_call_left_open_at_the_end_is_answered() {
        let out = history(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "a1", "role": "assistant", "toolCalls": [call("c1"), call("c2")]},
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"}
        ]));
        assert_eq!(out.len(), 5);
        assert!(matches!(&out[4], ChatMessage::Tool { tool_call_id, .. } if tool_call_id == "c2"));
    }
}
