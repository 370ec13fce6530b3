//! The offline model: a deterministic stand-in used when no API key is configured, so the
//! service can be tried (and tested end to end) with no network and no account.
//!
//! It answers through the same [`LlmEvent`] stream as a real server, with word-sized text
//! deltas and no artificial delay (except between the steps of a progress tool):
//! - after a tool result (the last message is a `Tool` message), a sentence quoting it, unless
//!   the answered call reported progress (an array of `{status}` items whose schema allows
//!   `"completed"`, such as the demo's `generate_task_steps_generative_ui`) with items still
//!   to do: then the same tool again with the next item completed;
//! - when the last user message names one of the request's tools, a call to that tool; a tool
//!   is named by its exact name, or else by a word of its name after the leading verb
//!   (`background` for `change_background`, `weather`, `haiku`, `steps` or `plan`, `recipe`,
//!   `document`). Its arguments come from its JSON Schema with believable values derived from
//!   the text after the name (see [`Generator`]), streamed in several fragments;
//! - when the agent has subagents and the text names no tool, a call to each of them at once,
//!   once per conversation (`offline/delegation.rs`), and after such a turn, a sentence quoting
//!   each result;
//! - when the generator of A2UI surfaces (`generate_a2ui`) is offered and the text asks to
//!   compare, show or display something, a call to it; a forced call of its `render_a2ui`
//!   gets a canned surface (`offline/a2ui.rs`);
//! - when the last user message has images, a reply that names them (it cannot see them);
//! - otherwise a scripted reply that says how to configure a real model;
//! - before any of these, a reasoning phase when the system prompt asks it to "think step by
//!   step" (`offline/chat_variants.rs`).
//!
//! Everything is a pure function of the request: the same request gets the same reply.

use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use serde_json::{Map, Value};

mod a2ui;
mod chat_variants;
mod delegation;

use super::error::LlmError;
use super::{ChatMessage, ChatRequest, FinishReason, LlmEvent, ToolSpec, Usage, UserPart};
use crate::text::truncate_chars;

/// What [`super::LlmClient::default_model`] reports for this backend.
pub(crate) const MODEL_NAME: &str = "offline";

/// How long each step of a progress tool "works" before the next call (streams only).
const PROGRESS_STEP_DELAY: std::time::Duration = std::time::Duration::from_millis(400);

/// How much of the user's text or of a tool result is quoted back.
const QUOTE_MAX_CHARS: usize = 200;

/// Lazy like a real request: the reply is computed when the stream is first polled.
///
/// The one pause: before the next step of a progress tool (see [`next_progress_call`]), as if
/// the step took [`PROGRESS_STEP_DELAY`] of work, so a page shows the steps complete one by one.
pub(crate) fn stream(request: ChatRequest) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
    stream::once(async move {
        if next_progress_call(&request).is_some() {
            tokio::time::sleep(PROGRESS_STEP_DELAY).await;
        }
        stream::iter(reply(&request).into_iter().map(Ok))
    })
    .flatten()
    .boxed()
}

/// The complete reply to `request`, as the events a stream would yield: the answer, after a
/// reasoning phase when the system prompt asks for one (see [`chat_variants`]).
pub(crate) fn reply(request: &ChatRequest) -> Vec<LlmEvent> {
    let answer = answer(request);
    if chat_variants::wants_reasoning(&request.messages) {
        let user_text = last_user_text(&request.messages);
        return chat_variants::with_reasoning(&request.messages, &user_text, answer);
    }
    answer
}

