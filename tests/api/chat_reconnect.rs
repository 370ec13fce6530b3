//! The terminal client picking a run up again after its connection drops: the binary talks to
//! the real app through a TCP proxy that cuts the first run's response mid-frame, and its
//! transcript must equal that of the same conversation without the cut, but for the two
//! notice lines that say what happened.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agui_host::settings::ThreadStoreKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::chat_client::{chat, ChatOptions};
use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;

const PARTS: [&str; 8] = [
    "Once ", "upon ", "a ", "time ", "a ", "run ", "went ", "on.",
];

/// A proxy to `target` that, once, cuts the response of the connection that carries the
/// `nth` occurrence of `marker`: it forwards `extra` bytes past it (inside the frame) and
/// closes both sides. Every other connection passes untouched.
async fn cutting_proxy(target: String, marker: &'static str, nth: usize, extra: usize) -> String {
    cutting_proxy_then(target.clone(), target, marker, nth, extra).await
}

/// [`cutting_proxy`], with the connections opened after the cut sent to `then`.
async fn cutting_proxy_then(
    target: String,
    then: String,
    marker: &'static str,
    nth: usize,
    extra: usize,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let armed = Arc::new(AtomicBool::new(true));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let target = if armed.load(Ordering::SeqCst) {
                target.clone()
            } else {
                then.clone()
            };
            let armed = armed.clone();
            tokio::spawn(async move {
                let host = target.trim_start_matches("http://");
                let Ok(server) = TcpStream::connect(host).await else {
                    return;
                };
                relay(client, server, armed, marker, nth, extra).await;
            });
        }
    });
    format!("http://{address}")
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<AtomicBool>,
    marker: &str,
    nth: usize,
    extra: usize,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut seen = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match server_read.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let before = seen.len();
        seen.extend_from_slice(&buffer[..read]);
        let cut = armed
            .load(Ordering::SeqCst)
            .then(|| nth_end(&seen, marker.as_bytes(), nth))
            .flatten()
            .map(|end| (end + extra).min(seen.len()));
        if let Some(cut) = cut {
            armed.store(false, Ordering::SeqCst);
            let _ = client_write.write_all(&seen[before..cut]).await;
            break; // dropping both halves closes the connection mid-response
        }
        if client_write.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    upstream.abort();
}

/// Where the `nth` occurrence of `marker` ends in `bytes`.
fn nth_end(bytes: &[u8], marker: &[u8], nth: usize) -> Option<usize> {
    bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, window)| *window == marker)
        .nth(nth - 1)
        .map(|(at, _)| at + marker.len())
}

fn session(url: String) -> ChatOptions {
    ChatOptions {
        url,
        ..ChatOptions::default()
    }
}

/// The transcript without its banner (which names the URL and a fresh thread id).
fn without_banner(transcript: &str) -> &str {
    transcript.split_once('\n').map_or("", |(_, rest)| rest)
}

/// The text replies of two runs; the first trickles, so the reconnect follows it live.
fn push_replies(app: &TestApp) {
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&PARTS),
        Duration::from_millis(30),
    ));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["And ", "then ", "more."])));
}

#[tokio::test]
async fn a_run_cut_mid_stream_is_resumed_and_the_transcript_equals_the_uncut_one() {
    let script = "Tell me a story\nGo on\n";
    let uncut_app = spawn_app(|_| {}).await;
    push_replies(&uncut_app);
    let uncut = chat(session(format!("{}/", uncut_app.address)), script).await;

    let app = spawn_app(|_| {}).await;
    push_replies(&app);
    let proxy = cutting_proxy(app.address.clone(), "TEXT_MESSAGE_CONTENT", 3, 12).await;
    let cut = chat(session(format!("{proxy}/")), script).await;

    // The notice names the last whole event read, then the stream goes on after it.
    let start = cut
        .find("connection lost, resuming from ")
        .unwrap_or_else(|| panic!("no reconnect notice in:\n{cut}"));
    let notice_end =
        start + cut[start..].find("…\nresumed\n").expect("resumed") + "…\nresumed\n".len();
    let last_id = &cut
        [start + "connection lost, resuming from ".len()..cut[start..].find('…').unwrap() + start];
    assert!(
        last_id.starts_with("run_") && last_id.contains(':'),
        "{last_id}"
    );
    assert_eq!(
        &cut[start - 1..start],
        "\n",
        "the notice is on a line of its own"
    );
    // The notice broke the streamed line; without it (and that break) nothing differs.
    let stitched = format!("{}{}", &cut[..start - 1], &cut[notice_end..]);
    assert_eq!(without_banner(&stitched), without_banner(&uncut));
    assert!(
        uncut.contains("Once upon a time a run went on.\n"),
        "{uncut}"
    );
    assert!(
        !cut.contains("[warning]") && !cut.contains("[error]"),
        "{cut}"
    );

    // The next run carries the whole answer in its history, as the uncut session's does.
    let bodies = app.upstream_bodies();
    assert_eq!(
        bodies.len(),
        2,
        "one model call per run, none repeated by the reconnect"
    );
    let history = bodies[1]["messages"].as_array().unwrap();
    let answer = history
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the first answer");
    assert_eq!(content_text(answer), PARTS.concat());
    assert_eq!(bodies[1], uncut_app.upstream_bodies()[1]);
}

