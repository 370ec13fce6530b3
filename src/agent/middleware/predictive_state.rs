//! `PredictiveStateDeltas`: the state a tool call is about to set, streamed to the client as
//! `STATE_DELTA`s while the model is still writing the call's arguments.
//!
//! Configured per agent as `predict_state = { <state key> = { tool, tool_argument } }`. A thin
//! adapter over [`crate::state`]: each call of a configured tool gets its own
//! [`Projection`], keyed by tool call id, so parallel calls never share a parser. Per run:
//! - The mapper keeps the server's view of the client's state: the request's `state` (`{}` when
//!   absent), with every `STATE_SNAPSHOT` and `STATE_DELTA` passing through applied to it.
//! - Before the first predictive call, when the client's state is not known to be an object
//!   (absent, `null`, an array...), a `STATE_SNAPSHOT` of `{}` goes out: the deltas address
//!   `/<state key>`, which only an object has.
//! - Every `TOOL_CALL_ARGS` passes through unchanged, followed by one `STATE_DELTA` when the
//!   projection produced operations. A delta is applied to the view before it is sent, and one
//!   that does not apply is never sent: the client applies a patch all or nothing and silently
//!   drops one that fails (the reference client uses fast-json-patch), so a delta it cannot
//!   apply would leave it stuck. That call then streams no more and waits for its snapshot.
//! - A state key streams from one call at a time (the first to start); another call of a tool
//!   writing the same key still sets it with its snapshot.
//! - At `TOOL_CALL_END` the arguments are complete. After the tool's `TOOL_CALL_RESULT` (server
//!   tools), or right away for a client tool (one named in the request's `tools`), the final
//!   values go into the view; a `STATE_SNAPSHOT` of it follows only when that changed what the
//!   client holds (a delta was held back), since the deltas normally got there already and
//!   repeating the state would only cost bytes. If the arguments are not valid JSON, or a
//!   server tool's schema refuses them (so it will not run), a snapshot restores the keys the
//!   call had streamed to their values before it, at once;
//!   reporting the tool error is the chat agent's business. A call the stream leaves unfinished
//!   is restored the same way when the run ends.
//!
//! # Confirmation of predicted state
//! A predictive tool that needs approval (`approval = "always"` on the tool) asks the person
//! to confirm what was predicted: the call's approval request carries the values its keys had
//! before the prediction, the approval gate signs them into the interrupt id (or the 0.x
//! approval call, e.g. `confirm_changes`), and the resumed run opens with a snapshot that keeps
//! the prediction (confirmed) or puts those values back (rejected). Nothing is stored between
//! the runs.
//!
//! # CopilotKit's `PredictState` event
//! With `emit_predict_state_event`, a `CUSTOM` event `PredictState` (value
//! `[{state_key, tool, tool_argument}]`, `tool_argument` absent for `*`) goes out once per tool
//! and run, before that tool's first `TOOL_CALL_START`, as CopilotKit's v1 provider expects. Off
//! by default, because of how that provider uses it: on every later `TOOL_CALL_ARGS` of the tool
//! it parses the partial arguments itself and calls `setState({[state_key]: args[state_key]})`,
//! which replaces the whole state with that one key (other keys vanish until the next snapshot),
//! and it looks the value up by *state key*, not `tool_argument`. It is only safe for a state
//! with a single key named like the argument. The deltas sent here work with every client.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use json_patch::PatchOperation;
use serde_json::{Map, Value};

use crate::agent::{
    map_updates, Agent, AgentError, AgentStream, AgentUpdate, RunRequest, UpdateMapper,
};
use crate::protocol::{Custom, EventBody, StateDelta, StateSnapshot};
use crate::settings::AgentSettings;
use crate::state::{Argument, Coalescing, Projection};
use crate::tools::ToolRegistry;

/// One predictive state key: the tool whose arguments fill it, and which part of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PredictStateRule {
    pub state_key: String,
    pub tool: String,
    pub argument: Argument,
}

/// What `PredictiveStateDeltas` does, from an agent's settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PredictiveStateRules {
    pub rules: Vec<PredictStateRule>,
    pub coalescing: Coalescing,
    /// Send CopilotKit's `PredictState` event (see the module docs for its hazards).
    pub emit_predict_state_event: bool,
}