fn answer(request: &ChatRequest) -> Vec<LlmEvent> {
    let input_tokens: u64 = request.messages.iter().map(message_words).sum();

    let ordinal = previous_tool_calls(&request.messages) + 1;
    let forced = request
        .forced_tool
        .as_ref()
        .and_then(|name| request.tools.iter().find(|tool| &tool.name == name));
    if let Some(tool) = forced {
        let arguments = a2ui::render_arguments(request, tool).unwrap_or_else(|| {
            let user_text = last_user_text(&request.messages);
            Value::Object(Generator::new(&user_text, "").arguments(&tool.name, &tool.parameters))
        });
        return tool_call_reply(&tool.name, &arguments, ordinal, input_tokens);
    }
    if let Some(ChatMessage::Tool { content, .. }) = request.messages.last() {
        if let Some((tool, arguments)) = next_progress_call(request) {
            return tool_call_reply(&tool.name, &arguments, ordinal, input_tokens);
        }
        if let Some(text) = a2ui::after_result(content) {
            return text_reply(text, input_tokens);
        }
        let handle = serde_json::from_str::<Value>(content).ok();
        if handle.is_some_and(|h| h["status"] == "started" && h["task"].is_string()) {
            let text = "It is running in the background; its result comes with your next message.";
            return text_reply(text, input_tokens);
        }
        if let Some(text) = delegation::after_results(&request.messages) {
            return text_reply(&text, input_tokens);
        }
        let text = format!(
            "The tool returned: {}",
            truncate_chars(content.trim(), QUOTE_MAX_CHARS)
        );
        return text_reply(&text, input_tokens);
    }

    let user_text = last_user_text(&request.messages);
    let found = find_named_tool(&request.tools, &user_text)
        .or_else(|| find_tool_by_keyword(&request.tools, &user_text));
    if let Some((tool, rest)) = found {
        let generator = Generator::new(&user_text, rest);
        let arguments = generator.arguments(&tool.name, &tool.parameters);
        return tool_call_reply(&tool.name, &Value::Object(arguments), ordinal, input_tokens);
    }
    if let Some(calls) = delegation::calls(&request.messages, &request.tools, &user_text) {
        return tool_calls_reply(&calls, ordinal, input_tokens);
    }
    if let Some(tool) = a2ui::view_asked(&request.tools, &user_text) {
        let arguments = serde_json::json!({"intent": "create", "description": user_text.trim()});
        return tool_call_reply(&tool.name, &arguments, ordinal, input_tokens);
    }

    let images = chat_variants::last_user_images(&request.messages);
    if !images.is_empty() {
        return text_reply(
            &chat_variants::image_reply(&images, &user_text),
            input_tokens,
        );
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
    name: &str,
    arguments: &Value,
    ordinal: usize,
    input_tokens: u64,
) -> Vec<LlmEvent> {
    tool_calls_reply(
        &[(name.to_owned(), arguments.clone())],
        ordinal,
        input_tokens,
    )
}

/// One turn calling each of `calls` (a name and its arguments), numbered from `ordinal`.
fn tool_calls_reply(calls: &[(String, Value)], ordinal: usize, input_tokens: u64) -> Vec<LlmEvent> {
    let mut events = Vec::new();
    let mut output_tokens = 0;
    for (index, (name, arguments)) in calls.iter().enumerate() {
        let arguments = arguments.to_string();
        output_tokens += word_count(&arguments);
        events.push(LlmEvent::ToolCallDelta {
            index,
            id: Some(format!("call_offline_{}", ordinal + index)),
            name: Some(name.clone()),
            arguments: String::new(),
        });
        // Streamed as a real server would: at least four fragments (short arguments in exactly
        // four), at most FRAGMENT_MAX_CHARS characters each, split on char boundaries.
        let chars: Vec<char> = arguments.chars().collect();
        let size = chars.len().div_ceil(4).clamp(1, FRAGMENT_MAX_CHARS);
        events.extend(chars.chunks(size).map(|fragment| LlmEvent::ToolCallDelta {
            index,
            id: None,
            name: None,
            arguments: fragment.iter().collect(),
        }));
    }
    events.push(LlmEvent::Finished {
        reason: FinishReason::ToolCalls,
    });
    events.push(LlmEvent::Usage(Usage {
        input_tokens,
        output_tokens,
        ..Usage::default()
    }));
    events
}

/// Longest argument fragment, so long arguments (a document) stream in many pieces.
const FRAGMENT_MAX_CHARS: usize = 24;

/// After a tool result: when the call it answers reported progress with items still to do, the
/// same tool with the first such item `completed`. A progress argument is a top-level array of
/// objects with a `status` whose schema `enum` includes `"completed"`.
fn next_progress_call(request: &ChatRequest) -> Option<(&ToolSpec, Value)> {
    let Some(ChatMessage::Tool {
        tool_call_id,
        content,
    }) = request.messages.last()
    else {
        return None;
    };
    if content.trim_start().starts_with("{\"error\"") {
        return None;
    }
    let call = request
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            ChatMessage::Assistant { tool_calls, .. } => {
                tool_calls.iter().find(|call| &call.id == tool_call_id)
            }
            _ => None,
        })?;
    let tool = request.tools.iter().find(|tool| tool.name == call.name)?;
    let mut arguments: Value = serde_json::from_str(&call.arguments).ok()?;
    let properties = tool.parameters.get("properties")?.as_object()?;
    for (key, property) in properties {
        let allows_completed = property
            .pointer("/items/properties/status/enum")
            .and_then(Value::as_array)
            .is_some_and(|values| values.iter().any(|v| v == "completed"));
        if !allows_completed {
            continue;
        }
        let Some(items) = arguments.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        let next = items.iter_mut().find(|item| {
            item.get("status")
                .is_some_and(|status| status != "completed")
        });
        if let Some(item) = next {
            item["status"] = Value::from("completed");
            return Some((tool, arguments));
        }
    }
    None
}

