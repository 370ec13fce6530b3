//! [`McpTool`]: one tool of an MCP server as a server tool of the agent. A call sends
//! `tools/call`; a call dropped before its answer (the agent's tool timeout, or the run's
//! client went away) sends `notifications/cancelled`, so the server can stop the work rather
//! than finish it for nobody. Progress notifications of the call go to the run. A tool with a
//! `ui://` resource answers with the `mcp-apps` activity beside its output (`apps.rs`); an app
//! calls it through [`McpTool::call_for_app`], which answers the server's result as it is. A
//! server that makes a task of the call is followed until the task ends (`task.rs`).

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, ProgressToken, RequestId, RequestMetaObject, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::RoleClient;
use serde_json::Value;
use tracing::Instrument;

use super::{content, elicit, identity, task, trace, McpServer, ProgressRoute};
use crate::tools::{Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

pub(super) struct McpTool {
    definition: ToolDefinition,
    /// The tool's name on the server.
    remote_name: String,
    /// The tool's `ui://` resource: its calls come with an `mcp-apps` activity.
    resource_uri: Option<String>,
    server: Weak<McpServer>,
}

impl McpTool {
    pub(super) fn new(
        server: Weak<McpServer>,
        name: &str,
        remote: &rmcp::model::Tool,
        resource_uri: Option<String>,
    ) -> Self {
        let description = remote
            .description
            .as_deref()
            .or(remote.title.as_deref())
            .unwrap_or_default();
        McpTool {
            definition: ToolDefinition::new(
                name,
                description,
                Value::Object(remote.input_schema.as_ref().clone()),
            ),
            remote_name: remote.name.to_string(),
            resource_uri,
            server,
        }
    }

    /// A call an MCP App made through the host: the server's `CallToolResult` as JSON, as
    /// the app expects it (an `isError` result too), with no activity and no progress.
    ///
    /// # Errors
    /// The server is not connected, refused or failed the call, or asked for input (an app's
    /// call has no person to ask: the chat is where questions go).
    pub(super) async fn call_for_app(
        &self,
        arguments: serde_json::Map<String, Value>,
        context: ToolContext,
    ) -> Result<Value, String> {
        let server = self
            .server
            .upgrade()
            .ok_or_else(|| "the MCP server is shut down".to_owned())?;
        let peer = server.current_peer().ok_or_else(|| {
            format!(
                "the MCP server `{}` is not connected; try again shortly",
                server.settings.name
            )
        })?;
        let span = trace::call_span(&server, &self.remote_name);
        let answer = self
            .request(&server, &peer, arguments, context, &span)
            .instrument(span.clone())
            .await;
        match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                serde_json::to_value(result).map_err(|e| e.to_string())
            }
            Ok(ServerResult::InputRequiredResult(_)) => Err(
                "the tool asks the user for input, which a call from an app cannot do; ask in the chat"
                    .into(),
            ),
            Ok(_) => Err("the MCP server answered tools/call with something else than a tool result".into()),
            Err(failure) => {
                trace::record_failure(&span, failure.error.kind(), failure.json_rpc_code);
                Err(failure.error.to_string())
            }
        }
    }

    async fn invoke(
        &self,
        arguments: Value,
        context: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let server = self
            .server
            .upgrade()
            .ok_or_else(|| ToolError::Failed("the MCP server is shut down".into()))?;
        let peer = server.current_peer().ok_or_else(|| {
            ToolError::Failed(format!(
                "the MCP server `{}` is not connected; try again shortly",
                server.settings.name
            ))
        })?;
        let Value::Object(arguments) = arguments else {
            return Err(ToolError::InvalidArguments(
                "the arguments must be a JSON object".into(),
            ));
        };
        let span = trace::call_span(&server, &self.remote_name);
        let answer = self
            .send(&server, &peer, arguments, context, &span)
            .instrument(span.clone())
            .await;
        match &answer {
            // Asking the user is how the call goes on, not a failure.
            Err(CallFailure {
                error: ToolError::NeedsInput(_),
                ..
            })
            | Ok(_) => {}
            Err(failure) => {
                trace::record_failure(&span, failure.error.kind(), failure.json_rpc_code)
            }
        }
        answer.map_err(|failure| failure.error)
    }

    /// Sends `tools/call` and maps its answer to the tool's output (with the `mcp-apps`
    /// activity for a tool with a UI resource).
    async fn send(
        &self,
        server: &Arc<McpServer>,
        peer: &rmcp::Peer<RoleClient>,
        arguments: serde_json::Map<String, Value>,
        context: ToolContext,
        span: &tracing::Span,
    ) -> Result<ToolOutput, CallFailure> {
        // The arguments go to the app as its `toolInput`.
        let app = self
            .resource_uri
            .as_deref()
            .map(|uri| (uri, arguments.clone(), context.tool_call_id.clone()));
        let progress = context.progress.clone().map(|sender| task::ProgressTarget {
            sender,
            tool_call_id: context.tool_call_id.clone(),
            tool_name: self.definition.name.clone(),
        });
        let answer = match self.request(server, peer, arguments, context, span).await? {
            // The server made a task of the call: its result comes when the task ends.
            ServerResult::CreateTaskResult(created) => {
                ServerResult::CallToolResult(task::follow(server, peer, created, progress).await?)
            }
            other => other,
        };
        match answer {
            ServerResult::CallToolResult(result) => {
                let activity = app.and_then(|(uri, input, call_id)| {
                    content::app_activity(server, uri, &call_id, input, &result)
                });
                let mut output = content::result_to_output(result)?;
                output.activity = activity;
                Ok(output)
            }
            ServerResult::InputRequiredResult(result) => {
                let asked = elicit::questions(&server.settings.name, result)?;
                Err(ToolError::NeedsInput(Box::new(asked)).into())
            }
            _ => Err(ToolError::Failed(
                "the MCP server answered tools/call with something else than a tool result".into(),
            )
            .into()),
        }
    }

    /// Sends `tools/call` and waits for the server's answer.
    async fn request(
        &self,
        server: &Arc<McpServer>,
        peer: &rmcp::Peer<RoleClient>,
        arguments: serde_json::Map<String, Value>,
        context: ToolContext,
        span: &tracing::Span,
    ) -> Result<ServerResult, CallFailure> {
        let mut params = CallToolRequestParams::new(self.remote_name.clone());
        params.arguments = Some(arguments);
        if let Some(answers) = context.input.as_deref() {
            // The retry of a call that asked: the answers, and the state exactly as it came.
            params.input_responses = Some(answers.responses.clone().into_iter().collect());
            params.request_state = answers.state.clone();
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut meta = if server.sends_identity() {
            identity::meta(&context.thread_id, &context.run_id, &server.agent)
        } else {
            RequestMetaObject::default()
        };
        // `traceparent` (and `tracestate`) of this request's span, where the MCP servers that
        // trace look for them, so their spans join the run's trace.
        for (key, value) in crate::telemetry::trace_context() {
            meta.0.insert(key, Value::String(value));
        }
        let mut options = PeerRequestOptions::no_options();
        if !meta.0.is_empty() {
            options = options.with_meta(meta);
        }
        let handle = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| protocol_failure(server, &e))?;
        trace::record_request(span, peer, &handle.id);
        let mut guard = InFlight {
            server: Arc::clone(server),
            peer: peer.clone(),
            request: Some(handle.id.clone()),
            progress_token: handle.progress_token.clone(),
        };
        if let Some(sender) = context.progress {
            server
                .progress
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    handle.progress_token.clone(),
                    ProgressRoute {
                        sender,
                        tool_call_id: context.tool_call_id,
                        tool_name: self.definition.name.clone(),
                    },
                );
        }
        let answer = handle.await_response().await;
        guard.request = None; // answered: nothing to cancel
        answer.map_err(|error| protocol_failure(server, &error))
    }
}

