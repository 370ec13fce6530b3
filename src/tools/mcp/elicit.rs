//! MCP elicitation as the agent's questions: an `input_required` answer to `tools/call`
//! (MCP 2026-07-28, multi round-trip requests) becomes [`InputRequired`], one question per
//! elicitation request, with the server's `requestState` kept exactly as sent for the retry.
//! Requests this host cannot fulfil (sampling, roots) fail the call with a message the model
//! can read.
//!
//! Servers on older revisions ask with an `elicitation/create` request in the middle of the
//! call. Holding that call open until a person answers cannot survive the run ending (the
//! answer arrives in a later run, maybe on another replica), so such requests are declined at
//! once (see `connection.rs`), and the server decides what its tool then does.

use rmcp::model::{ElicitRequestParams, InputRequest, InputRequiredResult};
use serde_json::{json, Map, Value};

use crate::tools::{InputQuestion, InputRequired, ToolError, MAX_CARRIED_BYTES};

/// Longest question shown to the user; a server's message is untrusted text.
const MAX_MESSAGE_CHARS: usize = 4000;

/// The questions of an `input_required` answer from the server named `server`.
pub(super) fn questions(
    server: &str,
    result: InputRequiredResult,
) -> Result<InputRequired, ToolError> {
    let requests = result.input_requests.unwrap_or_default();
    if requests.is_empty() {
        // Only state (load shedding): nothing to ask, and retrying at once would just loop.
        return Err(ToolError::Failed(format!(
            "the MCP server `{server}` asked to be called again later; try again shortly"
        )));
    }
    let mut questions = Vec::with_capacity(requests.len());
    for (key, request) in requests {
        let question = match request {
            InputRequest::Elicitation(request) => question(key, request.params)?,
            InputRequest::CreateMessage(_) => return Err(unsupported(server, "sampling")),
            InputRequest::ListRoots(_) => return Err(unsupported(server, "its roots")),
            _ => return Err(unsupported(server, "an unknown kind of input")),
        };
        questions.push(question);
    }
    let asked = InputRequired {
        questions,
        state: result.request_state,
        asker: server.to_owned(),
    };
    if asked.carried_bytes() > MAX_CARRIED_BYTES {
        return Err(ToolError::Failed(format!(
            "the MCP server `{server}` asked a question too large to carry to the user \
             (over {MAX_CARRIED_BYTES} bytes of schema and state)"
        )));
    }
    Ok(asked)
}

fn question(key: String, params: ElicitRequestParams) -> Result<InputQuestion, ToolError> {
    let clip = |text: String| crate::text::truncate_chars(&text, MAX_MESSAGE_CHARS);
    match params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => {
            let Ok(Value::Object(schema)) = serde_json::to_value(&requested_schema) else {
                return Err(ToolError::Failed(
                    "the MCP server asked with a schema that is not an object".into(),
                ));
            };
            Ok(InputQuestion {
                key,
                message: clip(message),
                schema,
                url: None,
                forwarded: None,
            })
        }
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => Ok(InputQuestion {
            key,
            message: clip(format!("{message}\n\n{url}")),
            schema: url_schema(),
            url: Some(url),
            forwarded: None,
        }),
        _ => Err(ToolError::Failed(
            "the MCP server asked for input in a mode this host does not know".into(),
        )),
    }
}

/// A URL-mode question is answered only by whether the user went there: any object.
fn url_schema() -> Map<String, Value> {
    match json!({"type": "object", "properties": {}}) {
        Value::Object(schema) => schema,
        _ => Map::new(),
    }
}

fn unsupported(server: &str, what: &str) -> ToolError {
    ToolError::Failed(format!(
        "the MCP server `{server}` asked for {what}, which this host does not provide"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(value: Value) -> InputRequiredResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn each_elicitation_is_a_question_and_the_state_is_kept() {
        let asked = questions(
            "travel",
            result(json!({
                "resultType": "input_required",
                "inputRequests": {
                    "party": {"method": "elicitation/create", "params": {"mode": "form", "message": "How many?",
                        "requestedSchema": {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]}}},
                    "login": {"method": "elicitation/create", "params": {"mode": "url", "message": "Sign in",
                        "url": "https://example.test/login"}}
                },
                "requestState": "opaque"
            })),
        )
        .unwrap();
        assert_eq!(asked.state.as_deref(), Some("opaque"));
        assert_eq!(asked.asker, "travel");
        let keys: Vec<&str> = asked.questions.iter().map(|q| q.key.as_str()).collect();
        assert_eq!(keys, ["login", "party"]);
        let party = &asked.questions[1];
        assert_eq!(party.message, "How many?");
        assert_eq!(party.schema["required"], json!(["size"]));
        assert_eq!(party.url, None);
        let login = &asked.questions[0];
        assert_eq!(login.url.as_deref(), Some("https://example.test/login"));
        assert!(login.message.contains("https://example.test/login"));
    }

    #[test]
    fn sampling_roots_state_only_and_oversized_questions_fail_the_call() {
        let sampling = result(
            json!({"resultType": "input_required", "inputRequests": {"s": {
            "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 10}}}}),
        );
        assert!(questions("x", sampling)
            .unwrap_err()
            .to_string()
            .contains("sampling"));
        let state_only = result(json!({"resultType": "input_required", "requestState": "s"}));
        assert!(questions("x", state_only).is_err());
        let huge = result(json!({
            "resultType": "input_required",
            "inputRequests": {"q": {"method": "elicitation/create", "params": {"mode": "form", "message": "?",
                "requestedSchema": {"type": "object", "properties": {}}}}},
            "requestState": "x".repeat(MAX_CARRIED_BYTES + 1)
        }));
        assert!(questions("x", huge)
            .unwrap_err()
            .to_string()
            .contains("too large"));
    }
}
