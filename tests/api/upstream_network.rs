//! Upstream faults below HTTP: nothing listening, a name that does not resolve, a TLS handshake
//! that fails, an answer that is not HTTP, a connection closed before any response. All are
//! `upstream_unreachable`, with the cause in the message; each run is bounded in time, so a
//! fault can never hang the test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agui_host::settings::Settings;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::helpers::*;
use crate::upstream_errors::run_error;

/// The app with its upstream at `base_url`, short connect timeout, and `max_retries`.
async fn app_with_upstream(base_url: String, max_retries: u32) -> TestApp {
    spawn_app(move |settings: &mut Settings| {
        settings.llm.base_url = base_url;
        settings.llm.connect_timeout_secs = 3;
        settings.llm.first_byte_timeout_secs = 5;
        settings.llm.max_retries = max_retries;
    })
    .await
}

async fn events_within(app: &TestApp, limit: Duration) -> Vec<Value> {
    tokio::time::timeout(limit, app.run_events("/", &input(vec![user("hi")])))
        .await
        .unwrap_or_else(|_| panic!("the run did not end within {limit:?}"))
}

#[track_caller]
fn unreachable_because<'a>(events: &'a [Value], cause: &str) -> &'a Value {
    let error = run_error(events, "upstream_unreachable");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(cause),
        "the message names the cause ({cause}): {message}"
    );
    assert!(
        !message.contains("127.0.0.1") && !message.contains(".invalid"),
        "the message does not carry the upstream address: {message}"
    );
    assert_eq!(events[0]["type"], "RUN_STARTED");
    error
}

/// A loopback port nothing listens on (bound, then released).
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("address")
}

/// A TCP server that runs `handle` on every connection and counts them.
async fn tcp_server<F, Fut>(handle: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handle(socket));
        }
    });
    (addr, connections)
}

#[tokio::test]
async fn connection_refused_is_retried_then_upstream_unreachable() {
    let addr = closed_port().await;
    let app = app_with_upstream(format!("http://{addr}/v1"), 1).await;

    let events = events_within(&app, Duration::from_secs(15)).await;

    unreachable_because(&events, "connection refused");
}

#[tokio::test]
async fn dns_failure_is_upstream_unreachable() {
    // `.invalid` never resolves (RFC 6761).
    let app = app_with_upstream("http://model-server.agui-host.invalid/v1".into(), 0).await;

    let events = events_within(&app, Duration::from_secs(15)).await;

    unreachable_because(&events, "DNS lookup failed");
}

#[tokio::test]
async fn https_to_a_server_that_does_not_speak_tls_is_a_tls_failure_not_retried() {
    // A plain HTTP server on the port: it answers the ClientHello with an HTTP error.
    let (addr, connections) = tcp_server(|mut socket| async move {
        let mut buf = [0u8; 1024];
        let _ = socket.read(&mut buf).await;
        let _ = socket
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
        let _ = socket.shutdown().await;
    })
    .await;
    let app = app_with_upstream(format!("https://{addr}/v1"), 2).await;

    let events = events_within(&app, Duration::from_secs(15)).await;

    unreachable_because(&events, "TLS handshake failed");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "a TLS failure is not retried"
    );
}

/// A real TLS server whose certificate (for localhost and 127.0.0.1) no trusted CA signed.
/// Returns its address, the connections it accepted, and the handshakes that completed.
///
/// The fixture is a throwaway, made with `openssl req -x509 -newkey ec -pkeyopt
/// ec_paramgen_curve:prime256v1 -nodes -days 36500 -subj "/CN=agui-host test server"
/// -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -addext basicConstraints=critical,CA:FALSE
/// -addext extendedKeyUsage=serverAuth`, then converted to DER (the key as PKCS#8).
async fn self_signed_tls_server() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use tokio_rustls::rustls::{self, pki_types};

    let certificate =
        pki_types::CertificateDer::from(include_bytes!("fixtures/self_signed_cert.der").to_vec());
    let key = pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(
        include_bytes!("fixtures/self_signed_key.der").to_vec(),
    ));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(vec![certificate], key)
    .expect("the fixture certificate and key");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let completed = handshakes.clone();
    let (addr, connections) = tcp_server(move |socket| {
        let acceptor = acceptor.clone();
        let completed = completed.clone();
        async move {
            if let Ok(mut tls) = acceptor.accept(socket).await {
                completed.fetch_add(1, Ordering::SeqCst);
                let _ = tls.shutdown().await;
            }
        }
    })
    .await;
    (addr, connections, handshakes)
}

#[tokio::test]
async fn https_to_a_self_signed_certificate_is_a_tls_failure() {
    // The client must refuse it rather than send the API key to it.
    let (addr, connections, handshakes) = self_signed_tls_server().await;
    let app = app_with_upstream(format!("https://{addr}/v1"), 2).await;

    let events = events_within(&app, Duration::from_secs(15)).await;

    unreachable_because(&events, "TLS handshake failed");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "not retried");
    assert_eq!(
        handshakes.load(Ordering::SeqCst),
        0,
        "the client never completed a handshake with an untrusted server"
    );
}

#[tokio::test]
async fn http_to_a_tls_port_says_check_http_versus_https_and_is_not_retried() {
    // The common slip: `http://` in front of a server that only speaks TLS.
    let (addr, connections, _) = self_signed_tls_server().await;
    let app = app_with_upstream(format!("http://{addr}/v1"), 2).await;

    let events = events_within(&app, Duration::from_secs(15)).await;

    unreachable_because(&events, "check http versus https");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "not retried");
}

#[tokio::test]
async fn connection_closed_before_a_response_is_retried_then_upstream_unreachable() {
    // Accepts, reads the request, hangs up without a word: the server never answered, so a
    // retry cannot double anything.
    let (addr, connections) = tcp_server(|mut socket| async move {
        let mut buf = [0u8; 4096];
        let _ = socket.read(&mut buf).await;
        drop(socket);
    })
    .await;
    let app = app_with_upstream(format!("http://{addr}/v1"), 2).await;

    let events = events_within(&app, Duration::from_secs(15)).await;

    unreachable_because(&events, "connection closed before a response");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        3,
        "one attempt and max_retries = 2 retries"
    );
}
