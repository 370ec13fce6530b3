//! A subagent that stops to ask a person (its approval, its input tool's question, or a
//! question one of its tools asked): its call passes the questions up as its own, and is
//! called again with the answers.
//!
//! The child's run ends with its interrupts. Its call ends with [`ToolError::NeedsInput`],
//! one question per interrupt, shown to the client as the child asked it
//! ([`ForwardedQuestion`]), and carrying what the retry needs: the child's run id (it goes on
//! under the same one), its interrupts' ids, and its conversation since the task (what it
//! said, the calls it made, the results it got). The parent's approval gate signs that into
//! each question's id, as for any tool's questions (see `crate::agent::elicitation`), so the
//! answer may come back to any replica, and a client cannot change what the child did. The
//! parent's decision ledger claims the answers once, so the child resumes, and its approved
//! call runs, once.
//!
//! An id has room for [`MAX_RESTORE_BYTES`]: a conversation too long for it is carried with
//! its longest tool results shortened, and one still too long fails the call, saying so.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::Failure;
use crate::agent::approval_id::MAX_RESTORE_BYTES;
use crate::agent::elicitation::CarriedQuestion;
use crate::protocol::{
    AssistantMessage, Content, EventBody, Interrupt, Message, ResumeEntry, ResumeStatus, ToolCall,
    ToolMessage,
};
use crate::tools::{ForwardedQuestion, InputAnswers, InputQuestion, InputRequired};

/// What a suspended child's call carries to its retry (short field names: it travels inside
/// every question's id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Suspended {
    /// The child's run id, which its continuation keeps.
    #[serde(rename = "sa")]
    pub(super) subagent_run_id: String,
    /// The child's interrupts, in order; question `q<n>` is the `n`th.
    #[serde(rename = "q")]
    pub(super) interrupts: Vec<ChildInterrupt>,
    /// The child's conversation after its task.
    #[serde(rename = "m")]
    pub(super) messages: Vec<Message>,
}

/// One of the child's interrupts: its id and reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct ChildInterrupt {
    #[serde(rename = "i")]
    id: String,
    #[serde(rename = "r")]
    reason: String,
}

/// Characters a shortened tool result keeps.
const SHORTENED_RESULT_CHARS: usize = 400;

impl Suspended {
    /// The questions of the child `agent` (run `subagent_run_id`) that ended with
    /// `interrupts`, having said `messages` since its task.
    ///
    /// # Errors
    /// The child's conversation does not fit a question's id, even shortened.
    pub(super) fn ask(
        agent: &str,
        subagent_run_id: &str,
        interrupts: Vec<Interrupt>,
        messages: Vec<Message>,
    ) -> Result<InputRequired, Failure> {
        let questions: Vec<InputQuestion> = interrupts
            .iter()
            .enumerate()
            .map(|(n, interrupt)| forwarded(agent, subagent_run_id, n, interrupt, &messages))
            .collect();
        let mut suspended = Suspended {
            subagent_run_id: subagent_run_id.to_owned(),
            interrupts: interrupts
                .into_iter()
                .map(|interrupt| ChildInterrupt {
                    id: interrupt.id,
                    reason: interrupt.reason,
                })
                .collect(),
            messages,
        };
        loop {
            let asked = InputRequired {
                questions: questions.clone(),
                state: Some(suspended.to_string()),
                asker: agent.to_owned(),
            };
            if fits(&asked) {
                return Ok(asked);
            }
            if !suspended.shorten_longest_result() {
                return Err(Failure {
                    code: "subagent_too_long_to_suspend",
                    message: format!(
                        "it asked a person, but its conversation is too long to carry to the answer (a question carries at most {MAX_RESTORE_BYTES} bytes)"
                    ),
                });
            }
        }
    }

    /// A child waiting for the client's tools, whose results `messages` now holds.
    pub(super) fn waiting(subagent_run_id: String, messages: Vec<Message>) -> Suspended {
        Suspended {
            subagent_run_id,
            interrupts: Vec::new(),
            messages,
        }
    }

    /// The suspension an answer's state carries; `None` when it is not one (never, for a state
    /// the gate verified: the server wrote it).
    pub(super) fn read(answers: &InputAnswers) -> Option<Suspended> {
        serde_json::from_str(answers.state.as_deref()?).ok()
    }

