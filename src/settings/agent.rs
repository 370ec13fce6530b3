//! The settings of one agent (`[agents.<name>]`): its prompt, tools and their approval policies,
//! state rules, predictive state, status, and MCP servers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::SettingsError;
pub use crate::agent::config::{
    A2uiGenerate, A2uiSettings, ApprovalPolicySetting, ApprovalSettings, FixedApproval,
    ResultStateKind, StateSettings, ToolNameClash, ToolStateRule, ToolStateSource,
    DEFAULT_STATE_PROMPT,
};
pub use crate::agent::subagent::{SubagentContext, SubagentVisibility};

/// One agent: its prompt, its server-side tools and its limits.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentSettings {
    /// What the agent does, for people and agent pickers (`GET /agents`, its capabilities).
    #[serde(default)]
    pub description: Option<String>,
    /// The system prompt.
    #[serde(default)]
    pub instructions: String,
    /// The model profile (`[models.<name>]`) this agent calls; absent or `default`: `[llm]`.
    #[serde(default)]
    pub profile: Option<String>,
    /// Overrides the model of the agent's profile.
    #[serde(default)]
    pub model: Option<String>,
    /// Most model calls in one run; the run ends with `max_iterations` after that.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Longest a server-side tool may run before its call fails with a timeout.
    #[serde(default = "default_tool_timeout_secs")]
    pub tool_timeout_secs: u64,
    /// What happens when a client tool has the name of one of this agent's server tools.
    #[serde(default)]
    pub tool_name_clash: ToolNameClash,
    /// Server-side tools.
    #[serde(default)]
    pub tools: Vec<ToolSettings>,
    /// MCP servers whose tools this agent may call (see `McpServerSettings`).
    #[serde(default)]
    pub mcp_servers: Vec<McpServerSettings>,
    /// Shared state: validation, prompt injection, and state updates from tools.
    #[serde(default)]
    pub state: StateSettings,
    /// Status updates published into the shared state while a run works.
    #[serde(default)]
    pub status: StatusSettings,
    /// How approvals reach clients and what the model is told about them.
    #[serde(default)]
    pub approval: ApprovalSettings,
    /// Predictive state: state keys filled in from a tool call's arguments while they stream,
    /// by state key.
    #[serde(default)]
    pub predict_state: BTreeMap<String, PredictStateRule>,
    /// How predictive state updates of growing strings are coalesced.
    #[serde(default)]
    pub predict_state_coalescing: PredictStateCoalescing,
    /// Also send CopilotKit's `PredictState` CUSTOM event before a predictive tool call (off by
    /// default: CopilotKit's v1 provider then replaces the whole state with the predicted key).
    #[serde(default)]
    pub emit_predict_state_event: bool,
    /// Send server tools' progress reports (MCP `notifications/progress`) as AG-UI activities
    /// (`ACTIVITY_SNAPSHOT`, then `ACTIVITY_DELTA`s), closed with the call's status before its
    /// result. On by default; `status` can publish them into the shared state as well.
    #[serde(default = "default_tool_activities")]
    pub tool_activities: bool,
    /// `generate_a2ui`: when it is offered, and how it designs a surface (`docs/a2ui.md`).
    #[serde(default)]
    pub a2ui: A2uiSettings,
    /// Background tasks (tools with `background = true`) of one thread, running or holding a
    /// result its next run has not read yet; a call over the limit fails.
    #[serde(default = "default_max_background_tasks_per_thread")]
    pub max_background_tasks_per_thread: usize,
    /// Background tasks of the agent in this process, counted the same way.
    #[serde(default = "default_max_background_tasks")]
    pub max_background_tasks: usize,
    /// Longest a background task may run before it fails with a timeout (instead of
    /// `tool_timeout_secs`).
    #[serde(default = "default_background_timeout_secs")]
    pub background_timeout_secs: u64,
    /// Other configured agents this one may delegate to, each offered to its model as a server
    /// tool named after the child (`docs/subagents.md`); checked by `settings::subagents`.
    #[serde(default)]
    pub subagents: Vec<String>,
    /// What clients see of its subagents' work: `attributed` (1.0 clients; 0.x get `inline`),
    /// `inline` or `hidden`.
    #[serde(default)]
    pub subagent_visibility: SubagentVisibility,
    /// The key of this agent's state each subagent's state lives under, by child; a child not
    /// named here has the key of its own name (`docs/subagents.md`, "State").
    #[serde(default)]
    pub subagent_state: BTreeMap<String, String>,
    /// By child: whether a call to it waits for a person first (`"always"`, `"never"`, or
    /// `{ when = <JSON Schema over the call's arguments> }`), as a server tool's `approval`.
    #[serde(default)]
    pub subagent_approval: BTreeMap<String, crate::agent::config::ApprovalPolicySetting>,
    /// Subagent calls one run may have going at once; calls beyond it get an error result.
    #[serde(default = "default_max_parallel_subagents")]
    pub max_parallel_subagents: usize,
    /// Longest chain of delegation from this agent (it to a child is 1).
    #[serde(default = "default_max_subagent_depth")]
    pub max_subagent_depth: usize,
    /// Longest a subagent call (the child's whole run) may take, instead of
    /// `tool_timeout_secs`.
    #[serde(default = "default_subagent_timeout_secs")]
    pub subagent_timeout_secs: u64,
    /// What its subagents see of its run beside their task: its latest messages, the client's
    /// context entries.
    #[serde(default)]
    pub subagent_context: SubagentContext,
    /// When it runs as a subagent: the JSON Schema its answer must meet (its answer is then
    /// JSON, checked, and asked again once when it does not match).
    #[serde(default)]
    pub answer_schema: Option<serde_json::Value>,
}

