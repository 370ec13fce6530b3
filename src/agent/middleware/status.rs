//! `StatusSnapshots`: publishes what a run is doing into the shared state, under one key
//! (`status` by default), as `{phase, message}` (plus `tool` while a tool runs).
//!
//! Every update is a `STATE_DELTA` with one `add` of that key: `add` creates or replaces the
//! member and leaves every other key of the client's state alone, where a naive
//! `STATE_SNAPSHOT` would wipe the rest. Phases: `in_progress` at the start, `calling_tool`
//! when a tool call starts, `in_progress` again after its result, `completed` at the end.
//!
//! A patch needs an object to land in: when the state is not an object (a client sent an array,
//! or a tool snapshotted a non-object) status updates are skipped rather than clobbering it.

use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::agent::{
    add_member, map_updates, Agent, AgentError, AgentStream, AgentUpdate, RunRequest, UpdateMapper,
    Updates,
};
use crate::protocol::EventBody;

pub struct StatusSnapshots {
    inner: Arc<dyn Agent>,
    key: String,
}

impl std::fmt::Debug for StatusSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusSnapshots")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl StatusSnapshots {
    pub fn new(inner: Arc<dyn Agent>, key: String) -> Self {
        StatusSnapshots { inner, key }
    }
}

impl Agent for StatusSnapshots {
    fn run(&self, request: RunRequest) -> Result<AgentStream, AgentError> {
        // A client that sent no state holds `{}`, which takes patches.
        let state_is_object = request.state.as_ref().is_none_or(Value::is_object);
        let mapper = StatusMapper {
            key: self.key.clone(),
            state_is_object,
        };
        let mut first = Updates::new();
        mapper.publish("in_progress", "Working on it", None, &mut first);
        let updates = self.inner.run(request)?;
        Ok(stream::iter(first.into_iter().map(Ok))
            .chain(map_updates(updates, mapper))
            .boxed())
    }
}

struct StatusMapper {
    /// The state key the status is published under.
    key: String,
    /// Whether the client's state is an object, so an `add` of a member applies.
    state_is_object: bool,
}

impl StatusMapper {
    fn publish(&self, phase: &str, message: &str, tool: Option<&str>, out: &mut Updates) {
        if !self.state_is_object {
            return;
        }
        let mut status = json!({"phase": phase, "message": message});
        if let Some(tool) = tool {
            status["tool"] = Value::String(tool.to_owned());
        }
        out.push(AgentUpdate::Event(EventBody::state_delta(
            json_patch::Patch(vec![add_member(&self.key, status)]),
        )));
    }
}

impl UpdateMapper for StatusMapper {
    fn on_update(&mut self, update: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
        if let AgentUpdate::ToolProgress(progress) = &update {
            let message = progress_message(progress);
            self.publish("calling_tool", &message, Some(&progress.tool_name), out);
            return Ok(());
        }
        let status = match &update {
            AgentUpdate::Event(EventBody::StateSnapshot(snapshot)) => {
                self.state_is_object = snapshot.snapshot.is_object();
                None
            }
            AgentUpdate::Event(EventBody::ToolCallStart(start)) => {
                Some(("calling_tool", Some(start.tool_call_name.clone())))
            }
            AgentUpdate::Event(EventBody::ToolCallResult(_)) => Some(("in_progress", None)),
            _ => None,
        };
        out.push(update);
        match status {
            Some(("calling_tool", Some(tool))) => {
                self.publish("calling_tool", &format!("Calling {tool}"), Some(&tool), out)
            }
            Some((phase, _)) => self.publish(phase, "Working on it", None, out),
            None => {}
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Updates) -> Result<(), AgentError> {
        self.publish("completed", "Done", None, out);
        Ok(())
    }
}

/// A tool's progress as a status message: its own message, else "50%" or "3 of 10" style.
fn progress_message(progress: &crate::tools::ToolProgress) -> String {
    let amount = match progress.total {
        Some(total) if total > 0.0 => format!(
            "{:.0}%",
            (progress.progress / total * 100.0).clamp(0.0, 100.0)
        ),
        _ => format!("{}", progress.progress),
    };
    match &progress.message {
        Some(message) if !message.is_empty() => format!("{message} ({amount})"),
        _ => format!("{} in progress ({amount})", progress.tool_name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::mapper::testing::{collect, request, ScriptedAgent};

    fn apply_all(mut state: Value, items: &[Result<AgentUpdate, &str>]) -> Value {
        for item in items {
            match item {
                Ok(AgentUpdate::Event(EventBody::StateDelta(d))) => {
                    json_patch::patch(&mut state, &d.delta).unwrap()
                }
                Ok(AgentUpdate::Event(EventBody::StateSnapshot(s))) => state = s.snapshot.clone(),
                _ => {}
            }
        }
        state
    }

    #[tokio::test]
    async fn status_updates_keep_unrelated_state_and_follow_tool_calls() {
        let inner = ScriptedAgent::new(vec![
            AgentUpdate::Event(EventBody::tool_call_start("c1", "search", Some("m".into()))),
            AgentUpdate::Event(EventBody::tool_call_result("t", "c1", "ok".to_owned())),
        ]);
        let agent = StatusSnapshots::new(Arc::new(inner), "status".into());
        let state = json!({"recipe": {"title": "Soup"}});
        let items = collect(agent.run(request(Some(state.clone()))).unwrap()).await;
        let phases: Vec<String> = items
            .iter()
            .filter_map(|item| match item {
                Ok(AgentUpdate::Event(EventBody::StateDelta(d))) => {
                    let ops = serde_json::to_value(&d.delta).unwrap();
                    assert_eq!(ops[0]["op"], "add");
                    Some(ops[0]["value"]["phase"].as_str().unwrap().to_owned())
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            phases,
            ["in_progress", "calling_tool", "in_progress", "completed"]
        );
        let final_state = apply_all(state, &items);
        assert_eq!(final_state["recipe"], json!({"title": "Soup"}));
        assert_eq!(final_state["status"]["phase"], "completed");
    }

    #[tokio::test]
    async fn a_non_object_state_gets_no_status() {
        let agent = StatusSnapshots::new(Arc::new(ScriptedAgent::new(vec![])), "status".into());
        let items = collect(agent.run(request(Some(json!([1, 2])))).unwrap()).await;
        assert!(items.is_empty());
    }
}
