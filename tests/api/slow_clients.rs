//! A client that reads slower than the model writes: what the server holds for it is bounded
//! (`server.max_stream_buffer_bytes`), a reader that makes no room for
//! `server.slow_client_timeout_secs` gets `RUN_ERROR` `client_too_slow` with the model's
//! stream closed, and a reader that is merely slow still gets the whole run.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;
use agui_host::settings::{Settings, ThreadStoreKind};

/// Text deltas in a long reply.
const DELTAS: usize = 12_000;

/// `DELTAS` text deltas of `delta_len` bytes each.
fn long_reply(delta_len: usize) -> Vec<String> {
    let delta = "y".repeat(delta_len);
    let parts: Vec<&str> = (0..DELTAS).map(|_| delta.as_str()).collect();
    chunks::text_reply(&parts)
}

fn small_buffer(settings: &mut Settings) {
    settings.threads.store = ThreadStoreKind::Off;
    settings.server.max_stream_buffer_bytes = 16 * 1024;
    settings.server.slow_client_timeout_secs = 0.5;
    settings.server.limits.max_concurrent_runs = 1;
}

/// A raw connection with a tiny receive buffer that has sent a run request: nothing has been
/// read yet, so the server sees a client that stops reading.
async fn post_without_reading(app: &TestApp, body: &Value) -> TcpStream {
    let address = app.address.trim_start_matches("http://").parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address).await.expect("the app accepts");
    let body = serde_json::to_vec(body).unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    stream
}

/// Reads the response to its end, pausing `pause` after every read; the status line and the
/// de-chunked body.
async fn read_response(mut stream: TcpStream, pause: Duration) -> (String, Vec<u8>) {
    let mut raw = Vec::new();
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer))
            .await
            .expect("the stream ends")
            .expect("the read succeeds");
        if read == 0 {
            break;
        }
        raw.extend_from_slice(&buffer[..read]);
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    (head, dechunk(&raw[split + 4..]))
}

fn dechunk(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = chunked.windows(2).position(|w| w == b"\r\n").expect("size");
        let size = std::str::from_utf8(&chunked[..line_end]).unwrap();
        let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
        if size == 0 {
            return body;
        }
        let data = &chunked[line_end + 2..];
        body.extend_from_slice(&data[..size]);
        chunked = &data[size + 2..];
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_gets_client_too_slow_and_the_upstream_is_closed() {
    let app = spawn_app(small_buffer).await;
    // 12 MB, paced, so the model is still writing when the run ends: the kernel's socket
    // buffers alone may take 4 MB on the way to the client, and a burst would sit whole in
    // those of the upstream connection before anyone noticed.
    app.fake
        .push(Reply::SlowSse(long_reply(1000), Duration::from_millis(1)));
    let stream = post_without_reading(&app, &input(vec![user("Tell me everything")])).await;

    // The client reads nothing while the model streams: the run fills the buffer, waits
    // 0.5 s for room, and ends; the upstream request is dropped before its reply is done.
    assert!(
        app.fake.wait_for_disconnect(Duration::from_secs(20)).await,
        "the upstream request stayed open for a client that reads nothing"
    );
    let (head, body) = read_response(stream, Duration::ZERO).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let full_size = DELTAS * 1000;
    assert!(
        body.len() < full_size / 2,
        "the server went on streaming to a stuck client: {} of about {full_size} bytes",
        body.len()
    );
    let events = parse_sse(std::str::from_utf8(&body).unwrap());
    assert_well_formed(&events);
    let terminal = last(&events);
    assert_eq!(terminal["type"], "RUN_ERROR", "{terminal}");
    assert_eq!(terminal["code"], "client_too_slow", "{terminal}");

    // The run's slot (the only one) is free: the next run streams to its end.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Hello", " again"])));
    let next = app.run_events("/", &input(vec![user("Hi")])).await;
    assert_eq!(last(&next)["type"], "RUN_FINISHED");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.lines().any(|line| {
            line.contains("client_too_slow") && !line.starts_with('#') && line.ends_with(" 1")
        }),
        "the failed run is counted under its code:\n{metrics}"
    );
}

#[tokio::test]
async fn a_client_that_reads_slowly_but_steadily_gets_the_whole_run() {
    let app = spawn_app(|settings| {
        small_buffer(settings);
        settings.server.slow_client_timeout_secs = 2.0;
    })
    .await;
    app.fake.push(Reply::Sse(long_reply(200)));
    let stream = post_without_reading(&app, &input(vec![user("Tell me everything")])).await;

    // Far slower than the model (a pause after every read of at most 16 KB), never stuck.
    let (_, body) = read_response(stream, Duration::from_millis(2)).await;
    let events = parse_sse(std::str::from_utf8(&body).unwrap());
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let text: usize = texts(&events).iter().map(|(_, text)| text.len()).sum();
    assert_eq!(text, DELTAS * 200);
    assert_eq!(
        app.fake.disconnects(),
        0,
        "the model's reply was read to its end"
    );
}
