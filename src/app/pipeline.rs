//! The one place agents are assembled from settings, and the order of their middlewares: each
//! middleware and the base agent get their own configuration, built here from the agent's
//! settings.
//!
//! Each wrapper added here wraps everything built before it: the last one added sees the
//! client's request first and the update stream last. Outermost first:
//! 1. `ClientStateInjection` validates the untrusted state before anything else runs (a 422
//!    costs nothing), and its defaults snapshot must be the first state event of the stream so
//!    every later delta applies on top of it;
//! 2. `StatusSnapshots` wraps everything below so its status patches bracket the whole run;
//! 3. `ApprovalGate` verifies decisions before the base agent acts on them, and turns the base
//!    agent's approval requests into interrupts or approval tool calls;
//! 4. `PredictiveStateDeltas` (when the agent has `predict_state` rules) streams tool arguments
//!    as state deltas; it sits on the base agent to see raw tool-call events and every state
//!    event below it;
//! 5. `SubagentView` (when the agent has `subagents`) shapes its children's work for the
//!    client, before any layer above sees it;
//! 6. `ChatAgent`, the base: model, tools, and state updates from tools.

use std::sync::Arc;
use std::time::Duration;

use crate::agent::approval::{ApprovalPolicies, ApprovalSigner};
use crate::agent::config::ApprovalPolicySetting;
use crate::agent::input::InputSpec;
use crate::agent::middleware::{
    ApprovalGate, ClientStateInjection, PredictStateRule, PredictiveStateDeltas,
    PredictiveStateRules, StatusSnapshots, SubagentView,
};
use crate::agent::subagent::SubagentRuns;
use crate::agent::{Agent, ChatAgent, ChatAgentConfig, BACKGROUND_RESULT_TOOL};
use crate::llm::LlmClient;
use crate::settings::{AgentSettings, ToolKindSettings};
use crate::state::{Argument, Coalescing};
use crate::tools::background::{BackgroundLimits, BackgroundTasks, CANCEL_TOOL};
use crate::tools::{Tool, ToolRegistry, ToolSource};

/// An agent's tools made outside its settings: the Rust tools registered for it and its
/// subagents' tools, with what those share with the layer that shows their work.
pub(crate) struct BuiltTools {
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) subagent_runs: SubagentRuns,
}

/// Builds the agent named `name` from its settings, with `extra.tools` registered after the
/// configured ones (a Rust tool of the same name replaces a configured one) and the tools of
/// `tool_sources` (its MCP servers) as they are when each run starts.
///
/// # Errors
/// A misconfigured tool or state schema, described for the operator.
pub(crate) fn build(
    name: &str,
    settings: &AgentSettings,
    llm: LlmClient,
    extra: BuiltTools,
    tool_sources: Vec<Arc<dyn ToolSource>>,
    approval_keys: &[String],
    max_id_bytes: usize,
) -> Result<Arc<dyn Agent>, String> {
    let mut tools = ToolRegistry::from_settings(&settings.tools).map_err(|e| e.to_string())?;
    let background = background_tasks(settings);
    if background.any() {
        // The server's own calls for background tasks: a tool of the same name would be
        // taken for one of them.
        for reserved in [BACKGROUND_RESULT_TOOL, CANCEL_TOOL] {
            if settings.tools.iter().any(|tool| tool.name == reserved) {
                return Err(format!(
                    "tool `{reserved}`: the name is the server's own for background tasks; rename the tool"
                ));
            }
        }
        tools
            .register(background.cancel_tool())
            .map_err(|e| e.to_string())?;
    }
    for tool in extra.tools {
        tools.register(tool).map_err(|e| e.to_string())?;
    }
    for source in tool_sources {
        tools.add_source(source);
    }
    let approvals = approval_policies(settings)?;
    let config = ChatAgentConfig {
        name: name.to_owned(),
        instructions: settings.instructions.clone(),
        model: settings.model.clone(),
        max_iterations: settings.max_iterations,
        tool_timeout: Duration::from_secs(settings.tool_timeout_secs),
        tool_timeouts: settings
            .subagents
            .iter()
            .map(|child| {
                (
                    child.clone(),
                    Duration::from_secs(settings.subagent_timeout_secs),
                )
            })
            .collect(),
        tool_name_clash: settings.tool_name_clash,
        state_rules: settings.state.from_tools.clone(),
        subagent_state_keys: settings
            .subagents
            .iter()
            .map(|child| settings.subagent_state_key(child).to_owned())
            .collect(),
        approvals: approvals.clone(),
        rejected_message: settings.approval.rejected_message.clone(),
        tool_activities: settings.tool_activities,
        background,
        a2ui: settings.a2ui.clone(),
    };
    let mut agent: Arc<dyn Agent> = Arc::new(ChatAgent::new(llm, config, tools.clone()));
    // Right above the chat agent, whose subagent tools stream their children's work: every
    // layer above sees it as the client will.
    if !settings.subagents.is_empty() {
        let visibility = settings.subagent_visibility;
        agent = Arc::new(SubagentView::new(agent, visibility, extra.subagent_runs));
    }
    // Right above the chat agent: it needs the raw tool-call events (arguments as they stream,
    // each call's end and result) and sees the state events of every layer below it, while
    // layers above see its deltas and snapshots as any other state events.
    let predictive = predictive_rules(settings);
    if !predictive.is_empty() {
        agent = Arc::new(PredictiveStateDeltas::new(agent, predictive, tools));
    }
    // Always present: it also refuses a `resume` sent to an agent that asked nothing.
    let signer = ApprovalSigner::new(approval_keys, name, settings.approval.ttl_secs);
    agent = Arc::new(
        ApprovalGate::new(agent, approvals, signer, settings.approval.clone())
            // MCP servers may ask while a call runs, and so may subagents.
            .with_tools_that_ask(!settings.mcp_servers.is_empty() || !settings.subagents.is_empty())
            .with_client_id_limit(max_id_bytes),
    );
    if settings.status.enabled {
        agent = Arc::new(StatusSnapshots::new(agent, settings.status.key.clone()));
    }
    agent = Arc::new(ClientStateInjection::new(agent, settings.state.clone())?);
    Ok(agent)
}

