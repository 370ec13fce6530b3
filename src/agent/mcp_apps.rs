//! The requests of MCP Apps, answered by the host: an app (an MCP tool's `ui://` resource,
//! rendered by the client from the `mcp-apps` activity) reaches its MCP server through the
//! agent, as a run whose `forwardedProps.__proxiedMCPRequest` is
//! `{serverHash, serverId?, method, params}`. [`McpApps::answer`] gives the run's result: the
//! MCP result, or `{error}` (the TS middleware's shape for a refusal), never a model call.
//!
//! The allow-list:
//! - `resources/read` of a `ui://` resource of the server the request names;
//! - `tools/call` of a tool that server lists as visible to apps, with arguments checked
//!   against its schema, through the agent's approval policies: a call that needs a person's
//!   approval is refused (an app's request is no chat turn, so no approval card can be shown
//!   for it), with a tool error telling the app to ask in the chat, where the model's call of
//!   the same tool waits for approval as any other;
//! - `ping`: `{}` while the server is connected.
//!
//! Anything else (another method, a resource that is not `ui://`, a tool only the model may
//! call or one the server does not list, a server of another agent or none) is refused. A
//! refused `tools/call` answers `{error, content: [text], isError: true}`, which is both the
//! middleware's `{error}` and a `CallToolResult` the app can show; every other refusal is
//! `{error}`. Servers are named by their opaque id (`tools::mcp` `apps`), never by a URL.
//!
//! Every answer is bounded by the agent's `tool_timeout_secs`; a request is bounded in size.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::approval::ApprovalPolicies;
use crate::tools::mcp::{is_ui_uri, AppServer, AppToolAccess};
use crate::tools::ToolContext;

/// The key of `forwardedProps` that makes a run an app's request.
pub const PROXIED_REQUEST_KEY: &str = "__proxiedMCPRequest";

/// Largest `params` (as JSON) an app's request may carry.
pub const MAX_PARAMS_BYTES: usize = 256 * 1024;

/// Longest server id, method or tool name taken from a request.
const MAX_NAME_BYTES: usize = 256;

/// An app's request, as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxiedRequest {
    pub server_hash: String,
    pub server_id: Option<String>,
    pub method: String,
    pub params: Map<String, Value>,
}

impl ProxiedRequest {
    /// The request a run's `forwardedProps` carry, if any: `Some(Err)` for one that is
    /// malformed, which is refused as a request (not run as a conversation turn).
    pub fn from_forwarded_props(props: Option<&Value>) -> Option<Result<Self, String>> {
        let request = props?.get(PROXIED_REQUEST_KEY)?;
        Some(Self::parse(request))
    }

    fn parse(request: &Value) -> Result<Self, String> {
        let Some(request) = request.as_object() else {
            return Err(format!("{PROXIED_REQUEST_KEY} must be an object"));
        };
        let text = |key: &str| -> Result<Option<String>, String> {
            match request.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.len() <= MAX_NAME_BYTES => Ok(Some(s.clone())),
                Some(_) => Err(format!(
                    "{PROXIED_REQUEST_KEY}.{key} must be a string of at most {MAX_NAME_BYTES} bytes"
                )),
            }
        };
        let server_hash = text("serverHash")?.unwrap_or_default();
        let server_id = text("serverId")?.filter(|id| !id.is_empty());
        let method =
            text("method")?.ok_or_else(|| format!("{PROXIED_REQUEST_KEY}.method is missing"))?;
        let params = match request.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params.clone(),
            Some(_) => return Err(format!("{PROXIED_REQUEST_KEY}.params must be an object")),
        };
        let size = serde_json::to_vec(&params).map_or(usize::MAX, |bytes| bytes.len());
        if size > MAX_PARAMS_BYTES {
            return Err(format!(
                "{PROXIED_REQUEST_KEY}.params is larger than {MAX_PARAMS_BYTES} bytes"
            ));
        }
        Ok(ProxiedRequest {
            server_hash,
            server_id,
            method,
            params,
        })
    }
}

