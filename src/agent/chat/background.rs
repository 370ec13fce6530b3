//! A chat run's side of background tools (`tools/background.rs` owns the tasks).
//!
//! A call of a `background = true` tool is started as a task and answered at once with its
//! handle, `{"status": "started", "task": "task_…", "note": …}`; an `ACTIVITY_SNAPSHOT`
//! (`messageId: "bg_<toolCallId>"`, `activityType: "agui-host.background"`, content
//! `{toolCallId, tool, task, status: "running"}`) tracks it, and the run goes on. A call over
//! a limit is answered with an error the model reads, and nothing starts.
//!
//! When the thread's next run starts, each task that ended since is delivered before the
//! first model call: as a call of [`RESULT_TOOL`] with its result, a new assistant message and
//! tool message (the original call already has its "started" result, and a second result for
//! one call id would break the provider's history), and as the task's activity snapshot again
//! with `status` `completed` or `failed` and the result or error. Both are ordinary events, so
//! the thread's record and the client keep them and later runs send them back: the model reads
//! a result once, and keeps reading it in the history that follows.
//!
//! A task the history shows as started, but that this process neither runs nor has delivered
//! (it was started before a restart, or by another replica), is delivered the same way with
//! `status` `lost`, once: the delivery is in the history after that. A task the history shows
//! settled (delivered, or cancelled with [`CANCEL_TOOL`]) is never delivered again, even when
//! this process ends it later.

use std::collections::{HashMap, HashSet};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::{json, Map, Value};

use super::{RunState, ToolCallOutcome};
use crate::agent::{new_id, AgentUpdate};
use crate::llm::{ChatMessage, ChatToolCall};
use crate::protocol::{ActivitySnapshot, EventBody, ToolResultContent};
use crate::tools::background::{Cancelled, FinishedTask, TaskCall, ThreadKey, CANCEL_TOOL};
use crate::tools::{self, ToolError, ToolOutput};

/// The activity type of a background task.
pub(super) const ACTIVITY_TYPE: &str = "agui-host.background";

/// What the model reads of a task this process does not know (see `deliver_background_results`).
const LOST: &str = "the background task was lost before it finished (the service restarted, or this conversation moved to another server); call the tool again if its result is still needed";

/// The name of the call that carries a finished task's result into the history. Not a tool
/// the model is offered: the server makes the call itself.
pub const RESULT_TOOL: &str = "background_result";