    /// The child's resume entries: each of its interrupts with the answer to its question.
    /// A question left unanswered (never, once the gate checked every key was answered)
    /// cancels its interrupt.
    pub(super) fn resume(&self, answers: &InputAnswers) -> Vec<ResumeEntry> {
        self.interrupts
            .iter()
            .enumerate()
            .map(|(n, interrupt)| {
                let response = answers.responses.get(&question_key(n));
                let (status, payload) = child_answer(&interrupt.reason, response);
                ResumeEntry {
                    interrupt_id: interrupt.id.clone(),
                    status,
                    payload,
                    metadata: None,
                }
            })
            .collect()
    }

    /// Shortens the longest tool result not shortened yet; `false` when none is left.
    fn shorten_longest_result(&mut self) -> bool {
        let longest = self
            .messages
            .iter_mut()
            .filter_map(|message| match message {
                Message::Tool(tool) => match &tool.content {
                    Content::Text(text) if text.chars().count() > SHORTENED_RESULT_CHARS + 80 => {
                        Some(tool)
                    }
                    _ => None,
                },
                _ => None,
            })
            .max_by_key(|tool| match &tool.content {
                Content::Text(text) => text.len(),
                Content::Parts(_) => 0,
            });
        let Some(tool) = longest else {
            return false;
        };
        if let Content::Text(text) = &tool.content {
            let kept = crate::text::truncate_chars(text, SHORTENED_RESULT_CHARS);
            tool.content = Content::Text(format!(
                "{kept}… (shortened: the rest of this result was dropped while a person was asked)"
            ));
        }
        true
    }
}

impl std::fmt::Display for Suspended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&text)
    }
}

fn question_key(n: usize) -> String {
    format!("q{n}")
}

/// Whether every question's id has room for what it carries.
fn fits(asked: &InputRequired) -> bool {
    asked
        .questions
        .iter()
        .all(|question| CarriedQuestion::of(asked, question).encode().len() <= MAX_RESTORE_BYTES)
}

/// The `n`th interrupt of the child `agent` as its parent's question: as the child asked it,
/// its call id as the client knows it (a child's own calls are prefixed with its run id), and
/// which agent asks in the metadata (with the call's tool and arguments, for an approval card).
fn forwarded(
    agent: &str,
    subagent_run_id: &str,
    n: usize,
    interrupt: &Interrupt,
    messages: &[Message],
) -> InputQuestion {
    let own = interrupt.subagent_run_id.is_none();
    let tool_call_id = interrupt.tool_call_id.as_ref().map(|id| match own {
        true => format!("{subagent_run_id}.{id}"),
        false => id.clone(),
    });
    let mut subagent_run_ids = vec![subagent_run_id.to_owned()];
    if let Some(deeper) = &interrupt.subagent_run_id {
        // A grandchild's question, passed up by the child: the child's own question names
        // the run ids below it in its metadata.
        subagent_run_ids.extend(passed_through(interrupt));
        if subagent_run_ids.last() != Some(deeper) {
            subagent_run_ids.push(deeper.clone());
        }
    }
    let mut metadata = interrupt.metadata.clone().unwrap_or_default();
    let ours = metadata
        .entry("agui-host")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(ours) = ours {
        if own {
            if let Some(call) = interrupt
                .tool_call_id
                .as_deref()
                .and_then(|id| find_call(messages, id))
            {
                ours.entry("tool")
                    .or_insert_with(|| json!(call.function.name));
                let arguments = serde_json::from_str::<Value>(&call.function.arguments)
                    .unwrap_or_else(|_| json!(call.function.arguments));
                ours.entry("arguments").or_insert(arguments);
            }
        }
        ours.insert("subagents".into(), json!(subagent_run_ids));
        ours.insert("agent".into(), json!(agent));
    }
    InputQuestion {
        key: question_key(n),
        message: interrupt
            .message
            .clone()
            .unwrap_or_else(|| format!("The `{agent}` agent needs an answer.")),
        schema: interrupt
            .response_schema
            .clone()
            .unwrap_or_else(|| Map::from_iter([("type".to_owned(), json!("object"))])),
        url: None,
        forwarded: Some(Box::new(ForwardedQuestion {
            reason: interrupt.reason.clone(),
            tool_call_id,
            metadata: Some(metadata),
            subagent_run_ids,
            agent: agent.to_owned(),
            expires_at: interrupt.expires_at.clone(),
        })),
    }
}