/// Who sent an app's request: what a tool call it makes is attributed to.
#[derive(Debug, Clone)]
pub struct ProxyCaller {
    /// The request's scope, as for a run (identity, idempotency keys).
    pub scope: String,
    pub thread_id: String,
    pub run_id: String,
}

/// What the apps of one agent may reach.
struct AgentApps {
    servers: Vec<AppServer>,
    approvals: ApprovalPolicies,
    timeout: Duration,
}

/// The apps' side door of every agent with MCP servers.
#[derive(Default)]
pub struct McpApps {
    agents: BTreeMap<String, AgentApps>,
}

impl std::fmt::Debug for McpApps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpApps")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl McpApps {
    /// Adds `agent`'s servers, with its approval policies and tool timeout.
    pub fn add_agent(
        &mut self,
        agent: &str,
        servers: Vec<AppServer>,
        approvals: ApprovalPolicies,
        timeout: Duration,
    ) {
        if servers.is_empty() {
            return;
        }
        let apps = AgentApps {
            servers,
            approvals,
            timeout,
        };
        self.agents.insert(agent.to_owned(), apps);
    }

    /// The result of an app's request to `agent` (see the module docs): the MCP result, or a
    /// refusal. Never fails otherwise; bounded by the agent's tool timeout.
    pub async fn answer(
        &self,
        agent: &str,
        request: Result<ProxiedRequest, String>,
        caller: ProxyCaller,
    ) -> Value {
        let request = match request {
            Ok(request) => request,
            Err(problem) => return refusal(&problem),
        };
        let apps = self.agents.get(agent);
        let server = apps.and_then(|apps| {
            let wanted = request.server_id.as_deref();
            let by_id = wanted.and_then(|id| apps.servers.iter().find(|s| s.id() == id));
            by_id.or_else(|| apps.servers.iter().find(|s| s.id() == request.server_hash))
        });
        let (Some(apps), Some(server)) = (apps, server) else {
            let named = request.server_id.as_deref().unwrap_or(&request.server_hash);
            return refusal(&format!(
                "Unknown server: {}",
                crate::text::truncate_chars(named, 80)
            ));
        };
        let answered = tokio::time::timeout(
            apps.timeout,
            answer_on((agent, apps), server, &request, caller),
        )
        .await;
        let answer = answered.unwrap_or_else(|_| {
            Err(Refusal::Request(format!(
                "the MCP server `{}` did not answer within {} s",
                server.name(),
                apps.timeout.as_secs()
            )))
        });
        tracing::info!(
            agent, server = %server.name(), method = %crate::text::truncate_chars(&request.method, 40),
            refused = answer.is_err(), "an MCP App's request was answered"
        );
        match answer {
            Ok(result) => result,
            Err(Refusal::Request(message)) => refusal(&message),
            Err(Refusal::ToolCall(message)) => tool_refusal(&message),
        }
    }
}

/// Why a request was not carried out, by the shape its answer takes.
enum Refusal {
    Request(String),
    ToolCall(String),
}

async fn answer_on(
    (agent, apps): (&str, &AgentApps),
    server: &AppServer,
    request: &ProxiedRequest,
    caller: ProxyCaller,
) -> Result<Value, Refusal> {
    match request.method.as_str() {
        "ping" if server.is_up() => Ok(json!({})),
        "ping" => Err(Refusal::Request(format!(
            "the MCP server `{}` is not connected",
            server.name()
        ))),
        "resources/read" => {
            let uri = request.params.get("uri").and_then(Value::as_str);
            let uri = uri.ok_or_else(|| Refusal::Request("resources/read needs a uri".into()))?;
            if !is_ui_uri(uri) {
                return Err(Refusal::Request(
                    "an app may read only ui:// resources of its own server".into(),
                ));
            }
            server.read_ui_resource(uri).await.map_err(Refusal::Request)
        }
        "tools/call" => call_tool((agent, apps), server, request, caller).await,
        other => Err(Refusal::Request(format!(
            "MCP method not allowed for an app: {}",
            crate::text::truncate_chars(other, 40)
        ))),
    }
}

