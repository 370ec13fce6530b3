//! The command line: the clap types of every subcommand and flag, and the subcommands that are
//! not the server itself (`healthcheck`, `check-config`, `chat`, `completions`). Only the binary
//! compiles this module; the library knows nothing of it.

mod chat;
mod check_config;
mod healthcheck;

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};

use agui_host::settings::{Settings, SettingsError, UnknownKey};

pub(crate) use chat::chat;
pub(crate) use check_config::check_config;
pub(crate) use healthcheck::health_check;

const SETTINGS_HELP: &str = "\
Settings come from config/default.toml (embedded), config/$APP_ENVIRONMENT.toml, the --config
file (also: APP_CONFIG_FILE), APP_<SECTION>__<KEY> variables, OPENAI_API_KEY, OPENAI_BASE_URL,
OPENAI_MODEL, HOST and PORT, then the flags above, later ones winning. With no API key and no
base URL, a built-in offline model answers.";

/// agui-host: an AG-UI host for LLM agents
#[derive(Debug, Parser)]
#[command(
    name = "agui-host",
    version,
    propagate_version = true,
    args_conflicts_with_subcommands = true,
    after_help = SETTINGS_HELP
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// With no command: serve, with these settings.
    #[command(flatten)]
    pub(crate) settings: SettingsArgs,
}

#[derive(Debug, Subcommand)]
// `display_name`: `agui-host chat --version` prints `agui-host 0.1.0`, as the binary is one
// program with one version, not `agui-host-chat`.
pub(crate) enum Command {
    /// Serve the configured agents over AG-UI (the default)
    #[command(after_help = SETTINGS_HELP)]
    #[command(display_name = "agui-host")]
    Serve(SettingsArgs),
    /// Validate the configuration and print what would be served
    ///
    /// Loads the configuration as the server would at start-up and builds every agent with its
    /// tools, JSON Schemas and state rules, without binding a port; prints the agents, their
    /// routes, tools (kind, approval policy) and state rules. Exits 0 when the configuration is
    /// valid, 1 with an error naming the file and the key otherwise; keys no setting reads are
    /// errors here.
    #[command(after_help = SETTINGS_HELP)]
    #[command(display_name = "agui-host")]
    CheckConfig(SettingsArgs),
    /// Probe the server on this machine (for container health checks)
    ///
    /// GETs /health on the configured port; exits 0 when it answers 200 within 3 seconds.
    #[command(display_name = "agui-host")]
    Healthcheck(SettingsArgs),
    /// Talk to an AG-UI server from the terminal
    ///
    /// Type messages, see text, tool calls, results and state as they stream; answer approvals
    /// with y/n; type the results of the client tools named with --tool. Commands: :state,
    /// :messages, :help, :quit.
    #[command(display_name = "agui-host")]
    Chat(ChatArgs),
    /// Print a shell completion script
    ///
    /// For example: agui-host completions bash > /etc/bash_completion.d/agui-host
    #[command(display_name = "agui-host")]
    Completions {
        /// The shell to complete in
        shell: clap_complete::Shell,
    },
}

/// The settings most often changed for one start; each wins over every configuration layer.
#[derive(Debug, Default, Clone, Args)]
pub(crate) struct SettingsArgs {
    /// Add a configuration file layer (also: APP_CONFIG_FILE)
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on (server.host; also HOST)
    #[arg(long, value_name = "ADDRESS")]
    pub(crate) host: Option<String>,
    /// Port to listen on (server.port; also PORT)
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// Model name (llm.model; also OPENAI_MODEL)
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
    /// OpenAI-compatible base URL including /v1 (llm.base_url; also OPENAI_BASE_URL)
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
}

impl SettingsArgs {
    /// The flags as configuration keys and values.
    fn overrides(&self) -> Vec<(&'static str, String)> {
        let flags = [
            ("server.host", self.host.clone()),
            ("server.port", self.port.map(|port| port.to_string())),
            ("llm.model", self.model.clone()),
            ("llm.base_url", self.base_url.clone()),
        ];
        flags
            .into_iter()
            .filter_map(|(key, value)| Some((key, value?)))
            .collect()
    }

    /// Every configuration layer, then these flags; and the keys no setting reads.
    pub(crate) fn load(&self) -> Result<(Settings, Vec<UnknownKey>), SettingsError> {
        Settings::load_checked(self.config.as_deref(), &self.overrides())
    }
}

#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    /// The agent's endpoint, e.g. http://127.0.0.1:8080/banking
    pub(crate) url: String,
    /// The thread to talk on (default: a fresh one)
    #[arg(long, value_name = "ID")]
    pub(crate) thread: Option<String>,
    /// A frontend tool whose results you type (repeatable)
    #[arg(long = "tool", value_name = "NAME")]
    pub(crate) tools: Vec<String>,
    /// An extra request header, e.g. 'Authorization: Bearer ...' (repeatable)
    #[arg(long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub(crate) headers: Vec<(String, String)>,
}

fn parse_header(header: &str) -> Result<(String, String), String> {
    let (name, value) = header
        .split_once(':')
        .ok_or_else(|| format!("`{header}` is not `NAME: VALUE`"))?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

/// `agui-host completions SHELL`.
pub(crate) fn completions(shell: clap_complete::Shell) {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "agui-host",
        &mut std::io::stdout(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("agui-host").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_command_serves_with_the_top_level_flags() {
        let cli = parse(&["--port", "9090", "--config", "a.toml"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.settings.port, Some(9090));
        assert_eq!(cli.settings.config, Some(PathBuf::from("a.toml")));
        assert!(parse(&["--port", "not-a-port"]).is_err());
        assert!(parse(&["nonsense"]).is_err());
    }

    #[test]
    fn flags_become_configuration_overrides() {
        let cli = parse(&[
            "check-config",
            "--host",
            "::",
            "--port",
            "1",
            "--model",
            "m",
            "--base-url",
            "http://x/v1",
        ])
        .unwrap();
        let Some(Command::CheckConfig(settings)) = cli.command else {
            panic!("check-config");
        };
        assert_eq!(
            settings.overrides(),
            [
                ("server.host", "::".to_owned()),
                ("server.port", "1".to_owned()),
                ("llm.model", "m".to_owned()),
                ("llm.base_url", "http://x/v1".to_owned()),
            ]
        );
        assert!(SettingsArgs::default().overrides().is_empty());
    }

    #[test]
    fn chat_takes_a_url_threads_tools_and_headers() {
        let cli = parse(&[
            "chat",
            "http://localhost:8080/banking",
            "--thread",
            "t1",
            "--tool",
            "change_background",
            "--header",
            "Authorization: Bearer abc",
        ])
        .unwrap();
        let Some(Command::Chat(chat)) = cli.command else {
            panic!("chat");
        };
        assert_eq!(chat.url, "http://localhost:8080/banking");
        assert_eq!(chat.thread.as_deref(), Some("t1"));
        assert_eq!(chat.tools, ["change_background"]);
        assert_eq!(
            chat.headers,
            [("Authorization".to_owned(), "Bearer abc".to_owned())]
        );
        assert!(parse(&["chat"]).is_err(), "the URL is required");
        assert!(parse(&["chat", "http://x", "--header", "x"]).is_err());
    }
}
