//! The accept loop: each connection served by hyper (HTTP/1.1, and HTTP/2 without TLS) with
//! buffers sized for this service's traffic, TCP_NODELAY, and a graceful end.
//!
//! Hand-written rather than `axum::serve` for the HTTP/1 buffer bound: hyper's default lets a
//! connection hold about 400 KB of response bytes for a client that reads slowly, on top of
//! what the run itself holds for it (`server.max_stream_buffer_bytes`, see `run::outbox`).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Most bytes an HTTP/1 connection buffers in each direction: request heads (with their
/// cookies and tokens) fit, and so do a few SSE chunks waiting for the socket.
const MAX_CONNECTION_BUFFER: usize = 64 * 1024;

/// How long the loop pauses after an accept error that is not about one connection (out of
/// file descriptors, say), so it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets each
/// open connection finish its responses (idle keep-alive connections close at once), and
/// returns when the last one has closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .max_buf_size(MAX_CONNECTION_BUFFER);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => tcp,
                Err(error) => {
                    on_accept_error(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Every SSE event is a small write: without TCP_NODELAY, Nagle's algorithm holds each
        // one back until the client's delayed ACK (about 40 ms), which stalls streams.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A failed accept: one connection's trouble (it was reset before we took it) is skipped;
/// anything else is logged and waited out.
async fn on_accept_error(error: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accept failed; pausing before the next accept");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}
