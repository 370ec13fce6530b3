//! MCP Apps (the MCP UI extension, SEP-1865), the client's side: the extension agui-host
//! declares when it connects, what a tool's `_meta.ui` says (its `ui://` resource and who may
//! call it), the opaque id a server's apps name it by, the `mcp-apps` activity a call of an
//! app's tool comes with (built in `content.rs`), and the three things an app may ask of its server through the host
//! ([`AppServer`]): read a `ui://` resource, call a tool the app may call, and ping.
//!
//! Visibility (`_meta.ui.visibility`): `["model", "app"]` when absent. A tool the model may see
//! joins the agent's tools; one only an app may call is kept aside for the apps; a value this
//! client does not know fails closed: the tool is neither offered nor callable, with a warning,
//! since a newer spec value could mean "nobody but X", which agui-host cannot honour.
//!
//! The server id stands for a server in the activity (`serverHash`, `serverId`) and in the
//! app's requests. It is a digest of the agent's and the server's configured names: stable
//! across runs, restarts and replicas that share the configuration, and free of the server's
//! URL, command, headers or any secret (the TS middleware hashes the URL and headers instead).

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{ExtensionCapabilities, ReadResourceRequestParams};
use serde_json::{json, Map, Value};

use super::call::McpTool;
use super::McpServer;
use crate::tools::{RegisteredTool, ToolContext};

/// The extension's id in `capabilities.extensions`.
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The one kind of UI resource agui-host's clients render.
pub const APP_MIME_TYPE: &str = "text/html;profile=mcp-app";

/// The activity type CopilotKit's renderer (and the TS middleware) use.
pub const ACTIVITY_TYPE: &str = "mcp-apps";

/// The scheme of the resources an app may read.
pub(super) const UI_SCHEME: &str = "ui://";

/// Longest resource URI taken from a tool's metadata or an app's request.
pub(super) const MAX_URI_BYTES: usize = 2048;

/// The extension as the client declares it.
pub(super) fn extensions() -> ExtensionCapabilities {
    let mut settings = Map::new();
    settings.insert("mimeTypes".into(), json!([APP_MIME_TYPE]));
    BTreeMap::from([(UI_EXTENSION.to_owned(), settings)])
}

/// What a tool's `_meta.ui` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ToolUi {
    /// The tool's `ui://` resource, when it has one.
    pub resource_uri: Option<String>,
    /// The model may be offered the tool.
    pub model: bool,
    /// An app may call the tool.
    pub app: bool,
}

/// Reads a tool's `_meta`: `ui.resourceUri` (then the legacy `ui/resourceUri`) and
/// `ui.visibility`.
///
/// # Errors
/// A visibility that is not a list of `model` and `app`: the tool must fail closed.
pub(super) fn tool_ui(meta: Option<&Map<String, Value>>) -> Result<ToolUi, String> {
    let ui = meta
        .and_then(|meta| meta.get("ui"))
        .and_then(Value::as_object);
    let uri = ui
        .and_then(|ui| ui.get("resourceUri"))
        .and_then(Value::as_str)
        .or_else(|| meta?.get("ui/resourceUri")?.as_str());
    let resource_uri = match uri {
        Some(uri) if is_ui_uri(uri) => Some(uri.to_owned()),
        Some(uri) => {
            return Err(format!(
                "its UI resource `{}` is not a ui:// URI",
                crate::text::truncate_chars(uri, 80)
            ))
        }
        None => None,
    };
    let (mut model, mut app) = (true, true);
    if let Some(visibility) = ui.and_then(|ui| ui.get("visibility")) {
        let Some(values) = visibility.as_array() else {
            return Err("its _meta.ui.visibility is not a list".into());
        };
        (model, app) = (false, false);
        for value in values {
            match value.as_str() {
                Some("model") => model = true,
                Some("app") => app = true,
                _ => {
                    return Err(format!(
                        "its _meta.ui.visibility holds {}, which agui-host does not know",
                        crate::text::truncate_chars(&value.to_string(), 40)
                    ))
                }
            }
        }
    }
    Ok(ToolUi {
        resource_uri,
        model,
        app,
    })
}

/// A `ui://` URI of reasonable length.
pub fn is_ui_uri(uri: &str) -> bool {
    uri.len() <= MAX_URI_BYTES && uri.starts_with(UI_SCHEME) && uri.len() > UI_SCHEME.len()
}

/// The opaque id a server's apps name it by (see the module docs).
pub(super) fn server_id(agent: &str, server: &str) -> String {
    let digest = crate::text::key_digest(&["agui-host/mcp-apps/1", agent, server]);
    format!("mcp_{}", &digest[..32])
}

/// A tool of a server as its apps see it: by its name on the server.
#[derive(Clone)]
pub(super) struct AppTool {
    /// The name the model and the approval policies know it by (`<server>__<tool>`).
    pub name: String,
    pub tool: Arc<McpTool>,
    /// For the arguments' schema.
    pub registered: RegisteredTool,
    pub ui: ToolUi,
}