/// Why a call failed: the tool error the model reads, and the JSON-RPC error code of a server
/// that refused it (for the trace).
pub(super) struct CallFailure {
    pub(super) error: ToolError,
    pub(super) json_rpc_code: Option<i32>,
}

impl From<ToolError> for CallFailure {
    fn from(error: ToolError) -> Self {
        CallFailure {
            error,
            json_rpc_code: None,
        }
    }
}

/// A failure of the connection or the protocol, as a tool error the model can read (details
/// in the log).
fn protocol_failure(server: &McpServer, error: &rmcp::ServiceError) -> CallFailure {
    let json_rpc_code = match error {
        rmcp::ServiceError::McpError(error) => Some(error.code.0),
        _ => None,
    };
    CallFailure {
        error: protocol_error(server, error),
        json_rpc_code,
    }
}

fn protocol_error(server: &McpServer, error: &rmcp::ServiceError) -> ToolError {
    tracing::warn!(server = %server.settings.name, %error, "MCP call failed");
    match error {
        rmcp::ServiceError::McpError(error) => ToolError::Failed(format!(
            "the MCP server refused the call: {}",
            error.message
        )),
        rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
            ToolError::Failed(format!(
                "the MCP server `{}` went away during the call",
                server.settings.name
            ))
        }
        _ => ToolError::Failed(format!(
            "the MCP server `{}` failed to answer the call",
            server.settings.name
        )),
    }
}

/// A call in flight: when dropped before its answer it tells the server to stop; either way
/// it stops routing the call's progress.
struct InFlight {
    server: Arc<McpServer>,
    peer: rmcp::Peer<RoleClient>,
    request: Option<RequestId>,
    progress_token: ProgressToken,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.server
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.progress_token);
        let Some(request_id) = self.request.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let name = self.server.settings.name.clone();
        runtime.spawn(async move {
            let notification = CancelledNotification::new(CancelledNotificationParam::new(
                Some(request_id),
                Some("the call was abandoned (timed out or the run was cancelled)".into()),
            ));
            if let Err(error) = peer.send_notification(notification.into()).await {
                tracing::debug!(server = %name, %error, "could not send MCP cancellation");
            }
        });
    }
}

impl Tool for McpTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.invoke(arguments, context).boxed()
    }
}
