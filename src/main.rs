//! The `agui-host` binary: read settings, start logging, serve until told to stop.

use std::path::PathBuf;
use std::process::ExitCode;

use agui_host::{telemetry, App, Settings};

const USAGE: &str = "\
agui-host: an AG-UI host for LLM agents

Usage: agui-host [--config FILE]

Options:
  --config FILE   add a configuration file layer (also: APP_CONFIG_FILE)
  -h, --help      print this help
  -V, --version   print the version

Settings come from config/default.toml (embedded), config/$APP_ENVIRONMENT.toml, the --config
file, APP_<SECTION>__<KEY> variables, and OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL, HOST,
PORT. With no API key and no base URL, a built-in offline model answers.";

#[tokio::main]
async fn main() -> ExitCode {
    let config_file = match parse_args(std::env::args().skip(1)) {
        Ok(Some(config_file)) => config_file,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let settings = match Settings::load(config_file.as_deref()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("agui-host: {error}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(&settings.telemetry);
    let app = match App::build(settings).await {
        Ok(app) => app,
        Err(error) => {
            tracing::error!(%error, "cannot start");
            eprintln!("agui-host: {error}");
            return ExitCode::FAILURE;
        }
    };
    if app.is_offline() {
        tracing::warn!(
            "no model configured (OPENAI_API_KEY / OPENAI_BASE_URL unset): the built-in offline \
             model answers with scripted replies"
        );
    }
    tracing::info!(
        address = %app.local_addr(),
        model = app.model_description(),
        "agui-host listening"
    );
    match app.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "server failed");
            ExitCode::FAILURE
        }
    }
}

/// `Ok(Some(config))` to run, `Ok(None)` when help or version was printed.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Option<PathBuf>>, String> {
    let mut config_file = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "-V" | "--version" => {
                println!("agui-host {}", env!("CARGO_PKG_VERSION"));
                return Ok(None);
            }
            "--config" => match args.next() {
                Some(path) => config_file = Some(PathBuf::from(path)),
                None => return Err("--config needs a file".to_owned()),
            },
            other => match other.strip_prefix("--config=") {
                Some(path) => config_file = Some(PathBuf::from(path)),
                None => return Err(format!("unknown argument `{other}`")),
            },
        }
    }
    Ok(Some(config_file))
}