async fn call_tool(
    (agent, apps): (&str, &AgentApps),
    server: &AppServer,
    request: &ProxiedRequest,
    caller: ProxyCaller,
) -> Result<Value, Refusal> {
    let remote_name = request.params.get("name").and_then(Value::as_str);
    let remote_name = remote_name
        .filter(|name| name.len() <= MAX_NAME_BYTES)
        .ok_or_else(|| Refusal::ToolCall("tools/call needs a tool name".into()))?;
    let arguments = match request.params.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        Some(_) => {
            return Err(Refusal::ToolCall(
                "the arguments must be a JSON object".into(),
            ))
        }
    };
    let name = match server.tool_access(remote_name) {
        AppToolAccess::Callable { name } => name,
        AppToolAccess::ModelOnly => {
            return Err(Refusal::ToolCall(format!(
                "the tool `{remote_name}` may be called by the model only, not by an app"
            )))
        }
        AppToolAccess::Unknown => {
            return Err(Refusal::ToolCall(format!(
                "the server has no tool `{remote_name}` an app may call"
            )))
        }
    };
    if apps.approvals.requires_approval(&name, &arguments) {
        return Err(Refusal::ToolCall(format!(
            "the tool `{remote_name}` needs a person's approval, which an app's call cannot \
             ask for: ask for it in the chat instead"
        )));
    }
    let context = ToolContext {
        scope: caller.scope,
        agent: agent.to_owned(),
        thread_id: caller.thread_id,
        tool_call_id: format!("app_{}", caller.run_id),
        message_id: None,
        run_id: caller.run_id,
        state: None,
        progress: None,
        events: None,
        input: None,
    };
    server
        .call_tool(remote_name, arguments, context)
        .await
        .map_err(Refusal::ToolCall)
}

/// A refused request, in the TS middleware's shape.
fn refusal(message: &str) -> Value {
    json!({"error": message})
}

/// A refused `tools/call`: the middleware's `{error}`, and a `CallToolResult` with `isError`
/// the app can show as it shows any tool error.
fn tool_refusal(message: &str) -> Value {
    json!({
        "error": message,
        "content": [{"type": "text", "text": message}],
        "isError": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read_from_forwarded_props_and_bounded() {
        assert!(ProxiedRequest::from_forwarded_props(None).is_none());
        assert!(ProxiedRequest::from_forwarded_props(Some(&json!({"other": 1}))).is_none());
        let request = ProxiedRequest::from_forwarded_props(Some(&json!({PROXIED_REQUEST_KEY: {
            "serverHash": "mcp_1", "serverId": "mcp_1", "method": "resources/read",
            "params": {"uri": "ui://a"}
        }})))
        .unwrap()
        .unwrap();
        assert_eq!(request.method, "resources/read");
        assert_eq!(request.params["uri"], "ui://a");
        let malformed = |value: Value| {
            ProxiedRequest::from_forwarded_props(Some(&json!({PROXIED_REQUEST_KEY: value})))
                .unwrap()
                .unwrap_err()
        };
        malformed(json!("tools/call"));
        malformed(json!({"serverHash": "x"}));
        malformed(json!({"serverHash": "x", "method": 3}));
        malformed(json!({"serverHash": "x", "method": "ping", "params": []}));
        malformed(json!({"serverHash": "x".repeat(300), "method": "ping"}));
        let big = "a".repeat(MAX_PARAMS_BYTES);
        malformed(json!({"serverHash": "x", "method": "ping", "params": {"a": big}}));
    }

    #[tokio::test]
    async fn an_unknown_agent_or_server_and_a_malformed_request_are_refused() {
        let apps = McpApps::default();
        let caller = ProxyCaller {
            scope: "s".into(),
            thread_id: "t".into(),
            run_id: "r".into(),
        };
        let request = ProxiedRequest {
            server_hash: "mcp_nope".into(),
            server_id: None,
            method: "ping".into(),
            params: Map::new(),
        };
        let answer = apps.answer("a", Ok(request), caller.clone()).await;
        assert_eq!(answer, json!({"error": "Unknown server: mcp_nope"}));
        let answer = apps.answer("a", Err("bad".into()), caller).await;
        assert_eq!(answer, json!({"error": "bad"}));
    }
}
