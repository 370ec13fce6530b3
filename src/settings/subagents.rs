//! The agents' `subagents` checked together, at start-up and by `check-config`: every child is
//! a configured agent a tool may be named after, delegation has no cycle and stays within each
//! agent's `max_subagent_depth`, each child's state has a key of its parent's state of its own
//! (`subagent_state`), and no child needs what a subagent cannot do yet (leave a background
//! task for a next run).

use std::collections::BTreeMap;

use super::{AgentSettings, SettingsError, ToolKindSettings, ToolStateSource};
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
    for child in agent.subagent_approval.keys() {
        if !agent.subagents.contains(child) {
            return Err(invalid(format!(
                "agents.{name}.subagent_approval `{child}`: not one of its subagents"
            )));
        }
    }
    if agent.subagents.is_empty() {
        // Only a `subagent_state` naming no subagent to refuse.
        return validate_state_keys(name, agent);
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
    validate_state_keys(name, agent)
}

/// Each child's key of the parent's state (`subagent_state`): set for a child of its only, one
/// key per child, none the parent writes itself (its status, its state tools' and state rules'
/// keys), and one the parent's state schema lets the client send back (the next run carries
/// it).
fn validate_state_keys(name: &str, agent: &AgentSettings) -> Result<(), SettingsError> {
    for child in agent.subagent_state.keys() {
        if !agent.subagents.contains(child) {
            return Err(invalid(format!(
                "agents.{name}.subagent_state `{child}`: not one of its subagents"
            )));
        }
    }
    let mut own = BTreeMap::new();
    if agent.status.enabled {
        own.insert(agent.status.key.as_str(), "its status key");
    }
    for tool in &agent.tools {
        if let ToolKindSettings::State { key, .. } = &tool.kind {
            own.insert(key.as_str(), "the key of one of its state tools");
        }
    }
    for rule in &agent.state.from_tools {
        if let ToolStateSource::Arguments { key, .. } = &rule.source {
            own.insert(key.as_str(), "the key of one of its state rules");
        }
    }
    for key in agent.predict_state.keys() {
        own.insert(key.as_str(), "one of its predict_state keys");
    }
    let closed = agent.state.schema.as_ref().and_then(closed_properties);
    let mut taken = BTreeMap::new();
    for child in &agent.subagents {
        let key = agent.subagent_state_key(child);
        let at = format!("agents.{name}.subagent_state: the state key `{key}` of `{child}`");
        if key.is_empty() {
            return Err(invalid(format!("{at} is empty")));
        }
        if let Some(other) = taken.insert(key, child) {
            return Err(invalid(format!(
                "{at} is `{other}`'s too; each subagent needs a key of its own"
            )));
        }
        if let Some(what) = own.get(key) {
            return Err(invalid(format!(
                "{at} is {what}, which the agent writes itself"
            )));
        }
        if closed.as_ref().is_some_and(|names| !names.contains(&key)) {
            return Err(invalid(format!(
                "{at} is not a property of its state.schema, whose additionalProperties is false: the next run's state would be refused"
            )));
        }
    }
    Ok(())
}

/// The properties a schema allows when it allows no others (`additionalProperties: false`).
fn closed_properties(schema: &serde_json::Value) -> Option<Vec<&str>> {
    if schema.get("additionalProperties") != Some(&serde_json::Value::Bool(false)) {
        return None;
    }
    let properties = schema
        .get("properties")
        .and_then(serde_json::Value::as_object);
    Some(
        properties
            .into_iter()
            .flatten()
            .map(|(name, _)| name.as_str())
            .collect(),
    )
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

/// What a child may not have yet: background tools (their results wait for a next run a child
/// never has). Approvals and questions are fine: the child's call passes them up.
fn validate_child(parent: &str, child: &str, agent: &AgentSettings) -> Result<(), SettingsError> {
    let at = format!("agents.{parent}.subagents `{child}`");
    if let Some(tool) = agent.tools.iter().find(|tool| tool.background) {
        return Err(invalid(format!(
            "{at}: its tool `{}` runs in the background, and its result would wait for a next run the subagent never has",
            tool.name
        )));
    }
    for server in &agent.mcp_servers {
        if server.tools.values().any(|tool| tool.background) {
            return Err(invalid(format!(
                "{at}: a tool of its MCP server `{}` runs in the background, and its result would wait for a next run the subagent never has",
                server.name
            )));
        }
    }
    Ok(())
}