/// Believable argument values for a tool call, derived from the user's words.
///
/// - `examples`: the first;
/// - `enum`: the value the text names, else the first;
/// - arrays with an `items` schema: three items (fixed lines for a haiku's `japanese` and
///   `english`); without one, `[]`;
/// - objects: their `required` properties, or all of them when none is required;
/// - numbers 0, booleans true;
/// - strings by the property's name: a colour named in the text for `background`/`color`, a
///   CSS gradient, an emoji `icon`, an `amount`, a Markdown `document`, the members of steps
///   or tasks, ingredient `name`s, a `title`; anything else gets the subject (the text after the tool's
///   name, without a leading preposition).
pub(crate) struct Generator {
    /// The user's whole text, lowercased (to find colours and enum values in).
    lower: String,
    /// What the request is about: the text after the tool's name, or the whole text.
    subject: String,
}

const COLOURS: &[&str] = &[
    "red",
    "orange",
    "yellow",
    "green",
    "blue",
    "purple",
    "pink",
    "black",
    "white",
    "gray",
    "grey",
    "teal",
    "navy",
    "gold",
    "silver",
    "brown",
    "cyan",
    "magenta",
    "lightblue",
];
const ICONS: &[&str] = &["🍗", "🌶️", "🧂", "🥬", "🧄"];
const AMOUNTS: &[&str] = &["2 pieces", "1 tsp", "1 pinch", "4 leaves", "2 cloves"];
const INGREDIENTS: &[&str] = &[
    "Chicken breast",
    "Chili powder",
    "Salt",
    "Lettuce leaves",
    "Garlic",
];
const HAIKU_JAPANESE: &[&str] = &["古池や", "蛙飛び込む", "水の音"];
const HAIKU_ENGLISH: &[&str] = &[
    "An old silent pond",
    "A frog jumps into the pond",
    "Splash! Silence again",
];
/// Times a scheduling tool offers (`slots`, `*_time`).
const TIME_SLOTS: &[&str] = &["Monday 10:00", "Tuesday 14:00", "Thursday 16:30"];
const STEP_VERBS: &[&str] = &["Research", "Plan", "Prepare", "Carry out", "Review"];
const LEADING_WORDS: &[&str] = &[
    "a", "an", "the", "to", "in", "for", "at", "about", "of", "on", "with", "me", "please",
];

