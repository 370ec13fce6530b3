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
/// agent's `SubagentView` (the fan-out limit, the children's usage, what they see of a run).
///
/// # Errors
/// A child's `answer_schema` that is not a valid JSON Schema.
pub(super) fn tools(
    agent: &AgentSettings,
    settings: &Settings,
    built: &BTreeMap<String, Arc<dyn Agent>>,
) -> Result<(Vec<Arc<dyn Tool>>, SubagentRuns), String> {
    let runs = SubagentRuns::new(agent.max_parallel_subagents, agent.subagent_context)
        .with_children(&agent.subagents);
    let mut tools = Vec::new();
    for child in &agent.subagents {
        let (Some(settings), Some(built)) = (settings.agents.get(child), built.get(child)) else {
            continue; // checked before: every child is configured and built first
        };
        let tool = SubagentTool::new(
            child,
            settings.description.as_deref(),
            built.clone(),
            runs.clone(),
            settings.answer_schema.clone(),
        )?
        .with_state_key(agent.subagent_state_key(child));
        tools.push(Arc::new(tool) as Arc<dyn Tool>);
    }
    Ok((tools, runs))
}