impl PredictiveStateRules {
    pub fn from_settings(settings: &AgentSettings) -> Self {
        let coalescing = &settings.predict_state_coalescing;
        PredictiveStateRules {
            rules: settings
                .predict_state
                .iter()
                .map(|(state_key, rule)| PredictStateRule {
                    state_key: state_key.clone(),
                    tool: rule.tool.clone(),
                    argument: Argument::from_setting(&rule.tool_argument),
                })
                .collect(),
            coalescing: Coalescing {
                resend_ratio: coalescing.resend_ratio,
                min_growth_bytes: coalescing.min_growth_bytes,
                min_interval: Duration::from_millis(coalescing.min_interval_ms),
            },
            emit_predict_state_event: settings.emit_predict_state_event,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// The middleware. See the module docs.
pub struct PredictiveStateDeltas {
    inner: Arc<dyn Agent>,
    rules: Arc<PredictiveStateRules>,
    /// The agent's server tools, whose schemas decide whether final arguments are valid.
    tools: ToolRegistry,
}

impl PredictiveStateDeltas {
    pub fn new(inner: Arc<dyn Agent>, rules: PredictiveStateRules, tools: ToolRegistry) -> Self {
        PredictiveStateDeltas {
            inner,
            rules: Arc::new(rules),
            tools,
        }
    }
}

impl fmt::Debug for PredictiveStateDeltas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PredictiveStateDeltas")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Agent for PredictiveStateDeltas {
    fn run(&self, request: RunRequest) -> Result<AgentStream, AgentError> {
        let client_tools = request.tools.iter().map(|t| t.name.clone()).collect();
        let (view, synced) = match &request.state {
            Some(state @ Value::Object(_)) => (state.clone(), true),
            _ => (Value::Object(Map::new()), false),
        };
        let inner = self.inner.run(request)?;
        Ok(map_updates(
            inner,
            PredictiveMapper {
                rules: self.rules.clone(),
                tools: self.tools.for_run(),
                client_tools,
                view,
                synced,
                calls: BTreeMap::new(),
                owners: HashMap::new(),
                announced: HashSet::new(),
            },
        ))
    }
}

/// The per-run state machine.
struct PredictiveMapper {
    rules: Arc<PredictiveStateRules>,
    tools: ToolRegistry,
    /// Tools the client runs: their calls end the run, so their snapshot cannot wait for a result.
    client_tools: HashSet<String>,
    /// The state as the client holds it, as far as this run's events tell.
    view: Value,
    /// Whether the client is known to hold `view` (an object): false until a snapshot is sent
    /// when the request's state was absent or not an object.
    synced: bool,
    /// Predictive calls by tool call id, from their start to their snapshot.
    calls: BTreeMap<String, PredictiveCall>,
    /// The call streaming each state key.
    owners: HashMap<String, String>,
    /// Tools whose `PredictState` event was sent.
    announced: HashSet<String>,
}

struct PredictiveCall {
    tool: String,
    /// The arguments' projection, until `TOOL_CALL_END`.
    projection: Option<Projection>,
    /// Whether its deltas are still sent.
    streaming: bool,
    /// The keys this call streams, with their values before it (`None`: absent).
    before: Vec<(String, Option<Value>)>,
    /// The final values, once the arguments are complete, waiting for the tool's result.
    outcome: Option<Vec<(String, Value)>>,
}

impl UpdateMapper for PredictiveMapper {
    fn on_update(
        &mut self,
        update: AgentUpdate,
        out: &mut Vec<AgentUpdate>,
    ) -> Result<(), AgentError> {
        let body = match update {
            AgentUpdate::Event(body) => body,
            AgentUpdate::ApprovalRequest(mut request) => {
                // A predictive call that waits for approval is a confirmation of predicted
                // state: the request carries what to put back if the person rejects it.
                if let Some(call) = self.calls.get(&request.tool_call_id) {
                    request.restore_state = Some(call.before.clone());
                }
                out.push(AgentUpdate::ApprovalRequest(request));
                return Ok(());
            }
            other => {
                out.push(other);
                return Ok(());
            }
        };
        match body {
            EventBody::StateSnapshot(snapshot) => {
                self.view = snapshot.snapshot.clone();
                self.synced = self.view.is_object();
                out.push(EventBody::StateSnapshot(snapshot).into());
            }
            EventBody::StateDelta(delta) => {
                // Applied all or nothing, as the client does: a patch that fails leaves both
                // unchanged.
                let _ = json_patch::patch(&mut self.view, &delta.delta);
                out.push(EventBody::StateDelta(delta).into());
            }
            EventBody::ToolCallStart(start) => {
                self.start(&start.tool_call_id, &start.tool_call_name, out);
                out.push(EventBody::ToolCallStart(start).into());
            }
            EventBody::ToolCallArgs(args) => {
                let ops = self.project(&args.tool_call_id, &args.delta);
                out.push(EventBody::ToolCallArgs(args).into());
                if let Some(ops) = ops {
                    out.push(
                        EventBody::StateDelta(StateDelta {
                            delta: json_patch::Patch(ops),
                            subagent_run_id: None,
                        })
                        .into(),
                    );
                }
            }
            EventBody::ToolCallEnd(end) => {
                let id = end.tool_call_id.clone();
                out.push(EventBody::ToolCallEnd(end).into());
                self.end(&id, out);
            }
            EventBody::ToolCallResult(result) => {
                let id = result.tool_call_id.clone();
                out.push(EventBody::ToolCallResult(result).into());
                if self.calls.get(&id).is_some_and(|c| c.outcome.is_some()) {
                    let changed = self.settle(&id);
                    out.extend(self.snapshot_if(changed));
                }
            }
            other => out.push(other.into()),
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Vec<AgentUpdate>) -> Result<(), AgentError> {
        // Calls whose result never came (the run ended with client calls pending), or whose
        // arguments never ended: settle them all, with one snapshot if that changed anything.
        let ids: Vec<String> = self.calls.keys().cloned().collect();
        let mut changed = false;
        for id in &ids {
            changed |= self.settle(id);
        }
        if !ids.is_empty() {
            out.extend(self.snapshot_if(changed));
        }
        Ok(())
    }
}

impl PredictiveMapper {
    fn start(&mut self, id: &str, tool: &str, out: &mut Vec<AgentUpdate>) {
        let all = self.rules.clone();
        let rules: Vec<&PredictStateRule> = all.rules.iter().filter(|r| r.tool == tool).collect();
        if rules.is_empty() || self.calls.contains_key(id) {
            return;
        }
        if !self.synced {
            if !self.view.is_object() {
                self.view = Value::Object(Map::new());
            }
            out.push(self.snapshot());
        }
        if self.rules.emit_predict_state_event && self.announced.insert(tool.to_owned()) {
            let value = rules
                .iter()
                .map(|rule| {
                    let mut entry =
                        serde_json::json!({"state_key": rule.state_key, "tool": rule.tool});
                    if let Argument::Named(name) = &rule.argument {
                        entry["tool_argument"] = Value::String(name.clone());
                    }
                    entry
                })
                .collect();
            out.push(
                EventBody::Custom(Custom {
                    name: "PredictState".into(),
                    value: Value::Array(value),
                    subagent_run_id: None,
                })
                .into(),
            );
        }
        let mut targets = Vec::new();
        let mut before = Vec::new();
        for rule in rules {
            if self.owners.contains_key(&rule.state_key) {
                continue;
            }
            self.owners.insert(rule.state_key.clone(), id.to_owned());
            targets.push((rule.state_key.clone(), rule.argument.clone()));
            before.push((
                rule.state_key.clone(),
                self.view.get(&rule.state_key).cloned(),
            ));
        }
        self.calls.insert(
            id.to_owned(),
            PredictiveCall {
                tool: tool.to_owned(),
                projection: Some(Projection::new(targets, self.rules.coalescing)),
                streaming: !before.is_empty(),
                before,
                outcome: None,
            },
        );
    }

    /// Feeds an argument fragment to its call's projection; returns the operations to send.
    fn project(&mut self, id: &str, fragment: &str) -> Option<Vec<PatchOperation>> {
        let call = self.calls.get_mut(id)?;
        let ops = call.projection.as_mut()?.push(fragment, Instant::now());
        if !call.streaming || ops.is_empty() {
            return None;
        }
        match json_patch::patch(&mut self.view, &ops) {
            Ok(()) => Some(ops),
            Err(error) => {
                // Something else changed the keys under the projection (another snapshot or
                // delta): the client would drop this patch, so it is not sent, and the call's
                // snapshot will bring the client up to date.
                tracing::debug!(tool_call_id = %id, %error, "predictive state stops streaming for this call");
                call.streaming = false;
                self.owners.retain(|_, owner| owner != id);
                None
            }
        }
    }

    fn end(&mut self, id: &str, out: &mut Vec<AgentUpdate>) {
        let Some(call) = self.calls.get_mut(id) else {
            return;
        };
        let Some(projection) = call.projection.take() else {
            return;
        };
        self.owners.retain(|_, owner| owner != id);
        // Arguments the server tool's schema refuses will not run: its state goes back too.
        let finished =
            projection
                .finish()
                .map_err(|e| e.to_string())
                .and_then(|finished| {
                    match self
                        .tools
                        .get(&call.tool)
                        .map(|tool| tool.validate(&finished.arguments))
                    {
                        Some(Err(error)) => Err(error.to_string()),
                        _ => Ok(finished),
                    }
                });
        match finished {
            Ok(finished) => {
                let values = self
                    .rules
                    .rules
                    .iter()
                    .filter(|rule| rule.tool == call.tool)
                    .filter_map(|rule| {
                        let value = rule.argument.select(&finished.arguments)?;
                        Some((rule.state_key.clone(), value.clone()))
                    })
                    .collect();
                call.outcome = Some(values);
                if !self.client_tools.contains(&call.tool) {
                    return; // the snapshot follows the tool's result
                }
            }
            Err(error) => {
                tracing::debug!(tool_call_id = %id, %error, "predictive tool call with invalid arguments: its state is restored");
            }
        }
        let changed = self.settle(id);
        out.extend(self.snapshot_if(changed));
    }

    /// Puts a call's final values in the view (or, without them, restores what it streamed)
    /// and forgets the call. True when that changed the view: when the deltas already brought
    /// the client to the final values (the usual case), no snapshot needs to repeat them.
    fn settle(&mut self, id: &str) -> bool {
        let Some(call) = self.calls.remove(id) else {
            return false;
        };
        self.owners.retain(|_, owner| owner != id);
        let mut changed = false;
        if !self.view.is_object() {
            self.view = Value::Object(Map::new());
            changed = true;
        }
        let Value::Object(view) = &mut self.view else {
            return changed;
        };
        match call.outcome {
            Some(values) => {
                for (key, value) in values {
                    if view.get(&key) != Some(&value) {
                        view.insert(key, value);
                        changed = true;
                    }
                }
            }
            None => {
                for (key, value) in call.before {
                    if view.get(&key) != value.as_ref() {
                        match value {
                            Some(value) => view.insert(key, value),
                            None => view.remove(&key),
                        };
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    /// A snapshot of the view unless the client already holds it.
    fn snapshot_if(&mut self, changed: bool) -> Option<AgentUpdate> {
        (changed || !self.synced).then(|| self.snapshot())
    }

    /// A snapshot of the view, after which the client is known to hold it.
    fn snapshot(&mut self) -> AgentUpdate {
        self.synced = true;
        EventBody::StateSnapshot(StateSnapshot {
            snapshot: self.view.clone(),
            subagent_run_id: None,
        })
        .into()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::mapper::testing::{collect, request, ScriptedAgent};
    use crate::protocol::{
        ToolCallArgs, ToolCallRef, ToolCallResult, ToolCallStart, ToolResultContent,
    };

    fn start(id: &str, name: &str) -> AgentUpdate {
        EventBody::ToolCallStart(ToolCallStart {
            tool_call_id: id.into(),
            tool_call_name: name.into(),
            parent_message_id: None,
            subagent_run_id: None,
        })
        .into()
    }

    fn args(id: &str, delta: &str) -> AgentUpdate {
        EventBody::ToolCallArgs(ToolCallArgs {
            tool_call_id: id.into(),
            delta: delta.into(),
            subagent_run_id: None,
        })
        .into()
    }

    fn end(id: &str) -> AgentUpdate {
        EventBody::ToolCallEnd(ToolCallRef {
            tool_call_id: id.into(),
            subagent_run_id: None,
        })
        .into()
    }

    fn result(id: &str) -> AgentUpdate {
        EventBody::ToolCallResult(ToolCallResult {
            message_id: format!("msg_{id}"),
            tool_call_id: id.into(),
            content: ToolResultContent::Text("ok".into()),
            role: None,
            subagent_run_id: None,
        })
        .into()
    }

    /// A whole call: start, the arguments in fragments of `size` bytes (ASCII), end.
    fn call(id: &str, name: &str, arguments: &str, size: usize) -> Vec<AgentUpdate> {
        let mut updates = vec![start(id, name)];
        updates.extend(
            arguments
                .as_bytes()
                .chunks(size)
                .map(|c| args(id, std::str::from_utf8(c).unwrap())),
        );
        updates.push(end(id));
        updates
    }

    fn rules(entries: &[(&str, &str, &str)]) -> PredictiveStateRules {
        PredictiveStateRules {
            rules: entries
                .iter()
                .map(|(key, tool, argument)| PredictStateRule {
                    state_key: key.to_string(),
                    tool: tool.to_string(),
                    argument: Argument::from_setting(argument),
                })
                .collect(),
            coalescing: Coalescing {
                min_growth_bytes: 8,
                ..Coalescing::default()
            },
            emit_predict_state_event: false,
        }
    }

    async fn run(
        rules: PredictiveStateRules,
        script: Vec<AgentUpdate>,
        request: RunRequest,
    ) -> Vec<AgentUpdate> {
        let inner = ScriptedAgent::new(script);
        let agent =
            PredictiveStateDeltas::new(Arc::new(inner.clone()), rules, ToolRegistry::default());
        let updates = collect(agent.run(request).unwrap()).await;
        assert_eq!(
            inner.last_request().messages.len(),
            1,
            "the request reaches the inner agent as is"
        );
        updates.into_iter().map(|u| u.expect("no error")).collect()
    }

    fn kind(update: &AgentUpdate) -> &'static str {
        match update {
            AgentUpdate::Event(body) => body.type_name(),
            _ => "OTHER",
        }
    }

    /// The client's state after every state event, applied the way the reference client does;
    /// panics on a patch the client would drop.
    fn client_state(initial: Value, updates: &[AgentUpdate]) -> Value {
        let mut state = initial;
        for update in updates {
            match update {
                AgentUpdate::Event(EventBody::StateSnapshot(s)) => state = s.snapshot.clone(),
                AgentUpdate::Event(EventBody::StateDelta(d)) => {
                    json_patch::patch(&mut state, &d.delta)
                        .unwrap_or_else(|e| panic!("{e}: {:?} on {state}", d.delta));
                }
                _ => {}
            }
        }
        state
    }

    fn snapshots(updates: &[AgentUpdate]) -> Vec<(usize, Value)> {
        updates
            .iter()
            .enumerate()
            .filter_map(|(i, u)| match u {
                AgentUpdate::Event(EventBody::StateSnapshot(s)) => Some((i, s.snapshot.clone())),
                _ => None,
            })
            .collect()
    }

    const RECIPE: &str = r#"{"recipe": {"title": "Lemon pasta with black pepper", "servings": 4, "ingredients": [{"name": "spaghetti", "amount": "400 g"}, {"name": "lemon \"Amalfi\"", "amount": "2"}]}}"#;

    #[tokio::test]
    async fn a_server_tool_streams_deltas_and_no_snapshot_repeats_them() {
        let mut script = call("c1", "update_recipe", RECIPE, 5);
        script.push(result("c1"));
        let initial = json!({"other": 1});
        let out = run(
            rules(&[("recipe", "update_recipe", "recipe")]),
            script.clone(),
            request(Some(initial.clone())),
        )
        .await;

        // The inner updates all pass, unchanged and in order.
        let passed: Vec<&AgentUpdate> = out
            .iter()
            .filter(|u| !matches!(kind(u), "STATE_DELTA" | "STATE_SNAPSHOT"))
            .collect();
        assert_eq!(passed, script.iter().collect::<Vec<_>>());
        // Several deltas, each right after an argument fragment.
        let deltas: Vec<usize> = (0..out.len())
            .filter(|&i| kind(&out[i]) == "STATE_DELTA")
            .collect();
        assert!(deltas.len() >= 5, "{} deltas", deltas.len());
        assert!(deltas
            .iter()
            .all(|&i| kind(&out[i - 1]) == "TOOL_CALL_ARGS"));
        // The deltas got the client to the final values: no snapshot repeats the state.
        let arguments: Value = serde_json::from_str(RECIPE).unwrap();
        let expected = json!({"other": 1, "recipe": arguments["recipe"]});
        assert_eq!(snapshots(&out), vec![]);
        assert_eq!(kind(&out[out.len() - 1]), "TOOL_CALL_RESULT");
        assert_eq!(client_state(initial, &out), expected);
    }

    #[tokio::test]
    async fn a_client_tool_ends_with_the_deltas_and_no_snapshot() {
        let mut request = request(Some(json!({})));
        request.tools = vec![serde_json::from_value(json!({"name": "write_document"})).unwrap()];
        let out = run(
            rules(&[("document", "write_document", "document")]),
            call(
                "c1",
                "write_document",
                r#"{"document": "A long document, written slowly."}"#,
                3,
            ),
            request,
        )
        .await;
        assert_eq!(kind(&out[out.len() - 1]), "TOOL_CALL_END");
        assert_eq!(snapshots(&out), vec![]);
        assert!(out.iter().any(|u| kind(u) == "STATE_DELTA"));
        assert_eq!(
            client_state(json!({}), &out),
            json!({"document": "A long document, written slowly."})
        );
    }

    #[tokio::test]
    async fn invalid_arguments_restore_the_state_from_before_the_call() {
        let initial = json!({"recipe": {"title": "Old"}, "other": true});
        let mut script = call(
            "c1",
            "update_recipe",
            r#"{"recipe": {"title": "New title here", "x": tru"#,
            4,
        );
        script.push(result("c1"));
        let out = run(
            rules(&[("recipe", "update_recipe", "recipe")]),
            script,
            request(Some(initial.clone())),
        )
        .await;
        assert!(
            out.iter().any(|u| kind(u) == "STATE_DELTA"),
            "it streamed first"
        );
        let snapshots = snapshots(&out);
        assert_eq!(snapshots.len(), 1);
        assert_eq!(
            kind(&out[snapshots[0].0 - 1]),
            "TOOL_CALL_END",
            "restored at once"
        );
        assert_eq!(snapshots[0].1, initial);
        assert_eq!(client_state(initial.clone(), &out), initial);
    }

    #[tokio::test]
    async fn a_state_that_is_not_an_object_is_replaced_by_an_object_first() {
        for state in [
            None,
            Some(json!(null)),
            Some(json!([1, 2])),
            Some(json!("text")),
        ] {
            let out = run(
                rules(&[("doc", "write", "*")]),
                call("c1", "write", r#"{"a": [1, 2]}"#, 2),
                request(state.clone()),
            )
            .await;
            assert_eq!(kind(&out[0]), "STATE_SNAPSHOT", "{state:?}");
            assert_eq!(snapshots(&out)[0].1, json!({}));
            assert_eq!(kind(&out[1]), "TOOL_CALL_START");
            assert_eq!(
                client_state(state.unwrap_or(Value::Null), &out),
                json!({"doc": {"a": [1, 2]}})
            );
        }
    }

    #[tokio::test]
    async fn a_snapshot_passing_through_becomes_the_baseline() {
        let mut script = vec![EventBody::StateSnapshot(StateSnapshot {
            snapshot: json!({"steps": ["one"]}),
            subagent_run_id: None,
        })
        .into()];
        script.extend(call(
            "c1",
            "write",
            r#"{"body": "some words to stream here"}"#,
            4,
        ));
        script.push(result("c1"));
        let out = run(rules(&[("body", "write", "body")]), script, request(None)).await;
        let snapshots = snapshots(&out);
        assert_eq!(
            snapshots.len(),
            1,
            "no extra snapshot: the inner one synced the client, the deltas did the rest"
        );
        assert_eq!(
            client_state(Value::Null, &out),
            json!({"steps": ["one"], "body": "some words to stream here"})
        );
    }

    #[tokio::test]
    async fn a_call_whose_key_is_changed_underneath_stops_streaming_and_still_settles() {
        let arguments = r#"{"recipe": {"title": "A title", "steps": ["one", "two", "three"]}}"#;
        let mut script = call("c1", "update_recipe", arguments, 4);
        // Halfway, a layer below removes the key the call is streaming into.
        script.insert(
            8,
            EventBody::StateDelta(StateDelta {
                delta: serde_json::from_value(json!([{"op": "remove", "path": "/recipe"}]))
                    .unwrap(),
                subagent_run_id: None,
            })
            .into(),
        );
        script.push(result("c1"));
        let out = run(
            rules(&[("recipe", "update_recipe", "recipe")]),
            script,
            request(Some(json!({}))),
        )
        .await;
        // Every delta sent still applies, and the snapshot restores the final value.
        let final_state = client_state(json!({}), &out);
        let parsed: Value = serde_json::from_str(arguments).unwrap();
        assert_eq!(final_state, json!({"recipe": parsed["recipe"]}));
        let removed_at = out
            .iter()
            .position(|u| matches!(u, AgentUpdate::Event(EventBody::StateDelta(d)) if serde_json::to_string(d).unwrap().contains("remove")))
            .unwrap();
        let after: Vec<&str> = out[removed_at + 1..].iter().map(kind).collect();
        assert!(!after.contains(&"STATE_DELTA"), "{after:?}");
    }

    #[tokio::test]
    async fn parallel_calls_do_not_mix_and_a_key_streams_from_one_call_at_a_time() {
        // Two calls of one tool writing the same key, and a call of another tool, interleaved.
        let a = call(
            "a",
            "update_recipe",
            r#"{"recipe": {"title": "First recipe title"}}"#,
            3,
        );
        let b = call(
            "b",
            "update_recipe",
            r#"{"recipe": {"title": "Second one", "n": [1]}}"#,
            3,
        );
        let c = call("c", "write", r#"{"body": "a body that streams along"}"#, 3);
        let mut script = Vec::new();
        for i in 0..a.len().max(b.len()).max(c.len()) {
            script.extend(
                [a.get(i), b.get(i), c.get(i)]
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
        script.extend([result("a"), result("b"), result("c")]);
        let out = run(
            rules(&[
                ("recipe", "update_recipe", "recipe"),
                ("body", "write", "body"),
            ]),
            script,
            request(Some(json!({}))),
        )
        .await;
        // Only the second call needs a snapshot: its recipe never streamed. The first call and
        // the body streamed all the way, so their deltas already set the final values.
        let snapshots = snapshots(&out);
        assert_eq!(snapshots.len(), 1);
        assert_eq!(
            snapshots[0].1["recipe"],
            json!({"title": "Second one", "n": [1]})
        );
        // Every delta applies in order, and only the first call's recipe streamed.
        assert_eq!(
            client_state(json!({}), &out),
            json!({"recipe": {"title": "Second one", "n": [1]}, "body": "a body that streams along"})
        );
        let streamed_second = out.iter().any(|u| match u {
            AgentUpdate::Event(EventBody::StateDelta(d)) => {
                serde_json::to_string(&d.delta).unwrap().contains("Second")
            }
            _ => false,
        });
        assert!(!streamed_second);
    }

    #[tokio::test]
    async fn the_predict_state_event_goes_before_the_first_call_of_its_tool_when_enabled() {
        let mut enabled = rules(&[("document", "write", "document"), ("all", "write", "*")]);
        enabled.emit_predict_state_event = true;
        let mut script = call("c1", "write", r#"{"document": "x"}"#, 4);
        script.extend(call("c2", "write", r#"{"document": "y"}"#, 4));
        let out = run(enabled, script.clone(), request(Some(json!({})))).await;
        let customs: Vec<(usize, &Custom)> = out
            .iter()
            .enumerate()
            .filter_map(|(i, u)| match u {
                AgentUpdate::Event(EventBody::Custom(c)) => Some((i, c)),
                _ => None,
            })
            .collect();
        assert_eq!(customs.len(), 1, "once per tool and run");
        assert_eq!(customs[0].1.name, "PredictState");
        let mut value = customs[0].1.value.as_array().unwrap().clone();
        value.sort_by_key(|v| v["state_key"].to_string());
        assert_eq!(
            value,
            vec![
                json!({"state_key": "all", "tool": "write"}),
                json!({"state_key": "document", "tool": "write", "tool_argument": "document"}),
            ]
        );
        assert_eq!(kind(&out[customs[0].0 + 1]), "TOOL_CALL_START");

        let out = run(
            rules(&[("document", "write", "document")]),
            script,
            request(Some(json!({}))),
        )
        .await;
        assert!(out.iter().all(|u| kind(u) != "CUSTOM"), "off by default");
    }

    #[tokio::test]
    async fn other_tools_and_updates_pass_through_untouched() {
        let mut script = call("c1", "get_weather", r#"{"location": "Lyon"}"#, 3);
        script.push(result("c1"));
        script.push(AgentUpdate::Usage(Default::default()));
        let out = run(
            rules(&[("doc", "write", "*")]),
            script.clone(),
            request(None),
        )
        .await;
        assert_eq!(out, script);
    }
}