/// The registry of the agent's background tools' tasks, with its limits.
fn background_tasks(settings: &AgentSettings) -> BackgroundTasks {
    let limits = BackgroundLimits {
        per_thread: settings.max_background_tasks_per_thread,
        per_agent: settings.max_background_tasks,
        timeout: Duration::from_secs(settings.background_timeout_secs),
    };
    BackgroundTasks::new(settings.background_tool_names(), limits)
}

/// The approval policies of an agent's configured tools and of its MCP servers' tools (by the
/// prefixed names the model sees).
///
/// # Errors
/// A `when` that is not a valid JSON Schema, or an MCP tool name too long.
pub fn approval_policies(agent: &AgentSettings) -> Result<ApprovalPolicies, String> {
    let mut policies = ApprovalPolicies::default();
    for tool in &agent.tools {
        if let ToolKindSettings::Input {
            response_schema,
            message,
            cancelled_result,
        } = &tool.kind
        {
            // An input tool asks by itself: an approval on top would ask twice.
            if !matches!(tool.approval, ApprovalPolicySetting::Unset) || tool.allow_edit {
                return Err(format!(
                    "tool `{}`: an input tool asks the user itself; `approval` and `allow_edit` do not apply",
                    tool.name
                ));
            }
            let spec = InputSpec::new(
                &tool.name,
                &tool.description,
                response_schema,
                message.clone(),
                cancelled_result.clone(),
            )?;
            policies.add_input(&tool.name, spec);
            continue;
        }
        let message = tool.approval_message.clone();
        policies.add(&tool.name, &tool.approval, tool.allow_edit, message)?;
    }
    for (child, approval) in &agent.subagent_approval {
        policies.add(child, approval, false, None)?;
    }
    for server in &agent.mcp_servers {
        for (tool, options) in &server.tools {
            let name = server.tool_name(tool).ok_or_else(|| {
                format!(
                    "MCP server `{}`: tool `{tool}` makes a name longer than 64 characters",
                    server.name
                )
            })?;
            let message = options.approval_message.clone();
            policies.add(&name, &options.approval, options.allow_edit, message)?;
        }
    }
    Ok(policies)
}

/// The agent's predictive state keys and how their updates are coalesced.
fn predictive_rules(settings: &AgentSettings) -> PredictiveStateRules {
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
