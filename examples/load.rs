//! Load test: N concurrent runs through the real app, in this process, against an in-process
//! fake OpenAI-compatible upstream whose replies trickle out one chunk per `--chunk-delay-ms`,
//! so every run stays open while the others start. Loopback only; bounded in runs and time (it
//! stops by itself, with exit code 1 on any error or timeout).
//!
//! ```sh
//! cargo run --release --example load                      # 1,000 runs, then 10% disconnecting
//! cargo run --release --example load -- --runs 200 --chunks 10 --chunk-delay-ms 50
//! ```
//!
//! Phase 1 reads every stream to its end and checks it with the reference client's ordering
//! rules (`tests/api/verify.rs`): zero errors, every stream well formed and ending with
//! `RUN_FINISHED`. Phase 2 runs the same load with `--disconnect-percent` of the clients hanging
//! up after their first text delta; then the server's `agui_runs_in_flight` must return to 0.
//!
//! The app, the fake upstream and the clients each run on their own tokio runtime with named
//! threads, so the server's CPU time is read from its own threads (`/proc/self/task/*/stat`).
//! RSS is the whole process (clients and fake upstream included), so the memory per open stream
//! is an upper bound for the server alone.

#[allow(dead_code, unreachable_pub, unused_imports)]
#[path = "../tests/api/verify.rs"]
mod verify;

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agui_host::settings::{LlmProvider, Settings};
use agui_host::App;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};

/// The server's runtime threads, by name (`/proc/.../comm` keeps 15 bytes).
const SERVER_THREAD: &str = "agui-server";

#[derive(Debug, Clone)]
struct Options {
    runs: usize,
    chunks: usize,
    chunk_delay: Duration,
    disconnect_percent: usize,
    timeout: Duration,
    server_threads: usize,
    /// Times the disconnect phase runs (RSS after each shows whether memory keeps growing).
    repeat: usize,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut options = Options {
            runs: 1000,
            chunks: 20,
            chunk_delay: Duration::from_millis(100),
            disconnect_percent: 10,
            timeout: Duration::from_secs(120),
            server_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            repeat: 1,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || -> Result<u64, String> {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .ok_or(format!("{flag} needs a number"))
            };
            match flag.as_str() {
                "--runs" => options.runs = usize::try_from(value()?).unwrap_or(usize::MAX),
                "--chunks" => options.chunks = usize::try_from(value()?).unwrap_or(1).max(1),
                "--chunk-delay-ms" => options.chunk_delay = Duration::from_millis(value()?),
                "--disconnect-percent" => {
                    options.disconnect_percent = usize::try_from(value()?.min(100)).unwrap_or(0)
                }
                "--timeout-secs" => options.timeout = Duration::from_secs(value()?),
                "--server-threads" => {
                    options.server_threads = usize::try_from(value()?).unwrap_or(1).max(1)
                }
                "--repeat" => options.repeat = usize::try_from(value()?).unwrap_or(1).clamp(1, 20),
                "--help" | "-h" => {
                    return Err(
                        "options: --runs N (1000) --chunks N (20) --chunk-delay-ms N (100) \
                         --disconnect-percent N (10) --timeout-secs N (120) --server-threads N \
                         (the CPU count) --repeat N (1: times the disconnect phase runs)"
                            .into(),
                    )
                }
                other => return Err(format!("unknown option {other}; try --help")),
            }
        }
        if options.runs > 20_000 {
            return Err("--runs is capped at 20,000 (each run takes 4 loopback sockets)".into());
        }
        Ok(options)
    }
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("load: {error}");
            ExitCode::FAILURE
        }
    }
}

fn runtime(name: &str, threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
}

