//! The request body's messages and tools in async-openai's request types: what the model server
//! is sent, with the concessions older servers need (a lone text part as a plain string, `{}`
//! for empty arguments, an empty object schema for tools without parameters).

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestMessageContentPartImage,
    ChatCompletionRequestMessageContentPartText, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionRequestUserMessageContentPart,
    ChatCompletionTool, ChatCompletionTools, FunctionCall, FunctionObject, ImageUrl,
};

use crate::llm::{ChatMessage, ToolSpec, UserPart};

pub(super) fn wire_message(message: &ChatMessage) -> ChatCompletionRequestMessage {
    match message {
        ChatMessage::System { content } => {
            ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
                content: ChatCompletionRequestSystemMessageContent::Text(content.clone()),
                name: None,
            })
        }
        ChatMessage::User { content } => {
            let content = match content.as_slice() {
                // One text part goes as a plain string: older servers reject content arrays.
                [] => ChatCompletionRequestUserMessageContent::Text(String::new()),
                [UserPart::Text(text)] => {
                    ChatCompletionRequestUserMessageContent::Text(text.clone())
                }
                parts => ChatCompletionRequestUserMessageContent::Array(
                    parts.iter().map(wire_user_part).collect(),
                ),
            };
            ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
                content,
                name: None,
            })
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let text = content.as_deref().filter(|c| !c.is_empty());
            // `content` may be absent only when there are tool calls.
            let content = match (text, tool_calls.is_empty()) {
                (Some(text), _) => Some(text.to_owned()),
                (None, true) => Some(String::new()),
                (None, false) => None,
            };
            let tool_calls: Vec<ChatCompletionMessageToolCalls> = tool_calls
                .iter()
                .map(|call| {
                    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                        id: call.id.clone(),
                        function: FunctionCall {
                            name: call.name.clone(),
                            // Servers that template the history parse the arguments; "" is not
                            // JSON, "{}" is what a call without arguments means.
                            arguments: if call.arguments.trim().is_empty() {
                                "{}".to_owned()
                            } else {
                                call.arguments.clone()
                            },
                        },
                    })
                })
                .collect();
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: content.map(ChatCompletionRequestAssistantMessageContent::Text),
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                ..Default::default()
            })
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
            content: ChatCompletionRequestToolMessageContent::Text(content.clone()),
            tool_call_id: tool_call_id.clone(),
        }),
    }
}

fn wire_user_part(part: &UserPart) -> ChatCompletionRequestUserMessageContentPart {
    match part {
        UserPart::Text(text) => ChatCompletionRequestUserMessageContentPart::Text(
            ChatCompletionRequestMessageContentPartText {
                text: text.clone(),
                prompt_cache_breakpoint: None,
            },
        ),
        UserPart::ImageUrl { url } => ChatCompletionRequestUserMessageContentPart::ImageUrl(
            ChatCompletionRequestMessageContentPartImage {
                image_url: ImageUrl {
                    url: url.clone(),
                    detail: None,
                },
                prompt_cache_breakpoint: None,
            },
        ),
    }
}

pub(super) fn wire_tool(tool: &ToolSpec) -> ChatCompletionTools {
    // Several servers require `parameters`; an empty object schema is what "none" means.
    let parameters = if tool.parameters.is_null() {
        serde_json::json!({ "type": "object", "properties": {} })
    } else {
        serde_json::Value::clone(&tool.parameters)
    };
    ChatCompletionTools::Function(ChatCompletionTool {
        function: FunctionObject {
            name: tool.name.clone(),
            description: (!tool.description.is_empty()).then(|| tool.description.clone()),
            parameters: Some(parameters),
            strict: None,
        },
    })
}
