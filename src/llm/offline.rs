//! The offline model: a deterministic stand-in used when no API key is configured, so the
//! service can be tried (and tested end to end) with no network and no account.
//!
//! It answers through the same [`LlmEvent`] stream as a real server, with word-sized text
//! deltas and no artificial delay:
//! - after a tool result (the last message is a `Tool` message), a sentence quoting it;
//! - when the last user message names one of the request's tools, a call to that tool, its
//!   required arguments filled from the text after the name;
//! - otherwise a scripted reply that says how to configure a real model.

use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::error::{truncate_chars, LlmError};
use super::{ChatMessage, ChatRequest, FinishReason, LlmEvent, ToolSpec, Usage, UserPart};

/// What [`super::LlmClient::default_model`] reports for this backend.
pub(crate) const MODEL_NAME: &str = "offline";

/// How much of the user's text or of a tool result is quoted back.
const QUOTE_MAX_CHARS: usize = 200;

/// Lazy like a real request: the reply is computed when the stream is first polled.
pub(crate) fn stream(request: ChatRequest) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
    stream::once(async move { stream::iter(reply(&request).into_iter().map(Ok)) })
        .flatten()
        .boxed()
}

/// The complete reply to `request`, as the events a stream would yield.
pub(crate) fn reply(request: &ChatRequest) -> Vec<LlmEvent> {
    let input_tokens: u64 = request.messages.iter().map(message_words).sum();

    if let Some(ChatMessage::Tool { content, .. }) = request.messages.last() {
        let text = format!(
            "The tool returned: {}",
            truncate_chars(content.trim(), QUOTE_MAX_CHARS)
        );
        return text_reply(&text, input_tokens);
    }

    let user_text = last_user_text(&request.messages);
    if let Some((tool, rest)) = find_named_tool(&request.tools, &user_text) {
        let ordinal = previous_tool_calls(&request.messages) + 1;
        return tool_call_reply(tool, rest, ordinal, input_tokens);
    }

    let text = format!(
        "Hello from the agui-host offline model. No API key is configured, so this reply is \
         scripted. You said: \"{}\". Set OPENAI_API_KEY (and optionally OPENAI_BASE_URL) to \
         talk to a real model.",
        truncate_chars(user_text.trim(), QUOTE_MAX_CHARS)
    );
    text_reply(&text, input_tokens)
}

fn text_reply(text: &str, input_tokens: u64) -> Vec<LlmEvent> {
    // Each delta is one word with the whitespace after it, so the deltas add up to `text`.
    let mut events: Vec<LlmEvent> = text
        .split_inclusive(char::is_whitespace)
        .map(|word| LlmEvent::TextDelta(word.to_owned()))
        .collect();
    events.push(LlmEvent::Finished {
        reason: FinishReason::Stop,
    });
    events.push(LlmEvent::Usage(Usage {
        input_tokens,
        output_tokens: word_count(text),
        ..Usage::default()
    }));
    events
}

fn tool_call_reply(
    tool: &ToolSpec,
    rest: &str,
    ordinal: usize,
    input_tokens: u64,
) -> Vec<LlmEvent> {
    let arguments = Value::Object(arguments_for(&tool.parameters, rest)).to_string();
    let mut events = vec![LlmEvent::ToolCallDelta {
        index: 0,
        id: Some(format!("call_offline_{ordinal}")),
        name: Some(tool.name.clone()),
        arguments: String::new(),
    }];
    // Streamed in about four fragments, as a real server would, split on char boundaries.
    let chars: Vec<char> = arguments.chars().collect();
    let size = chars.len().div_ceil(4).max(1);
    events.extend(chars.chunks(size).map(|fragment| LlmEvent::ToolCallDelta {
        index: 0,
        id: None,
        name: None,
        arguments: fragment.iter().collect(),
    }));
    events.push(LlmEvent::Finished {
        reason: FinishReason::ToolCalls,
    });
    events.push(LlmEvent::Usage(Usage {
        input_tokens,
        output_tokens: word_count(&arguments),
        ..Usage::default()
    }));
    events
}

