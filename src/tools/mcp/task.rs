//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663), client side. The client
//! declares the extension; a server may then answer a `tools/call` with a task instead of a
//! result. The call follows the task: it polls `tasks/get` at the server's suggested interval
//! (kept between [`MIN_POLL`] and [`MAX_POLL`]) until the task ends, passes each new status
//! message on as progress, and takes the task's result as the call's. A call dropped before the
//! task ended (the tool's timeout, a cancelled run, a cancelled background task) sends
//! `tasks/cancel`, so the server can stop the work.
//!
//! A task that asks the user for input (`input_required`) is cancelled and fails the call:
//! questions inside a task are not carried to the user (a tool's questions outside a task are,
//! `elicit.rs`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CancelTaskParams, CreateTaskResult, GetTaskParams, Task, TaskPayload,
};
use rmcp::RoleClient;
use serde_json::Value;

use super::McpServer;
use crate::text::truncate_chars;
use crate::tools::{ToolError, ToolProgress};

/// The extension's id in `capabilities.extensions`.
pub(super) use rmcp::model::TASKS_EXTENSION_ID;

/// Bounds on the interval between two `tasks/get`: a server's suggestion is untrusted.
const MIN_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_secs(5);
/// When the server suggests none.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Longest status message or error passed on.
const MAX_MESSAGE_CHARS: usize = 500;

/// Where a task's status messages go: the run's progress channel, for one call.
pub(super) struct ProgressTarget {
    pub(super) sender: tokio::sync::mpsc::Sender<ToolProgress>,
    pub(super) tool_call_id: String,
    pub(super) tool_name: String,
}

/// Follows the task a server made of a call until it ends: its result, or why it has none.
pub(super) async fn follow(
    server: &Arc<McpServer>,
    peer: &rmcp::Peer<RoleClient>,
    created: CreateTaskResult,
    progress: Option<ProgressTarget>,
) -> Result<CallToolResult, ToolError> {
    let mut task = created.task;
    let mut guard = Unfinished {
        peer: peer.clone(),
        server: server.settings.name.clone(),
        task_id: Some(task.task_id.clone()),
    };
    let mut last_message: Option<String> = None;
    loop {
        report(&task, &mut last_message, progress.as_ref());
        tokio::time::sleep(interval(&task)).await;
        let polled = peer
            .get_task(GetTaskParams::new(task.task_id.clone()))
            .await
            .map_err(|error| {
                ToolError::Failed(format!(
                    "the MCP server `{}` could not be asked about its task: {}",
                    server.settings.name,
                    truncate_chars(&error.to_string(), MAX_MESSAGE_CHARS)
                ))
            })?;
        let detailed = polled.task;
        task = detailed.task;
        match detailed.payload {
            TaskPayload::Completed { result } => {
                guard.task_id = None;
                return serde_json::from_value(Value::Object(result)).map_err(|error| {
                    ToolError::Failed(format!(
                        "the MCP server's task ended with something else than a tool result ({error})"
                    ))
                });
            }
            TaskPayload::Failed { error } => {
                guard.task_id = None;
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given");
                return Err(ToolError::Failed(format!(
                    "the MCP server's task failed: {}",
                    truncate_chars(message, MAX_MESSAGE_CHARS)
                )));
            }
            TaskPayload::Cancelled => {
                guard.task_id = None;
                return Err(ToolError::Failed(
                    "the MCP server cancelled the task".into(),
                ));
            }
            // The guard cancels it.
            TaskPayload::InputRequired { .. } => return Err(ToolError::Failed(
                "the MCP server's task asked for the user's input, which a task cannot get here"
                    .into(),
            )),
            // Working, and any status a later revision adds: poll again.
            _ => continue,
        }
    }
}

/// The wait before the next `tasks/get`.
fn interval(task: &Task) -> Duration {
    task.poll_interval_ms
        .map_or(DEFAULT_POLL, Duration::from_millis)
        .clamp(MIN_POLL, MAX_POLL)
}

/// Passes a new status message on as progress (without a figure: a task has none).
fn report(task: &Task, last: &mut Option<String>, target: Option<&ProgressTarget>) {
    let (Some(target), Some(message)) = (target, task.status_message.as_deref()) else {
        return;
    };
    if last.as_deref() == Some(message) {
        return;
    }
    *last = Some(message.to_owned());
    // Advisory, like all progress: dropped when the run is behind.
    let _ = target.sender.try_send(ToolProgress {
        tool_call_id: target.tool_call_id.clone(),
        tool_name: target.tool_name.clone(),
        progress: f64::NAN,
        total: None,
        message: Some(truncate_chars(message, MAX_MESSAGE_CHARS)),
    });
}

/// A task the call stopped following before it ended: cancelled on the server when dropped.
struct Unfinished {
    peer: rmcp::Peer<RoleClient>,
    server: String,
    task_id: Option<String>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(task_id) = self.task_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let server = std::mem::take(&mut self.server);
        runtime.spawn(async move {
            if let Err(error) = peer.cancel_task(CancelTaskParams::new(task_id)).await {
                tracing::debug!(%server, %error, "could not cancel the MCP task");
            }
        });
    }
}
