//! An MCP tool result as the agent's tool output: text content as text, images, audio and
//! resources described (never their bytes: a model's context is no place for base64),
//! `structuredContent` as JSON (so state rules can use it), `isError` as a tool error. The
//! result of a tool with a `ui://` resource is also carried whole in its `mcp-apps` activity
//! ([`app_activity`]), for the app.

use rmcp::model::CallToolResult;
use serde_json::{json, Map, Value};

use super::apps::ACTIVITY_TYPE;
use super::McpServer;
use crate::tools::{ToolActivity, ToolError, ToolOutput};

/// Largest result (as JSON) a call's activity carries: the activity is kept in the run's log
/// and the thread's record. A larger result reaches the model as usual, without the app.
const MAX_ACTIVITY_RESULT_BYTES: usize = 512 * 1024;

/// Most bytes of text taken from one result; the rest is cut with a note.
const MAX_RESULT_TEXT: usize = 1024 * 1024;

/// Maps a `tools/call` result.
///
/// # Errors
/// [`ToolError::Failed`] with the server's text when the result has `isError`.
pub fn result_to_output(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let blocks: Vec<Value> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .collect();
    let text = describe(&blocks);
    if result.is_error == Some(true) {
        let message = if text.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            text
        };
        return Err(ToolError::Failed(message));
    }
    Ok(ToolOutput::from(match result.structured_content {
        Some(structured) => structured,
        None => Value::String(text),
    }))
}

/// The `mcp-apps` activity of a completed call, in the shape CopilotKit's renderer reads
/// (`@copilotkit/mcp-apps-renderer` `MCPAppsActivityContentSchema`), plus `toolCallId`, by
/// which the thread's record keeps it next to its call. `None` for a result too large to
/// carry.
pub(super) fn app_activity(
    server: &McpServer,
    resource_uri: &str,
    tool_call_id: &str,
    tool_input: Map<String, Value>,
    result: &CallToolResult,
) -> Option<Box<ToolActivity>> {
    let result = serde_json::to_value(result).ok()?;
    let size = serde_json::to_vec(&result).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_ACTIVITY_RESULT_BYTES {
        tracing::warn!(
            server = %server.settings.name, size,
            "an MCP App's tool result is too large to carry in its activity; the app is not shown"
        );
        return None;
    }
    let mut content = Map::new();
    content.insert("result".into(), result);
    content.insert("resourceUri".into(), json!(resource_uri));
    content.insert("serverHash".into(), json!(server.server_id));
    content.insert("serverId".into(), json!(server.server_id));
    content.insert("toolInput".into(), Value::Object(tool_input));
    content.insert("toolCallId".into(), json!(tool_call_id));
    Some(Box::new(ToolActivity {
        activity_type: ACTIVITY_TYPE.to_owned(),
        content,
    }))
}

/// The content blocks as one text, one block per line.
fn describe(blocks: &[Value]) -> String {
    let mut text = String::new();
    for block in blocks {
        let part = describe_block(block);
        if part.is_empty() {
            continue;
        }
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&part);
        if text.len() > MAX_RESULT_TEXT {
            let mut end = MAX_RESULT_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("\n[result truncated]");
            break;
        }
    }
    text
}

fn describe_block(block: &Value) -> String {
    let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => field("text").to_owned(),
        kind @ ("image" | "audio") => format!(
            "[{kind}: {}, {} bytes]",
            or_unknown(field("mimeType")),
            base64_len(field("data"))
        ),
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            let of = |name: &str| {
                resource
                    .get(name)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {}]\n{text}", of("uri")),
                None => format!(
                    "[resource {}: {}, {} bytes]",
                    of("uri"),
                    or_unknown(&of("mimeType")),
                    base64_len(&of("blob"))
                ),
            }
        }
        "resource_link" => {
            let name = field("name");
            let description = field("description");
            let mut link = format!("[resource link: {}", field("uri"));
            if !name.is_empty() {
                link.push_str(&format!(" ({name})"));
            }
            if !description.is_empty() {
                link.push_str(&format!(": {description}"));
            }
            link.push(']');
            link
        }
        other => format!("[{} content]", or_unknown(other)),
    }
}

fn or_unknown(text: &str) -> &str {
    if text.is_empty() {
        "unknown type"
    } else {
        text
    }
}

/// The decoded size of base64 data.
fn base64_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn text_images_and_resources_become_one_text() {
        let output = result_to_output(result(json!({"content": [
            {"type": "text", "text": "Here it is"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAA=", "mimeType": "application/gzip"}},
            {"type": "resource_link", "uri": "test://1", "name": "one"}
        ]})))
        .unwrap();
        assert_eq!(
            output.content,
            json!("Here it is\n[image: image/png, 3 bytes]\n[resource file:///a.txt]\nhello\n[resource file:///b.bin: application/gzip, 2 bytes]\n[resource link: test://1 (one)]")
        );
    }

    #[test]
    fn structured_content_is_the_json_result() {
        let output = result_to_output(result(json!({
            "content": [{"type": "text", "text": "{\"t\": 1}"}],
            "structuredContent": {"t": 1}
        })))
        .unwrap();
        assert_eq!(output.content, json!({"t": 1}));
    }

    #[test]
    fn is_error_is_a_tool_error_with_the_servers_text() {
        let error = result_to_output(result(json!({
            "content": [{"type": "text", "text": "no such file"}], "isError": true
        })))
        .unwrap_err();
        assert_eq!(error, ToolError::Failed("no such file".into()));
        let error = result_to_output(result(json!({"content": [], "isError": true}))).unwrap_err();
        assert_eq!(
            error,
            ToolError::Failed("the tool reported an error".into())
        );
    }
}
