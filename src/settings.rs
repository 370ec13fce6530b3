//! Settings: the one typed tree every other module is configured from.
//!
//! Layers, later ones winning:
//! 1. `config/default.toml`, embedded in the binary so a bare `cargo run` works from any folder;
//! 2. `config/{APP_ENVIRONMENT}.toml` beside the working directory, when present;
//! 3. the file named by `--config FILE` or `APP_CONFIG_FILE` (a file mounted into a container);
//! 4. `APP_<SECTION>__<KEY>` environment variables (`APP_SERVER__PORT=9090`);
//! 5. the conventional `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_MODEL`, `HOST` and `PORT`;
//! 6. the command line's flags (`--host`, `--port`, `--model`, `--base-url`).
//!
//! Keys no setting reads are found on the way (`keys`): the server warns, `check-config` refuses.
//!
//! The module is `settings`, not `config`: a root module named `config` would shadow the crate.
//! [`crate::app::App::build`] takes a `Settings` by value and never reads the environment itself,
//! which is what lets the tests override any field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod agent;
pub use crate::protocol::InputLimits as InputLimitSettings;
pub use agent::*;
mod keys;
pub use keys::UnknownKey;
mod llm;
pub use llm::{LlmProvider, LlmSettings};
mod models;
pub use models::{ModelProfile, DEFAULT_PROFILE};
mod runs;
mod subagents;
mod threads;
pub use runs::{OnDisconnect, RunSettings};
pub use threads::{ConcurrentRunPolicy, HistoryPolicy, ThreadSettings, ThreadStoreKind};

/// The embedded default configuration (the same text as `config/default.toml`).
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// The embedded demo agents (the same text as `config/demo.toml`): one per AG-UI dojo feature,
/// added when `demo_agents` is on (see [`Settings::add_demo_agents`]).
pub const DEMO_TOML: &str = include_str!("../config/demo.toml");

/// Everything the service needs to start.
#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub server: ServerSettings,
    /// The default model profile: agents that name no `profile` use it.
    pub llm: LlmSettings,
    /// Named model profiles (`[models.<name>]`) an agent picks with `profile = "<name>"`.
    #[serde(default)]
    pub models: BTreeMap<String, ModelProfile>,
    pub telemetry: TelemetrySettings,
    #[serde(default)]
    pub security: SecuritySettings,
    pub metrics: MetricsSettings,
    /// Threads the server remembers (`[threads]`; absent: the defaults).
    #[serde(default)]
    pub threads: ThreadSettings,
    /// Runs that outlive their connection and the log to reconnect to (`[runs]`).
    #[serde(default)]
    pub runs: RunSettings,
    /// Name of the agent served on `POST /`.
    pub default_agent: String,
    /// The configured agents by name; each is also served on `POST /<name>`.
    pub agents: BTreeMap<String, AgentSettings>,
    /// Add the AG-UI dojo demo agents of `config/demo.toml` (`/agentic_chat`, ...), except
    /// where a configured agent has the same name. Never in `security.mode = "production"`.
    #[serde(default = "default_demo_agents")]
    pub demo_agents: bool,
}

fn default_demo_agents() -> bool {
    true
}

fn default_max_stream_buffer_bytes() -> usize {
    128 * 1024
}

fn default_slow_client_timeout_secs() -> f64 {
    30.0
}

fn default_body_read_timeout_secs() -> f64 {
    30.0
}

fn default_max_connections() -> usize {
    512
}

fn default_header_read_timeout_secs() -> f64 {
    30.0
}

fn default_http2_keep_alive_interval_secs() -> f64 {
    20.0
}

fn default_http2_keep_alive_timeout_secs() -> f64 {
    20.0
}

fn default_http2_max_concurrent_streams() -> u32 {
    128
}

