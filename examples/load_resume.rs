//! Resume load: N concurrent runs spread round robin over one or more running agui-host
//! servers, a share of whose clients drop their connection once mid-stream and resume the run
//! on the *next* server with `Last-Event-ID`. Every reassembled stream is checked: ids
//! `<runId>:<seq>` with no gap and no repeat, the reference client's ordering rules
//! (`tests/api/verify.rs`), one terminal `RUN_FINISHED`, and text deltas that concatenate to
//! exactly the scripted answer. It prints runs/s, run time p50/p99, and the CPU each server
//! process (and Redis) spent, read from `/proc/<pid>/stat` before and after.
//!
//! The servers call a fake OpenAI-compatible upstream, which this example also serves:
//!
//! ```sh
//! # 1. the fake upstream (prints `upstream http://127.0.0.1:PORT/v1`, serves until killed)
//! cargo run --release --example load_resume -- --serve-upstream --chunks 20 --chunk-delay-ms 100
//! # 2. servers with APP_LLM__PROVIDER=openai OPENAI_BASE_URL=<that URL> OPENAI_API_KEY=x
//! # 3. the load
//! cargo run --release --example load_resume -- --urls http://127.0.0.1:8081,http://127.0.0.1:8082 \
//!     --pids 1234,1235 --redis-pid 1200 --runs 1000 --resume-percent 10 --chunks 20
//! ```
//!
//! `scripts/load-scale.sh` does all three (one or two replicas, any store). With one URL the
//! resume goes back to the same server. With several, a first run checks that a run started on
//! one server can be read on another, and stops with a clear message if not (a per-process
//! run log). `--chunks` must match the upstream's, since the scripted text is checked.

#[allow(dead_code, unreachable_pub, unused_imports)]
#[path = "../tests/api/verify.rs"]
mod verify;

#[path = "support/fake_upstream.rs"]
mod fake_upstream;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[derive(Debug, Clone)]
struct Options {
    serve_upstream: bool,
    urls: Vec<String>,
    pids: Vec<u32>,
    redis_pid: Option<u32>,
    runs: usize,
    resume_percent: usize,
    chunks: usize,
    chunk_delay: Duration,
    timeout: Duration,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut options = Options {
            serve_upstream: false,
            urls: Vec::new(),
            pids: Vec::new(),
            redis_pid: None,
            runs: 1000,
            resume_percent: 10,
            chunks: 20,
            chunk_delay: Duration::from_millis(100),
            timeout: Duration::from_secs(180),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            let number = |text: String| -> Result<u64, String> {
                text.parse().map_err(|_| format!("not a number: {text}"))
            };
            match flag.as_str() {
                "--serve-upstream" => options.serve_upstream = true,
                "--urls" => {
                    options.urls = value()?
                        .split(',')
                        .map(|url| url.trim().trim_end_matches('/').to_owned())
                        .filter(|url| !url.is_empty())
                        .collect();
                }
                "--pids" => {
                    options.pids = value()?
                        .split(',')
                        .map(|pid| pid.trim().parse().map_err(|_| format!("a bad pid: {pid}")))
                        .collect::<Result<_, _>>()?;
                }
                "--redis-pid" => options.redis_pid = Some(number(value()?)? as u32),
                "--runs" => options.runs = number(value()?)? as usize,
                "--resume-percent" => options.resume_percent = number(value()?)? as usize,
                "--chunks" => options.chunks = number(value()?)? as usize,
                "--chunk-delay-ms" => {
                    options.chunk_delay = Duration::from_millis(number(value()?)?)
                }
                "--timeout-secs" => options.timeout = Duration::from_secs(number(value()?)?),
                other => return Err(format!("unknown flag {other}")),
            }
        }
        if !options.serve_upstream && options.urls.is_empty() {
            return Err("give --serve-upstream, or --urls of running servers".into());
        }
        if options.resume_percent > 100 || options.chunks < 2 {
            return Err("--resume-percent is at most 100; --chunks at least 2".into());
        }
        Ok(options)
    }
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("load_resume: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("load-client")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("load_resume: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = if options.serve_upstream {
        runtime.block_on(serve_upstream(options))
    } else {
        runtime.block_on(run_load(&options))
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("load_resume: {error}");
            ExitCode::FAILURE
        }
    }
}

// ---- The fake upstream ---------------------------------------------------------------------

