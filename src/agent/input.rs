//! Input requests: tools that ask the user a question and wait for a structured answer
//! (`kind = "input"`), and how an answer is read and checked.
//!
//! An input tool never runs on the server. When the model calls one, the run ends and asks,
//! through the same signed ids, transports and decision ledger as approvals (see
//! [`crate::agent::approval`]): a 1.0 client gets an interrupt with `reason: "input_required"`
//! and the tool's `responseSchema`; a 0.x client gets a `request_input` client tool call. The
//! answer, checked against the schema, becomes the call's result, so the model reads what the
//! user chose as it would read any tool's result; a cancelled question becomes a result that
//! says so.
//!
//! The answer is untrusted: it is validated against the configured schema before anything
//! reaches the model, and a 1.0 answer that fails it ends the run with `RUN_ERROR`
//! `invalid_resume_payload` (the protocol's rule), leaving the question open to be answered
//! again.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::tools::schema_violations;

/// What a cancelled question tells the model, unless the tool says otherwise.
pub const DEFAULT_CANCELLED_RESULT: &str =
    "The user cancelled the question without answering. Do not ask again unless the user asks.";

/// One input tool: the question it asks and the answer it takes.
#[derive(Clone)]
pub struct InputSpec {
    /// The question; `{arguments}` and `{<argument>}` are filled from the model's call.
    message: Option<String>,
    /// Said when the template is absent and the call has no `question` or `message` argument.
    description: String,
    response_schema: Map<String, Value>,
    validator: Arc<jsonschema::Validator>,
    cancelled_result: String,
}

impl std::fmt::Debug for InputSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputSpec")
            .field("response_schema", &self.response_schema)
            .finish_non_exhaustive()
    }
}

/// How a 0.x client's answer (a tool message's text) reads.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientAnswer {
    Answered(Value),
    Cancelled,
}

impl InputSpec {
    /// # Errors
    /// A response schema that is not a JSON Schema object.
    pub fn new(
        tool: &str,
        description: &str,
        response_schema: &Value,
        message: Option<String>,
        cancelled_result: Option<String>,
    ) -> Result<InputSpec, String> {
        // AG-UI's `responseSchema` must be an object (a boolean schema is not allowed).
        let Value::Object(schema) = response_schema else {
            return Err(format!(
                "tool `{tool}`: response_schema must be a JSON Schema object"
            ));
        };
        let validator = jsonschema::validator_for(response_schema).map_err(|e| {
            format!("tool `{tool}`: response_schema is not a valid JSON Schema: {e}")
        })?;
        Ok(InputSpec {
            message,
            description: description.trim().to_owned(),
            response_schema: schema.clone(),
            validator: Arc::new(validator),
            cancelled_result: cancelled_result
                .unwrap_or_else(|| DEFAULT_CANCELLED_RESULT.to_owned()),
        })
    }

    pub fn response_schema(&self) -> &Map<String, Value> {
        &self.response_schema
    }

    /// What the model reads when the user cancels.
    pub fn cancelled_result(&self) -> &str {
        &self.cancelled_result
    }

    /// The question shown to the user for a call of `tool` with `arguments`: the template
    /// filled in, else the call's own `question` (or `message`), else the tool's description.
    pub fn message(&self, tool: &str, arguments: &Value) -> String {
        if let Some(template) = &self.message {
            return fill_template(template, arguments);
        }
        let asked = ["question", "message"]
            .iter()
            .find_map(|key| arguments.get(key).and_then(Value::as_str))
            .map(str::trim)
            .filter(|text| !text.is_empty());
        match asked {
            Some(text) => text.to_owned(),
            None if !self.description.is_empty() => self.description.clone(),
            None => format!("`{tool}` needs your input."),
        }
    }

    /// Checks an answer against the response schema: `Err` says what is wrong, for the user.
    pub fn check(&self, answer: &Value) -> Result<(), String> {
        match schema_violations(&self.validator, answer) {
            None => Ok(()),
            Some(problems) => Err(format!("does not match the response schema: {problems}")),
        }
    }

