//! A tool's own questions (an MCP server's elicitation): what the signed id of each question
//! carries, and how the user's answer becomes the tool's response.
//!
//! When a running tool stops to ask ([`crate::tools::ToolError::NeedsInput`]), every question
//! goes to the client under an approval id of its own (see [`crate::agent::approval`]), and
//! the id carries, covered by its tag, what the retry needs and the client must not change:
//! the question's key, the keys of all the call's questions (so a resume that leaves one out
//! is refused), the answer's schema, and the tool's opaque state (an MCP `requestState`, which
//! the MCP specification says a client must hand back exactly as it came). Nothing is stored
//! server-side, so the answer can come to any replica with the same keys. The id is signed,
//! not encrypted: the state is the server's own opaque string, which its server must protect
//! by itself (MCP 2026-07-28 requires it to verify what comes back).
//!
//! An answer becomes the MCP `ElicitResult` the retry carries: `accept` with the answer (for
//! a form, checked against its schema first), `decline` for a payload `{"action": "decline"}`,
//! `cancel` for a cancelled interrupt.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::tools::{InputQuestion, InputRequired};

/// The `_` key marks a question's data apart from the predictive-state restore data an id may
/// carry instead (a JSON array).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Envelope {
    #[serde(rename = "_")]
    question: CarriedQuestion,
}

/// What one question's id carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarriedQuestion {
    /// The question's key among the call's questions.
    pub key: String,
    /// Every key of the call's questions: all must be answered together.
    pub keys: Vec<String>,
    /// The answer's schema.
    pub schema: Map<String, Value>,
    /// Answered by visiting a page: any answer accepts, and none is sent to the tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub url: bool,
    /// The tool's state, exactly as it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl CarriedQuestion {
    pub fn of(asked: &InputRequired, question: &InputQuestion) -> CarriedQuestion {
        CarriedQuestion {
            key: question.key.clone(),
            keys: asked.questions.iter().map(|q| q.key.clone()).collect(),
            schema: question.schema.clone(),
            url: question.url.is_some(),
            state: asked.state.clone(),
        }
    }

    /// The bytes an id carries: canonical JSON, so one question always signs the same way.
    pub fn encode(&self) -> Vec<u8> {
        let envelope = serde_json::to_value(Envelope {
            question: self.clone(),
        })
        .unwrap_or(Value::Null);
        crate::text::canonical_json(&envelope).into_bytes()
    }

    /// The question an id's data describes; `None` for anything else (restore data).
    pub fn decode(bytes: &[u8]) -> Option<CarriedQuestion> {
        serde_json::from_slice::<Envelope>(bytes)
            .ok()
            .map(|envelope| envelope.question)
    }

    /// The tool's response to a 1.0 `resolved` answer.
    ///
    /// # Errors
    /// A payload that is missing, or does not match the schema: what is wrong, for the user.
    pub fn resolved(&self, payload: Option<&Value>) -> Result<Value, String> {
        let payload = payload.ok_or_else(|| "has no payload".to_owned())?;
        if is_decline(payload) {
            return Ok(decline());
        }
        if self.url {
            return Ok(json!({"action": "accept"}));
        }
        self.check(payload)?;
        Ok(json!({"action": "accept", "content": payload}))
    }

    /// The tool's response to a 0.x answer (a tool message's text): `{"cancelled": true}`
    /// cancels, `{"action": "decline"}` declines, `{"answer": <value>}` or the bare value
    /// accepts. A 0.x page cannot be asked again inside its conversation, so an answer that
    /// cannot be read cancels.
    pub fn client_answer(&self, text: &str) -> Value {
        let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        if value == json!({"cancelled": true}) {
            return cancel();
        }
        let value = match value {
            Value::Object(mut object) if object.len() == 1 && object.contains_key("answer") => {
                object.remove("answer").unwrap_or_default()
            }
            other => other,
        };
        self.resolved(Some(&value)).unwrap_or_else(|why| {
            tracing::warn!(%why, "unreadable answer to a tool's question: cancelled");
            cancel()
        })
    }

    fn check(&self, answer: &Value) -> Result<(), String> {
        let validator = jsonschema::validator_for(&Value::Object(self.schema.clone()))
            .map_err(|_| "cannot be checked: the question's schema is not valid".to_owned())?;
        match crate::tools::schema_violations(&validator, answer) {
            None => Ok(()),
            Some(problems) => Err(format!("does not match the response schema: {problems}")),
        }
    }
}

/// The response to a cancelled question: the user dismissed it.
pub fn cancel() -> Value {
    json!({"action": "cancel"})
}

fn decline() -> Value {
    json!({"action": "decline"})
}

fn is_decline(payload: &Value) -> bool {
    *payload == decline()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn party() -> CarriedQuestion {
        CarriedQuestion {
            key: "party".into(),
            keys: vec!["date".into(), "party".into()],
            schema: match json!({"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}, "required": ["size"]})
            {
                Value::Object(schema) => schema,
                _ => unreachable!(),
            },
            url: false,
            state: Some("opaque-state".into()),
        }
    }

    #[test]
    fn a_question_round_trips_through_its_bytes_and_restore_data_is_not_one() {
        let question = party();
        assert_eq!(CarriedQuestion::decode(&question.encode()), Some(question));
        let restore = br#"[["document","old",true]]"#;
        assert_eq!(CarriedQuestion::decode(restore), None);
    }

    #[test]
    fn answers_become_the_tools_response() {
        let question = party();
        assert_eq!(
            question.resolved(Some(&json!({"size": 4}))),
            Ok(json!({"action": "accept", "content": {"size": 4}}))
        );
        assert_eq!(
            question.resolved(Some(&json!({"action": "decline"}))),
            Ok(json!({"action": "decline"}))
        );
        assert!(question.resolved(Some(&json!({"size": 0}))).is_err());
        assert!(question.resolved(None).is_err());
        let url = CarriedQuestion {
            url: true,
            ..party()
        };
        assert_eq!(
            url.resolved(Some(&json!({}))),
            Ok(json!({"action": "accept"}))
        );
    }

    #[test]
    fn a_0x_answer_accepts_declines_or_cancels() {
        let question = party();
        assert_eq!(
            question.client_answer(r#"{"size":2}"#),
            json!({"action": "accept", "content": {"size": 2}})
        );
        assert_eq!(
            question.client_answer(r#"{"answer":{"size":3}}"#),
            json!({"action": "accept", "content": {"size": 3}})
        );
        assert_eq!(question.client_answer(r#"{"cancelled":true}"#), cancel());
        assert_eq!(question.client_answer(r#"{"action":"decline"}"#), decline());
        assert_eq!(question.client_answer(r#"{"size":"two"}"#), cancel());
    }
}