fn default_subagent_timeout_secs() -> u64 {
    120
}

fn default_max_parallel_subagents() -> usize {
    4
}

fn default_max_subagent_depth() -> usize {
    3
}

fn default_max_background_tasks_per_thread() -> usize {
    16
}

fn default_max_background_tasks() -> usize {
    64
}

fn default_background_timeout_secs() -> u64 {
    600
}

fn default_tool_activities() -> bool {
    true
}

/// Status updates (`{phase, message}`) under one state key, published as `add` patches that
/// leave every other key alone.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct StatusSettings {
    pub enabled: bool,
    /// The state key that holds the status object.
    pub key: String,
}

impl Default for StatusSettings {
    fn default() -> Self {
        StatusSettings {
            enabled: false,
            key: "status".to_owned(),
        }
    }
}

/// One predictive state key: which tool's arguments fill it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PredictStateRule {
    pub tool: String,
    /// A top-level argument name, or `*` for the whole arguments.
    pub tool_argument: String,
}

/// Coalescing of predictive state updates; see `state::Coalescing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PredictStateCoalescing {
    /// Bytes of growing strings re-sent per argument byte, at most.
    pub resend_ratio: u32,
    /// Growth in bytes before a growing string is sent again.
    pub min_growth_bytes: usize,
    /// Least milliseconds between two re-sends of growing strings.
    pub min_interval_ms: u64,
}

impl Default for PredictStateCoalescing {
    fn default() -> Self {
        PredictStateCoalescing {
            resend_ratio: 4,
            min_growth_bytes: 32,
            min_interval_ms: 0,
        }
    }
}

fn default_max_iterations() -> u32 {
    8
}

fn default_tool_timeout_secs() -> u64 {
    30
}

/// A server-side tool declared in configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolSettings {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments; absent means an object with any members.
    #[serde(default)]
    pub parameters: Option<Value>,
    /// Whether the tool waits for a person's approval before it runs.
    #[serde(default)]
    pub approval: ApprovalPolicySetting,
    /// Whether the person approving may edit the arguments (`editedArgs`).
    #[serde(default)]
    pub allow_edit: bool,
    /// The question shown to the person; `{arguments}` is replaced by the arguments as JSON.
    #[serde(default)]
    pub approval_message: Option<String>,
    /// The call runs as a background task: the model gets a task handle at once, and the
    /// result on the thread's next run (`docs/threads.md`, "Background tools").
    #[serde(default)]
    pub background: bool,
    #[serde(flatten)]
    pub kind: ToolKindSettings,
}