/// A JSON object with every `required` property of `schema`: strings get `text`, numbers 0,
/// booleans true, arrays [], objects {}.
fn arguments_for(schema: &Value, text: &str) -> Map<String, Value> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    required
        .iter()
        .filter_map(Value::as_str)
        .map(|name| {
            let property = properties.and_then(|p| p.get(name));
            (name.to_owned(), placeholder(property, text))
        })
        .collect()
}

fn placeholder(property: Option<&Value>, text: &str) -> Value {
    let kind = match property.and_then(|p| p.get("type")) {
        Some(Value::String(kind)) => Some(kind.as_str()),
        // `["string", "null"]`: the first non-null type.
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null"),
        _ => None,
    };
    match kind {
        Some("number" | "integer") => Value::from(0),
        Some("boolean") => Value::Bool(true),
        Some("array") => Value::Array(Vec::new()),
        Some("object") => Value::Object(Map::new()),
        Some("null") => Value::Null,
        // A string, or an untyped property: the text, unless an `enum` rules it out.
        _ => {
            let allowed = property
                .and_then(|p| p.get("enum"))
                .and_then(Value::as_array);
            match allowed {
                Some(values) if !values.is_empty() => values
                    .iter()
                    .find(|v| v.as_str().is_some_and(|v| v.eq_ignore_ascii_case(text)))
                    .or_else(|| values.first())
                    .cloned()
                    .unwrap_or(Value::Null),
                _ => Value::String(text.to_owned()),
            }
        }
    }
}

/// The earliest tool whose exact name appears in `text` as a whole word (ASCII
/// case-insensitive), with the text after it.
fn find_named_tool<'a, 't>(
    tools: &'a [ToolSpec],
    text: &'t str,
) -> Option<(&'a ToolSpec, &'t str)> {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `text`.
    let lower = text.to_ascii_lowercase();
    let is_word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut best: Option<(usize, usize, &ToolSpec)> = None;
    for tool in tools {
        let name = tool.name.trim().to_ascii_lowercase();
        if name.is_empty() {
            continue;
        }
        let found = lower
            .match_indices(name.as_str())
            .map(|(at, _)| at)
            .find(|&at| {
                let end = at + name.len();
                let before_ok = at
                    .checked_sub(1)
                    .and_then(|i| lower.as_bytes().get(i))
                    .is_none_or(|&b| !is_word_byte(b));
                let after_ok = lower.as_bytes().get(end).is_none_or(|&b| !is_word_byte(b));
                before_ok && after_ok
            });
        if let Some(at) = found {
            let end = at + name.len();
            let better = match best {
                None => true,
                // Earliest mention wins; at the same place, the longer name.
                Some((best_at, best_end, _)) => at < best_at || (at == best_at && end > best_end),
            };
            if better {
                best = Some((at, end, tool));
            }
        }
    }
    let (_, end, tool) = best?;
    let rest = text.get(end..).unwrap_or_default().trim();
    let rest = rest.strip_prefix(':').unwrap_or(rest).trim_start();
    Some((tool, rest))
}