/// The shape of `config/demo.toml`: agents only.
#[derive(Deserialize)]
struct DemoAgents {
    agents: BTreeMap<String, AgentSettings>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ServerSettings {
    pub host: String,
    pub port: u16,
    /// Largest accepted request body, in bytes.
    pub body_limit_bytes: usize,
    /// Seconds between SSE keep-alive comments on an idle stream.
    pub keep_alive_secs: u64,
    /// Seconds open streams may go on after SIGTERM/SIGINT; then they end with `RUN_ERROR`
    /// code `shutdown`. Fractions are allowed.
    pub shutdown_grace_secs: f64,
    /// Seconds a request's whole body may take to arrive; then 408 `body_timeout`. Fractions
    /// are allowed; must be above 0.
    #[serde(default = "default_body_read_timeout_secs")]
    pub body_read_timeout_secs: f64,
    /// Most bytes of a stream's events the server holds for a client that reads slower than
    /// the model writes; then the run waits for the client (the model's stream waits too).
    #[serde(default = "default_max_stream_buffer_bytes")]
    pub max_stream_buffer_bytes: usize,
    /// Seconds a run may wait for a client whose buffer is full; then it ends with `RUN_ERROR`
    /// code `client_too_slow` and the model's stream is closed. Fractions are allowed.
    #[serde(default = "default_slow_client_timeout_secs")]
    pub slow_client_timeout_secs: f64,
    /// Host names (`Host` / `:authority`, port aside) the server answers: exact names,
    /// `*.example.com` for subdomains, `["*"]` for any. Empty: loopback names only when bound
    /// to a loopback address, any name otherwise (see `http::host`). Probes are exempt.
    #[serde(default, deserialize_with = "list_or_csv")]
    pub allowed_hosts: Vec<String>,
    pub limits: LimitSettings,
    /// Limits on what one `RunAgentInput` may carry (absent from a file: the defaults).
    #[serde(default)]
    pub input_limits: InputLimitSettings,
    pub cors: CorsSettings,
    pub auth: AuthSettings,
    pub ready: ReadySettings,
}

/// Limits that hold for a run's whole stream, not just until its headers.
#[derive(Debug, Clone, Deserialize)]
pub struct LimitSettings {
    /// Most runs streaming at once; 0 = no limit. A run over it gets 503 and `Retry-After`.
    pub max_concurrent_runs: usize,
    /// Seconds a refused client is told to wait (`Retry-After`).
    pub retry_after_secs: u64,
    /// Longest one run may stream; 0 = no limit. Then it ends with `RUN_ERROR` `run_deadline`.
    /// Fractions are allowed.
    pub run_deadline_secs: f64,
    /// Most connections open at once; 0 = no limit. A connection over it is closed as soon as
    /// it is accepted (see `http::serve`).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Seconds a connection may take to deliver its first request (from the accept, whatever
    /// the HTTP version, even with no byte at all), and an HTTP/1 connection each later
    /// request head; then it is closed. Fractions are allowed; must be above 0.
    #[serde(default = "default_header_read_timeout_secs")]
    pub header_read_timeout_secs: f64,
    /// Seconds between HTTP/2 keep-alive pings; 0 = none. A connection whose peer does not
    /// answer a ping within `http2_keep_alive_timeout_secs` is closed.
    #[serde(default = "default_http2_keep_alive_interval_secs")]
    pub http2_keep_alive_interval_secs: f64,
    #[serde(default = "default_http2_keep_alive_timeout_secs")]
    pub http2_keep_alive_timeout_secs: f64,
    /// Most requests (streams) one HTTP/2 connection may have open at once.
    #[serde(default = "default_http2_max_concurrent_streams")]
    pub http2_max_concurrent_streams: u32,
}

/// Cross-origin access for frontends that call the service straight from the browser.
#[derive(Debug, Clone, Deserialize)]
pub struct CorsSettings {
    /// Exact origins (`https://app.example.com`), or `["*"]` for any. Empty: no CORS headers,
    /// so browsers refuse cross-origin calls. From the environment: a comma-separated list.
    #[serde(deserialize_with = "list_or_csv")]
    pub allowed_origins: Vec<String>,
    /// Request headers a browser may send.
    #[serde(deserialize_with = "list_or_csv")]
    pub allowed_headers: Vec<String>,
    /// Send `Access-Control-Allow-Credentials: true` (explicit origins only).
    pub allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer.
    pub max_age_secs: u64,
}

/// Optional bearer-token / API-key authentication of every route except the probes.
#[derive(Clone, Deserialize)]
pub struct AuthSettings {
    /// Accepted tokens (`Authorization: Bearer <token>` or `X-API-Key: <token>`). Empty: no
    /// authentication. Secret; never printed. From the environment: a comma-separated list.
    #[serde(deserialize_with = "list_or_csv")]
    pub tokens: Vec<String>,
}

impl fmt::Debug for AuthSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthSettings")
            .field("tokens", &format_args!("[{} redacted]", self.tokens.len()))
            .finish()
    }
}

