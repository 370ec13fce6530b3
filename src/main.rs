//! The `agui-host` binary: read settings, start logging, serve until told to stop; or, as
//! `agui-host healthcheck`, probe a running server (the container's `HEALTHCHECK`, so the image
//! needs no curl); or, as `agui-host chat <url>`, talk to any AG-UI server from a terminal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use agui_host::{telemetry, App, Settings};

/// mimalloc rather than the system allocator: every run allocates and frees many buffers of a
/// few kilobytes on two threads, and glibc's arenas kept that memory after load (the RSS of a
/// soak stepped up by megabytes every few minutes and never came down), while mimalloc returns
/// it and holds the RSS flat (`cargo run --release --example load -- --soak-secs 300`). Only the
/// binary sets it: an embedding application chooses its own allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "\
agui-host: an AG-UI host for LLM agents

Usage: agui-host [--config FILE]
       agui-host healthcheck [--config FILE]
       agui-host chat URL [--thread ID] [--tool NAME]... [--header 'NAME: VALUE']...

Commands:
  healthcheck     GET /health on the configured port of this machine; exit 0 when it answers
                  200 (for container health checks)
  chat            an interactive AG-UI client: type messages, see text, tool calls, results
                  and state; answer approvals with y/n; type the results of the client tools
                  named with --tool; :state, :messages, :help, :quit

Options:
  --config FILE   add a configuration file layer (also: APP_CONFIG_FILE)
  -h, --help      print this help
  -V, --version   print the version

Settings come from config/default.toml (embedded), config/$APP_ENVIRONMENT.toml, the --config
file, APP_<SECTION>__<KEY> variables, and OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL, HOST,
PORT. With no API key and no base URL, a built-in offline model answers.";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Serve,
    HealthCheck,
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("chat") {
        args.next();
        return chat(args).await;
    }
    let (command, config_file) = match parse_args(args) {
        Ok(Some(parsed)) => parsed,
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
    if command == Command::HealthCheck {
        return health_check(&settings).await;
    }
    // Held until the server stops: dropping it sends the spans still buffered.
    let _telemetry = telemetry::init(&settings.telemetry);
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

/// `Ok(Some(what, config))` to run, `Ok(None)` when help or version was printed.
fn parse_args(
    mut args: impl Iterator<Item = String>,
) -> Result<Option<(Command, Option<PathBuf>)>, String> {
    let mut config_file = None;
    let mut command = Command::Serve;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "healthcheck" if command == Command::Serve => command = Command::HealthCheck,
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
    Ok(Some((command, config_file)))
}

/// `agui-host chat`: no settings and no logging, so nothing mixes into the conversation.
async fn chat(args: impl Iterator<Item = String>) -> ExitCode {
    let options = match parse_chat_args(args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match agui_host::chat_client::run(options, std::io::stdin().lock(), std::io::stdout()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agui-host chat: {error}");
            ExitCode::FAILURE
        }
    }
}

fn parse_chat_args(
    mut args: impl Iterator<Item = String>,
) -> Result<agui_host::chat_client::ChatOptions, String> {
    let mut options = agui_host::chat_client::ChatOptions::default();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--thread" => options.thread_id = Some(value("--thread")?),
            "--tool" => options.client_tools.push(value("--tool")?),
            "--header" => {
                let header = value("--header")?;
                let (name, header_value) = header
                    .split_once(':')
                    .ok_or_else(|| format!("--header `{header}` is not `NAME: VALUE`"))?;
                options
                    .headers
                    .push((name.trim().to_owned(), header_value.trim().to_owned()));
            }
            other if other.starts_with('-') => return Err(format!("unknown argument `{other}`")),
            url if options.url.is_empty() => options.url = url.to_owned(),
            extra => return Err(format!("unexpected argument `{extra}`")),
        }
    }
    if options.url.is_empty() {
        return Err("chat needs the URL of an AG-UI endpoint".to_owned());
    }
    Ok(options)
}

/// Probes `/health` on this machine's configured port. A raw HTTP/1.0 request over TCP: the
/// probe runs every few seconds in the container, and needs no TLS client or extra binary.
async fn health_check(settings: &agui_host::Settings) -> ExitCode {
    // A wildcard listen address is reachable on loopback.
    let host = match settings.server.host.as_str() {
        "0.0.0.0" | "" => "127.0.0.1",
        "::" | "[::]" => "::1",
        other => other,
    };
    let port = settings.server.port;
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut head = Vec::with_capacity(64);
        // The status line is all we need; a healthy answer is tiny anyway.
        (&mut stream).take(64).read_to_end(&mut head).await?;
        Ok::<_, std::io::Error>(head)
    };
    match tokio::time::timeout(Duration::from_secs(3), probe).await {
        Ok(Ok(head)) if head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200") => {
            ExitCode::SUCCESS
        }
        Ok(Ok(head)) => {
            let line = String::from_utf8_lossy(&head);
            eprintln!(
                "agui-host healthcheck: unhealthy answer: {}",
                line.lines().next().unwrap_or("")
            );
            ExitCode::FAILURE
        }
        Ok(Err(error)) => {
            eprintln!("agui-host healthcheck: {host}:{port}: {error}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("agui-host healthcheck: {host}:{port}: no answer within 3 s");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<(Command, Option<PathBuf>)>, String> {
        parse_args(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn parses_serve_and_healthcheck_with_a_config_file() {
        assert_eq!(parse(&[]), Ok(Some((Command::Serve, None))));
        assert_eq!(
            parse(&["healthcheck", "--config", "a.toml"]),
            Ok(Some((Command::HealthCheck, Some(PathBuf::from("a.toml")))))
        );
        assert!(parse(&["healthcheck", "healthcheck"]).is_err());
        assert!(parse(&["serve"]).is_err());
    }

    #[test]
    fn parses_chat_options() {
        let options = parse_chat_args(
            [
                "http://localhost:8080/banking",
                "--thread",
                "t1",
                "--tool",
                "change_background",
                "--header",
                "Authorization: Bearer abc",
            ]
            .into_iter()
            .map(String::from),
        )
        .unwrap();
        assert_eq!(options.url, "http://localhost:8080/banking");
        assert_eq!(options.thread_id.as_deref(), Some("t1"));
        assert_eq!(options.client_tools, ["change_background"]);
        assert_eq!(
            options.headers,
            [("Authorization".to_owned(), "Bearer abc".to_owned())]
        );
        assert!(parse_chat_args(std::iter::empty()).is_err());
        assert!(parse_chat_args(["--header".to_owned(), "x".to_owned()].into_iter()).is_err());
    }
}