#[tokio::test]
async fn without_event_ids_a_cut_stream_is_reported_and_the_session_goes_on() {
    let app = spawn_app(|settings| settings.threads.store = ThreadStoreKind::Off).await;
    push_replies(&app);
    let proxy = cutting_proxy(app.address.clone(), "TEXT_MESSAGE_CONTENT", 3, 12).await;

    let cut = chat(session(format!("{proxy}/")), "Tell me a story\nGo on\n").await;

    assert!(!cut.contains("resuming"), "no ids, no reconnect:\n{cut}");
    assert_eq!(cut.matches("[error] the stream broke").count(), 1, "{cut}");
    assert!(!cut.contains("[warning]"), "the error says it all:\n{cut}");
    assert!(
        cut.contains("And then more.\n"),
        "the next message still runs:\n{cut}"
    );
}

#[tokio::test]
async fn a_run_the_server_does_not_know_is_reported_not_retried() {
    // After the cut, the proxy sends every connection to another server, which never saw the
    // run (a replica without a shared log): 404, said once, and the session goes on there.
    let app = spawn_app(|_| {}).await;
    push_replies(&app);
    let other = spawn_app(|_| {}).await;
    other
        .fake
        .push(Reply::Sse(chunks::text_reply(&["And ", "then ", "more."])));
    let proxy = cutting_proxy_then(
        app.address.clone(),
        other.address.clone(),
        "TEXT_MESSAGE_CONTENT",
        3,
        12,
    )
    .await;

    let cut = chat(session(format!("{proxy}/")), "Tell me a story\nGo on\n").await;

    assert!(cut.contains("connection lost, resuming from "), "{cut}");
    assert_eq!(
        cut.matches("[error] the run cannot be resumed").count(),
        1,
        "{cut}"
    );
    assert!(!cut.contains("[warning]"), "the error says it all:\n{cut}");
    assert!(
        cut.contains("[http 404 Not Found]") && cut.contains("run_not_found"),
        "{cut}"
    );
    assert!(
        cut.contains("And then more.\n"),
        "the next message still runs:\n{cut}"
    );
}

/// A server tool's call and result, then the answer, then a second message: the session the
/// cut and the uncut runs both play.
async fn tool_session(address: &str, app: &TestApp) -> String {
    app.fake.push_call_then_text(
        ("call_w", "get_weather", r#"{"location":"Paris"}"#),
        "Sunny in Paris.",
    );
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["You're welcome."])));
    chat(
        session(format!("{address}/")),
        "Weather in Paris?\nThanks\n",
    )
    .await
}

#[tokio::test]
async fn a_cut_at_a_tool_call_its_result_or_the_terminal_event_loses_and_repeats_nothing() {
    let uncut_app = spawn_app(|_| {}).await;
    let uncut = tool_session(&uncut_app.address, &uncut_app).await;
    let uncut_bodies = uncut_app.upstream_bodies();
    for (marker, extra) in [
        ("TOOL_CALL_START", 5),
        ("TOOL_CALL_ARGS", 0),
        ("TOOL_CALL_RESULT", 20),
        ("RUN_FINISHED", 3),
    ] {
        let app = spawn_app(|_| {}).await;
        let proxy = cutting_proxy(app.address.clone(), marker, 1, extra).await;
        let cut = tool_session(&proxy, &app).await;

        assert_eq!(
            cut.matches("connection lost, resuming from ").count(),
            1,
            "cut in {marker}:\n{cut}"
        );
        // The notice may follow a prompt on its line (piped input is not echoed).
        let without_notices: String = cut
            .lines()
            .filter(|line| *line != "resumed")
            .map(|line| match line.find("connection lost, resuming from ") {
                Some(at) => &line[..at],
                None => line,
            })
            .collect::<Vec<_>>()
            .join("\n");
        // Line breaks aside (a notice may end a streamed line early), the same transcript.
        assert_eq!(
            without_banner(&without_notices).replace('\n', ""),
            without_banner(&uncut).replace('\n', ""),
            "cut in {marker}:\n{cut}"
        );
        assert_eq!(cut.matches("[tool] get_weather").count(), 1, "{cut}");
        assert_eq!(cut.matches("[result] ").count(), 1, "{cut}");
        // The runs after it carry the same history as without the cut.
        assert_eq!(app.upstream_bodies(), uncut_bodies, "cut in {marker}");
    }
}