impl Generator {
    pub(crate) fn new(user_text: &str, rest: &str) -> Self {
        let mut subject = rest.trim();
        // Drop leading prepositions and articles: "weather in Paris" is about "Paris".
        loop {
            let word_end = subject.find(char::is_whitespace).unwrap_or(subject.len());
            let word = &subject[..word_end];
            if word_end < subject.len()
                && LEADING_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word))
            {
                subject = subject[word_end..].trim_start();
            } else {
                break;
            }
        }
        let subject = subject.trim_end_matches(['.', '!', '?', ' ']);
        let subject = if subject.is_empty() {
            user_text.trim().trim_end_matches(['.', '!', '?'])
        } else {
            subject
        };
        Generator {
            lower: user_text.to_lowercase(),
            subject: subject.to_owned(),
        }
    }

    /// The arguments object of `schema` (an object schema; anything else gives `{}`).
    pub(crate) fn arguments(&self, tool: &str, schema: &Value) -> Map<String, Value> {
        match self.value(tool, "", schema, 0) {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn value(&self, parent: &str, name: &str, schema: &Value, index: usize) -> Value {
        // A schema's own example is the most believable value there is.
        if let Some(example) = schema
            .get("examples")
            .and_then(Value::as_array)
            .and_then(|examples| examples.first())
        {
            return example.clone();
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            if let Some(first) = values.first() {
                return values
                    .iter()
                    .find(|v| {
                        v.as_str()
                            .is_some_and(|v| contains_word(&self.lower, &v.to_lowercase()))
                    })
                    .unwrap_or(first)
                    .clone();
            }
        }
        let kind = match schema.get("type") {
            Some(Value::String(kind)) => Some(kind.as_str()),
            // `["string", "null"]`: the first non-null type.
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|kind| *kind != "null"),
            // Untyped but with properties: an object.
            None if schema.get("properties").is_some() => Some("object"),
            _ => None,
        };
        match kind {
            Some("number" | "integer") => Value::from(0),
            Some("boolean") => Value::Bool(true),
            Some("null") => Value::Null,
            Some("array") => match schema.get("items") {
                Some(items) if items.is_object() => Value::Array(
                    (0..3)
                        .map(|i| self.value(name, &singular(name), items, i))
                        .collect(),
                ),
                _ => Value::Array(Vec::new()),
            },
            Some("object") => {
                let properties = schema.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let names: Vec<&str> = if required.is_empty() {
                    properties
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default()
                } else {
                    required
                };
                names
                    .into_iter()
                    .map(|property| {
                        let schema = properties
                            .and_then(|p| p.get(property))
                            .unwrap_or(&Value::Null);
                        (
                            property.to_owned(),
                            self.value(name, property, schema, index),
                        )
                    })
                    .collect::<Map<String, Value>>()
                    .into()
            }
            // A string, or an untyped property.
            _ => Value::String(self.string(parent, name, index)),
        }
    }

    fn string(&self, parent: &str, name: &str, index: usize) -> String {
        let name = name.to_ascii_lowercase();
        let parent = parent.to_ascii_lowercase();
        let pick = |list: &[&str]| list[index % list.len()].to_owned();
        let subject = &self.subject;
        if name.contains("background") || name.contains("color") || name.contains("colour") {
            return COLOURS
                .iter()
                .find(|colour| contains_word(&self.lower, colour))
                .map_or_else(|| "lightblue".to_owned(), |c| (*c).to_owned());
        }
        if name.contains("gradient") {
            return "linear-gradient(135deg, #667eea 0%, #764ba2 100%)".to_owned();
        }
        if name.contains("japanese") {
            return pick(HAIKU_JAPANESE);
        }
        if name.contains("english") {
            return pick(HAIKU_ENGLISH);
        }
        if name.contains("image") {
            return "Mount_Fuji_Lake_Reflection_Cherry_Blossoms.jpg".to_owned();
        }
        if name == "icon" {
            return pick(ICONS);
        }
        if name == "amount" || name == "quantity" {
            return pick(AMOUNTS);
        }
        if name == "document" || name == "markdown" {
            return document(subject);
        }
        if parent.contains("ingredient") && name == "name" {
            return pick(INGREDIENTS);
        }
        if parent.contains("instruction") {
            return format!("Step {}: {} {}.", index + 1, STEP_VERBS[index % 5], subject);
        }
        if parent.contains("step") || parent.contains("task") {
            return format!("{} {}", STEP_VERBS[index % STEP_VERBS.len()], subject);
        }
        if name == "title" {
            return capitalised(subject);
        }
        if parent.contains("slot") || name.contains("slot") || name.ends_with("time") {
            return pick(TIME_SLOTS);
        }
        subject.clone()
    }
}

