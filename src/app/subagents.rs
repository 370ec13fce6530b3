//! Wiring subagents: agents are built children first, so that each parent gets its children's
//! whole agents (their own pipelines) as tools (`agent::subagent`). The settings were checked
//! before (`settings::subagents`: no cycle, every child configured).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::agent::subagent::{SubagentRuns, SubagentTool};
use crate::agent::Agent;
use crate::settings::{AgentSettings, Settings};
use crate::tools::Tool;

/// Every agent's name, each after all of its subagents.
pub(super) fn build_order(settings: &Settings) -> Vec<String> {
    fn visit(name: &str, settings: &Settings, done: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if !done.insert(name.to_owned()) {
            return;
        }
        if let Some(agent) = settings.agents.get(name) {
            for child in &agent.subagents {
                visit(child, settings, done, out);
            }
        }
        out.push(name.to_owned());
    }
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for name in settings.agents.keys() {
        visit(name, settings, &mut done, &mut out);
    }
    out
}

/// The subagent tools of `agent`, over its children as built, and what they share with the
/// agent's `SubagentView` (the fan-out limit, the children's usage).
pub(super) fn tools(
    agent: &AgentSettings,
    settings: &Settings,
    built: &BTreeMap<String, Arc<dyn Agent>>,
) -> (Vec<Arc<dyn Tool>>, SubagentRuns) {
    let runs = SubagentRuns::new(agent.max_parallel_subagents);
    let tools = agent
        .subagents
        .iter()
        .filter_map(|child| {
            let description = settings.agents.get(child)?.description.as_deref();
            let tool =
                SubagentTool::new(child, description, built.get(child)?.clone(), runs.clone());
            Some(Arc::new(tool) as Arc<dyn Tool>)
        })
        .collect();
    (tools, runs)
}
