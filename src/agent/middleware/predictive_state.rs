//! `PredictiveStateDeltas`: the state a tool call is about to set, streamed to the client as
//! `STATE_DELTA`s while the model is still writing the call's arguments.
//!
//! Configured per agent as `predict_state = { <state key> = { tool, tool_argument } }`. Each call
//! of a configured tool gets its own [`Projection`]; the mapper keeps the server's view of the
//! client's state and never sends a delta that does not apply to it. The call's final values
//! (or, when it will not run, the values from before it) are made authoritative by a snapshot
//! only when the deltas did not already get them there. The per-run rules, the confirmation of
//! predicted state and CopilotKit's `PredictState` event are explained in
//! `docs/architecture.md` ("Predictive state").

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use json_patch::PatchOperation;
use serde_json::{Map, Value};

use crate::agent::approval::restore_fits;
use crate::agent::{
    map_updates, Agent, AgentError, AgentStream, AgentUpdate, RunRequest, UpdateMapper, Updates,
};
use crate::protocol::EventBody;
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
                owners: BTreeMap::new(),
                announced: BTreeSet::new(),
            },
        ))
    }
}

/// The per-run state machine. Its sets and maps are B-trees: a handful of entries at most, and
/// empty (as in most runs) a B-tree is 24 bytes where a hash set is 48.
struct PredictiveMapper {
    rules: Arc<PredictiveStateRules>,
    tools: ToolRegistry,
    /// Tools the client runs: their calls end the run, so their snapshot cannot wait for a result.
    client_tools: BTreeSet<String>,
    /// The state as the client holds it, as far as this run's events tell.
    view: Value,
    /// Whether the client is known to hold `view` (an object): false until a snapshot is sent
    /// when the request's state was absent or not an object.
    synced: bool,
    /// Predictive calls by tool call id, from their start to their snapshot.
    calls: BTreeMap<String, PredictiveCall>,
    /// The call streaming each state key.
    owners: BTreeMap<String, String>,
    /// Tools whose `PredictState` event was sent.
    announced: BTreeSet<String>,
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
    fn on_update(&mut self, update: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
        let body = match update {
            AgentUpdate::Event(body) => body,
            AgentUpdate::ApprovalRequest(mut request) => {
                // A predictive call that waits for approval is a confirmation of predicted
                // state: the request carries what to put back if the person rejects it.
                let id = request.tool_call_id.clone();
                if let Some(call) = self.calls.get_mut(&id) {
                    if restore_fits(&call.before) {
                        request.restore_state = Some(call.before.clone());
                    } else {
                        // Too large to ride in the id (and so in every later request): the
                        // prediction is withdrawn before asking, so a rejection undoes nothing.
                        call.outcome = None;
                        let changed = self.settle(&id);
                        out.extend(self.snapshot_if(changed));
                    }
                }
                out.push(AgentUpdate::ApprovalRequest(request));
                return Ok(());
            }
            other => {
                out.push(other);
                return Ok(());
            }
        };
        // A subagent's calls are its own: its rules, not this agent's, predict from them (its
        // state events, under its key, still move the view).
        let childs_call = body.subagent_run_id().is_some()
            && matches!(
                body,
                EventBody::ToolCallStart(_)
                    | EventBody::ToolCallArgs(_)
                    | EventBody::ToolCallEnd(_)
                    | EventBody::ToolCallResult(_)
            );
        if childs_call {
            out.push(body.into());
            return Ok(());
        }
        match body {
            EventBody::StateSnapshot(snapshot) => {
                self.view = snapshot.snapshot.clone();
                self.synced = self.view.is_object();
                out.push(EventBody::StateSnapshot(snapshot).into());
            }
            EventBody::StateDelta(delta) => {
                // Applied all or nothing, as the client does: a patch that fails leaves both
                // unchanged.
                let _ = crate::state::patch::apply(&mut self.view, &delta.delta);
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
                    out.push(EventBody::state_delta(json_patch::Patch(ops)).into());
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

    fn on_end(&mut self, out: &mut Updates) -> Result<(), AgentError> {
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
    fn start(&mut self, id: &str, tool: &str, out: &mut Updates) {
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
            out.push(EventBody::custom("PredictState", Value::Array(value)).into());
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
        match crate::state::patch::apply(&mut self.view, &ops) {
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

    fn end(&mut self, id: &str, out: &mut Updates) {
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
        EventBody::state_snapshot(self.view.clone()).into()
    }
}

#[cfg(test)]
mod tests;