/// A short Markdown document about `subject`, long enough to stream in many fragments.
fn document(subject: &str) -> String {
    let title = capitalised(subject);
    format!(
        "# {title}\n\n{title} is the subject of this document, written by the agui-host offline \
         model.\n\n## Overview\n\nThis section explains what {subject} is and why it \
         matters.\n\n## Details\n\n- What to know first\n- What to do next\n- What to avoid\n\n\
         ## Summary\n\nThat is all about {subject} for now."
    )
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn singular(name: &str) -> String {
    name.strip_suffix('s').unwrap_or(name).to_owned()
}

/// Whether `word` occurs in `text` as a whole word (both already lowercased).
fn contains_word(text: &str, word: &str) -> bool {
    find_word(text, word).is_some()
}

/// The byte offset of the first whole-word occurrence of `word` in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    if word.is_empty() {
        return None;
    }
    let is_word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = text.as_bytes();
    text.match_indices(word).map(|(at, _)| at).find(|&at| {
        let end = at + word.len();
        let before_ok = at
            .checked_sub(1)
            .and_then(|i| bytes.get(i))
            .is_none_or(|&b| !is_word_byte(b));
        let after_ok = bytes.get(end).is_none_or(|&b| !is_word_byte(b));
        before_ok && after_ok
    })
}

/// Other words that name a tool word: a plan is steps.
const SYNONYMS: &[(&str, &[&str])] = &[
    ("steps", &["plan", "step"]),
    ("step", &["plan", "steps"]),
    ("document", &["doc", "essay", "story", "article"]),
    ("haiku", &["poem"]),
];

/// The words that name a tool without its exact name: the words of the name after the first
/// (taken as a verb) when there are several, their singular and plural forms, and synonyms.
fn tool_keywords(name: &str) -> Vec<String> {
    let words: Vec<String> = name
        .split(['_', '-'])
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let nouns = if words.len() > 1 {
        &words[1..]
    } else {
        &words[..]
    };
    let mut keywords = Vec::new();
    for noun in nouns.iter().filter(|w| w.len() >= 3) {
        keywords.push(noun.clone());
        match noun.strip_suffix('s') {
            Some(one) => keywords.push(one.to_owned()),
            None => keywords.push(format!("{noun}s")),
        }
        for (word, synonyms) in SYNONYMS {
            if word == noun {
                keywords.extend(synonyms.iter().map(|s| (*s).to_owned()));
            }
        }
    }
    keywords
}

/// The tool whose keyword (see [`tool_keywords`]) the text mentions first, with the text after
/// that keyword.
fn find_tool_by_keyword<'a, 't>(
    tools: &'a [ToolSpec],
    text: &'t str,
) -> Option<(&'a ToolSpec, &'t str)> {
    // ASCII lowercasing keeps byte offsets, so positions found in `lower` index `text`.
    let lower = text.to_ascii_lowercase();
    let mut best: Option<(usize, usize, &ToolSpec)> = None;
    for tool in tools {
        for keyword in tool_keywords(&tool.name) {
            if let Some(at) = find_word(&lower, &keyword) {
                let end = at + keyword.len();
                let better = match best {
                    None => true,
                    Some((best_at, best_end, _)) => {
                        at < best_at || (at == best_at && end > best_end)
                    }
                };
                if better {
                    best = Some((at, end, tool));
                }
            }
        }
    }
    let (_, end, tool) = best?;
    Some((tool, text.get(end..).unwrap_or_default().trim()))
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
            ..
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
mod tests;
