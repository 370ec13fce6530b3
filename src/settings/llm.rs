//! `[llm]` (and each `[models.<name>]` profile once resolved): which model endpoint a model
//! call goes to, how it is reached, and what is asked of it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::SettingsError;

/// Which kind of model endpoint the service talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LlmProvider {
    /// `openai` when an API key or base URL is configured, else `offline`.
    Auto,
    /// Any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, LM Studio, ...).
    Openai,
    /// Azure OpenAI: `base_url` is the resource endpoint, plus a deployment and an API version.
    Azure,
    /// Anthropic's Messages API (`POST /v1/messages`), natively: extended thinking with its
    /// signatures, prompt caching, `tool_use` streamed as `input_json_delta` fragments.
    Anthropic,
    /// OpenAI's Responses API (`POST /v1/responses`), stateless: reasoning summaries and
    /// encrypted reasoning items, which Chat Completions never streams.
    #[serde(alias = "openai_responses")]
    OpenaiResponses,
    /// The built-in deterministic offline model; needs no key and no network.
    Offline,
}

impl LlmProvider {
    /// The configured name (`openai-responses`), for reports and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LlmProvider::Auto => "auto",
            LlmProvider::Openai => "openai",
            LlmProvider::Azure => "azure",
            LlmProvider::Anthropic => "anthropic",
            LlmProvider::OpenaiResponses => "openai-responses",
            LlmProvider::Offline => "offline",
        }
    }
}

fn default_anthropic_version() -> String {
    "2023-06-01".to_owned()
}

fn default_true() -> bool {
    true
}

/// The bounds of `llm.read_buffer_bytes` when it is set: the response head must fit in the
/// buffer (OpenAI-compatible servers and the gateways in front of them send 1–3 KB), and more
/// than a few megabytes per connection is not a buffer any more.
const MIN_READ_BUFFER_BYTES: usize = 4096;
const MAX_READ_BUFFER_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone, Deserialize)]
pub struct LlmSettings {
    pub provider: LlmProvider,
    /// Base URL including the version path, e.g. `https://api.openai.com/v1`
    /// (for Azure: `https://<resource>.openai.azure.com`). Empty means the provider default.
    pub base_url: String,
    /// Secret; never printed (see the `Debug` impl). Empty means none.
    pub api_key: String,
    /// The environment variable holding the key, read at load when `api_key` is empty, so a
    /// file can name a key without holding it (`ANTHROPIC_API_KEY`).
    #[serde(default)]
    pub api_key_env: String,
    pub model: String,
    pub azure_deployment: String,
    pub azure_api_version: String,
    /// Extra HTTP headers sent with every upstream request.
    pub extra_headers: BTreeMap<String, String>,
    pub connect_timeout_secs: u64,
    /// Longest wait for the response headers of one upstream request.
    pub first_byte_timeout_secs: u64,
    /// Longest silence between two chunks of a streaming response.
    pub idle_timeout_secs: u64,
    /// Idle keep-alive connections kept per model server.
    pub pool_max_idle_per_host: usize,
    /// How long an idle keep-alive connection is kept; 0 closes it after each reply.
    pub pool_idle_timeout_secs: u64,
    /// The read buffer of each connection to a plain-HTTP model server, fixed at this many
    /// bytes; 0 lets it grow with the reply, as the HTTPS client's does.
    pub read_buffer_bytes: usize,
    /// Retries of a request that failed before any byte arrived (429, 5xx, connect errors).
    pub max_retries: u32,
    /// Ask the server for a final usage chunk (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// Text, reasoning and argument deltas of one message or call that arrive in one piece of
    /// the body are handed on as one delta; `false` keeps one per model chunk.
    pub merge_deltas: bool,
    /// Optional sampling temperature; absent lets the server decide.
    pub temperature: Option<f32>,
    /// Optional cap on tokens per completion (Anthropic needs one: 4096 when unset).
    pub max_tokens: Option<u32>,
    /// `anthropic-version` header (provider `anthropic`).
    #[serde(default = "default_anthropic_version")]
    pub anthropic_version: String,
    /// Mark the system prompt and the tools as a cacheable prefix (provider `anthropic`:
    /// `cache_control` breakpoints), so a long prompt is paid in full once per few minutes.
    #[serde(default = "default_true")]
    pub prompt_caching: bool,
    /// Tokens of extended thinking per model call (provider `anthropic`); 0 = thinking off.
    #[serde(default)]
    pub thinking_budget_tokens: u32,
    /// Reasoning effort (provider `openai-responses`: `minimal`, `low`, `medium`, `high`);
    /// empty sends no reasoning options, as models without reasoning need.
    #[serde(default)]
    pub reasoning_effort: String,
    /// Reasoning summaries (provider `openai-responses`: `auto`, `concise`, `detailed`), sent
    /// with `reasoning_effort`; empty asks for none.
    #[serde(default)]
    pub reasoning_summary: String,
    /// Let the Responses API keep the response (provider `openai-responses`). Off by default:
    /// the thread store is this server's, and the reasoning goes back encrypted instead.
    #[serde(default)]
    pub store: bool,
}