/// The declarative tool kinds.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolKindSettings {
    /// Returns a fixed JSON value whatever the arguments, and optionally updates the state
    /// (`state` in the envelope form of the `http` kind: `{snapshot}`, `{delta}`, or
    /// `{set, set_if_absent}`).
    Static {
        result: Value,
        #[serde(default)]
        state: Option<Value>,
        /// Milliseconds the call takes before it answers, as a slow service would (demos of
        /// progress, cancellation and background tools).
        #[serde(default)]
        delay_ms: u64,
    },
    /// Writes an argument (or all arguments, with `argument = "*"`) to the state key `key` and
    /// returns `confirmation` to the model.
    State {
        key: String,
        #[serde(default = "all_arguments")]
        argument: String,
        #[serde(default = "default_confirmation")]
        confirmation: String,
        /// How the key is written: the whole value (`set`, the default), or only what changed
        /// when the key already holds a value (`diff`).
        #[serde(default)]
        update: StateWriteUpdate,
    },
    /// Asks the user and waits: the run ends with an `input_required` interrupt (1.0 clients)
    /// or a `request_input` client tool call (0.x clients), and the user's answer, checked
    /// against `response_schema`, is the call's result. Never runs on the server.
    Input {
        /// JSON Schema (an object schema) the answer must match; sent as `responseSchema`.
        response_schema: Value,
        /// The question; `{arguments}` and `{<argument>}` are filled from the call. Absent:
        /// the call's `question` argument, else the tool's description.
        #[serde(default)]
        message: Option<String>,
        /// What the model reads when the user cancels the question.
        #[serde(default)]
        cancelled_result: Option<String>,
    },
    /// Shows a fixed A2UI surface: `components` (a flat A2UI v0.9 component array with a
    /// `root`) whose data model is the call's arguments. The result carries the surface's
    /// operations (`a2ui_operations`), which a client's A2UI middleware paints.
    A2ui {
        surface_id: String,
        /// The catalog the components come from; the client must have registered it.
        /// Absent: A2UI's basic catalog.
        #[serde(default)]
        catalog_id: Option<String>,
        components: Value,
    },
    /// POSTs the arguments as JSON to `url`; the JSON answer is the result.
    Http {
        url: String,
        /// Header name -> name of the environment variable holding its value (read at start).
        #[serde(default)]
        headers_from_env: BTreeMap<String, String>,
        #[serde(default = "default_http_timeout_secs")]
        timeout_secs: u64,
        /// The answer is an envelope `{"content": <for the model>, "state": <update>}` where the
        /// update is `{"snapshot": <state>}`, `{"delta": [<RFC 6902 ops>]}`, or
        /// `{"set": {<key>: <value>, ...}}` and/or `{"set_if_absent": {...}}`.
        #[serde(default)]
        envelope: bool,
    },
}

// ---- MCP servers -------------------------------------------------------------------------

/// One Model Context Protocol server whose tools an agent may call, each named
/// `<name>__<tool>`.
#[derive(Debug, Clone, Deserialize)]
pub struct McpServerSettings {
    /// The prefix of the server's tools; ASCII letters, digits, `_` or `-`, unique per agent.
    pub name: String,
    #[serde(flatten)]
    pub transport: McpTransportSettings,
    /// Only these tools (by their name on the server); empty: all of them.
    #[serde(default)]
    pub include: Vec<String>,
    /// Never these tools (by their name on the server).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// A server that cannot be reached at start-up is a warning (and no tools until it comes
    /// up) instead of a start-up error.
    #[serde(default)]
    pub optional: bool,
    /// Seconds to connect and list the tools, at start-up and on every reconnection.
    #[serde(default = "default_mcp_connect_timeout_secs")]
    pub connect_timeout_secs: u64,
    /// Approval and other per-tool options, by the tool's name on the server.
    #[serde(default)]
    pub tools: BTreeMap<String, McpToolSettings>,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpTransportSettings {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        /// Variable of the child -> name of the variable of this service holding its value (read
        /// at start-up, never logged). The child inherits no other variable but `PATH`, `HOME`,
        /// `LANG` and the like.
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default)]
        cwd: Option<PathBuf>,
    },
    /// A server speaking MCP over streamable HTTP.
    Http {
        url: String,
        /// Header name -> name of the environment variable holding its value (read at start).
        #[serde(default)]
        headers_from_env: BTreeMap<String, String>,
        /// Per-call headers from the run: header name -> template with `{thread_id}`,
        /// `{run_id}` and `{agent}` (opt-in: nothing is sent unless configured).
        #[serde(default)]
        identity_headers: BTreeMap<String, String>,
    },
}

