//! Unknown configuration keys: a misspelt key (`instrutions`, `max_iteration`) would otherwise
//! be ignored by serde and leave the default in force without a word. This module owns finding
//! them and naming where each came from (the file, or the environment).
//!
//! serde reports ignored keys of ordinary structs (through `serde_ignored`), but cannot see
//! through `#[serde(flatten)]`, which buffers every key it does not know for the flattened
//! enum; the two flattened tables (a tool and its kind, a state rule and its source) are
//! checked against their key lists here instead.

use serde_json::Value;

use super::{Settings, SettingsError};

/// A key that no setting reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// The key's path, as in the files: `agents.assistant.tools[0].kidn`.
    pub key: String,
    /// Where the key was set: a file path, "the environment", or none for embedded text.
    pub origin: Option<String>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.origin {
            Some(origin) => write!(f, "unknown key `{}` in {origin}", self.key),
            None => write!(f, "unknown key `{}`", self.key),
        }
    }
}

/// Keys every tool has, whatever its kind.
const TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "parameters",
    "approval",
    "allow_edit",
    "approval_message",
    "background",
    "kind",
];

/// The keys of each tool kind (`ToolKindSettings`).
fn tool_kind_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "static" => &["result", "state", "delay_ms"],
        "state" => &["key", "argument", "confirmation", "update"],
        "http" => &["url", "headers_from_env", "timeout_secs", "envelope"],
        "input" => &["response_schema", "message", "cancelled_result"],
        "a2ui" => &["surface_id", "catalog_id", "components"],
        _ => &[],
    }
}

/// The keys of each state rule source (`ToolStateSource`), beside `tool` and `from`.
fn state_rule_keys(from: &str) -> &'static [&'static str] {
    match from {
        "arguments" => &["argument", "key"],
        "result" => &["as"],
        _ => &[],
    }
}

/// Variables of the `APP_` prefix that are read directly, not as settings.
const PROCESS_VARIABLES: &[&str] = &["environment", "config_file"];

/// Deserializes `config` into settings and lists every key no setting reads.
pub(super) fn deserialize(
    config: &config::Config,
) -> Result<(Settings, Vec<UnknownKey>), SettingsError> {
    let mut ignored = Vec::new();
    let settings: Settings = serde_ignored::deserialize(config.clone(), |path| {
        ignored.push(config_key(&path));
    })?;
    ignored.retain(|key| !PROCESS_VARIABLES.contains(&key.as_str()));
    ignored.extend(flattened_unknown_keys(config));
    let mut unknown: Vec<UnknownKey> = ignored
        .into_iter()
        .map(|key| {
            let origin = origin(config, &key);
            UnknownKey { key, origin }
        })
        .collect();
    unknown.sort_by(|a, b| a.key.cmp(&b.key));
    unknown.dedup();
    Ok((settings, unknown))
}

/// The file (or "the environment") that set `key`. Read from the table holding it: `get` would
/// deserialize the value into a new one, which knows no origin.
fn origin(config: &config::Config, key: &str) -> Option<String> {
    let (table, leaf) = match key.rsplit_once('.') {
        Some((parent, leaf)) => (config.get_table(parent).ok()?, leaf),
        None => (config::Source::collect(config).ok()?, key),
    };
    table.get(leaf)?.origin().map(str::to_owned)
}

