//! The accept loop: each connection served by hyper (HTTP/1.1, and HTTP/2 without TLS) with
//! buffers sized for this service's traffic, TCP_NODELAY, a bound on open connections, a
//! deadline for a connection's first request, HTTP/2 keep-alive, and a graceful end.
//!
//! Hand-written rather than `axum::serve` for the HTTP/1 buffer bound: hyper's default lets a
//! connection hold about 400 KB of response bytes for a client that reads slowly, on top of
//! what the run itself holds for it (`server.max_stream_buffer_bytes`, see `run::outbox`).
//!
//! What a connection may hold without asking for anything is bounded here, since no request
//! handler sees it:
//! - hyper-util's auto builder reads the first bytes to pick HTTP/1 or HTTP/2, with no
//!   deadline, and HTTP/2 has no deadline for a first request either: a socket that sends
//!   nothing, or only the HTTP/2 preface and SETTINGS, would be held (a task, its buffers, a
//!   file descriptor) for ever. Each connection therefore has its own timer until its first
//!   request reaches the service (`server.limits.header_read_timeout_secs`); after that,
//!   hyper's `header_read_timeout` bounds every HTTP/1 head (an idle keep-alive connection
//!   too), and HTTP/2 keep-alive pings close a connection whose peer has gone.
//! - `server.limits.max_connections` bounds them all. A connection over it is closed as soon
//!   as it is accepted, not answered: a 503 would mean reading its request (whose HTTP version
//!   is not even known yet) with a task and buffers per refused connection, which is what the
//!   bound is there to save; a client, proxy or load balancer sees a closed connection and
//!   retries elsewhere or later. The loop takes a slot without waiting (`try_acquire`), so it
//!   never blocks, and a refusal is a close, so it never spins on its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};

use crate::settings::LimitSettings;

/// Most bytes an HTTP/1 connection buffers in each direction: request heads (with their
/// cookies and tokens) fit, and so do a few SSE chunks waiting for the socket.
const MAX_CONNECTION_BUFFER: usize = 64 * 1024;

/// How long the loop pauses after an accept error that is not about one connection (out of
/// file descriptors, say), so it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// What one connection may hold, from `server.limits`.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Most connections open at once; `None`: no bound.
    pub max_connections: Option<usize>,
    /// From the accept to the first request, and for every later HTTP/1 request head.
    pub header_read_timeout: Duration,
    pub http2_keep_alive_interval: Option<Duration>,
    pub http2_keep_alive_timeout: Duration,
    pub http2_max_concurrent_streams: u32,
}

impl ConnectionLimits {
    /// From validated settings (durations finite and positive where they must be).
    pub fn new(limits: &LimitSettings) -> Self {
        ConnectionLimits {
            max_connections: Some(limits.max_connections).filter(|&n| n > 0),
            header_read_timeout: Duration::from_secs_f64(limits.header_read_timeout_secs),
            http2_keep_alive_interval: Some(limits.http2_keep_alive_interval_secs)
                .filter(|&secs| secs > 0.0)
                .map(Duration::from_secs_f64),
            http2_keep_alive_timeout: Duration::from_secs_f64(limits.http2_keep_alive_timeout_secs),
            http2_max_concurrent_streams: limits.http2_max_concurrent_streams,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets each
/// open connection finish its responses (idle keep-alive connections close at once), and
/// returns when the last one has closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_CONNECTION_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(limits.http2_keep_alive_timeout)
        .max_concurrent_streams(limits.http2_max_concurrent_streams);
    let builder = Arc::new(builder);
    let slots = limits.max_connections.map(|n| Arc::new(Semaphore::new(n)));
    // Whether the last connection was refused, so a burst over the limit logs once.
    let mut refusing = false;
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
        let slot = match slots
            .as_ref()
            .map(|slots| Arc::clone(slots).try_acquire_owned())
        {
            None => None,
            Some(Ok(slot)) => Some(slot),
            Some(Err(_full)) => {
                if !refusing {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "server.limits.max_connections reached: closing new connections until \
                         one ends"
                    );
                }
                refusing = true;
                drop(tcp);
                continue;
            }
        };
        refusing = false;
        // Every SSE event is a small write: without TCP_NODELAY, Nagle's algorithm holds each
        // one back until the client's delayed ACK (about 40 ms), which stalls streams.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let first_request = Arc::new(Notify::new());
        let service = NoticeRequests {
            inner: TowerToHyperService::new(router.clone()),
            seen: Arc::clone(&first_request),
        };
        // Subscribed here, before the task runs, so a shutdown from now on reaches it.
        let watcher = graceful.watcher();
        let builder = Arc::clone(&builder);
        let first_request_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            // Held for as long as the connection is open.
            let _slot = slot;
            // Made here, not before the spawn: a connection moved into the task and pinned
            // there would take two places in it, the captured one and the pinned one.
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                .into_owned();
            drop(builder);
            let connection = watcher.watch(connection);
            tokio::pin!(connection);
            // Whether the first request came in time. Boxed: it is over with the first request,
            // and inline its timer and waiter would stay in the task for as long as the
            // connection is open. `notify_one` keeps a permit, so a request that came before
            // this wait counts.
            let in_time = Box::pin(async move {
                tokio::select! {
                    () = first_request.notified() => true,
                    () = tokio::time::sleep(first_request_timeout) => false,
                }
            });
            let ended = tokio::select! {
                result = &mut connection => Some(result),
                in_time = in_time => {
                    if !in_time {
                        tracing::debug!(
                            timeout_secs = first_request_timeout.as_secs_f64(),
                            "closing a connection that sent no request in time"
                        );
                        return;
                    }
                    None
                }
            };
            let result = match ended {
                Some(result) => result,
                None => connection.await,
            };
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The service of one connection, telling the connection's task that a request has arrived
/// (from then on the first-request deadline is over).
#[derive(Clone)]
struct NoticeRequests<S> {
    inner: S,
    seen: Arc<Notify>,
}

impl<S, R> hyper::service::Service<R> for NoticeRequests<S>
where
    S: hyper::service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, request: R) -> Self::Future {
        self.seen.notify_one();
        self.inner.call(request)
    }
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