fn last_user_text(messages: &[ChatMessage]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|message| match message {
            ChatMessage::User { content } => Some(
                content
                    .iter()
                    .filter_map(|part| match part {
                        UserPart::Text(text) => Some(text.as_str()),
                        UserPart::ImageUrl { .. } => None,
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        })
        .unwrap_or_default()
}

/// Tool calls already in the history, so each new call id is unique within the thread.
fn previous_tool_calls(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .map(|message| match message {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum()
}

fn word_count(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

fn message_words(message: &ChatMessage) -> u64 {
    match message {
        ChatMessage::System { content } | ChatMessage::Tool { content, .. } => word_count(content),
        ChatMessage::User { content } => content
            .iter()
            .map(|part| match part {
                UserPart::Text(text) => word_count(text),
                UserPart::ImageUrl { .. } => 0,
            })
            .sum(),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            content.as_deref().map_or(0, word_count)
                + tool_calls
                    .iter()
                    .map(|call| word_count(&call.arguments))
                    .sum::<u64>()
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::TryStreamExt;
    use serde_json::json;

    use super::super::{ChatToolCall, LlmClient};
    use super::*;

    fn weather_tool() -> ToolSpec {
        ToolSpec {
            name: "get_weather".into(),
            description: "Get the weather.".into(),
            parameters: json!({
                "type": "object",
                "properties": { "location": { "type": "string" }, "unit": { "type": "string" } },
                "required": ["location"]
            }),
        }
    }

    fn request(messages: Vec<ChatMessage>, tools: Vec<ToolSpec>) -> ChatRequest {
        ChatRequest {
            model: None,
            messages,
            tools,
        }
    }

    fn text_of(events: &[LlmEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                LlmEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn arguments_of(events: &[LlmEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                LlmEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn scripted_reply_quotes_the_user() {
        let req = request(
            vec![
                ChatMessage::System {
                    content: "Be brief.".into(),
                },
                ChatMessage::user_text("Hi there, model"),
            ],
            vec![weather_tool()],
        );
        let events = reply(&req);
        let expected = "Hello from the agui-host offline model. No API key is configured, so this reply is scripted. You said: \"Hi there, model\". Set OPENAI_API_KEY (and optionally OPENAI_BASE_URL) to talk to a real model.";
        assert_eq!(text_of(&events), expected);
        // Word-sized deltas.
        let deltas = events
            .iter()
            .filter(|e| matches!(e, LlmEvent::TextDelta(_)))
            .count();
        assert_eq!(deltas, expected.split_whitespace().count());
        let n = events.len();
        assert_eq!(
            events[n - 2],
            LlmEvent::Finished {
                reason: FinishReason::Stop
            }
        );
        assert_eq!(
            events[n - 1],
            LlmEvent::Usage(Usage {
                input_tokens: 5,
                output_tokens: expected.split_whitespace().count() as u64,
                ..Usage::default()
            })
        );
        // Deterministic.
        assert_eq!(reply(&req), events);
    }

    #[test]
    fn long_user_text_is_truncated() {
        let long = "a".repeat(500);
        let text = text_of(&reply(&request(vec![ChatMessage::user_text(long)], vec![])));
        assert!(
            text.contains(&format!("\"{}…\"", "a".repeat(200))),
            "{text}"
        );
        let empty = text_of(&reply(&request(vec![], vec![])));
        assert!(empty.contains("You said: \"\"."));
    }

    #[test]
    fn tool_result_is_quoted() {
        let result = format!("{{\"temperature\":20,\"pad\":\"{}\"}}", "x".repeat(300));
        let req = request(
            vec![
                ChatMessage::user_text("get_weather Paris"),
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![ChatToolCall {
                        id: "call_offline_1".into(),
                        name: "get_weather".into(),
                        arguments: "{\"location\":\"Paris\"}".into(),
                    }],
                },
                ChatMessage::Tool {
                    tool_call_id: "call_offline_1".into(),
                    content: result.clone(),
                },
            ],
            vec![weather_tool()],
        );
        let events = reply(&req);
        let text = text_of(&events);
        assert!(
            text.starts_with("The tool returned: {\"temperature\":20"),
            "{text}"
        );
        assert_eq!(text.chars().count(), "The tool returned: ".len() + 201);
        assert!(events.contains(&LlmEvent::Finished {
            reason: FinishReason::Stop
        }));
    }

    #[test]
    fn naming_a_tool_calls_it() {
        let req = request(
            vec![ChatMessage::user_text(
                "Please use GET_WEATHER: Paris, France ",
            )],
            vec![weather_tool()],
        );
        let events = reply(&req);
        assert_eq!(
            events[0],
            LlmEvent::ToolCallDelta {
                index: 0,
                id: Some("call_offline_1".into()),
                name: Some("get_weather".into()),
                arguments: String::new(),
            }
        );
        let fragments = events
            .iter()
            .filter(|e| matches!(e, LlmEvent::ToolCallDelta { id: None, arguments, .. } if !arguments.is_empty()))
            .count();
        assert!(fragments >= 3, "{events:?}");
        let arguments: Value = serde_json::from_str(&arguments_of(&events)).expect("JSON");
        assert_eq!(arguments, json!({ "location": "Paris, France" }));
        let n = events.len();
        assert_eq!(
            events[n - 2],
            LlmEvent::Finished {
                reason: FinishReason::ToolCalls
            }
        );
        assert!(matches!(events[n - 1], LlmEvent::Usage(_)));
    }

    #[test]
    fn call_ids_count_previous_calls() {
        let req = request(
            vec![
                ChatMessage::user_text("get_weather Oslo"),
                ChatMessage::Assistant {
                    content: Some("calling".into()),
                    tool_calls: vec![ChatToolCall {
                        id: "call_offline_1".into(),
                        name: "get_weather".into(),
                        arguments: "{}".into(),
                    }],
                },
                ChatMessage::Tool {
                    tool_call_id: "call_offline_1".into(),
                    content: "sunny".into(),
                },
                ChatMessage::Assistant {
                    content: Some("The tool returned: sunny".into()),
                    tool_calls: vec![],
                },
                ChatMessage::user_text("and get_weather Rome"),
            ],
            vec![weather_tool()],
        );
        let events = reply(&req);
        assert!(
            matches!(&events[0], LlmEvent::ToolCallDelta { id: Some(id), .. } if id == "call_offline_2")
        );
        assert_eq!(arguments_of(&events), "{\"location\":\"Rome\"}");
    }

    #[test]
    fn placeholders_follow_the_schema() {
        let tool = ToolSpec {
            name: "change_background".into(),
            description: String::new(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "color": { "type": "string" },
                    "count": { "type": "integer" },
                    "ratio": { "type": "number" },
                    "flag": { "type": "boolean" },
                    "items": { "type": "array" },
                    "extra": { "type": "object" },
                    "maybe": { "type": ["null", "string"] },
                    "mode": { "type": "string", "enum": ["light", "dark"] },
                    "optional": { "type": "string" }
                },
                "required": ["color", "count", "ratio", "flag", "items", "extra", "maybe", "mode", "undeclared"]
            }),
        };
        let events = reply(&request(
            vec![ChatMessage::user_text("change_background")],
            vec![weather_tool(), tool],
        ));
        let arguments: Value = serde_json::from_str(&arguments_of(&events)).expect("JSON");
        assert_eq!(
            arguments,
            json!({
                "color": "", "count": 0, "ratio": 0, "flag": true, "items": [], "extra": {},
                "maybe": "", "mode": "light", "undeclared": ""
            })
        );
        // A tool without a schema gets `{}`.
        let bare = ToolSpec {
            name: "ping".into(),
            description: String::new(),
            parameters: Value::Null,
        };
        let events = reply(&request(vec![ChatMessage::user_text("ping")], vec![bare]));
        assert_eq!(arguments_of(&events), "{}");
    }

    #[test]
    fn only_whole_tool_names_count() {
        for text in ["get_weathers please", "forget_weather", "get weather"] {
            let events = reply(&request(
                vec![ChatMessage::user_text(text)],
                vec![weather_tool()],
            ));
            assert!(
                !events
                    .iter()
                    .any(|e| matches!(e, LlmEvent::ToolCallDelta { .. })),
                "{text}"
            );
        }
        // Without tools in the request, naming one does nothing.
        let events = reply(&request(
            vec![ChatMessage::user_text("get_weather")],
            vec![],
        ));
        assert!(text_of(&events).starts_with("Hello from"));
    }

    #[test]
    fn non_ascii_text_is_safe() {
        let events = reply(&request(
            vec![ChatMessage::user_text("İstanbul get_weather Zürich ☀")],
            vec![weather_tool()],
        ));
        assert_eq!(arguments_of(&events), "{\"location\":\"Zürich ☀\"}");
    }

    #[tokio::test]
    async fn streams_through_the_client() {
        let client = LlmClient::offline();
        let req = request(vec![ChatMessage::user_text("hello")], vec![]);
        let streamed: Vec<LlmEvent> = client
            .stream_chat(req.clone())
            .try_collect()
            .await
            .expect("no error");
        assert_eq!(streamed, reply(&req));
    }
}
