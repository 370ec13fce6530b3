//! The `agui-host` binary: read the command line, then serve (the default), check the
//! configuration, probe a running server (`healthcheck`), talk to any AG-UI server from a
//! terminal (`chat`), or print shell completions. The command line lives in `cli`, which only
//! the binary compiles.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use agui_host::settings::UnknownKey;
use agui_host::{telemetry, App, Settings};

use cli::{Cli, Command};

/// mimalloc rather than the system allocator: every run allocates and frees many buffers of a
/// few kilobytes on two threads, and glibc's arenas kept that memory after load (the RSS of a
/// soak stepped up by megabytes every few minutes and never came down), while mimalloc returns
/// it and holds the RSS flat (`cargo run --release --example load -- --soak-secs 300`). Only the
/// binary sets it: an embedding application chooses its own allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings_args = match cli.command {
        None => cli.settings,
        Some(Command::Serve(settings_args)) => settings_args,
        Some(Command::CheckConfig(settings_args)) => return cli::check_config(&settings_args),
        Some(Command::Chat(chat_args)) => return cli::chat(chat_args).await,
        Some(Command::Completions { shell }) => {
            cli::completions(shell);
            return ExitCode::SUCCESS;
        }
        Some(Command::Healthcheck(settings_args)) => {
            return match settings_args.load() {
                Ok((settings, _)) => cli::health_check(&settings).await,
                Err(error) => settings_error(&error),
            };
        }
    };
    match settings_args.load() {
        Ok((settings, unknown_keys)) => serve(settings, &unknown_keys).await,
        Err(error) => settings_error(&error),
    }
}

fn settings_error(error: &agui_host::settings::SettingsError) -> ExitCode {
    eprintln!("agui-host: {error}");
    ExitCode::from(2)
}

/// Logging, the service, and its run until a signal stops it.
async fn serve(settings: Settings, unknown_keys: &[UnknownKey]) -> ExitCode {
    // Held until the server stops: dropping it sends the spans still buffered.
    let _telemetry = telemetry::init(&settings.telemetry);
    for unknown in unknown_keys {
        tracing::warn!("{unknown}: no setting reads it (see `agui-host check-config`)");
    }
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