impl fmt::Debug for LlmSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted_headers: BTreeMap<&str, &str> = self
            .extra_headers
            .keys()
            .map(|k| (k.as_str(), "[redacted]"))
            .collect();
        f.debug_struct("LlmSettings")
            .field("provider", &self.provider)
            // A base URL may carry a password or a key in its query.
            .field("base_url", &crate::text::redact_url(&self.base_url))
            .field(
                "api_key",
                &if self.api_key.is_empty() {
                    ""
                } else {
                    "[redacted]"
                },
            )
            .field("model", &self.model)
            .field("azure_deployment", &self.azure_deployment)
            .field("azure_api_version", &self.azure_api_version)
            .field("extra_headers", &redacted_headers)
            .field("connect_timeout_secs", &self.connect_timeout_secs)
            .field("first_byte_timeout_secs", &self.first_byte_timeout_secs)
            .field("idle_timeout_secs", &self.idle_timeout_secs)
            .field("pool_max_idle_per_host", &self.pool_max_idle_per_host)
            .field("pool_idle_timeout_secs", &self.pool_idle_timeout_secs)
            .field("read_buffer_bytes", &self.read_buffer_bytes)
            .field("max_retries", &self.max_retries)
            .field("stream_usage", &self.stream_usage)
            .field("merge_deltas", &self.merge_deltas)
            .field("temperature", &self.temperature)
            .field("max_tokens", &self.max_tokens)
            .field("api_key_env", &self.api_key_env)
            .field("anthropic_version", &self.anthropic_version)
            .field("prompt_caching", &self.prompt_caching)
            .field("thinking_budget_tokens", &self.thinking_budget_tokens)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("reasoning_summary", &self.reasoning_summary)
            .field("store", &self.store)
            .finish()
    }
}

impl LlmSettings {
    /// The provider actually used once `auto` is resolved.
    pub fn effective_provider(&self) -> LlmProvider {
        match self.provider {
            LlmProvider::Auto if self.api_key.is_empty() && self.base_url.is_empty() => {
                LlmProvider::Offline
            }
            LlmProvider::Auto => LlmProvider::Openai,
            other => other,
        }
    }

    /// The model calls go to when an agent names none: the Azure deployment for Azure (the
    /// deployment decides the model there), `offline` for the built-in model.
    pub fn served_model(&self) -> &str {
        match self.effective_provider() {
            LlmProvider::Azure => &self.azure_deployment,
            LlmProvider::Offline => "offline",
            _ => &self.model,
        }
    }

    /// Checks what serde cannot; `section` names the table in messages (`llm`, `models.fast`).
    pub(super) fn validate(&self, section: &str) -> Result<(), SettingsError> {
        let read_buffer = self.read_buffer_bytes;
        if read_buffer != 0
            && !(MIN_READ_BUFFER_BYTES..=MAX_READ_BUFFER_BYTES).contains(&read_buffer)
        {
            return Err(SettingsError::Invalid(format!(
                "{section}.read_buffer_bytes must be 0 (a buffer that grows) or between \
                 {MIN_READ_BUFFER_BYTES} and {MAX_READ_BUFFER_BYTES}, not {read_buffer}: the \
                 model server's response head must fit in it"
            )));
        }
        if self.effective_provider() == LlmProvider::Azure
            && (self.base_url.is_empty() || self.azure_deployment.is_empty())
        {
            return Err(SettingsError::Invalid(format!(
                "{section}.provider = \"azure\" needs {section}.base_url (the resource endpoint) \
                 and {section}.azure_deployment"
            )));
        }
        if self.effective_provider() == LlmProvider::Anthropic
            && self.thinking_budget_tokens > 0
            && self.thinking_budget_tokens < 1024
        {
            return Err(SettingsError::Invalid(format!(
                "{section}.thinking_budget_tokens must be 0 (no extended thinking) or at least \
                 1024, not {}",
                self.thinking_budget_tokens
            )));
        }
        Ok(())
    }
}