/// Options of one tool of an MCP server.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct McpToolSettings {
    /// Whether the tool waits for a person's approval before it runs.
    #[serde(default)]
    pub approval: ApprovalPolicySetting,
    /// Whether the person approving may edit the arguments.
    #[serde(default)]
    pub allow_edit: bool,
    /// The question shown to the person; `{arguments}` is replaced by the arguments as JSON.
    #[serde(default)]
    pub approval_message: Option<String>,
    /// The call runs as a background task, like a configured tool's `background`.
    #[serde(default)]
    pub background: bool,
}

fn default_mcp_connect_timeout_secs() -> u64 {
    30
}

/// The separator between an MCP server's name and its tool's name.
pub const MCP_TOOL_SEPARATOR: &str = "__";

impl McpServerSettings {
    /// The name the model sees for the server's tool `tool`: `<name>__<tool>`, with every
    /// character models refuse in a tool name replaced by `_`; `None` past 64 characters.
    pub fn tool_name(&self, tool: &str) -> Option<String> {
        let sanitized: String = tool
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = format!("{}{MCP_TOOL_SEPARATOR}{sanitized}", self.name);
        (!tool.is_empty() && name.len() <= 64).then_some(name)
    }

    fn validate(&self, agent: &str) -> Result<(), SettingsError> {
        let at = format!("agents.{agent}.mcp_servers `{}`", self.name);
        let valid_name = !self.name.is_empty()
            && self.name.len() <= 32
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(SettingsError::Invalid(format!(
                "{at}: the name must be 1 to 32 ASCII letters, digits, `_` or `-` (it prefixes tool names)"
            )));
        }
        match &self.transport {
            McpTransportSettings::Stdio { command, .. } if command.trim().is_empty() => Err(
                SettingsError::Invalid(format!("{at}: `command` must not be empty")),
            ),
            McpTransportSettings::Http { url, .. }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(SettingsError::Invalid(format!(
                    "{at}: `url` must be an http(s) URL"
                )))
            }
            _ if self.connect_timeout_secs == 0 => Err(SettingsError::Invalid(format!(
                "{at}: connect_timeout_secs must be at least 1"
            ))),
            _ => Ok(()),
        }
    }

    /// Whether any tool of this server may need approval.
    pub(super) fn needs_approval(&self) -> bool {
        self.tools.values().any(|tool| {
            !matches!(
                tool.approval,
                ApprovalPolicySetting::Unset | ApprovalPolicySetting::Fixed(FixedApproval::Never)
            )
        })
    }
}

impl AgentSettings {
    /// The key of this agent's state that holds the state of its subagent `child`.
    pub fn subagent_state_key<'a>(&'a self, child: &'a str) -> &'a str {
        self.subagent_state.get(child).map_or(child, String::as_str)
    }

    /// The names the model sees of the tools whose calls run as background tasks: configured
    /// tools and MCP servers' tools (`<server>__<tool>`) with `background = true`.
    pub fn background_tool_names(&self) -> Vec<String> {
        let configured = self
            .tools
            .iter()
            .filter(|tool| tool.background)
            .map(|tool| tool.name.clone());
        let mcp = self.mcp_servers.iter().flat_map(|server| {
            server
                .tools
                .iter()
                .filter(|(_, tool)| tool.background)
                .filter_map(|(name, _)| server.tool_name(name))
        });
        configured.chain(mcp).collect()
    }