fn run(options: &Options) -> Result<bool, Box<dyn std::error::Error>> {
    let upstream_rt = runtime("fake-upstream", 1)?;
    let server_rt = runtime(SERVER_THREAD, options.server_threads)?;
    let client_rt = runtime("load-client", 1)?;

    let upstream = upstream_rt.block_on(start_fake_upstream(options.clone()))?;
    let mut settings = Settings::embedded_default()?;
    settings.server.host = "127.0.0.1".into();
    settings.server.port = 0;
    // The default of 128 would refuse most of the load with 503: room for every run.
    settings.server.limits.max_concurrent_runs = options.runs + 16;
    settings.llm.provider = LlmProvider::Openai;
    settings.llm.base_url = format!("http://{upstream}/v1");
    settings.llm.api_key = "load-test".into();
    settings.llm.max_retries = 0;
    let (address, metrics) = server_rt.block_on(async {
        let app = App::build(settings).await?;
        let address = app.local_addr();
        let metrics = app.metrics();
        tokio::spawn(app.run_until(std::future::pending()));
        Ok::<_, agui_host::AppError>((address, metrics))
    })?;
    let runs_in_flight = move || in_flight(&metrics.encode());

    println!(
        "agui-host load test: {} runs, {} chunks {} ms apart ({} server threads)",
        options.runs,
        options.chunks,
        options.chunk_delay.as_millis(),
        options.server_threads
    );
    // Warm up (connections, allocator arenas) so the baseline is a running server.
    let warm = client_rt.block_on(load(&address.to_string(), 8, 0, options.chunks))?;
    if warm.errors > 0 {
        println!("warm-up failed: {:?}", warm.first_error);
        return Ok(false);
    }

    let mut ok = true;
    let phases = std::iter::once(("all streams read to the end", 0)).chain(std::iter::repeat_n(
        (
            "with clients disconnecting mid-stream",
            options.disconnect_percent,
        ),
        options.repeat,
    ));
    let mut baseline = None;
    for (phase, disconnect) in phases {
        let rss_before = rss_kib();
        let cpu_before = server_cpu_secs();
        let peak = Arc::new(AtomicUsize::new(0));
        let peak_rss = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (peak, peak_rss, runs_in_flight) =
                (peak.clone(), peak_rss.clone(), runs_in_flight.clone());
            client_rt.spawn(async move {
                loop {
                    let now = runs_in_flight();
                    if now > peak.load(Ordering::Relaxed) {
                        peak.store(now, Ordering::Relaxed);
                        peak_rss.store(rss_kib(), Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let started = Instant::now();
        let outcome = client_rt.block_on(async {
            tokio::time::timeout(
                options.timeout,
                load(
                    &address.to_string(),
                    options.runs,
                    disconnect,
                    options.chunks,
                ),
            )
            .await
        });
        let wall = started.elapsed();
        let outcome = match outcome {
            Ok(outcome) => outcome?,
            Err(_) => {
                println!("phase `{phase}`: timed out after {:?}", options.timeout);
                return Ok(false);
            }
        };
        // In flight back to zero: every run's slot and metrics released.
        let drained_by = Instant::now() + Duration::from_secs(10);
        let mut left = runs_in_flight();
        while left > 0 && Instant::now() < drained_by {
            std::thread::sleep(Duration::from_millis(20));
            left = runs_in_flight();
        }
        sampler.abort();
        let cpu = server_cpu_secs() - cpu_before;
        std::thread::sleep(Duration::from_millis(500));
        let rss_after = rss_kib();
        let peak_streams = peak.load(Ordering::Relaxed);
        let rss_during = peak_rss.load(Ordering::Relaxed).max(rss_before);
        let mut durations = outcome.durations.clone();
        durations.sort();
        let pct = |p: f64| {
            durations
                .get(((durations.len() as f64 * p) as usize).min(durations.len().saturating_sub(1)))
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        println!("\nphase: {phase}");
        println!(
            "  runs {}, finished {}, disconnected on purpose {}, errors {}",
            outcome.started, outcome.finished, outcome.disconnected, outcome.errors
        );
        println!("  concurrent streams held (server's agui_runs_in_flight, peak) {peak_streams}");
        println!(
            "  run time p50 {:.0} ms, p99 {:.0} ms (of the runs read to the end); wall {:.1} s",
            pct(0.50),
            pct(0.99),
            wall.as_secs_f64()
        );
        println!(
            "  server CPU {:.3} s, {:.2} ms per run",
            cpu,
            cpu * 1000.0 / outcome.started.max(1) as f64
        );
        println!(
            "  RSS before {} KiB, during (at the peak) {} KiB, after {} KiB; {:.1} KiB per open \
             stream (whole process: clients and fake upstream included)",
            rss_before,
            rss_during,
            rss_after,
            (rss_during.saturating_sub(rss_before)) as f64 / peak_streams.max(1) as f64
        );
        println!("  in flight afterwards {left}");
        match baseline {
            None => baseline = Some(rss_after),
            Some(baseline) => println!(
                "  RSS after vs. after the first phase: {:+} KiB",
                rss_after as i64 - baseline as i64
            ),
        }
        if let Some(error) = &outcome.first_error {
            println!("  first error: {error}");
        }
        ok &= outcome.errors == 0 && left == 0;
        ok &= outcome.finished + outcome.disconnected == options.runs;
    }
    println!("\n{}", if ok { "PASS" } else { "FAIL" });
    drop(client_rt);
    drop(server_rt);
    drop(upstream_rt);
    Ok(ok)
}

#[derive(Debug, Default)]
struct Outcome {
    started: usize,
    finished: usize,
    disconnected: usize,
    errors: usize,
    first_error: Option<String>,
    durations: Vec<Duration>,
}

/// Posts `runs` runs at once; `disconnect_percent` of the clients hang up halfway through their
/// stream (after half the text deltas), the others read their stream to the end and check it.
async fn load(
    address: &str,
    runs: usize,
    disconnect_percent: usize,
    chunks: usize,
) -> Result<Outcome, reqwest::Error> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let url = format!("http://{address}/");
    let mut tasks = Vec::with_capacity(runs);
    for i in 0..runs {
        let hang_up = (disconnect_percent > 0
            && (i * disconnect_percent) % 100 < disconnect_percent)
            .then_some(chunks.div_ceil(2));
        let (client, url) = (client.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let body = json!({
                "threadId": format!("t{i}"),
                "runId": format!("r{i}"),
                "protocolVersion": "1.0",
                "messages": [{"id": format!("u{i}"), "role": "user", "content": "Tell me a story."}],
            });
            let started = Instant::now();
            let result = one_run(&client, &url, &body, hang_up).await;
            (result, started.elapsed())
        }));
    }
    let mut outcome = Outcome {
        started: runs,
        ..Outcome::default()
    };
    for task in tasks {
        let (result, elapsed) = task
            .await
            .unwrap_or((Err("the client task panicked".into()), Duration::ZERO));
        match result {
            Ok(RunEnd::Finished) => {
                outcome.finished += 1;
                outcome.durations.push(elapsed);
            }
            Ok(RunEnd::HungUp) => outcome.disconnected += 1,
            Err(error) => {
                outcome.errors += 1;
                outcome.first_error.get_or_insert(error);
            }
        }
    }
    Ok(outcome)
}

enum RunEnd {
    Finished,
    HungUp,
}

async fn one_run(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    hang_up_after: Option<usize>,
) -> Result<RunEnd, String> {
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .map_err(|e| format!("request: {e}"))?;
    if response.status() != 200 {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        return Err(format!("status {status}: {text}"));
    }
    let mut buffer = Vec::new();
    let mut events: Vec<Value> = Vec::new();
    let mut deltas = 0;
    loop {
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buffer.drain(..end + 2).collect();
            let frame = std::str::from_utf8(&frame[..end]).map_err(|e| format!("UTF-8: {e}"))?;
            if frame.starts_with(':') {
                continue;
            }
            let payload = frame
                .strip_prefix("data: ")
                .ok_or(format!("a frame that is not `data: `: {frame:?}"))?;
            let event: Value =
                serde_json::from_str(payload).map_err(|e| format!("an event is not JSON: {e}"))?;
            if event["type"] == "TEXT_MESSAGE_CONTENT" {
                deltas += 1;
            }
            events.push(event);
            if hang_up_after.is_some_and(|after| deltas >= after) {
                if events[0]["type"] != "RUN_STARTED" {
                    return Err(format!("the stream began with {}", events[0]));
                }
                // Dropping the response closes the connection mid-stream.
                return Ok(RunEnd::HungUp);
            }
        }
        match response.chunk().await.map_err(|e| format!("read: {e}"))? {
            Some(chunk) => buffer.extend_from_slice(&chunk),
            None => break,
        }
    }
    if !buffer.is_empty() {
        return Err("the stream ended inside a frame".into());
    }
    verify::check_well_formed(&events)?;
    match events.last() {
        Some(last) if last["type"] == "RUN_FINISHED" => Ok(RunEnd::Finished),
        last => Err(format!("the stream ended with {last:?}, not RUN_FINISHED")),
    }
}

/// The fake upstream: every chat completion streams `chunks` text deltas, one per
/// `chunk_delay`, then a finish reason and `[DONE]`.
async fn start_fake_upstream(options: Options) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let router = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let options = options.clone();
            async move { streamed_reply(&options) }
        }),
    );
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            eprintln!("fake upstream: {error}");
        }
    });
    Ok(address)
}

fn streamed_reply(options: &Options) -> Response {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({
            "id": "chatcmpl-load",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "load",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    frames.extend(
        (0..options.chunks).map(|i| chunk(json!({"content": format!("word{i} ")}), Value::Null)),
    );
    frames.push(chunk(json!({}), json!("stop")));
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let delay = options.chunk_delay;
    let body = stream::iter(frames.into_iter().enumerate()).then(move |(i, frame)| async move {
        if i > 0 {
            tokio::time::sleep(delay).await;
        }
        Ok::<_, Infallible>(frame)
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}

/// `agui_runs_in_flight` from the OpenMetrics text.
fn in_flight(metrics: &str) -> usize {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("agui_runs_in_flight "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(usize::MAX)
}

/// The process's resident set, in KiB.
fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// User plus system CPU seconds of the server runtime's threads.
fn server_cpu_secs() -> f64 {
    // /proc reports clock ticks of USER_HZ, which is 100 on Linux.
    const TICKS_PER_SEC: f64 = 100.0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != SERVER_THREAD {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the `(comm)`: state is field 3, utime 14 and stime 15.
        if let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            for index in [11, 12] {
                ticks += fields
                    .get(index)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    ticks as f64 / TICKS_PER_SEC
}
