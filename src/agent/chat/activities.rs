//! Tool progress as AG-UI activities: the first report of a running server tool call opens an
//! `ACTIVITY_SNAPSHOT` (`activityType: "agui-host.tool"`, `messageId: "act_<toolCallId>"`,
//! content `{toolCallId, tool, status: "running", progress, total?, message?}`); later reports
//! become `ACTIVITY_DELTA`s (JSON Patch on that content) at most one per [`MIN_INTERVAL`] per
//! call, the latest values kept in between; the call's end sends a last delta with the latest
//! values and `status` `completed`, `failed` or `input_required`, before the call's result.
//! A call that reports no progress has no activity.
//!
//! A tool's result may come with an activity of its own (an MCP App's `mcp-apps` activity):
//! one `ACTIVITY_SNAPSHOT` (`messageId: "app_<toolCallId>"`, `replace: true`) right after the
//! call's `TOOL_CALL_RESULT` ([`result_activity`]).

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::protocol::{ActivityDelta, ActivitySnapshot, EventBody};
use crate::tools::{self, ProgressChannel, ToolActivity, ToolProgress};

/// The activity type of a tool call's progress.
pub(super) const ACTIVITY_TYPE: &str = "agui-host.tool";

/// Least time between two deltas of one call: a server may report far faster than a page
/// repaints, and every delta is kept in the run's log.
pub(super) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Longest progress message carried; a tool's message is untrusted text.
const MAX_MESSAGE_CHARS: usize = 500;

/// How a call's activity ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    Completed,
    Failed,
    InputRequired,
}

/// The open activities of one run's tool calls.
#[derive(Debug, Default)]
pub(super) struct ToolActivities {
    open: Vec<Open>,
    /// Calls whose activity ended: a report that arrives after the end opens nothing.
    ended: Vec<String>,
}

#[derive(Debug)]
struct Open {
    tool_call_id: String,
    /// The content as the client holds it.
    sent: Map<String, Value>,
    /// The content with the latest report.
    latest: Map<String, Value>,
    sent_at: Instant,
}

impl ToolActivities {
    /// The events a progress report makes: a snapshot for a call's first, else a delta when
    /// the last one is old enough.
    pub(super) fn progress(&mut self, report: &ToolProgress, out: &mut Vec<EventBody>) {
        if self.ended.contains(&report.tool_call_id) {
            return;
        }
        let content = content(report, "running");
        match self
            .open
            .iter_mut()
            .find(|open| open.tool_call_id == report.tool_call_id)
        {
            None => {
                out.push(EventBody::ActivitySnapshot(ActivitySnapshot {
                    message_id: message_id(&report.tool_call_id),
                    activity_type: ACTIVITY_TYPE.to_owned(),
                    content: content.clone(),
                    replace: Some(true),
                    subagent_run_id: None,
                }));
                self.open.push(Open {
                    tool_call_id: report.tool_call_id.clone(),
                    sent: content.clone(),
                    latest: content,
                    sent_at: Instant::now(),
                });
            }
            Some(open) => {
                open.latest = content;
                if open.sent_at.elapsed() >= MIN_INTERVAL {
                    open.flush(out);
                }
            }
        }
    }

    /// The last delta of `tool_call_id`'s activity, if it has one.
    pub(super) fn finish(&mut self, tool_call_id: &str, ending: Ending, out: &mut Vec<EventBody>) {
        let Some(at) = self
            .open
            .iter()
            .position(|open| open.tool_call_id == tool_call_id)
        else {
            return;
        };
        let mut open = self.open.swap_remove(at);
        self.ended.push(open.tool_call_id.clone());
        let status = match ending {
            Ending::Completed => "completed",
            Ending::Failed => "failed",
            Ending::InputRequired => "input_required",
        };
        open.latest.insert("status".into(), json!(status));
        open.flush(out);
    }
}

impl Open {
    /// A delta from what the client holds to the latest content (nothing when they agree).
    fn flush(&mut self, out: &mut Vec<EventBody>) {
        let mut operations = Vec::new();
        for (key, value) in &self.latest {
            let op = match self.sent.get(key) {
                Some(sent) if sent == value => continue,
                Some(_) => "replace",
                None => "add",
            };
            operations.push(json!({"op": op, "path": format!("/{key}"), "value": value}));
        }
        for key in self
            .sent
            .keys()
            .filter(|key| !self.latest.contains_key(*key))
        {
            operations.push(json!({"op": "remove", "path": format!("/{key}")}));
        }
        self.sent_at = Instant::now();
        if operations.is_empty() {
            return;
        }
        let Ok(patch) = serde_json::from_value(Value::Array(operations)) else {
            return;
        };
        self.sent = self.latest.clone();
        out.push(EventBody::ActivityDelta(ActivityDelta {
            message_id: message_id(&self.tool_call_id),
            activity_type: ACTIVITY_TYPE.to_owned(),
            patch,
            subagent_run_id: None,
        }));
    }
}

