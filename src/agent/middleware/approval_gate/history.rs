//! What the approval gate reads in a request's history: the tool calls with their parsed
//! arguments and the assistant message holding each, the tool messages answering them, whether
//! a call was carried out, and how the approval protocol is removed before the model sees it.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use crate::protocol::{Content, Message};

/// A tool call found in the client's history.
pub(super) struct HistoryCall {
    pub(super) id: String,
    pub(super) name: String,
    /// Parsed arguments (`Null` when they are not JSON).
    pub(super) arguments: Value,
    /// Index of the assistant message holding it.
    pub(super) message_index: usize,
    /// That message's id.
    pub(super) message_id: String,
}

/// How a decision reaches the gate, which decides where a client's echo of it can be.
#[derive(Clone, Copy)]
pub(super) enum Channel {
    /// 0.x: a tool message answering the approval call, which is a call of its own.
    ApprovalCall,
    /// 1.0: a `resume` entry.
    Resume,
}

/// The tool calls and tool messages of a request's history.
pub(super) struct History<'r> {
    pub(super) calls: Vec<HistoryCall>,
    /// The text of the first tool message answering each call id.
    answers: HashMap<String, String>,
    /// The "already carried out" guard's data: where each call's tool messages are.
    replies: HashMap<String, Vec<usize>>,
    /// Index of the last assistant message: what the model said last.
    last_assistant: Option<usize>,
    /// Calls the thread's record holds a result for (see [`RunRequest::recorded_results`]).
    recorded: &'r BTreeSet<String>,
}

impl<'r> History<'r> {
    pub(super) fn of(messages: &[Message], recorded: &'r BTreeSet<String>) -> History<'r> {
        let mut answers = HashMap::new();
        let mut replies: HashMap<String, Vec<usize>> = HashMap::new();
        for (index, call_id, text) in tool_answers(messages) {
            replies.entry(call_id.clone()).or_default().push(index);
            answers.entry(call_id).or_insert(text);
        }
        History {
            calls: history_calls(messages),
            answers,
            replies,
            last_assistant: messages
                .iter()
                .rposition(|m| matches!(m, Message::Assistant(_))),
            recorded,
        }
    }

    pub(super) fn answer_to(&self, call_id: &str) -> Option<&str> {
        self.answers.get(call_id).map(String::as_str)
    }

    /// The "already carried out" guard: whether the call has its result in the history. A
    /// decision about such a call was acted on in an earlier run, and the client kept what it
    /// produced; acting on it again would repeat the side effect.
    ///
    /// A result is told from a client's echo of the decision by where it is, never by what it
    /// says: a tool's own result may well read `{"approved": true}`. A 0.x answer is a message
    /// on the approval call, so any message on the call itself is its result. A 1.0 client may
    /// echo its answer as a message on the call (CopilotKit's `useInterrupt`), added when it
    /// answers: then it is the call's only message and the model has said nothing since. A
    /// second message, or a reply of the model after the first, means the call has its result.
    /// With a thread store the record settles it: a result the server produced (which it may
    /// have put back where the client had dropped it) is a result.
    pub(super) fn carried_out(&self, call_id: &str, channel: Channel) -> bool {
        if self.recorded.contains(call_id) {
            return true;
        }
        let replies = self.replies.get(call_id).map_or(&[][..], Vec::as_slice);
        match (channel, replies) {
            (_, []) => false,
            (Channel::Resume, [only]) => self.last_assistant.is_some_and(|last| last > *only),
            _ => true,
        }
    }
}

fn history_calls(messages: &[Message]) -> Vec<HistoryCall> {
    let mut calls = Vec::new();
    for (message_index, message) in messages.iter().enumerate() {
        let Message::Assistant(assistant) = message else {
            continue;
        };
        for call in &assistant.tool_calls {
            let arguments = if call.function.arguments.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_str(&call.function.arguments).unwrap_or(Value::Null)
            };
            calls.push(HistoryCall {
                id: call.id.clone(),
                name: call.function.name.clone(),
                arguments,
                message_index,
                message_id: assistant.id.clone(),
            });
        }
    }
    calls
}

/// `(index, tool_call_id, text)` of every tool message.
fn tool_answers(messages: &[Message]) -> Vec<(usize, String, String)> {
    messages
        .iter()
        .enumerate()
        .filter_map(|(index, message)| match message {
            Message::Tool(tool) => Some((
                index,
                tool.tool_call_id.clone(),
                content_text(&tool.content),
            )),
            _ => None,
        })
        .collect()
}

fn content_text(content: &Content) -> String {
    content.text()
}

/// Removes approval calls from assistant messages (and messages left empty), and the tool
/// messages answering approval calls or echoing decisions.
pub(super) fn strip_protocol(
    messages: &mut Vec<Message>,
    calls: &HashSet<String>,
    answers: &HashSet<String>,
) {
    if calls.is_empty() && answers.is_empty() {
        return;
    }
    messages.retain_mut(|message| match message {
        Message::Tool(tool) => !answers.contains(&tool.tool_call_id),
        Message::Assistant(assistant) => {
            assistant
                .tool_calls
                .retain(|call| !calls.contains(&call.id));
            !assistant.tool_calls.is_empty()
                || assistant.content.as_deref().is_some_and(|c| !c.is_empty())
        }
        _ => true,
    });
}