/// What `GET /ready` checks beyond "the configuration loaded".
#[derive(Debug, Clone, Deserialize)]
pub struct ReadySettings {
    /// Also require the model endpoint to answer HTTP at all (any status counts).
    pub check_upstream: bool,
    /// Seconds one upstream check result is reused, so probes do not hammer the model server.
    pub cache_secs: u64,
    /// Seconds the upstream check may take.
    pub timeout_secs: u64,
}

impl ServerSettings {
    /// Checks the values serde accepts but the server cannot use.
    fn validate(&self) -> Result<(), SettingsError> {
        for (key, secs) in [
            ("server.shutdown_grace_secs", self.shutdown_grace_secs),
            (
                "server.limits.run_deadline_secs",
                self.limits.run_deadline_secs,
            ),
        ] {
            // NaN and infinities fail too: Duration::from_secs_f64 would panic on them.
            if !(0.0..=1e9).contains(&secs) {
                return Err(SettingsError::Invalid(format!(
                    "{key} must be a number of seconds between 0 and 1e9, not {secs}"
                )));
            }
        }
        if !(self.body_read_timeout_secs > 0.0 && self.body_read_timeout_secs <= 1e9) {
            return Err(SettingsError::Invalid(format!(
                "server.body_read_timeout_secs must be a number of seconds above 0 and at most \
                 1e9, not {}",
                self.body_read_timeout_secs
            )));
        }
        if !(self.slow_client_timeout_secs > 0.0 && self.slow_client_timeout_secs <= 1e9) {
            return Err(SettingsError::Invalid(format!(
                "server.slow_client_timeout_secs must be a number of seconds above 0 and at most \
                 1e9, not {}",
                self.slow_client_timeout_secs
            )));
        }
        let limits = &self.limits;
        for (key, secs) in [
            (
                "server.limits.header_read_timeout_secs",
                limits.header_read_timeout_secs,
            ),
            (
                "server.limits.http2_keep_alive_timeout_secs",
                limits.http2_keep_alive_timeout_secs,
            ),
        ] {
            if !(secs > 0.0 && secs <= 1e9) {
                return Err(SettingsError::Invalid(format!(
                    "{key} must be a number of seconds above 0 and at most 1e9, not {secs}"
                )));
            }
        }
        let interval = limits.http2_keep_alive_interval_secs;
        if !(0.0..=1e9).contains(&interval) {
            return Err(SettingsError::Invalid(format!(
                "server.limits.http2_keep_alive_interval_secs must be a number of seconds \
                 between 0 (no pings) and 1e9, not {interval}"
            )));
        }
        if limits.http2_max_concurrent_streams == 0 {
            return Err(SettingsError::Invalid(
                "server.limits.http2_max_concurrent_streams must be at least 1".into(),
            ));
        }
        self.validate_allowed_hosts()?;
        if self.max_stream_buffer_bytes < 1024 {
            return Err(SettingsError::Invalid(format!(
                "server.max_stream_buffer_bytes must be at least 1024, not {}",
                self.max_stream_buffer_bytes
            )));
        }
        self.validate_cors()?;
        if self
            .auth
            .tokens
            .iter()
            .any(|t| t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(SettingsError::Invalid(
                "server.auth.tokens: a token must be non-empty printable ASCII without spaces"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Whether the server listens on a loopback address (or `localhost`): reachable from this
    /// machine only. A host name other than `localhost` counts as not loopback, since what it
    /// resolves to is not known here.
    pub fn binds_loopback(&self) -> bool {
        let host = self.host.trim();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// `server.allowed_hosts`: `*` alone, or names a `Host` header can carry (no scheme, no
    /// port, no path), each optionally `*.`-prefixed.
    fn validate_allowed_hosts(&self) -> Result<(), SettingsError> {
        let hosts = &self.allowed_hosts;
        if hosts.iter().any(|h| h == "*") && hosts.len() > 1 {
            return Err(SettingsError::Invalid(
                "server.allowed_hosts: `*` cannot be combined with other names".into(),
            ));
        }
        for host in hosts.iter().filter(|h| *h != "*") {
            let name = host.strip_prefix("*.").unwrap_or(host);
            let bracketed = name.starts_with('[') && name.ends_with(']');
            let valid = !name.is_empty()
                && (bracketed
                    || name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)));
            if !valid {
                return Err(SettingsError::Invalid(format!(
                    "server.allowed_hosts: `{host}` is not a host name like app.example.com, \
                     *.example.com, 10.0.0.5 or [::1] (no scheme, no port)"
                )));
            }
        }
        Ok(())
    }

    /// The CORS origins and headers: values a browser could actually send.
    fn validate_cors(&self) -> Result<(), SettingsError> {
        let origins = &self.cors.allowed_origins;
        let any = origins.iter().any(|o| o == "*");
        if any && origins.len() > 1 {
            return Err(SettingsError::Invalid(
                "server.cors.allowed_origins: `*` cannot be combined with other origins".into(),
            ));
        }
        if any && self.cors.allow_credentials {
            return Err(SettingsError::Invalid(
                "server.cors.allow_credentials needs explicit origins, not `*` (browsers refuse \
                 credentials with a wildcard)"
                    .into(),
            ));
        }
        for origin in origins.iter().filter(|o| *o != "*") {
            // A browser's Origin is scheme://host[:port] with no path: anything else never matches.
            let valid = (origin.starts_with("http://") || origin.starts_with("https://"))
                && !origin.ends_with('/')
                && origin
                    .split("://")
                    .nth(1)
                    .is_some_and(|rest| !rest.contains('/'))
                && origin.bytes().all(|b| b.is_ascii_graphic());
            if !valid {
                return Err(SettingsError::Invalid(format!(
                    "server.cors.allowed_origins: `{origin}` is not an origin like \
                     https://app.example.com (scheme, host, optional port, no path)"
                )));
            }
        }
        for header in &self.cors.allowed_headers {
            if header.is_empty() || header == "*" || !header.bytes().all(is_token_byte) {
                return Err(SettingsError::Invalid(format!(
                    "server.cors.allowed_headers: `{header}` is not a header name"
                )));
            }
        }
        Ok(())
    }
}

/// An HTTP token character (RFC 9110 `tchar`), what a header name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A list from a file (`["a", "b"]`) or from one environment variable (`a,b`): items are
/// trimmed and empty ones dropped, so an empty variable is an empty list.
fn list_or_csv<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrCsv {
        List(Vec<String>),
        Csv(String),
    }
    let items = match ListOrCsv::deserialize(deserializer)? {
        ListOrCsv::List(items) => items,
        ListOrCsv::Csv(text) => text.split(',').map(str::to_owned).collect(),
    };
    Ok(items
        .into_iter()
        .map(|item| item.trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect())
}

/// Whether the service runs as a development instance or in production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunMode {
    #[default]
    Development,
    Production,
}

#[derive(Clone, Default, Deserialize)]
#[serde(default)]
pub struct SecuritySettings {
    /// `production` refuses to start without the secrets an agent needs (e.g. approval keys).
    pub mode: RunMode,
    /// Secret that signs approval interrupts, so a resume is verified with no stored state,
    /// across restarts and replicas. Empty: a random key per process (development only).
    /// Kept for existing deployments: it is read as the last of `approval_keys`.
    pub approval_key: String,
    /// Secrets that sign approval interrupts: the first signs, any verifies, so a key is
    /// rotated by putting a new one first. From the environment: a comma-separated list.
    #[serde(deserialize_with = "list_or_csv")]
    pub approval_keys: Vec<String>,
}

impl SecuritySettings {
    /// Every approval key, the signing one first: `approval_keys`, then `approval_key` when
    /// set and not already listed. Empty when neither is set.
    pub fn approval_key_list(&self) -> Vec<String> {
        let mut keys = self.approval_keys.clone();
        if !self.approval_key.is_empty() && !keys.contains(&self.approval_key) {
            keys.push(self.approval_key.clone());
        }
        keys
    }
}

impl fmt::Debug for SecuritySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecuritySettings")
            .field("mode", &self.mode)
            .field(
                "approval_key",
                &if self.approval_key.is_empty() {
                    ""
                } else {
                    "[redacted]"
                },
            )
            .field(
                "approval_keys",
                &format_args!("[{} redacted]", self.approval_keys.len()),
            )
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct TelemetrySettings {
    /// `tracing_subscriber::EnvFilter` directives; `RUST_LOG` wins when set.
    pub log_filter: String,
    /// JSON log lines (production) instead of human-readable ones (development).
    pub json: bool,
    /// Exported model-call and tool spans carry the messages, tool arguments and results.
    pub capture_content: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MetricsSettings {
    /// Serve `GET /metrics` (Prometheus / OpenMetrics text).
    pub enabled: bool,
    /// Whether `/metrics` needs a token when `server.auth.tokens` is set.
    pub require_auth: bool,
}

/// Paths of the service's own routes, which an agent (served on `POST /<name>`) cannot take.
pub const RESERVED_ROUTES: &[&str] = &["agents", "health", "ready", "metrics"];

/// Why the settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("invalid configuration: {0}")]
    Config(#[from] config::ConfigError),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Settings {
    /// The embedded defaults alone, with no file and no environment: what the tests start from.
    pub fn embedded_default() -> Result<Self, SettingsError> {
        let settings: Settings = config::Config::builder()
            .add_source(config::File::from_str(
                DEFAULT_TOML,
                config::FileFormat::Toml,
            ))
            .build()?
            .try_deserialize()?;
        let mut settings = settings;
        settings.add_demo_agents()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Adds the demo agents of [`DEMO_TOML`] when `demo_agents` is on and the mode is not
    /// production, keeping any configured agent of the same name. They are not in
    /// `default.toml` because agent maps of configuration layers merge: an agent there could
    /// never be removed by a user's file.
    ///
    /// # Errors
    /// The embedded demo file does not parse (a bug caught by the tests).
    pub fn add_demo_agents(&mut self) -> Result<(), SettingsError> {
        if !self.demo_agents || self.security.mode == RunMode::Production {
            return Ok(());
        }
        let demo: DemoAgents = config::Config::builder()
            .add_source(config::File::from_str(DEMO_TOML, config::FileFormat::Toml))
            .build()?
            .try_deserialize()?;
        for (name, agent) in demo.agents {
            self.agents.entry(name).or_insert(agent);
        }
        Ok(())
    }

    /// Loads every layer described in the module docs. `config_file` is the `--config` option.
    pub fn load(config_file: Option<&Path>) -> Result<Self, SettingsError> {
        Ok(Self::load_checked(config_file, &[])?.0)
    }

    /// [`Settings::load`], with `overrides` (`("server.port", "9090")`: the command line's
    /// flags) winning over every layer, and the keys that no setting reads (misspellings).
    pub fn load_checked(
        config_file: Option<&Path>,
        overrides: &[(&str, String)],
    ) -> Result<(Self, Vec<UnknownKey>), SettingsError> {
        let environment = std::env::var("APP_ENVIRONMENT").unwrap_or_default();
        let config_file: Option<PathBuf> = config_file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("APP_CONFIG_FILE").map(PathBuf::from));

        let mut builder = config::Config::builder().add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ));
        if !environment.is_empty() {
            builder = builder.add_source(
                config::File::with_name(&format!("config/{environment}")).required(false),
            );
        }
        if let Some(path) = &config_file {
            builder = builder.add_source(config::File::from(path.as_path()).required(true));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("APP")
                .prefix_separator("_")
                .separator("__"),
        );
        // The conventional variables every OpenAI-compatible tool honours.
        for (variable, key) in [
            ("OPENAI_API_KEY", "llm.api_key"),
            ("OPENAI_BASE_URL", "llm.base_url"),
            ("OPENAI_MODEL", "llm.model"),
            ("HOST", "server.host"),
            ("PORT", "server.port"),
        ] {
            if let Some(value) = std::env::var(variable).ok().filter(|v| !v.is_empty()) {
                builder = builder.set_override(key, value)?;
            }
        }
        for (key, value) in overrides {
            builder = builder.set_override(*key, value.as_str())?;
        }
        let (mut settings, unknown) = keys::deserialize(&builder.build()?)?;
        settings.read_model_keys(|variable| std::env::var(variable).ok())?;
        settings.add_demo_agents()?;
        settings.validate()?;
        Ok((settings, unknown))
    }

    /// Checks what serde cannot: cross-references and values with a meaning.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.server.validate()?;
        if !self.agents.contains_key(&self.default_agent) {
            return Err(SettingsError::Invalid(format!(
                "default_agent `{}` is not one of the configured agents ({})",
                self.default_agent,
                self.agents.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        for (name, agent) in &self.agents {
            validate_agent(name, agent)?;
        }
        subagents::validate(&self.agents)?;
        self.validate_approval_keys()?;
        self.validate_production_access()?;
        self.llm.validate("llm")?;
        models::validate_profiles(self)?;
        Ok(())
    }

    /// In production, a server others can reach must know who calls it: tokens, or a trusted
    /// proxy in front that authenticates every request and names the user in
    /// `threads.scope_header` (the proxy then owns authentication; it must also overwrite any
    /// copy of that header a client sends). On a loopback address only this machine can call.
    fn validate_production_access(&self) -> Result<(), SettingsError> {
        if self.security.mode != RunMode::Production
            || self.server.binds_loopback()
            || !self.server.auth.tokens.is_empty()
            || !self.threads.scope_header.trim().is_empty()
        {
            return Ok(());
        }
        Err(SettingsError::Invalid(format!(
            "security.mode = \"production\" listens on {} (not a loopback address) with no \
             authentication: set server.auth.tokens (APP_SERVER__AUTH__TOKENS, comma-separated), \
             or threads.scope_header behind a proxy that authenticates every request; otherwise \
             anyone who reaches the port can run the agents and read the threads",
            self.server.host
        )))
    }

    /// In production, agents with tools that need approval need real approval keys.
    fn validate_approval_keys(&self) -> Result<(), SettingsError> {
        let needs_approval_key = self.agents.values().any(|agent| {
            agent
                .mcp_servers
                .iter()
                .any(McpServerSettings::needs_approval)
                || agent.tools.iter().any(|tool| {
                    !matches!(
                        tool.approval,
                        ApprovalPolicySetting::Unset
                            | ApprovalPolicySetting::Fixed(FixedApproval::Never)
                    )
                })
        });
        let keys = self.security.approval_key_list();
        if needs_approval_key
            && self.security.mode == RunMode::Production
            && (keys.is_empty() || keys.iter().any(|key| key.len() < 32))
        {
            return Err(SettingsError::Invalid(
                "an agent has tools that need approval: in production, security.approval_keys \
                 (APP_SECURITY__APPROVAL_KEYS, comma-separated) must hold secrets of at least \
                 32 characters each"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// One agent's name (a route) and the settings serde cannot check.
fn validate_agent(name: &str, agent: &AgentSettings) -> Result<(), SettingsError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(SettingsError::Invalid(format!(
            "agent name `{name}` must be non-empty ASCII letters, digits, `_` or `-` (it is a route)"
        )));
    }
    if RESERVED_ROUTES.contains(&name) {
        return Err(SettingsError::Invalid(format!(
            "agent name `{name}` is taken by the route /{name}; reserved: {}",
            RESERVED_ROUTES.join(", ")
        )));
    }
    if agent.max_iterations == 0 {
        return Err(SettingsError::Invalid(format!(
            "agents.{name}.max_iterations must be at least 1"
        )));
    }
    for (key, rule) in &agent.predict_state {
        if key.is_empty() || rule.tool.is_empty() || rule.tool_argument.is_empty() {
            return Err(SettingsError::Invalid(format!(
                "agents.{name}.predict_state: the state key `{key}`, its tool and its tool_argument must be non-empty"
            )));
        }
    }
    agent.validate_mcp_servers(name)?;
    agent.validate_background_tools(name)?;
    agent.validate_a2ui(name)?;
    let mut seen = std::collections::BTreeSet::new();
    for tool in &agent.tools {
        if !seen.insert(tool.name.as_str()) {
            return Err(SettingsError::Invalid(format!(
                "agents.{name}: tool `{}` is declared twice",
                tool.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
