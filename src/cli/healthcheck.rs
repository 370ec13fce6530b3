//! `agui-host healthcheck`: probes `/health` of the server on this machine (the container's
//! `HEALTHCHECK`, so the image needs no curl).

use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Probes `/health` on this machine's configured port. A raw HTTP/1.0 request over TCP: the
/// probe runs every few seconds in the container, and needs no TLS client or extra binary.
pub(crate) async fn health_check(settings: &agui_host::Settings) -> ExitCode {
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
