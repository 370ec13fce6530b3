//! Model profiles (`[models.<name>]`): named model endpoints an agent picks with
//! `profile = "<name>"`, beside `[llm]`, which stays the default profile so a configuration
//! without profiles works as it always has.
//!
//! A profile names its own endpoint: provider, base URL, key, model, sampling and the
//! provider's options are its own and never come from `[llm]` (an OpenAI key must never reach
//! an Anthropic URL). Transport settings it leaves out (timeouts, retries, the connection pool,
//! usage and delta merging) are `[llm]`'s, so one place tunes them for every endpoint.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::{LlmProvider, LlmSettings, Settings, SettingsError};

/// The name an agent may give for `[llm]` itself, and what `/agents` and `check-config` show
/// for an agent that names no profile.
pub const DEFAULT_PROFILE: &str = "default";

/// One `[models.<name>]` table. Every field is optional; see the module docs for what an
/// absent one means.
#[derive(Clone, Default, Deserialize)]
#[serde(default)]
pub struct ModelProfile {
    /// Required: `openai`, `azure`, `anthropic`, `openai-responses` or `offline`.
    pub provider: Option<LlmProvider>,
    pub base_url: String,
    /// Secret; never printed.
    pub api_key: String,
    /// The environment variable holding the key (read at load when `api_key` is empty).
    pub api_key_env: String,
    pub model: String,
    pub azure_deployment: String,
    pub azure_api_version: Option<String>,
    pub extra_headers: BTreeMap<String, String>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    pub anthropic_version: Option<String>,
    pub prompt_caching: Option<bool>,
    pub thinking_budget_tokens: Option<u32>,
    pub reasoning_effort: String,
    pub reasoning_summary: String,
    pub store: Option<bool>,
    pub connect_timeout_secs: Option<u64>,
    pub first_byte_timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub pool_max_idle_per_host: Option<usize>,
    pub pool_idle_timeout_secs: Option<u64>,
    pub read_buffer_bytes: Option<usize>,
    pub max_retries: Option<u32>,
    pub stream_usage: Option<bool>,
    pub merge_deltas: Option<bool>,
}

// By hand, as `LlmSettings`'s: the key and header values are never printed.
impl fmt::Debug for ModelProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelProfile")
            .field("provider", &self.provider)
            .field("base_url", &crate::text::redact_url(&self.base_url))
            .field("api_key_set", &!self.api_key.is_empty())
            .field("api_key_env", &self.api_key_env)
            .field("model", &self.model)
            .field(
                "extra_headers",
                &self.extra_headers.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ModelProfile {
    /// The full settings of this profile: its own endpoint, `[llm]`'s transport where it sets
    /// none.
    pub fn resolve(&self, llm: &LlmSettings) -> LlmSettings {
        LlmSettings {
            provider: self.provider.unwrap_or(LlmProvider::Openai),
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            api_key_env: self.api_key_env.clone(),
            model: self.model.clone(),
            azure_deployment: self.azure_deployment.clone(),
            azure_api_version: self
                .azure_api_version
                .clone()
                .unwrap_or_else(|| llm.azure_api_version.clone()),
            extra_headers: self.extra_headers.clone(),
            connect_timeout_secs: self
                .connect_timeout_secs
                .unwrap_or(llm.connect_timeout_secs),
            first_byte_timeout_secs: self
                .first_byte_timeout_secs
                .unwrap_or(llm.first_byte_timeout_secs),
            idle_timeout_secs: self.idle_timeout_secs.unwrap_or(llm.idle_timeout_secs),
            pool_max_idle_per_host: self
                .pool_max_idle_per_host
                .unwrap_or(llm.pool_max_idle_per_host),
            pool_idle_timeout_secs: self
                .pool_idle_timeout_secs
                .unwrap_or(llm.pool_idle_timeout_secs),
            read_buffer_bytes: self.read_buffer_bytes.unwrap_or(llm.read_buffer_bytes),
            max_retries: self.max_retries.unwrap_or(llm.max_retries),
            stream_usage: self.stream_usage.unwrap_or(llm.stream_usage),
            merge_deltas: self.merge_deltas.unwrap_or(llm.merge_deltas),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            anthropic_version: self
                .anthropic_version
                .clone()
                .unwrap_or_else(|| llm.anthropic_version.clone()),
            prompt_caching: self.prompt_caching.unwrap_or(true),
            thinking_budget_tokens: self.thinking_budget_tokens.unwrap_or(0),
            reasoning_effort: self.reasoning_effort.clone(),
            reasoning_summary: self.reasoning_summary.clone(),
            store: self.store.unwrap_or(false),
        }
    }
}

impl Settings {
    /// The settings of the profile `name` (`None` or [`DEFAULT_PROFILE`]: `[llm]`); `None` when
    /// there is no such profile.
    pub fn model_profile(&self, name: Option<&str>) -> Option<LlmSettings> {
        match name {
            None | Some(DEFAULT_PROFILE) => Some(self.llm.clone()),
            Some(name) => self.models.get(name).map(|p| p.resolve(&self.llm)),
        }
    }

    /// Fills each empty `api_key` from the variable its `api_key_env` names, through `lookup`
    /// (the process environment at load; a map in tests). A named variable that is unset is an
    /// error: the profile would otherwise call its provider without a key.
    pub fn read_model_keys(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), SettingsError> {
        let llm = std::iter::once((
            "llm".to_owned(),
            &mut self.llm.api_key,
            &self.llm.api_key_env,
        ));
        let profiles = self
            .models
            .iter_mut()
            .map(|(name, p)| (format!("models.{name}"), &mut p.api_key, &p.api_key_env));
        for (section, key, variable) in llm.chain(profiles) {
            let variable = variable.trim();
            if !key.is_empty() || variable.is_empty() {
                continue;
            }
            match lookup(variable).filter(|v| !v.trim().is_empty()) {
                Some(value) => *key = value.trim().to_owned(),
                None => {
                    return Err(SettingsError::Invalid(format!(
                        "{section}.api_key_env names `{variable}`, which is not set"
                    )))
                }
            }
        }
        Ok(())
    }
}

/// Each profile is usable and each agent's `profile` names one.
pub(super) fn validate_profiles(settings: &Settings) -> Result<(), SettingsError> {
    for (name, profile) in &settings.models {
        let section = format!("models.{name}");
        if name == DEFAULT_PROFILE {
            return Err(SettingsError::Invalid(format!(
                "{section}: `{DEFAULT_PROFILE}` is the name of [llm] itself; pick another name"
            )));
        }
        match profile.provider {
            None => {
                return Err(SettingsError::Invalid(format!(
                    "{section}.provider is required: openai, azure, anthropic, \
                     openai-responses or offline"
                )))
            }
            Some(LlmProvider::Auto) => {
                return Err(SettingsError::Invalid(format!(
                    "{section}.provider cannot be `auto`: a profile names its provider"
                )))
            }
            Some(_) => {}
        }
        profile.resolve(&settings.llm).validate(&section)?;
    }
    for (agent, agent_settings) in &settings.agents {
        if let Some(profile) = agent_settings.profile.as_deref() {
            if settings.model_profile(Some(profile)).is_none() {
                let known: Vec<&str> = std::iter::once(DEFAULT_PROFILE)
                    .chain(settings.models.keys().map(String::as_str))
                    .collect();
                return Err(SettingsError::Invalid(format!(
                    "agents.{agent}.profile `{profile}` is not a model profile ({})",
                    known.join(", ")
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
