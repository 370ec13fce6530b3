//! The offline model's script for the demo app's chat variants: a visible reasoning phase when
//! the system prompt asks the model to think step by step (as a reasoning model streams
//! `reasoning_content` before its answer), and a reply about the images the user attached (it
//! cannot see them, and says so with what it does know: their type and size or address).

use super::super::{ChatMessage, LlmEvent, Usage, UserPart};
use super::{word_count, QUOTE_MAX_CHARS};
use crate::text::truncate_chars;

/// The words in a system prompt that make the offline model show its reasoning.
const REASONING_CUE: &str = "think step by step";

/// Whether a system message asks for step-by-step thinking.
pub(super) fn wants_reasoning(messages: &[ChatMessage]) -> bool {
    messages.iter().any(|message| match message {
        ChatMessage::System { content } => content.to_lowercase().contains(REASONING_CUE),
        _ => false,
    })
}

/// Puts word-sized reasoning deltas before `answer` (a complete reply) that say what the answer
/// is about to do, and counts them as reasoning tokens within the output tokens.
pub(super) fn with_reasoning(
    messages: &[ChatMessage],
    user_text: &str,
    answer: Vec<LlmEvent>,
) -> Vec<LlmEvent> {
    let called = answer.iter().find_map(|event| match event {
        LlmEvent::ToolCallDelta {
            name: Some(name), ..
        } => Some(name.clone()),
        _ => None,
    });
    let situation = match messages.last() {
        Some(ChatMessage::Tool { .. }) => "A tool has answered.".to_owned(),
        _ => format!(
            "The user wrote: \"{}\".",
            truncate_chars(user_text.trim(), QUOTE_MAX_CHARS)
        ),
    };
    let plan = match called {
        Some(name) => format!("The {name} tool does what is asked, so I will call it."),
        None => "No tool is needed, so I will answer in text.".to_owned(),
    };
    let reasoning = format!("{situation} {plan}");
    let reasoning_tokens = word_count(&reasoning);

    let mut events: Vec<LlmEvent> = reasoning
        .split_inclusive(char::is_whitespace)
        .map(|word| LlmEvent::ReasoningDelta(word.to_owned()))
        .collect();
    events.extend(answer.into_iter().map(|event| match event {
        LlmEvent::Usage(usage) => LlmEvent::Usage(Usage {
            output_tokens: usage.output_tokens + reasoning_tokens,
            reasoning_tokens: Some(reasoning_tokens),
            ..usage
        }),
        other => other,
    }));
    events
}

/// The images of the last user message, described by what can be known without seeing them:
/// `image/png, 68 bytes` for inline data, the host for a URL. Empty when there are none.
pub(super) fn last_user_images(messages: &[ChatMessage]) -> Vec<String> {
    let Some(content) = messages.iter().rev().find_map(|message| match message {
        ChatMessage::User { content } => Some(content),
        _ => None,
    }) else {
        return Vec::new();
    };
    content
        .iter()
        .filter_map(|part| match part {
            UserPart::ImageUrl { url } => Some(describe_image(url)),
            UserPart::Text(_) => None,
        })
        .collect()
}

fn describe_image(url: &str) -> String {
    if let Some((mime_type, data)) = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        let padding = data.bytes().rev().take(2).filter(|&b| b == b'=').count();
        let bytes = (data.len() / 4 * 3).saturating_sub(padding);
        return format!("{mime_type}, {bytes} bytes");
    }
    let host = url.split_once("://").map_or(url, |(_, rest)| {
        rest.split(['/', '?', '#']).next().unwrap_or(rest)
    });
    format!("from {}", truncate_chars(host, QUOTE_MAX_CHARS))
}

/// The text reply to a message with images attached.
pub(super) fn image_reply(images: &[String], user_text: &str) -> String {
    let count = match images.len() {
        1 => "an image".to_owned(),
        n => format!("{n} images"),
    };
    format!(
        "You attached {count} ({}). The offline model cannot see images, so it cannot describe \
         what they show; configure a vision model (OPENAI_API_KEY and a model such as \
         gpt-4o-mini) and the image content goes to it. You said: \"{}\".",
        images.join("; "),
        truncate_chars(user_text.trim(), QUOTE_MAX_CHARS)
    )
}

#[cfg(test)]
mod tests {
    use super::super::{reply, ChatRequest, FinishReason};
    use super::*;

    fn text_of(events: &[LlmEvent], reasoning: bool) -> String {
        events
            .iter()
            .filter_map(|event| match event {
                LlmEvent::ReasoningDelta(delta) if reasoning => Some(delta.as_str()),
                LlmEvent::TextDelta(delta) if !reasoning => Some(delta.as_str()),
                _ => None,
            })
            .collect()
    }

    fn request(system: &str, user: Vec<UserPart>) -> ChatRequest {
        ChatRequest {
            messages: vec![
                ChatMessage::System {
                    content: system.to_owned(),
                },
                ChatMessage::User { content: user },
            ],
            ..ChatRequest::default()
        }
    }

    #[test]
    fn a_step_by_step_prompt_gets_reasoning_before_the_answer() {
        let events = reply(&request(
            "You are helpful. Think step by step before you answer.",
            vec![UserPart::Text("What is the best car to buy?".into())],
        ));
        let first_text = events
            .iter()
            .position(|e| matches!(e, LlmEvent::TextDelta(_)))
            .unwrap();
        let last_reasoning = events
            .iter()
            .rposition(|e| matches!(e, LlmEvent::ReasoningDelta(_)))
            .unwrap();
        assert!(last_reasoning < first_text, "reasoning comes first");
        assert_eq!(
            text_of(&events, true),
            "The user wrote: \"What is the best car to buy?\". No tool is needed, so I will \
             answer in text."
        );
        let Some(LlmEvent::Usage(usage)) = events.last() else {
            panic!("usage last: {events:?}")
        };
        assert_eq!(usage.reasoning_tokens, Some(20));
        assert_eq!(
            usage.output_tokens,
            20 + word_count(&text_of(&events, false))
        );
        assert!(events.contains(&LlmEvent::Finished {
            reason: FinishReason::Stop
        }));

        let plain = reply(&request(
            "You are helpful.",
            vec![UserPart::Text("What is the best car to buy?".into())],
        ));
        assert!(plain
            .iter()
            .all(|e| !matches!(e, LlmEvent::ReasoningDelta(_))));
    }

    #[test]
    fn attached_images_are_described_by_type_and_size() {
        let events = reply(&request(
            "You are helpful.",
            vec![
                UserPart::Text("What do you see in this image?".into()),
                UserPart::ImageUrl {
                    url: "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=".into(),
                },
                UserPart::ImageUrl {
                    url: "https://images.example.com/cat.jpg?w=200".into(),
                },
            ],
        ));
        let text = text_of(&events, false);
        assert!(
            text.starts_with(
                "You attached 2 images (image/png, 68 bytes; from images.example.com)."
            ),
            "{text}"
        );
        assert!(text.contains("You said: \"What do you see in this image?\""));
    }
}