    /// Reads a 0.x answer: `{"cancelled": true}` cancels, `{"answer": <value>}` answers with
    /// the value, any other JSON is the answer itself (a page may send the form as it is).
    ///
    /// # Errors
    /// Text that is not JSON, or an answer that fails the schema.
    pub fn read_client_answer(&self, text: &str) -> Result<ClientAnswer, String> {
        let value: Value = serde_json::from_str(text).map_err(|_| "is not JSON".to_owned())?;
        let answer = match value {
            Value::Object(object)
                if object.len() == 1 && object.get("cancelled") == Some(&json!(true)) =>
            {
                return Ok(ClientAnswer::Cancelled)
            }
            Value::Object(mut object) if object.len() == 1 && object.contains_key("answer") => {
                object.remove("answer").unwrap_or_default()
            }
            other => other,
        };
        self.check(&answer)?;
        Ok(ClientAnswer::Answered(answer))
    }
}

/// `{arguments}` becomes the arguments as JSON, `{name}` an argument's value (a string as it
/// is, anything else as JSON); a placeholder naming no argument is left as written.
fn fill_template(template: &str, arguments: &Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let name = &after[..close];
        let value = if name == "arguments" {
            Some(crate::text::canonical_json(arguments))
        } else {
            arguments.get(name).map(|value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
        };
        match value {
            Some(value) => out.push_str(&value),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_spec(message: Option<&str>) -> InputSpec {
        InputSpec::new(
            "choose_time",
            "Ask the user to pick a time.",
            &json!({
                "type": "object",
                "properties": {"chosen_time": {"type": "string"}, "chosen_label": {"type": "string"}},
                "required": ["chosen_time"],
                "additionalProperties": false,
            }),
            message.map(str::to_owned),
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_question_comes_from_the_template_the_call_or_the_description() {
        let args = json!({"topic": "design review", "slots": ["10:00", "14:00"]});
        assert_eq!(
            slot_spec(Some(
                "When should we hold the {topic}? Options: {slots}. {missing}"
            ))
            .message("choose_time", &args),
            "When should we hold the design review? Options: [\"10:00\",\"14:00\"]. {missing}"
        );
        assert_eq!(
            slot_spec(Some("Args: {arguments}")).message("choose_time", &json!({"b": 1, "a": 2})),
            "Args: {\"a\":2,\"b\":1}"
        );
        assert_eq!(
            slot_spec(None).message("choose_time", &json!({"question": " Which slot? "})),
            "Which slot?"
        );
        assert_eq!(
            slot_spec(None).message("choose_time", &json!({})),
            "Ask the user to pick a time."
        );
        assert_eq!(
            slot_spec(Some("{unclosed")).message("choose_time", &json!({})),
            "{unclosed"
        );
    }

    #[test]
    fn answers_are_checked_against_the_schema() {
        let spec = slot_spec(None);
        assert!(spec.check(&json!({"chosen_time": "10:00"})).is_ok());
        let wrong = spec.check(&json!({"chosen_time": 10})).unwrap_err();
        assert!(wrong.contains("/chosen_time"), "{wrong}");
        assert!(spec.check(&json!({})).is_err());
        assert!(spec
            .check(&json!({"chosen_time": "1", "extra": 1}))
            .is_err());
    }

    #[test]
    fn a_client_answer_may_be_wrapped_bare_or_a_cancel() {
        let spec = slot_spec(None);
        assert_eq!(
            spec.read_client_answer(r#"{"cancelled":true}"#),
            Ok(ClientAnswer::Cancelled)
        );
        assert_eq!(
            spec.read_client_answer(r#"{"answer":{"chosen_time":"10:00"}}"#),
            Ok(ClientAnswer::Answered(json!({"chosen_time": "10:00"})))
        );
        assert_eq!(
            spec.read_client_answer(r#"{"chosen_time":"14:00","chosen_label":"Afternoon"}"#),
            Ok(ClientAnswer::Answered(
                json!({"chosen_time": "14:00", "chosen_label": "Afternoon"})
            ))
        );
        assert!(spec.read_client_answer("not json").is_err());
        assert!(spec
            .read_client_answer(r#"{"answer":{"chosen_time":3}}"#)
            .is_err());
    }

    #[test]
    fn a_response_schema_must_be_an_object_schema() {
        for schema in [json!(true), json!("string"), json!({"type": 12})] {
            assert!(
                InputSpec::new("t", "", &schema, None, None).is_err(),
                "{schema}"
            );
        }
    }
}