    /// Checks the agent's background tools: a kind that can run unattended, no approval (a
    /// person's decision would have to outlive the run), and limits that let one run.
    pub(super) fn validate_background_tools(&self, agent: &str) -> Result<(), SettingsError> {
        for server in &self.mcp_servers {
            for (name, tool) in server.tools.iter().filter(|(_, tool)| tool.background) {
                let unset = matches!(
                    tool.approval,
                    ApprovalPolicySetting::Unset
                        | ApprovalPolicySetting::Fixed(FixedApproval::Never)
                );
                if !unset || tool.allow_edit {
                    return Err(SettingsError::Invalid(format!(
                        "agents.{agent}.mcp_servers `{}` tool `{name}`: a background tool cannot wait for approval; remove `approval` or `background`",
                        server.name
                    )));
                }
            }
        }
        if self.background_tool_names().is_empty() {
            return Ok(());
        }
        if self.max_background_tasks == 0
            || self.max_background_tasks_per_thread == 0
            || self.background_timeout_secs == 0
        {
            return Err(SettingsError::Invalid(format!(
                "agents.{agent}: max_background_tasks, max_background_tasks_per_thread and background_timeout_secs must be at least 1 for its background tools"
            )));
        }
        for tool in self.tools.iter().filter(|tool| tool.background) {
            let at = format!("agents.{agent}.tools `{}`", tool.name);
            let kind = match &tool.kind {
                ToolKindSettings::Input { .. } => Some("an `input` tool asks the user"),
                ToolKindSettings::State { .. } => Some("a `state` tool writes the run's state"),
                _ => None,
            };
            if let Some(why) = kind {
                return Err(SettingsError::Invalid(format!(
                    "{at}: `background = true` does not apply: {why}, which needs the run it was called in"
                )));
            }
            let unset = matches!(
                tool.approval,
                ApprovalPolicySetting::Unset | ApprovalPolicySetting::Fixed(FixedApproval::Never)
            );
            if !unset || tool.allow_edit {
                return Err(SettingsError::Invalid(format!(
                    "{at}: a background tool cannot wait for approval; remove `approval` or `background`"
                )));
            }
        }
        Ok(())
    }

    /// Checks `[agents.<name>.a2ui]`: attempts and a time that let one surface be made, and no
    /// configured tool under the name the generator takes.
    pub(super) fn validate_a2ui(&self, agent: &str) -> Result<(), SettingsError> {
        let a2ui = &self.a2ui;
        if !(1..=10).contains(&a2ui.max_attempts) || a2ui.timeout_secs == 0 {
            return Err(SettingsError::Invalid(format!(
                "agents.{agent}.a2ui: max_attempts must be 1 to 10 and timeout_secs at least 1"
            )));
        }
        let generates = a2ui.generate != A2uiGenerate::Never;
        if let Some(tool) = self
            .tools
            .iter()
            .find(|tool| generates && tool.name == "generate_a2ui")
        {
            return Err(SettingsError::Invalid(format!(
                "agents.{agent}.tools `{}`: the name is the server's own A2UI generator; rename the tool or set a2ui.generate = \"never\"",
                tool.name
            )));
        }
        Ok(())
    }

    /// Checks the agent's MCP servers: valid and distinct names.
    pub(super) fn validate_mcp_servers(&self, agent: &str) -> Result<(), SettingsError> {
        let mut names = std::collections::BTreeSet::new();
        for server in &self.mcp_servers {
            server.validate(agent)?;
            if !names.insert(server.name.as_str()) {
                return Err(SettingsError::Invalid(format!(
                    "agents.{agent}: two MCP servers are named `{}`",
                    server.name
                )));
            }
        }
        Ok(())
    }
}

/// How a `state` tool writes its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateWriteUpdate {
    /// One `add` of the key with the whole new value.
    #[default]
    Set,
    /// When the key already holds a value: only the differences, as JSON Patch operations on
    /// it (e.g. one `replace` of a step's status); otherwise as `set`.
    Diff,
}

fn all_arguments() -> String {
    "*".to_owned()
}

fn default_confirmation() -> String {
    "State updated.".to_owned()
}

fn default_http_timeout_secs() -> u64 {
    10
}
