//! The accept loop: each connection served by hyper (HTTP/1.1, and HTTP/2 without TLS) with
//! buffers sized for this service's traffic, TCP_NODELAY, a bound on open connections, a
//! deadline for a connection's first request, HTTP/2 keep-alive, and a graceful end.
//!
//! Hand-written rather than `axum::serve` for the HTTP/1 buffer bound: hyper's default lets a
//! connection hold about 400 KB of response bytes for a client that reads slowly, on top of
//! what the run itself holds for it (`server.max_stream_buffer_bytes`, see `session::outbox`).
//!
//! What a connection may hold without asking for anything is bounded here, since no request
//! handler sees it:
//! - The loop reads a connection's first bytes to pick HTTP/1 or HTTP/2 (rather than
//!   hyper-util's auto connection, which holds room for both in every connection's task, 1.5 KB
//!   where an HTTP/1 connection needs 0.65), and HTTP/2 has no deadline for a first request: a
//!   socket that sends nothing, or only the HTTP/2 preface and SETTINGS, would be held (a task,
//!   its buffers, a file descriptor) for ever. Each connection therefore has its own timer until
//!   its first request reaches the service (`server.limits.header_read_timeout_secs`); after that,
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

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

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
    let builders = Arc::new(Builders::new(&limits));
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
        let builders = Arc::clone(&builders);
        let deadline = tokio::time::Instant::now() + limits.header_read_timeout;
        tokio::spawn(async move {
            // Held for as long as the connection is open.
            let _slot = slot;
            let Ok(Ok((version, io))) = tokio::time::timeout_at(deadline, read_version(tcp)).await
            else {
                tracing::debug!("closing a connection that sent no request in time");
                return;
            };
            // Each connection is made here, inside its task, and boxed: its state moves no
            // more (a future moved into an async function and pinned there keeps a place for
            // each), and the task holds the connection of the version the client speaks, not
            // room for the larger of the two (hyper-util's auto connection holds both).
            let result = match version {
                HttpVersion::Http1 => {
                    let connection = builders.http1.serve_connection(io, service);
                    drop(builders);
                    until_closed(Box::pin(watcher.watch(connection)), first_request, deadline).await
                }
                HttpVersion::Http2 => {
                    let connection = builders.http2.serve_connection(io, service);
                    drop(builders);
                    until_closed(Box::pin(watcher.watch(connection)), first_request, deadline).await
                }
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

/// The connection builders of both HTTP versions, configured once.
struct Builders {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl Builders {
    fn new(limits: &ConnectionLimits) -> Self {
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(MAX_CONNECTION_BUFFER);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(limits.http2_keep_alive_interval)
            .keep_alive_timeout(limits.http2_keep_alive_timeout)
            .max_concurrent_streams(limits.http2_max_concurrent_streams);
        Builders { http1, http2 }
    }
}

/// Drives a connection until it closes, closing it early when its first request has not come
/// by `deadline`.
async fn until_closed<C>(
    mut connection: Pin<Box<C>>,
    first_request: Arc<Notify>,
    deadline: Instant,
) -> Result<(), hyper::Error>
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    // Whether the first request came in time. Boxed: it is over with the first request, and
    // inline its timer and waiter would stay in the task for as long as the connection is
    // open. `notify_one` keeps a permit, so a request that came before this wait counts.
    let in_time = Box::pin(async move {
        tokio::select! {
            () = first_request.notified() => true,
            () = tokio::time::sleep_until(deadline) => false,
        }
    });
    tokio::select! {
        result = connection.as_mut() => return result,
        in_time = in_time => {
            if !in_time {
                tracing::debug!("closing a connection that sent no request in time");
                return Ok(());
            }
        }
    }
    connection.await
}

/// The HTTP/2 connection preface (RFC 9113, section 3.4): a client that speaks HTTP/2 without
/// TLS (prior knowledge) sends it first; an HTTP/1 request line never starts with it.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpVersion {
    Http1,
    Http2,
}

/// Reads a connection's first bytes, as far as it takes to tell the HTTP/2 preface from an
/// HTTP/1 request, and hands them back in front of the rest of the stream.
async fn read_version(mut tcp: TcpStream) -> std::io::Result<(HttpVersion, TokioIo<Prefixed>)> {
    let mut prefix = [0u8; H2_PREFACE.len()];
    let mut filled = 0;
    let version = loop {
        let read = tcp.read(&mut prefix[filled..]).await?;
        let start = filled;
        filled += read;
        if read == 0 || prefix[start..filled] != H2_PREFACE[start..filled] {
            // Not the preface (or closed before it said): HTTP/1 reads the bytes as a request,
            // or sees the end of the stream and closes too.
            break HttpVersion::Http1;
        }
        if filled == H2_PREFACE.len() {
            break HttpVersion::Http2;
        }
    };
    let prefixed = Prefixed {
        prefix,
        start: 0,
        end: filled as u8,
        tcp,
    };
    Ok((version, TokioIo::new(prefixed)))
}

/// A connection whose first bytes were read to tell its version: they are read again first.
struct Prefixed {
    prefix: [u8; H2_PREFACE.len()],
    /// What is left of `prefix` to read again.
    start: u8,
    end: u8,
    tcp: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.start < this.end {
            let left = &this.prefix[usize::from(this.start)..usize::from(this.end)];
            let taken = left.len().min(buf.remaining());
            buf.put_slice(&left[..taken]);
            this.start += taken as u8;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
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