/// Serves the fake upstream until the process is killed: every chat completion streams
/// `chunks` text deltas (`word0 word1 ...`), one per `chunk_delay` ([`fake_upstream`]).
async fn serve_upstream(options: Options) -> Result<bool, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let router = fake_upstream::router(options.chunks, options.chunk_delay);
    println!("upstream http://{address}/v1");
    axum::serve(listener, router)
        .await
        .map_err(|e| e.to_string())?;
    Ok(true)
}

// ---- The load ------------------------------------------------------------------------------

/// Warm-up, the cross-server check, then the measured phase; true when it passed.
async fn run_load(options: &Options) -> Result<bool, String> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let agent = default_agent(&client, &options.urls[0]).await?;
    let ctx = Context {
        client,
        urls: options.urls.clone(),
        agent,
        expected_text: fake_upstream::scripted_text(options.chunks),
        hang_up_after: options.chunks.div_ceil(2),
    };
    if ctx.urls.len() > 1 {
        check_shared_log(&ctx).await?;
    }
    let warm = load(&ctx, "warm", 8, options.resume_percent).await;
    if warm.failed > 0 {
        println!("warm-up failed: {}", warm.first_error.unwrap_or_default());
        return Ok(false);
    }
    println!(
        "agui-host resume load: {} runs over {} server(s), {}% resuming on the next server, \
         {} chunks {} ms apart",
        options.runs,
        ctx.urls.len(),
        options.resume_percent,
        options.chunks,
        options.chunk_delay.as_millis()
    );
    let cpu_before = Cpu::sample(options);
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        options.timeout,
        load(&ctx, "load", options.runs, options.resume_percent),
    )
    .await
    .map_err(|_| format!("timed out after {:?}", options.timeout))?;
    let wall = started.elapsed();
    let cpu = Cpu::sample(options).since(&cpu_before);
    outcome.print(options, wall, &cpu);
    let passed = outcome.failed == 0 && outcome.finished == options.runs;
    println!("\n{}", if passed { "PASS" } else { "FAIL" });
    Ok(passed)
}

/// `defaultAgent` from `GET /`: runs are posted to `/<agent>` so that their events route,
/// `/<agent>/runs/<runId>/events`, is known.
async fn default_agent(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let info: Value = client
        .get(format!("{url}/"))
        .send()
        .await
        .map_err(|e| format!("GET {url}/: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET {url}/: {e}"))?;
    info["defaultAgent"]
        .as_str()
        .map(str::to_owned)
        .ok_or(format!("GET {url}/ names no defaultAgent: {info}"))
}

/// One run started on the first server and read from the second: the resume load across
/// servers needs a run log they share.
async fn check_shared_log(ctx: &Context) -> Result<(), String> {
    let run_id = format!("check-{}", std::process::id());
    let mut frames = Vec::new();
    let response = ctx.post_run(&ctx.urls[0], &run_id, 0).await?;
    read_frames(response, &mut frames, Some(1)).await?;
    let url = ctx.events_url(&ctx.urls[1], &run_id);
    let answer = ctx
        .client
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    match answer.status().as_u16() {
        200 => Ok(()),
        404 => Err(format!(
            "a run started on {} is unknown on {} (404): the servers keep their run logs per \
             process. Resuming on another replica needs the run log shared through Redis \
             (threads.store = \"redis\" with a build that logs runs in Redis Streams).",
            ctx.urls[0], ctx.urls[1]
        )),
        status => Err(format!(
            "GET {url} answered {status}: {}",
            answer.text().await.unwrap_or_default()
        )),
    }
}

/// What every client shares.
struct Context {
    client: reqwest::Client,
    urls: Vec<String>,
    agent: String,
    expected_text: String,
    /// Text deltas a resuming client reads before it drops its connection.
    hang_up_after: usize,
}

impl Context {
    async fn post_run(
        &self,
        url: &str,
        run_id: &str,
        i: usize,
    ) -> Result<reqwest::Response, String> {
        let body = json!({
            "threadId": format!("t-{run_id}"),
            "runId": run_id,
            "protocolVersion": "1.0",
            "messages": [{"id": format!("u{i}"), "role": "user", "content": "Tell me a story."}],
        });
        let response = self
            .client
            .post(format!("{url}/{}", self.agent))
            .header("accept", "text/event-stream")
            // A share of these clients drop their connection and resume: their runs must go
            // on meanwhile (a plain disconnect stops a run).
            .header("x-agui-on-disconnect", "continue")
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        accept(response).await
    }

    fn events_url(&self, url: &str, run_id: &str) -> String {
        format!("{url}/{}/runs/{run_id}/events", self.agent)
    }