/// The activity a tool's result came with, as the snapshot that follows the result.
pub(super) fn result_activity(tool_call_id: &str, activity: ToolActivity) -> EventBody {
    EventBody::ActivitySnapshot(ActivitySnapshot {
        message_id: format!("app_{tool_call_id}"),
        activity_type: activity.activity_type,
        content: activity.content,
        replace: Some(true),
        subagent_run_id: None,
    })
}

/// The next progress report of a run's server tools; `None` when no tool has run (the select
/// branch waiting on it is then disabled).
pub(super) async fn next_progress(channel: Option<&mut ProgressChannel>) -> Option<ToolProgress> {
    channel?.receiver.recv().await
}

/// The next event a running tool put on the stream; `None` when no tool has run, like
/// [`next_progress`].
pub(super) async fn next_tool_event(
    channel: Option<&mut tools::ToolEventChannel>,
) -> Option<EventBody> {
    channel?.receiver.recv().await
}

fn message_id(tool_call_id: &str) -> String {
    format!("act_{tool_call_id}")
}

fn content(report: &ToolProgress, status: &str) -> Map<String, Value> {
    let mut content = Map::new();
    content.insert("toolCallId".into(), json!(report.tool_call_id));
    content.insert("tool".into(), json!(report.tool_name));
    content.insert("status".into(), json!(status));
    if report.progress.is_finite() {
        content.insert("progress".into(), json!(report.progress));
    }
    if let Some(total) = report.total.filter(|total| total.is_finite()) {
        content.insert("total".into(), json!(total));
    }
    if let Some(message) = &report.message {
        let message = crate::text::truncate_chars(message, MAX_MESSAGE_CHARS);
        content.insert("message".into(), json!(message));
    }
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(progress: f64, message: &str) -> ToolProgress {
        ToolProgress {
            tool_call_id: "c1".into(),
            tool_name: "mcp__slow".into(),
            progress,
            total: Some(4.0),
            message: Some(message.into()),
        }
    }

    fn apply(content: &mut Value, event: &EventBody) {
        match event {
            EventBody::ActivitySnapshot(snapshot) => {
                *content = Value::Object(snapshot.content.clone());
            }
            EventBody::ActivityDelta(delta) => json_patch::patch(content, &delta.patch).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_snapshot_then_coalesced_deltas_then_the_ending() {
        let mut activities = ToolActivities::default();
        let mut out = Vec::new();
        activities.progress(&report(1.0, "step 1"), &mut out);
        // Within the interval: kept, not sent.
        activities.progress(&report(2.0, "step 2"), &mut out);
        assert_eq!(out.len(), 1);
        std::thread::sleep(MIN_INTERVAL);
        activities.progress(&report(3.0, "step 3"), &mut out);
        activities.finish("c1", Ending::Completed, &mut out);
        activities.finish("c1", Ending::Completed, &mut out);
        assert_eq!(out.len(), 3, "{out:?}");
        let mut content = Value::Null;
        for event in &out {
            apply(&mut content, event);
        }
        assert_eq!(
            content,
            json!({"toolCallId": "c1", "tool": "mcp__slow", "status": "completed",
                   "progress": 3.0, "total": 4.0, "message": "step 3"})
        );
        let EventBody::ActivitySnapshot(snapshot) = &out[0] else {
            panic!()
        };
        assert_eq!(snapshot.message_id, "act_c1");
        assert_eq!(snapshot.replace, Some(true));
    }

    #[test]
    fn a_call_without_progress_has_no_activity_and_an_ending_flushes_what_was_held() {
        let mut activities = ToolActivities::default();
        let mut out = Vec::new();
        activities.finish("c1", Ending::Failed, &mut out);
        assert!(out.is_empty());
        activities.progress(&report(1.0, "a"), &mut out);
        activities.progress(&report(2.0, "b"), &mut out);
        activities.finish("c1", Ending::Failed, &mut out);
        activities.progress(&report(3.0, "late"), &mut out);
        assert_eq!(out.len(), 2, "a late report opens nothing: {out:?}");
        let mut content = Value::Null;
        for event in &out {
            apply(&mut content, event);
        }
        assert_eq!(content["status"], "failed");
        assert_eq!(content["progress"], 2.0, "the held report is not lost");
    }
}
