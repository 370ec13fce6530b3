//! Connections that hold a socket without asking for anything are closed: one that sends no
//! byte, only the HTTP/2 preface and SETTINGS, or half an HTTP/1 head, within
//! `server.limits.header_read_timeout_secs`; and past `server.limits.max_connections` a new
//! connection is closed at once while the ones being served go on.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

/// The HTTP/2 client preface, then an empty SETTINGS frame (length 0, type 4, no flags,
/// stream 0).
const H2_PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .expect("the server accepts")
}

/// Reads (and discards: the server's own SETTINGS, say) until the server closes the socket;
/// `None` when it is still open after `within`.
async fn closed_within(socket: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buffer = [0u8; 1024];
    let closed = tokio::time::timeout(within, async {
        // A reset counts as closed as much as an end of stream does.
        while socket.read(&mut buffer).await.unwrap_or(0) > 0 {}
    })
    .await;
    closed.ok().map(|()| start.elapsed())
}

/// A whole HTTP/1.1 request for a run, asking the server to close after its answer.
fn a_run_request() -> Vec<u8> {
    let body = serde_json::to_vec(&input(vec![user("hi")])).unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body].concat()
}

/// Reads the answer to [`a_run_request`] to its end: a 200 whose stream finished the run.
async fn assert_the_run_is_answered(socket: &mut TcpStream) {
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("the answer ends")
        .expect("the answer is read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("RUN_FINISHED"), "{answer}");
}

#[tokio::test]
async fn a_connection_that_asks_for_nothing_is_closed_after_the_header_read_timeout() {
    let app = spawn_app(|s| s.server.limits.header_read_timeout_secs = 1.0).await;
    let mut silent = connect(&app).await;
    let mut h2_preface_only = connect(&app).await;
    h2_preface_only
        .write_all(H2_PREFACE_AND_SETTINGS)
        .await
        .unwrap();
    let mut half_a_head = connect(&app).await;
    half_a_head
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n")
        .await
        .unwrap();
    for (what, socket) in [
        ("no byte at all", &mut silent),
        ("only the HTTP/2 preface and SETTINGS", &mut h2_preface_only),
        ("half an HTTP/1 head", &mut half_a_head),
    ] {
        let closed = closed_within(socket, Duration::from_secs(5)).await;
        let closed = closed.unwrap_or_else(|| panic!("{what}: still open after 5 s"));
        assert!(closed < Duration::from_secs(5), "{what}: {closed:?}");
    }
    // A connection that asks in time is served, and the server goes on serving.
    let response = app.get("/health").await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_connection_that_sent_its_request_is_not_cut_by_the_timeout() {
    let app = spawn_app(|s| s.server.limits.header_read_timeout_secs = 0.5).await;
    app.fake.push(crate::fake_llm::Reply::Sse(
        crate::fake_llm::chunks::text_reply(&["Hi."]),
    ));
    let mut socket = connect(&app).await;
    socket.write_all(&a_run_request()).await.unwrap();
    // Let the deadline pass while the answer is read.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_the_run_is_answered(&mut socket).await;
}

/// The server tells HTTP/1 from HTTP/2 by the first bytes: a request that starts like the
/// HTTP/2 preface (`P` of `POST`, as `PRI`) and comes a few bytes at a time is still read
/// whole as HTTP/1, the bytes read to tell included.
#[tokio::test]
async fn a_request_that_starts_like_the_http2_preface_and_comes_in_pieces_is_served() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(crate::fake_llm::Reply::Sse(
        crate::fake_llm::chunks::text_reply(&["Hi."]),
    ));
    let mut socket = connect(&app).await;
    socket.set_nodelay(true).unwrap();
    let request = a_run_request();
    for piece in [
        &request[..1],
        &request[1..3],
        &request[3..30],
        &request[30..],
    ] {
        socket.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_the_run_is_answered(&mut socket).await;
}

#[tokio::test]
async fn past_max_connections_a_new_connection_is_closed_and_the_others_are_served() {
    let app = spawn_app(|s| s.server.limits.max_connections = 2).await;
    let mut first = connect(&app).await;
    let second = connect(&app).await;
    // Both are being served: a request on the first is answered.
    first
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 1024];
    let n = first.read(&mut buffer).await.unwrap();
    assert!(
        buffer[..n].starts_with(b"HTTP/1.1 200"),
        "the first is served"
    );

    let mut third = connect(&app).await;
    let _ = third
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await;
    let closed = closed_within(&mut third, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "the connection over the limit is closed");

    // The first is still served after the refusal.
    first
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let n = first.read(&mut buffer).await.unwrap();
    assert!(buffer[..n].starts_with(b"HTTP/1.1 200"), "still served");

    // Once one closes, a new connection gets its place.
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = reqwest::Client::new()
            .get(format!("{}/health", app.address))
            .send()
            .await;
        if answer.is_ok_and(|a| a.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "a place frees up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
