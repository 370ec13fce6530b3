//! The answers to the questions a tool asked while it ran (see `crate::agent::elicitation`),
//! gathered by call: one resume may answer them in any order, and the call is retried once,
//! with all of them, only when every question of its asking is answered. A 0.x client carries
//! a question's data in the call's arguments rather than its id; it is put back here before
//! the tag is checked.

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::history::HistoryCall;
use crate::agent::approval::ApprovalSigner;
use crate::agent::approval_id::ApprovalId;
use crate::agent::elicitation::CarriedQuestion;
use crate::agent::{DecisionOutcome, ToolDecision};
use crate::tools::InputAnswers;

/// The calls whose questions a request answers, by call id.
#[derive(Default)]
pub(super) struct ElicitedCalls {
    calls: BTreeMap<String, ElicitedCall>,
}

/// The answers so far to the questions one call asked.
struct ElicitedCall {
    question_keys: Vec<String>,
    state: Option<String>,
    responses: Map<String, Value>,
    /// Each answered question's id: its tag and expiry.
    ids: BTreeMap<String, ApprovalId>,
    tool_name: String,
    arguments: Value,
    parent_message_id: String,
}

/// Why an answer is not taken.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// The id is of another asking of the call (other questions or another state).
    #[error("the answer belongs to another asking of its call")]
    OtherAsking,
    #[error("a question is answered twice")]
    Twice,
    #[error("the call `{call_id}` of `{tool}` asked {questions} questions; answer every one of its interrupts in `resume`")]
    Unanswered {
        call_id: String,
        tool: String,
        questions: usize,
    },
}

/// A call to run again with its answers.
pub(super) struct Retry {
    pub(super) decision: ToolDecision,
    /// The latest expiry of its questions' ids (Unix seconds).
    pub(super) expires: Option<u64>,
    /// The first question's tag (hex): the asking's name in the decision ledger, whatever
    /// order the answers came in.
    pub(super) approval: String,
}

impl ElicitedCalls {
    /// Takes the answer to the question `id` carries about `call`. Ids of one asking agree on
    /// the questions and the state (both signed).
    pub(super) fn add(
        &mut self,
        call: &HistoryCall,
        id: &ApprovalId,
        question: CarriedQuestion,
        response: Value,
    ) -> Result<(), Refusal> {
        let entry = self
            .calls
            .entry(call.id.clone())
            .or_insert_with(|| ElicitedCall {
                question_keys: question.keys.clone(),
                state: question.state.clone(),
                responses: Map::new(),
                ids: BTreeMap::new(),
                tool_name: call.name.clone(),
                arguments: call.arguments.clone(),
                parent_message_id: call.message_id.clone(),
            });
        if entry.question_keys != question.keys || entry.state != question.state {
            return Err(Refusal::OtherAsking);
        }
        if entry
            .responses
            .insert(question.key.clone(), response)
            .is_some()
        {
            return Err(Refusal::Twice);
        }
        entry.ids.insert(question.key, id.clone());
        Ok(())
    }

    /// Every call whose questions are all answered, as a retry; a question left unanswered
    /// refuses the request.
    pub(super) fn finish(self) -> Result<Vec<Retry>, Refusal> {
        let mut retries = Vec::with_capacity(self.calls.len());
        for (call_id, call) in self.calls {
            let all_answered = call
                .question_keys
                .iter()
                .all(|key| call.responses.contains_key(key));
            let first = call.ids.values().next();
            let (true, Some(first)) = (all_answered, first) else {
                return Err(Refusal::Unanswered {
                    call_id,
                    tool: call.tool_name,
                    questions: call.question_keys.len(),
                });
            };
            retries.push(Retry {
                expires: call
                    .ids
                    .values()
                    .filter_map(ApprovalSigner::expires_unix)
                    .max(),
                approval: crate::text::hex(&first.tag),
                decision: ToolDecision {
                    tool_call_id: call_id,
                    tool_name: call.tool_name,
                    outcome: DecisionOutcome::Elicited {
                        arguments: call.arguments,
                        answers: Box::new(InputAnswers {
                            responses: call.responses,
                            state: call.state,
                        }),
                        parent_message_id: Some(call.parent_message_id),
                    },
                },
            });
        }
        Ok(retries)
    }
}

/// A 0.x question's full id: the call's id, with the data it carries put back from the
/// call's `carried` argument (see `ask.rs`). The tag covers both, so nothing in either can be
/// changed.
pub(super) fn with_carried(call_id: &str, arguments: &Value) -> String {
    let Some(carried) = arguments.get("carried").and_then(Value::as_str) else {
        return call_id.to_owned();
    };
    match (
        call_id.parse::<ApprovalId>(),
        URL_SAFE_NO_PAD.decode(carried),
    ) {
        (Ok(mut id), Ok(bytes)) if id.restore.is_none() && !bytes.is_empty() => {
            id.restore = Some(bytes);
            id.to_string()
        }
        _ => call_id.to_owned(),
    }
}

/// The question an id was minted for, when it was minted for a tool's question.
pub(super) fn carried_question(id: &ApprovalId) -> Option<CarriedQuestion> {
    ApprovalSigner::carried(id).and_then(CarriedQuestion::decode)
}
