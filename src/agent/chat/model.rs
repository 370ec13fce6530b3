//! The provider and model an agent's runs name: one rule for its runs, their spans and usage,
//! and the metrics' labels.

use crate::llm::LlmClient;

/// The provider and model an agent's model calls name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentModel {
    pub provider: &'static str,
    pub model: String,
}

/// The provider and model of an agent whose settings name `configured` (its `model`), else the
/// client's default model: the one rule its runs, their spans and usage, and the metrics' labels
/// follow.
pub fn agent_model(llm: &LlmClient, configured: Option<&str>) -> AgentModel {
    AgentModel {
        provider: llm.provider_id(),
        model: configured.map_or_else(|| llm.default_model().to_owned(), str::to_owned),
    }
}