/// Who may call a tool an app asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppToolAccess {
    /// An app may call it; `name` is what the approval policies know it by.
    Callable { name: String },
    /// Only the model may call it.
    ModelOnly,
    /// The server has no such tool (or it is excluded, or failed closed).
    Unknown,
}

/// One MCP server as its apps reach it through the host. Cheap to clone.
#[derive(Clone)]
pub struct AppServer(pub(super) Arc<McpServer>);

impl std::fmt::Debug for AppServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AppServer")
            .field(&self.0.settings.name)
            .finish()
    }
}

impl AppServer {
    /// The opaque id the server's apps name it by.
    pub fn id(&self) -> &str {
        &self.0.server_id
    }

    /// The server's configured name (for logs).
    pub fn name(&self) -> &str {
        &self.0.settings.name
    }

    /// Whether an app may call the server's tool `remote_name`, as last listed.
    pub fn tool_access(&self, remote_name: &str) -> AppToolAccess {
        match self.app_tool(remote_name) {
            Some(tool) if tool.ui.app => AppToolAccess::Callable { name: tool.name },
            Some(_) => AppToolAccess::ModelOnly,
            None => AppToolAccess::Unknown,
        }
    }

    fn app_tool(&self, remote_name: &str) -> Option<AppTool> {
        let tools = self.0.app_tools.read().unwrap_or_else(|e| e.into_inner());
        tools.get(remote_name).cloned()
    }

    /// `resources/read` of a `ui://` resource: the server's `ReadResourceResult` as JSON.
    ///
    /// # Errors
    /// Not a `ui://` URI, the server is not connected, or it refused.
    pub async fn read_ui_resource(&self, uri: &str) -> Result<Value, String> {
        if !is_ui_uri(uri) {
            return Err("only ui:// resources may be read by an app".into());
        }
        let peer = self.0.current_peer().ok_or_else(|| self.not_connected())?;
        let result = peer
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .map_err(|error| {
                tracing::warn!(server = %self.0.settings.name, %error, "an app's resources/read failed");
                format!("the MCP server could not read {uri}")
            })?;
        serde_json::to_value(result).map_err(|e| e.to_string())
    }

    /// `tools/call` of a tool an app may call, with arguments checked against its schema: the
    /// server's `CallToolResult` as JSON (an `isError` result included, for the app to show).
    ///
    /// # Errors
    /// The tool is not one an app may call, invalid arguments, or the call failed.
    pub async fn call_tool(
        &self,
        remote_name: &str,
        arguments: Value,
        context: ToolContext,
    ) -> Result<Value, String> {
        let tool = self
            .app_tool(remote_name)
            .filter(|tool| tool.ui.app)
            .ok_or_else(|| format!("the tool `{remote_name}` may not be called by an app"))?;
        tool.registered
            .validate(&arguments)
            .map_err(|e| e.to_string())?;
        let Value::Object(arguments) = arguments else {
            return Err("the arguments must be a JSON object".into());
        };
        tool.tool.call_for_app(arguments, context).await
    }

    /// Whether the server's connection is up (the answer to an app's `ping`).
    pub fn is_up(&self) -> bool {
        self.0.is_up()
    }

    fn not_connected(&self) -> String {
        format!(
            "the MCP server `{}` is not connected; try again shortly",
            self.0.settings.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ui(meta: &Value) -> Result<ToolUi, String> {
        tool_ui(meta.as_object())
    }

    #[test]
    fn the_stable_key_wins_over_the_legacy_one_and_visibility_defaults_to_both() {
        let both =
            ui(&json!({"ui": {"resourceUri": "ui://a/app.html"}, "ui/resourceUri": "ui://b"}));
        assert_eq!(
            both.unwrap(),
            ToolUi {
                resource_uri: Some("ui://a/app.html".into()),
                model: true,
                app: true
            }
        );
        let legacy = ui(&json!({"ui/resourceUri": "ui://b/x"})).unwrap();
        assert_eq!(legacy.resource_uri.as_deref(), Some("ui://b/x"));
        assert_eq!(tool_ui(None).unwrap().resource_uri, None);
    }

    #[test]
    fn visibility_is_honoured_and_an_unknown_value_fails_closed() {
        let app_only =
            ui(&json!({"ui": {"resourceUri": "ui://a", "visibility": ["app"]}})).unwrap();
        assert!(app_only.app && !app_only.model);
        let model_only = ui(&json!({"ui": {"visibility": ["model"]}})).unwrap();
        assert!(model_only.model && !model_only.app);
        assert!(ui(&json!({"ui": {"visibility": ["model", "robot"]}})).is_err());
        assert!(ui(&json!({"ui": {"visibility": "app"}})).is_err());
        assert!(ui(&json!({"ui": {"resourceUri": "https://example.test/app"}})).is_err());
    }

    #[test]
    fn the_server_id_is_stable_opaque_and_differs_per_server() {
        let id = server_id("assistant", "weather");
        assert_eq!(id, server_id("assistant", "weather"));
        assert_ne!(id, server_id("assistant", "other"));
        assert_ne!(id, server_id("other", "weather"));
        assert!(id.starts_with("mcp_") && id.len() == 36);
        assert!(!id.contains("weather"));
    }
}
