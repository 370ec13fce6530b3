//! The one place agents are assembled from settings, and the order of their middlewares.
//!
//! Each wrapper added here wraps everything built before it: the last one added sees the
//! client's request first and the update stream last. Today the pipeline is the base
//! [`ChatAgent`](super::ChatAgent) alone; state, approval and predictive-state middlewares slot
//! in here as they are built.

use std::sync::Arc;
use std::time::Duration;

use super::middleware::{PredictiveStateDeltas, PredictiveStateRules};
use super::{Agent, ChatAgent, ChatAgentConfig};
use crate::llm::LlmClient;
use crate::settings::AgentSettings;
use crate::tools::{Tool, ToolRegistry};

/// Builds the agent named `name` from its settings, with `extra_tools` registered after the
/// configured ones (a Rust tool of the same name replaces a configured one).
pub fn build(
    name: &str,
    settings: &AgentSettings,
    llm: LlmClient,
    extra_tools: &[Arc<dyn Tool>],
) -> Arc<dyn Agent> {
    let mut tools = ToolRegistry::from_settings(&settings.tools);
    for tool in extra_tools {
        tools.register(tool.clone());
    }
    let config = ChatAgentConfig {
        name: name.to_owned(),
        instructions: settings.instructions.clone(),
        model: settings.model.clone(),
        max_iterations: settings.max_iterations,
        tool_timeout: Duration::from_secs(settings.tool_timeout_secs),
        tool_name_clash: settings.tool_name_clash,
    };
    let mut agent: Arc<dyn Agent> = Arc::new(ChatAgent::new(llm, config, tools));
    // Right above the chat agent: it needs the raw tool-call events (arguments as they stream,
    // each call's end and result) and sees the state events of every layer below it, while
    // layers above see its deltas and snapshots as any other state events.
    let predictive = PredictiveStateRules::from_settings(settings);
    if !predictive.is_empty() {
        agent = Arc::new(PredictiveStateDeltas::new(agent, predictive));
    }
    agent
}
