//! The agents' `subagents` checked together, at start-up and by `check-config`: every child is
//! a configured agent a tool may be named after, delegation has no cycle and stays within each
//! agent's `max_subagent_depth`, and no child needs what a subagent cannot do yet (write the
//! run's state, leave a background task for a next run).

use std::collections::BTreeMap;

use super::{AgentSettings, SettingsError, ToolKindSettings};
use crate::agent::subagent::MAX_CONTEXT_MESSAGES;

/// Checks every agent's subagents. See the module docs.
///
/// # Errors
/// The first problem found, naming the agents (and for a cycle, the cycle).
pub(super) fn validate(agents: &BTreeMap<String, AgentSettings>) -> Result<(), SettingsError> {
    for (name, agent) in agents {
        validate_parent(name, agent, agents)?;
    }
    refuse_cycles(agents)?;
    for (name, agent) in agents {
        let mut longest = Vec::new();
        deepest(name, agents, &mut vec![name.clone()], &mut longest);
        let depth = longest.len().saturating_sub(1);
        if depth > agent.max_subagent_depth {
            return Err(invalid(format!(
                "agents.{name}: delegation goes {depth} deep ({}), more than its max_subagent_depth = {}",
                longest.join(" -> "),
                agent.max_subagent_depth
            )));
        }
    }
    for (parent, agent) in agents {
        for child in &agent.subagents {
            validate_child(parent, child, &agents[child])?;
        }
    }
    for (name, agent) in agents {
        if let Some(schema) = &agent.answer_schema {
            jsonschema::validator_for(schema).map_err(|why| {
                invalid(format!(
                    "agents.{name}.answer_schema is not a valid JSON Schema: {why}"
                ))
            })?;
        }
    }
    Ok(())
}

fn invalid(message: String) -> SettingsError {
    SettingsError::Invalid(message)
}

/// A parent's own list: known agents, each once, whose names make tools it has no other of.
fn validate_parent(
    name: &str,
    agent: &AgentSettings,
    agents: &BTreeMap<String, AgentSettings>,
) -> Result<(), SettingsError> {
    if agent.subagents.is_empty() {
        return Ok(());
    }
    if agent.subagent_context.messages > MAX_CONTEXT_MESSAGES {
        return Err(invalid(format!(
            "agents.{name}.subagent_context.messages: at most {MAX_CONTEXT_MESSAGES}"
        )));
    }
    if agent.max_parallel_subagents == 0
        || agent.max_subagent_depth == 0
        || agent.subagent_timeout_secs == 0
    {
        return Err(invalid(format!(
            "agents.{name}: max_parallel_subagents, max_subagent_depth and subagent_timeout_secs must be at least 1 for its subagents"
        )));
    }
    let mut seen = std::collections::BTreeSet::new();
    for child in &agent.subagents {
        let at = format!("agents.{name}.subagents `{child}`");
        if !agents.contains_key(child) {
            return Err(invalid(format!(
                "{at}: no agent has that name (configured: {})",
                agents.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        if !seen.insert(child.as_str()) {
            return Err(invalid(format!("{at}: named twice")));
        }
        // Agent names are ASCII letters, digits, `_` and `-` already; a tool's are 64 at most.
        if child.len() > 64 {
            return Err(invalid(format!(
                "{at}: a subagent is a tool named after it, and a tool name is 64 characters at most"
            )));
        }
        if agent.tools.iter().any(|tool| tool.name == *child) {
            return Err(invalid(format!(
                "{at}: the agent has a tool of that name already"
            )));
        }
    }
    Ok(())
}

/// Refuses any cycle of delegation, naming it (`a -> b -> a`).
fn refuse_cycles(agents: &BTreeMap<String, AgentSettings>) -> Result<(), SettingsError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        OnPath,
        Done,
    }
    fn visit(
        name: &str,
        agents: &BTreeMap<String, AgentSettings>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Result<(), SettingsError> {
        marks.insert(name.to_owned(), Mark::OnPath);
        path.push(name.to_owned());
        for child in &agents[name].subagents {
            match marks.get(child).copied().unwrap_or(Mark::Unseen) {
                Mark::OnPath => {
                    let from = path.iter().position(|n| n == child).unwrap_or(0);
                    let mut cycle = path[from..].to_vec();
                    cycle.push(child.clone());
                    return Err(invalid(format!(
                        "agents.{name}.subagents: delegation goes round in a cycle ({}); an agent may not delegate to itself, directly or not",
                        cycle.join(" -> ")
                    )));
                }
                Mark::Unseen => visit(child, agents, marks, path)?,
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(name.to_owned(), Mark::Done);
        Ok(())
    }
    let mut marks = BTreeMap::new();
    for name in agents.keys() {
        if marks.get(name).copied().unwrap_or(Mark::Unseen) == Mark::Unseen {
            visit(name, agents, &mut marks, &mut Vec::new())?;
        }
    }
    Ok(())
}

/// The longest chain of delegation from the end of `path` (no cycles: checked before).
fn deepest(
    name: &str,
    agents: &BTreeMap<String, AgentSettings>,
    path: &mut Vec<String>,
    longest: &mut Vec<String>,
) {
    if path.len() > longest.len() {
        *longest = path.clone();
    }
    for child in &agents[name].subagents {
        path.push(child.clone());
        deepest(child, agents, path, longest);
        path.pop();
    }
}

/// What a child may not have yet: state writes (a child's state events are not passed on),
/// background tools (their results wait for a next run a child never has). Approvals and
/// questions are fine: the child's call passes them up.
fn validate_child(parent: &str, child: &str, agent: &AgentSettings) -> Result<(), SettingsError> {
    let at = format!("agents.{parent}.subagents `{child}`");
    for tool in &agent.tools {
        let why = match &tool.kind {
            ToolKindSettings::State { .. } => {
                "writes the shared state, which a subagent's run does not pass on"
            }
            _ if tool.background => {
                "runs in the background, and its result would wait for a next run the subagent never has"
            }
            _ => continue,
        };
        return Err(invalid(format!("{at}: its tool `{}` {why}", tool.name)));
    }
    for server in &agent.mcp_servers {
        if server.tools.values().any(|tool| tool.background) {
            return Err(invalid(format!(
                "{at}: a tool of its MCP server `{}` runs in the background, and its result would wait for a next run the subagent never has",
                server.name
            )));
        }
    }
    if !agent.state.from_tools.is_empty() || !agent.predict_state.is_empty() {
        return Err(invalid(format!(
            "{at}: it updates the shared state from tools, which a subagent's run does not pass on"
        )));
    }
    Ok(())
}