    async fn resume(
        &self,
        url: &str,
        run_id: &str,
        last_id: &str,
    ) -> Result<reqwest::Response, String> {
        let response = self
            .client
            .get(self.events_url(url, run_id))
            .header("accept", "text/event-stream")
            .header("last-event-id", last_id)
            .send()
            .await
            .map_err(|e| format!("resume on {url}: {e}"))?;
        accept(response).await
    }
}

async fn accept(response: reqwest::Response) -> Result<reqwest::Response, String> {
    if response.status() == 200 {
        return Ok(response);
    }
    let status = response.status();
    Err(format!(
        "status {status}: {}",
        response.text().await.unwrap_or_default()
    ))
}

/// One SSE frame of a run: its id (when the server logs runs) and its event.
struct Frame {
    id: Option<String>,
    event: Value,
}

/// Reads frames off `response` into `frames` until the body ends, or until `stop_after` text
/// deltas have been read in all (then it returns with the connection still open, for the
/// caller to drop).
async fn read_frames(
    mut response: reqwest::Response,
    frames: &mut Vec<Frame>,
    stop_after: Option<usize>,
) -> Result<(), String> {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        while let Some(end) = memchr::memmem::find(&buffer, b"\n\n") {
            let raw: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = std::str::from_utf8(&raw[..end]).map_err(|e| format!("UTF-8: {e}"))?;
            if let Some(frame) = parse_frame(text)? {
                frames.push(frame);
                let deltas = frames
                    .iter()
                    .filter(|f| f.event["type"] == "TEXT_MESSAGE_CONTENT")
                    .count();
                if stop_after.is_some_and(|after| deltas >= after) {
                    return Ok(());
                }
            }
        }
        match response.chunk().await.map_err(|e| format!("read: {e}"))? {
            Some(chunk) => buffer.extend_from_slice(&chunk),
            None if buffer.is_empty() => return Ok(()),
            None => return Err("the stream ended inside a frame".into()),
        }
    }
}