/// `agents.a.tools[0].kidn` from serde_ignored's path (which writes `agents.a.tools.0.kidn`
/// and marks options with `?`).
fn config_key(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", config_key(parent)),
        Path::Map { parent, key } => {
            let parent = config_key(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => config_key(parent),
    }
}

/// Unknown keys of tools and state rules, which serde cannot report (see the module docs).
fn flattened_unknown_keys(config: &config::Config) -> Vec<String> {
    let Ok(agents) = config.get::<serde_json::Map<String, Value>>("agents") else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    for (agent, settings) in &agents {
        let tools = settings.get("tools").and_then(Value::as_array);
        for (index, tool) in tools.into_iter().flatten().enumerate() {
            let kind = tool.get("kind").and_then(Value::as_str).unwrap_or_default();
            let allowed =
                |key: &str| TOOL_KEYS.contains(&key) || tool_kind_keys(kind).contains(&key);
            unknown.extend(
                unknown_in(tool, allowed).map(|key| format!("agents.{agent}.tools[{index}].{key}")),
            );
        }
        let rules = settings
            .pointer("/state/from_tools")
            .and_then(Value::as_array);
        for (index, rule) in rules.into_iter().flatten().enumerate() {
            let from = rule.get("from").and_then(Value::as_str).unwrap_or_default();
            let allowed =
                |key: &str| ["tool", "from"].contains(&key) || state_rule_keys(from).contains(&key);
            unknown.extend(
                unknown_in(rule, allowed)
                    .map(|key| format!("agents.{agent}.state.from_tools[{index}].{key}")),
            );
        }
    }
    unknown
}

fn unknown_in<'a>(
    table: &'a Value,
    allowed: impl Fn(&str) -> bool + 'a,
) -> impl Iterator<Item = &'a String> + 'a {
    table
        .as_object()
        .into_iter()
        .flat_map(|map| map.keys())
        .filter(move |key| !allowed(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{DEFAULT_TOML, DEMO_TOML};

    fn unknown_keys(toml: &str) -> Vec<String> {
        let config = config::Config::builder()
            .add_source(config::File::from_str(
                DEFAULT_TOML,
                config::FileFormat::Toml,
            ))
            .add_source(config::File::from_str(toml, config::FileFormat::Toml))
            .build()
            .expect("the TOML parses");
        let (_, unknown) = deserialize(&config).expect("the settings deserialize");
        unknown.into_iter().map(|u| u.key).collect()
    }

    #[test]
    fn the_shipped_configurations_have_no_unknown_key() {
        assert_eq!(unknown_keys(""), Vec::<String>::new());
        assert_eq!(unknown_keys(DEMO_TOML), Vec::<String>::new());
        for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples"))
            .expect("config/examples")
        {
            let path = entry.expect("an entry").path();
            let text = std::fs::read_to_string(&path).expect("readable");
            assert_eq!(
                unknown_keys(&text),
                Vec::<String>::new(),
                "{}",
                path.display()
            );
        }
    }

    #[test]
    fn the_a2ui_settings_and_kind_and_an_mcp_background_tool_are_known() {
        let unknown = unknown_keys(
            r#"
[agents.assistant.a2ui]
generate = "always"
max_attempts = 2
timeout_secs = 30
catalog_id = "c"
guidelines = "g"
atempts = 1
[[agents.assistant.tools]]
name = "cards"
kind = "a2ui"
surface_id = "s"
catalog_id = "c"
components = [{ id = "root", component = "Row" }]
surfce = "x"
[[agents.assistant.mcp_servers]]
name = "m"
transport = "stdio"
command = "m"
[agents.assistant.mcp_servers.tools.long]
background = true
"#,
        );
        assert_eq!(
            unknown,
            [
                "agents.assistant.a2ui.atempts",
                "agents.assistant.tools[0].surfce",
            ]
        );
    }

    #[test]
    fn misspelt_keys_are_reported_with_their_path() {
        let unknown = unknown_keys(
            r#"
[server]
prot = 9
[agents.assistant]
instrutions = "x"
[[agents.assistant.tools]]
name = "t"
kind = "static"
result = 1
reslt = 2
[[agents.assistant.state.from_tools]]
tool = "t"
from = "result"
as = "snapshot"
key = "k"
"#,
        );
        assert_eq!(
            unknown,
            [
                "agents.assistant.instrutions",
                "agents.assistant.state.from_tools[0].key",
                "agents.assistant.tools[0].reslt",
                "server.prot",
            ]
        );
    }
}