/// The subagent run ids a child's own forwarded question names, outermost first.
fn passed_through(interrupt: &Interrupt) -> Vec<String> {
    interrupt
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.get("agui-host"))
        .and_then(|ours| ours.get("subagents"))
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn find_call<'m>(messages: &'m [Message], id: &str) -> Option<&'m ToolCall> {
    messages.iter().rev().find_map(|message| match message {
        Message::Assistant(assistant) => assistant.tool_calls.iter().find(|call| call.id == id),
        _ => None,
    })
}

/// The child's resume entry for the answer to its interrupt of `reason` (the response the
/// parent's gate made of it: `{action: accept, content}`, `decline` or `cancel`).
fn child_answer(reason: &str, response: Option<&Value>) -> (ResumeStatus, Option<Value>) {
    let action = response
        .and_then(|r| r.get("action"))
        .and_then(Value::as_str);
    match action {
        Some("accept") => (
            ResumeStatus::Resolved,
            Some(
                response
                    .and_then(|r| r.get("content"))
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            ),
        ),
        // A decline of a question the child's own tool asked is that tool's to hear; an
        // approval or an input tool's question has no decline but its cancel.
        Some("decline") if reason == "input_required" => {
            (ResumeStatus::Resolved, Some(json!({"action": "decline"})))
        }
        _ => (ResumeStatus::Cancelled, None),
    }
}

/// The child's conversation as its own events tell it (its subagents' events are theirs):
/// its text messages, its calls with their arguments, and their results.
#[derive(Debug, Default)]
pub(super) struct Transcript {
    messages: Vec<Message>,
}

impl Transcript {
    pub(super) fn observe(&mut self, body: &EventBody) {
        if body.subagent_run_id().is_some() {
            return;
        }
        match body {
            EventBody::TextMessageStart(start) => {
                self.assistant(&start.message_id);
            }
            EventBody::TextMessageContent(content) => {
                if let Some(message) = self.find(&content.message_id) {
                    message
                        .content
                        .get_or_insert_with(String::new)
                        .push_str(&content.delta);
                }
            }
            EventBody::ToolCallStart(start) => {
                let parent = start
                    .parent_message_id
                    .clone()
                    .unwrap_or_else(|| start.tool_call_id.clone());
                if let Some(message) = self.assistant(&parent) {
                    let call = ToolCall::started(&start.tool_call_id, &start.tool_call_name);
                    message.tool_calls.push(call);
                }
            }
            EventBody::ToolCallArgs(args) => {
                let call = self.messages.iter_mut().rev().find_map(|m| match m {
                    Message::Assistant(a) => {
                        a.tool_calls.iter_mut().find(|c| c.id == args.tool_call_id)
                    }
                    _ => None,
                });
                if let Some(call) = call {
                    call.function.arguments.push_str(&args.delta);
                }
            }
            EventBody::ToolCallResult(result) => {
                self.messages
                    .push(Message::Tool(ToolMessage::answering(result)));
            }
            _ => {}
        }
    }

    pub(super) fn into_messages(self) -> Vec<Message> {
        self.messages
    }

    fn find(&mut self, id: &str) -> Option<&mut AssistantMessage> {
        self.messages.iter_mut().rev().find_map(|m| match m {
            Message::Assistant(a) if a.id == id => Some(a),
            _ => None,
        })
    }