/// `id:` and `data:` lines of one frame; `None` for a comment (keep-alive).
fn parse_frame(text: &str) -> Result<Option<Frame>, String> {
    let (mut id, mut data) = (None, None);
    for line in text.split('\n') {
        if let Some(value) = line.strip_prefix("id: ") {
            id = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("data: ") {
            data = Some(value);
        } else if !line.starts_with(':') {
            return Err(format!("an unexpected line: {line:?}"));
        }
    }
    let Some(data) = data else {
        return Ok(None);
    };
    let event = serde_json::from_str(data).map_err(|e| format!("an event is not JSON: {e}"))?;
    Ok(Some(Frame { id, event }))
}

/// One client: the run on `urls[i % n]`; a resuming client drops its connection after half
/// the text and reads the rest from `urls[(i + 1) % n]`. The reassembled stream, checked.
async fn one_run(ctx: &Context, i: usize, tag: &str, resumes: bool) -> Result<Gaps, String> {
    let servers = ctx.urls.len();
    let run_id = format!("{tag}-{}-{i}", std::process::id());
    let response = ctx.post_run(&ctx.urls[i % servers], &run_id, i).await?;
    let mut frames = Vec::new();
    if resumes {
        // read_frames drops the response when it stops: the connection closes mid-stream,
        // and the run goes on into its log.
        read_frames(response, &mut frames, Some(ctx.hang_up_after)).await?;
        let last_id = frames
            .last()
            .and_then(|frame| frame.id.clone())
            .ok_or("the server sends no event ids: nothing to resume from (threads.store off?)")?;
        let resumed = ctx
            .resume(&ctx.urls[(i + 1) % servers], &run_id, &last_id)
            .await?;
        read_frames(resumed, &mut frames, None).await?;
    } else {
        read_frames(response, &mut frames, None).await?;
    }
    check_run(ctx, &run_id, &frames)
}

/// Events missing from, and repeated in, a reassembled stream, by their ids.
#[derive(Debug, Default, Clone, Copy)]
struct Gaps {
    lost: usize,
    repeated: usize,
}

/// The ids' sequence numbers against 1..=last; a frame without an id, or with another run's,
/// is an error of its own.
fn gaps(run_id: &str, frames: &[Frame]) -> Result<Gaps, String> {
    let mut seen = std::collections::HashSet::new();
    let (mut repeated, mut highest) = (0, 0);
    for frame in frames {
        let seq: usize = frame
            .id
            .as_deref()
            .and_then(|id| id.strip_prefix(run_id)?.strip_prefix(':')?.parse().ok())
            .ok_or_else(|| format!("a frame with the id {:?} in run {run_id}", frame.id))?;
        if !seen.insert(seq) {
            repeated += 1;
        }
        highest = highest.max(seq);
    }
    Ok(Gaps {
        lost: highest - seen.len(),
        repeated,
    })
}

/// No gap and no repeat in the ids (when the server sends them), a well-formed stream ending
/// in `RUN_FINISHED`, and the whole scripted text.
fn check_run(ctx: &Context, run_id: &str, frames: &[Frame]) -> Result<Gaps, String> {
    let gaps = if frames.iter().any(|frame| frame.id.is_some()) {
        gaps(run_id, frames)?
    } else {
        Gaps::default()
    };
    if gaps.lost > 0 || gaps.repeated > 0 {
        return Ok(gaps);
    }
    let events: Vec<Value> = frames.iter().map(|frame| frame.event.clone()).collect();
    verify::check_well_formed(&events)?;
    match events.last() {
        Some(last) if last["type"] == "RUN_FINISHED" => {}
        last => return Err(format!("the stream ended with {last:?}, not RUN_FINISHED")),
    }
    let text: String = events
        .iter()
        .filter(|event| event["type"] == "TEXT_MESSAGE_CONTENT")
        .filter_map(|event| event["delta"].as_str())
        .collect();
    if text != ctx.expected_text {
        return Err(format!("the text is {text:?}, not {:?}", ctx.expected_text));
    }
    Ok(gaps)
}

#[derive(Debug, Default)]
struct Outcome {
    finished: usize,
    resumed: usize,
    failed: usize,
    lost_events: usize,
    repeated_events: usize,
    first_error: Option<String>,
    durations: Vec<Duration>,
    resumed_durations: Vec<Duration>,
}

/// `runs` clients at once; `resume_percent` of them resume once.
async fn load(ctx: &Context, tag: &str, runs: usize, resume_percent: usize) -> Outcome {
    let clients = (0..runs).map(|i| {
        // Spread evenly: client i resumes when the running share crosses a whole client.
        let resumes = (i + 1) * resume_percent / 100 > i * resume_percent / 100;
        async move {
            let started = Instant::now();
            let result = one_run(ctx, i, tag, resumes).await;
            (resumes, result, started.elapsed())
        }
    });
    let results = futures_util::future::join_all(clients).await;
    let mut outcome = Outcome::default();
    for (resumes, result, elapsed) in results {
        match result {
            Ok(gaps) if gaps.lost > 0 || gaps.repeated > 0 => {
                outcome.failed += 1;
                outcome.lost_events += gaps.lost;
                outcome.repeated_events += gaps.repeated;
                outcome
                    .first_error
                    .get_or_insert(format!("{gaps:?} in one stream"));
            }
            Ok(_) => {
                outcome.finished += 1;
                outcome.durations.push(elapsed);
                if resumes {
                    outcome.resumed += 1;
                    outcome.resumed_durations.push(elapsed);
                }
            }
            Err(error) => {
                outcome.failed += 1;
                outcome.first_error.get_or_insert(error);
            }
        }
    }
    outcome
}

impl Outcome {
    fn print(&self, options: &Options, wall: Duration, cpu: &CpuSpent) {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "  runs: {} finished and checked ({} resumed once), {} failed; events lost {}, \
             repeated {}",
            self.finished, self.resumed, self.failed, self.lost_events, self.repeated_events
        );
        if let Some(error) = &self.first_error {
            println!("  first error: {error}");
        }
        println!(
            "  wall {:.2} s, {:.0} runs/s; run time p50 {:.0} ms, p99 {:.0} ms (resumed runs: \
             p50 {:.0} ms)",
            wall.as_secs_f64(),
            options.runs as f64 / wall.as_secs_f64(),
            ms(quantile(&self.durations, 0.5)),
            ms(quantile(&self.durations, 0.99)),
            ms(quantile(&self.resumed_durations, 0.5)),
        );
        let runs = options.runs as f64;
        let mut total = 0.0;
        for (pid, secs) in &cpu.servers {
            total += secs;
            println!(
                "  server pid {pid}: CPU {:.2} s, {:.3} ms per run of the load",
                secs,
                secs * 1000.0 / runs
            );
        }
        if !cpu.servers.is_empty() {
            println!(
                "  servers together: {:.3} ms CPU per run",
                total * 1000.0 / runs
            );
        }
        if let Some((pid, secs)) = cpu.redis {
            println!(
                "  redis pid {pid}: CPU {:.2} s, {:.3} ms per run",
                secs,
                secs * 1000.0 / runs
            );
        }
    }
}

fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let at = (sorted.len() as f64 * q) as usize;
    sorted
        .get(at.min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

// ---- CPU of other processes -----------------------------------------------------------------

/// CPU seconds (user + system, all threads) of the watched processes at one instant.
struct Cpu {
    servers: Vec<(u32, f64)>,
    redis: Option<(u32, f64)>,
}

/// CPU seconds spent between two samples.
struct CpuSpent {
    servers: Vec<(u32, f64)>,
    redis: Option<(u32, f64)>,
}

impl Cpu {
    fn sample(options: &Options) -> Cpu {
        Cpu {
            servers: options
                .pids
                .iter()
                .map(|&pid| (pid, cpu_secs(pid)))
                .collect(),
            redis: options.redis_pid.map(|pid| (pid, cpu_secs(pid))),
        }
    }

    fn since(&self, before: &Cpu) -> CpuSpent {
        let spent = |(pid, now): (u32, f64), then: f64| (pid, now - then);
        CpuSpent {
            servers: self
                .servers
                .iter()
                .zip(&before.servers)
                .map(|(&now, &(_, then))| spent(now, then))
                .collect(),
            redis: self
                .redis
                .zip(before.redis)
                .map(|(now, (_, then))| spent(now, then)),
        }
    }
}

/// utime + stime of a process, in seconds (0 if it cannot be read).
fn cpu_secs(pid: u32) -> f64 {
    // /proc reports clock ticks of USER_HZ, which is 100 on Linux.
    const TICKS_PER_SEC: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`: utime is field 14 and stime 15 (11 and 12 after it).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&index| fields.get(index).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    ticks as f64 / TICKS_PER_SEC
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            client: reqwest::Client::new(),
            urls: vec!["http://127.0.0.1:9".into()],
            agent: "assistant".into(),
            expected_text: fake_upstream::scripted_text(2),
            hang_up_after: 1,
        }
    }

    /// A whole run of two text deltas, as the server frames it.
    fn frames(run_id: &str) -> Vec<Frame> {
        let events = [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": run_id}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "word0 "}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "word1 "}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": run_id}),
        ];
        events
            .into_iter()
            .enumerate()
            .map(|(at, event)| Frame {
                id: Some(format!("{run_id}:{}", at + 1)),
                event,
            })
            .collect()
    }

    #[test]
    fn a_whole_stream_passes_and_a_lost_or_repeated_event_is_counted() {
        let ctx = context();
        let whole = frames("r1");
        let gaps = check_run(&ctx, "r1", &whole).expect("a whole stream");
        assert_eq!((gaps.lost, gaps.repeated), (0, 0));

        let mut lost = frames("r1");
        lost.remove(3);
        let gaps = check_run(&ctx, "r1", &lost).expect("counted, not an error");
        assert_eq!((gaps.lost, gaps.repeated), (1, 0));

        let mut repeated = frames("r1");
        let again = Frame {
            id: repeated[2].id.clone(),
            event: repeated[2].event.clone(),
        };
        repeated.insert(3, again);
        let gaps = check_run(&ctx, "r1", &repeated).expect("counted, not an error");
        assert_eq!((gaps.lost, gaps.repeated), (0, 1));
    }

    #[test]
    fn another_runs_id_a_missing_terminal_event_or_other_text_fails() {
        let ctx = context();
        assert!(
            check_run(&ctx, "r2", &frames("r1")).is_err(),
            "another run's ids"
        );
        let mut unfinished = frames("r1");
        unfinished.pop();
        assert!(
            check_run(&ctx, "r1", &unfinished).is_err(),
            "no RUN_FINISHED"
        );
        let mut other_text = frames("r1");
        other_text[3].event["delta"] = json!("word9 ");
        assert!(
            check_run(&ctx, "r1", &other_text).is_err(),
            "not the scripted text"
        );
    }

    #[test]
    fn frames_parse_with_and_without_ids_and_comments_are_skipped() {
        let frame = parse_frame("id: r:3\ndata: {\"type\":\"RUN_STARTED\"}")
            .unwrap()
            .expect("an event");
        assert_eq!(frame.id.as_deref(), Some("r:3"));
        assert_eq!(frame.event["type"], "RUN_STARTED");
        let plain = parse_frame("data: {}").unwrap().expect("an event");
        assert_eq!(plain.id, None);
        assert!(parse_frame(": keep-alive").unwrap().is_none());
        assert!(parse_frame("event: x\ndata: {}").is_err());
    }
}
