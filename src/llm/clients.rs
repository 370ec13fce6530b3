//! [`ModelClients`]: one [`LlmClient`] per model profile (`[llm]` and each `[models.<name>]`),
//! built once at start-up so the agents on one profile share its connection pool.

use std::collections::BTreeMap;

use super::{LlmClient, LlmError};
use crate::settings::Settings;

/// The clients of every configured profile.
#[derive(Debug, Clone)]
pub struct ModelClients {
    /// `[llm]`'s: agents that name no profile use it.
    pub default: LlmClient,
    profiles: BTreeMap<String, LlmClient>,
}

impl ModelClients {
    /// Builds every profile's client, so a profile no agent uses yet is checked too.
    ///
    /// # Errors
    /// [`LlmError::Config`] naming the profile whose client cannot be built.
    pub fn new(settings: &Settings) -> Result<Self, LlmError> {
        let default = LlmClient::new(&settings.llm)?;
        let mut profiles = BTreeMap::new();
        for (name, profile) in &settings.models {
            let client =
                LlmClient::new(&profile.resolve(&settings.llm)).map_err(|error| match error {
                    LlmError::Config(message) => {
                        LlmError::Config(format!("models.{name}: {message}"))
                    }
                    other => other,
                })?;
            tracing::debug!(profile = %name, model = %client.describe(), "model profile");
            profiles.insert(name.clone(), client);
        }
        Ok(Self { default, profiles })
    }

    /// The client of the profile an agent names (`None`, `default` or an unknown name, which
    /// validation refuses before this is reached: `[llm]`'s).
    pub fn for_profile(&self, name: Option<&str>) -> LlmClient {
        name.and_then(|name| self.profiles.get(name))
            .unwrap_or(&self.default)
            .clone()
    }
}