    /// The assistant message `id`, added when new.
    fn assistant(&mut self, id: &str) -> Option<&mut AssistantMessage> {
        let known = self
            .messages
            .iter()
            .any(|m| matches!(m, Message::Assistant(a) if a.id == id));
        if !known {
            self.messages
                .push(Message::Assistant(AssistantMessage::empty(id)));
        }
        self.find(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{TextMessageContent, ToolCallResult, ToolResultContent};

    fn result(call: &str, text: &str) -> EventBody {
        EventBody::ToolCallResult(ToolCallResult {
            message_id: format!("r_{call}"),
            tool_call_id: call.into(),
            content: ToolResultContent::Text(text.into()),
            role: None,
            subagent_run_id: None,
        })
    }

    fn approval(id: &str, call: &str) -> Interrupt {
        Interrupt {
            id: id.into(),
            reason: "tool_call".into(),
            message: Some("Book it?".into()),
            tool_call_id: Some(call.into()),
            response_schema: None,
            expires_at: None,
            metadata: None,
            subagent_run_id: None,
        }
    }

    fn transcript(result_text: &str) -> Vec<Message> {
        let mut transcript = Transcript::default();
        for body in [
            EventBody::tool_call_start("c1", "search", Some("m1".into())),
            EventBody::tool_call_args("c1", "{}"),
            EventBody::tool_call_end("c1".to_owned()),
            result("c1", result_text),
            EventBody::tool_call_start("c2", "book", Some("m2".into())),
            EventBody::tool_call_args("c2", r#"{"hotel":"Grand"}"#),
            EventBody::tool_call_end("c2".to_owned()),
        ] {
            transcript.observe(&body);
        }
        transcript.into_messages()
    }

    #[test]
    fn the_childs_own_events_make_its_conversation_and_a_grandchilds_do_not() {
        let mut messages = transcript("found");
        assert_eq!(messages.len(), 3);
        let mut grandchilds = EventBody::TextMessageContent(TextMessageContent::new("m1", "x"));
        grandchilds.attribute_to("sa_grandchild");
        let mut transcript = Transcript {
            messages: std::mem::take(&mut messages),
        };
        transcript.observe(&grandchilds);
        let messages = transcript.into_messages();
        let Message::Assistant(first) = &messages[0] else {
            panic!("{messages:?}")
        };
        assert_eq!(first.content, None);
        assert_eq!(first.tool_calls[0].function.arguments, "{}");
        assert!(matches!(&messages[1], Message::Tool(t) if t.tool_call_id == "c1"));
    }

    #[test]
    fn a_question_is_the_childs_and_its_answers_become_the_childs_resume() {
        let asked = Suspended::ask(
            "hotels",
            "sa_1",
            vec![approval("apr_child", "c2")],
            transcript("found"),
        )
        .unwrap_or_else(|_| panic!("fits"));
        let question = &asked.questions[0];
        let forwarded = question.forwarded.as_deref().unwrap();
        assert_eq!(forwarded.tool_call_id.as_deref(), Some("sa_1.c2"));
        assert_eq!(forwarded.subagent_run_ids, ["sa_1"]);
        let about = &forwarded.metadata.as_ref().unwrap()["agui-host"];
        assert_eq!(about["tool"], "book");
        assert_eq!(about["arguments"], json!({"hotel": "Grand"}));

        let answers = |response: Value| InputAnswers {
            responses: Map::from_iter([("q0".to_owned(), response)]),
            state: asked.state.clone(),
        };
        let accepted = answers(json!({"action": "accept", "content": {"approved": true}}));
        let suspended = Suspended::read(&accepted).unwrap();
        assert_eq!(suspended.subagent_run_id, "sa_1");
        assert_eq!(suspended.messages.len(), 3);
        let entry = &suspended.resume(&accepted)[0];
        assert_eq!(entry.interrupt_id, "apr_child");
        assert_eq!(entry.status, ResumeStatus::Resolved);
        assert_eq!(entry.payload, Some(json!({"approved": true})));
        // An approval has no decline: it is cancelled, which declines it.
        let declined = suspended.resume(&answers(json!({"action": "decline"})));
        assert_eq!(declined[0].status, ResumeStatus::Cancelled);
    }

    #[test]
    fn a_long_conversation_is_carried_shortened_and_one_too_long_fails_the_call() {
        let long = "x".repeat(20_000);
        let asked = Suspended::ask(
            "hotels",
            "sa_1",
            vec![approval("apr_child", "c2")],
            transcript(&long),
        )
        .unwrap_or_else(|_| panic!("fits once shortened"));
        assert!(fits(&asked));
        let state = asked.state.as_deref().unwrap();
        assert!(state.contains("shortened"), "{state}");

        let mut too_long = transcript("found");
        too_long.push(Message::Assistant(AssistantMessage {
            content: Some("y".repeat(20_000)),
            ..AssistantMessage::empty("m3")
        }));
        let refused = Suspended::ask("hotels", "sa_1", vec![approval("a", "c2")], too_long);
        assert!(matches!(refused, Err(f) if f.code == "subagent_too_long_to_suspend"));
    }
}