impl RunState {
    /// Starts `call` as a background task; the returned outcome, ready at once, is the call's
    /// result: the task's handle, or why it did not start.
    pub(super) fn start_in_background(
        &mut self,
        call: ChatToolCall,
        parent_message_id: String,
    ) -> BoxFuture<'static, ToolCallOutcome> {
        let task = new_id("task");
        let work = self
            .run_server_tool(call.clone(), None, Some(parent_message_id.clone()))
            .map(|outcome| task_outcome(outcome.output))
            .boxed();
        let task_call = TaskCall {
            task: task.clone(),
            tool: call.name.clone(),
            tool_call_id: call.id.clone(),
        };
        let output = match self
            .config
            .background
            .start(self.thread_key(), task_call.clone(), work)
        {
            Ok(()) => {
                let snapshot = activity(&task_call, "running", Map::new());
                self.queue.push(AgentUpdate::Event(snapshot));
                Ok(ToolOutput::from(json!({
                    "status": "started",
                    "task": task,
                    "note": "The tool runs in the background; its result will arrive in a later turn of this conversation.",
                })))
            }
            Err(refusal) => {
                tracing::warn!(tool = %call.name, tool_call_id = %call.id, %refusal, "background call refused");
                Err(ToolError::Failed(refusal.to_string()))
            }
        };
        async move {
            ToolCallOutcome {
                call,
                output,
                parent_message_id: Some(parent_message_id),
            }
        }
        .boxed()
    }

    /// Hands the thread's finished tasks to this run: each becomes a [`RESULT_TOOL`] call with
    /// its result, for the client and for the model, and its activity's last snapshot.
    pub(super) fn deliver_background_results(&mut self) {
        if !self.config.background.any() {
            return;
        }
        // Read before the finished ones are taken: a task that ends in between is then still
        // known, and delivered by the run after, never taken for lost.
        let running: HashSet<String> = (self.config.background.running(&self.thread_key()))
            .into_iter()
            .map(|call| call.task)
            .collect();
        let mut history = self.history_tasks();
        for finished in self.config.background.take_finished(&self.thread_key()) {
            // Already settled in the history: reported lost by a replica that did not hold
            // it, or delivered before. The model must not read a second outcome.
            if history.settled.insert(finished.call.task.clone()) {
                self.deliver(finished, "failed");
            }
        }
        let lost: Vec<TaskCall> = history
            .started
            .into_iter()
            .filter(|call| !history.settled.contains(&call.task) && !running.contains(&call.task))
            .filter(|call| self.config.background.runs(&call.tool))
            .collect();
        for call in lost {
            let outcome = Err(LOST.to_owned());
            self.deliver(FinishedTask { call, outcome }, "lost");
        }
    }

    /// The background calls the history shows started, and the tasks it shows settled: their
    /// outcome delivered, or cancelled by the model.
    fn history_tasks(&self) -> HistoryTasks {
        let mut names = HashMap::new();
        let mut settled = HashSet::new();
        let mut started = Vec::new();
        for message in &self.history {
            match message {
                ChatMessage::Assistant { tool_calls, .. } => {
                    for call in tool_calls {
                        if call.name == RESULT_TOOL {
                            let arguments: Value =
                                serde_json::from_str(&call.arguments).unwrap_or_default();
                            if let Some(task) = arguments["task"].as_str() {
                                settled.insert(task.to_owned());
                            }
                        }
                        names.insert(call.id.as_str(), call.name.as_str());
                    }
                }
                ChatMessage::Tool {
                    tool_call_id,
                    content,
                } => {
                    let Some(&tool) = names.get(tool_call_id.as_str()) else {
                        continue;
                    };
                    let Ok(result) = serde_json::from_str::<Value>(content) else {
                        continue;
                    };
                    let (Some(status), Some(task)) =
                        (result["status"].as_str(), result["task"].as_str())
                    else {
                        continue;
                    };
                    if tool == CANCEL_TOOL && status == Cancelled::Stopped.status() {
                        settled.insert(task.to_owned());
                    } else if status == "started" && tool != RESULT_TOOL && tool != CANCEL_TOOL {
                        started.push(TaskCall {
                            task: task.to_owned(),
                            tool: tool.to_owned(),
                            tool_call_id: tool_call_id.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        HistoryTasks { started, settled }
    }

    /// Sends `finished` to the client and the model; `failure` names the status of an error.
    fn deliver(&mut self, finished: FinishedTask, failure: &str) {
        let FinishedTask {
            call: task,
            outcome,
        } = finished;
        let call_id = new_id("call");
        let message_id = new_id("msg");
        let arguments = json!({"task": task.task, "tool": task.tool}).to_string();
        let mut content = Map::new();
        let mut result = json!({
            "task": task.task,
            "tool": task.tool,
            "toolCallId": task.tool_call_id,
        });
        let status = match outcome {
            Ok(text) => {
                // A JSON answer is carried as JSON, not as a string of it.
                let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
                content.insert("result".into(), value.clone());
                result["result"] = value;
                "completed"
            }
            Err(error) => {
                content.insert("error".into(), json!(error));
                result["error"] = json!(error);
                failure
            }
        };
        result["status"] = json!(status);
        let result = result.to_string();
        let events = [
            EventBody::tool_call_start(call_id.clone(), RESULT_TOOL, Some(message_id)),
            EventBody::tool_call_args(call_id.clone(), arguments.clone()),
            EventBody::tool_call_end(call_id.clone()),
            EventBody::tool_call_result(
                new_id("msg"),
                call_id.clone(),
                ToolResultContent::Text(result.clone()),
            ),
            activity(&task, status, content),
        ];
        self.queue
            .extend(events.into_iter().map(AgentUpdate::Event));
        self.history.push(ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ChatToolCall {
                id: call_id.clone(),
                name: RESULT_TOOL.to_owned(),
                arguments,
            }],
            reasoning: Vec::new(),
        });
        self.history.push(ChatMessage::Tool {
            tool_call_id: call_id,
            content: result,
        });
    }

    fn thread_key(&self) -> ThreadKey {
        ThreadKey {
            scope: self.scope.clone(),
            thread_id: self.thread_id.clone(),
        }
    }
}

/// What the history says of the thread's background tasks.
struct HistoryTasks {
    started: Vec<TaskCall>,
    /// Delivered, or cancelled.
    settled: HashSet<String>,
}

/// What a task's call produced, as the model will read it. The run that started it is over,
/// so a state update or an app the result carries has nowhere to go.
fn task_outcome(output: Result<ToolOutput, ToolError>) -> Result<String, String> {
    match output {
        Ok(output) => Ok(tools::result_text(&output.content)),
        Err(ToolError::NeedsInput(_) | ToolError::AwaitsClient) => {
            Err("the tool asked for the user's input, which a background call cannot do".into())
        }
        Err(error) => Err(error.to_string()),
    }
}

/// The task's activity, replacing what the client held.
fn activity(task: &TaskCall, status: &str, extra: Map<String, Value>) -> EventBody {
    let mut content = Map::new();
    content.insert("toolCallId".into(), json!(task.tool_call_id));
    content.insert("tool".into(), json!(task.tool));
    content.insert("task".into(), json!(task.task));
    content.insert("status".into(), json!(status));
    content.extend(extra);
    EventBody::ActivitySnapshot(ActivitySnapshot {
        message_id: format!("bg_{}", task.tool_call_id),
        activity_type: ACTIVITY_TYPE.to_owned(),
        content,
        replace: Some(true),
        subagent_run_id: None,
    })
}
