//! Resumable runs across replicas (docs/resumable.md): two servers sharing one real
//! `redis-server`. A run started on replica A and cut mid-stream resumes on replica B with
//! `Last-Event-ID` to exactly the uninterrupted stream; a stop sent to B ends A's run and closes
//! A's upstream; B's reader of a run whose owner was killed (`kill -9`, a second process) gets
//! `RUN_ERROR` `run_lost` within the lease time; a run read only on B is not cancelled by A's
//! grace period, and one read nowhere is.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agui_host::settings::{OnDisconnect, Settings, ThreadStoreKind};
use serde_json::{json, Value};

use crate::approvals::{transfer_tool, with_tools, ToolService};
use crate::fake_llm::{chunks, FakeLlm, Reply};
use crate::helpers::*;
use crate::redis_server::RedisServer;
use crate::resumable::{
    assert_a_run_read_nowhere_is_cancelled, assert_error, assert_stitched,
    assert_stop_after_the_end_is_a_no_op, cut_before_an_interrupt_and_resume,
    cut_inside_a_predictive_call_and_resume, cut_mid_text_and_resume, events, predict_recipe,
    reconnect, request_stop, run_body, start_stalled, FrameReader,
};

fn on_redis(redis: &RedisServer) -> impl Fn(&mut Settings) + '_ {
    |settings| {
        settings.threads.store = ThreadStoreKind::Redis;
        settings.threads.redis_url = redis.url();
    }
}

/// Replicas A and B on one Redis, each configured by `configure` too.
async fn replicas(redis: &RedisServer, configure: impl Fn(&mut Settings)) -> (TestApp, TestApp) {
    let app = || {
        spawn_app(|settings| {
            on_redis(redis)(settings);
            configure(settings);
        })
    };
    (app().await, app().await)
}

#[tokio::test]
async fn a_run_cut_mid_text_on_a_and_resumed_on_b_equals_the_uninterrupted_run() {
    let redis = RedisServer::start().await;
    let (a, b) = replicas(&redis, |_| {}).await;
    cut_mid_text_and_resume(&a, &b).await;
}

#[tokio::test]
async fn a_run_cut_inside_a_predictive_tool_call_on_a_and_resumed_on_b_equals_the_whole() {
    let redis = RedisServer::start().await;
    let (a, b) = replicas(&redis, predict_recipe).await;
    cut_inside_a_predictive_call_and_resume(&a, &b).await;
}

#[tokio::test]
async fn a_run_cut_just_before_its_interrupt_on_a_and_resumed_on_b_equals_the_whole() {
    let redis = RedisServer::start().await;
    let service = ToolService::start().await;
    let (a, b) = replicas(&redis, |s| {
        with_tools(s, vec![transfer_tool(&service, false)]);
    })
    .await;
    cut_before_an_interrupt_and_resume(&a, &b, &service).await;
}

#[tokio::test]
async fn stop_sent_to_b_ends_the_run_a_owns_and_closes_its_upstream_within_a_second() {
    let redis = RedisServer::start().await;
    let (a, b) = replicas(&redis, |_| {}).await;
    let (reader, mut frames) = start_stalled(&a, "r-stop").await;
    stop_on(&b, "r-stop").await;
    assert!(
        a.fake.wait_for_disconnect(Duration::from_secs(1)).await,
        "A closed its upstream within a second of the stop sent to B"
    );
    frames.extend(reader.rest().await);
    assert_stitched("r-stop", &frames);
    assert_eq!(
        frames.last().unwrap().1["outcome"],
        json!({"type": "cancelled"})
    );
    // B reads the same ending, and a second stop there changes nothing.
    let on_b = FrameReader::new(reconnect(&b, "r-stop", None).await)
        .rest()
        .await;
    assert_eq!(on_b, frames);
    assert_stop_after_the_end_is_a_no_op(&b, "r-stop").await;
}

#[tokio::test]
async fn a_run_read_only_on_b_goes_on_past_a_s_grace_period_and_one_read_nowhere_is_cancelled() {
    let redis = RedisServer::start().await;
    let (a, b) = replicas(&redis, |s| {
        s.runs.on_disconnect = OnDisconnect::Continue;
        s.runs.reconnect_grace_secs = 1;
    })
    .await;
    // 12 words 250 ms apart: three seconds, three grace periods, read on B alone.
    let words: Vec<String> = (0..12).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    a.fake.push(Reply::SlowSse(
        chunks::text_reply(&words),
        Duration::from_millis(250),
    ));
    let mut first = FrameReader::new(a.post_run("/", &run_body("t", "r-b", "Go")).await);
    let mut seen = vec![first.next().await.unwrap()];
    drop(first);
    seen.extend(
        FrameReader::new(reconnect(&b, "r-b", Some(&seen[0].0)).await)
            .rest()
            .await,
    );
    assert_stitched("r-b", &seen);
    assert_eq!(seen.last().unwrap().1["outcome"]["type"], "success");
    assert_eq!(a.fake.disconnects(), 0);

    // Read nowhere: cancelled once the grace period is over, and B reads why.
    assert_a_run_read_nowhere_is_cancelled(&a, &b, "r-gone").await;
}

#[tokio::test]
async fn another_scope_gets_404_on_any_replica_and_a_live_run_id_is_409_on_the_other() {
    let redis = RedisServer::start().await;
    let (a, b) = replicas(&redis, |s| s.threads.scope_header = "x-user-id".into()).await;
    a.fake
        .push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let started = a
        .client
        .post(format!("{}/", a.address))
        .header("x-user-id", "alice")
        .json(&run_body("t", "r-alice", "Go"))
        .send()
        .await
        .unwrap();
    let mut reader = FrameReader::new(started);
    reader.next().await.unwrap();
    let get = |user: &'static str, path: &str| {
        b.client
            .get(format!("{}{path}", b.address))
            .header("x-user-id", user)
            .send()
    };
    for (user, path) in [
        ("bob", "/assistant/runs/r-alice/events"),
        ("alice", "/other/runs/r-alice/events"),
        ("alice", "/assistant/runs/r-unknown/events"),
    ] {
        assert_error(get(user, path).await.unwrap(), 404, "run_not_found").await;
    }
    let stop = b
        .client
        .post(format!("{}/assistant/runs/r-alice/stop", b.address))
        // A stop is declared JSON, like every POST (no page can send that cross-origin).
        .header("content-type", "application/json")
        .header("x-user-id", "bob")
        .send()
        .await
        .unwrap();
    assert_error(stop, 404, "run_not_found").await;
    let again = b
        .client
        .post(format!("{}/", b.address))
        .header("x-user-id", "alice")
        .json(&run_body("t2", "r-alice", "Go"))
        .send()
        .await
        .unwrap();
    assert_error(again, 409, "run_in_progress").await;
    // Alice herself reads it on B.
    let mine = get("alice", "/assistant/runs/r-alice/events")
        .await
        .unwrap();
    let mut on_b = FrameReader::new(mine);
    assert_eq!(on_b.next().await.unwrap().1["type"], "RUN_STARTED");
    let caps: Value = b
        .client
        .get(format!("{}/assistant/capabilities", b.address))
        .header("x-user-id", "alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(caps["transport"]["resumable"], true);
}

#[tokio::test]
async fn a_cursor_older_than_the_shared_log_is_410_on_b() {
    let redis = RedisServer::start().await;
    // MAXLEN ~ trims whole nodes of 100 entries: a long run is needed to lose its first ones.
    let (a, b) = replicas(&redis, |s| s.runs.log_max_run_events = 10).await;
    let words: Vec<String> = (0..400).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    a.fake.push(Reply::Sse(chunks::text_reply(&words)));
    FrameReader::new(a.post_run("/", &run_body("t", "r-long", "Go")).await)
        .rest()
        .await;
    assert_error(
        reconnect(&b, "r-long", Some("r-long:1")).await,
        410,
        "cursor_expired",
    )
    .await;
    assert_error(
        reconnect(&b, "r-long", Some("r-long:999")).await,
        400,
        "invalid_last_event_id",
    )
    .await;
}

/// Replica A as a process of its own, so it can be killed outright.
struct Process {
    child: Child,
    address: String,
}

impl Process {
    fn start(fake: &FakeLlm, redis: &RedisServer, lease_ttl_secs: u64) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agui-host"))
            .args(["--port", "0"])
            .env_clear()
            .env("HOST", "127.0.0.1")
            .env("OPENAI_BASE_URL", fake.base_url())
            .env("OPENAI_API_KEY", API_KEY)
            .env("APP_LLM__PROVIDER", "openai")
            .env("APP_LLM__MAX_RETRIES", "0")
            .env("APP_THREADS__STORE", "redis")
            .env("APP_THREADS__REDIS_URL", redis.url())
            .env("APP_RUNS__LEASE_TTL_SECS", lease_ttl_secs.to_string())
            .env("APP_TELEMETRY__JSON", "true")
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the server starts");
        let (listening, log) = wait_until_listening(&mut child);
        let listening = listening.unwrap_or_else(|| panic!("the server did not start: {log:#?}"));
        let line: Value = serde_json::from_str(&listening).expect("a JSON log line");
        let address = format!("http://{}", line["address"].as_str().expect("an address"));
        Process { child, address }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn killing_the_owner_gives_the_reader_on_b_run_error_run_lost_within_the_lease_time() {
    let redis = RedisServer::start().await;
    let lease = Duration::from_secs(2);
    let b = spawn_app(on_redis(&redis)).await;
    let fake = FakeLlm::start().await;
    let mut a = Process::start(&fake, &redis, lease.as_secs());
    fake.push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let started = reqwest::Client::new()
        .post(format!("{}/assistant", a.address))
        .json(&run_body("t", "r-lost", "Go"))
        .send()
        .await
        .unwrap();
    let mut on_a = FrameReader::new(started);
    let mut seen = vec![on_a.next().await.unwrap(), on_a.next().await.unwrap()];
    let mut on_b = FrameReader::new(reconnect(&b, "r-lost", Some(&seen[1].0)).await);
    seen.push(on_b.next().await.unwrap());
    drop(on_a);

    // A keeps renewing its lease while it lives: B waits, well past the lease time.
    tokio::time::sleep(lease * 2).await;
    a.child.kill().expect("kill -9 the owner");
    let killed = Instant::now();
    let rest = on_b.rest().await;
    let waited = killed.elapsed();
    seen.extend(rest);
    assert_stitched("r-lost", &seen);
    let lost = &seen.last().unwrap().1;
    assert_eq!(lost["type"], "RUN_ERROR");
    assert_eq!(lost["code"], "run_lost");
    assert!(
        waited <= lease + Duration::from_millis(1500),
        "run_lost came {waited:?} after the kill; the lease is {lease:?}"
    );
    // Every later reader ends the same way.
    let replay = FrameReader::new(reconnect(&b, "r-lost", None).await)
        .rest()
        .await;
    assert_eq!(replay, seen);
    assert_eq!(texts(&events(&seen))[0].1, "Half");
}

#[tokio::test]
async fn when_redis_stalls_the_owner_s_reader_gets_the_whole_run_and_b_s_reader_run_lost() {
    let redis = RedisServer::start().await;
    // A gives up on a write after 300 ms; B's reads wait out the stall.
    let a = spawn_app(|s| {
        on_redis(&redis)(s);
        s.threads.redis_timeout_ms = 300;
    })
    .await;
    let b = spawn_app(|s| {
        on_redis(&redis)(s);
        s.threads.redis_timeout_ms = 3000;
    })
    .await;
    let words: Vec<String> = (0..20).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    a.fake.push(Reply::SlowSse(
        chunks::text_reply(&words),
        Duration::from_millis(100),
    ));
    let mut on_a = FrameReader::new(a.post_run("/", &run_body("t", "r-stall", "Go")).await);
    let mut seen_on_a = vec![on_a.next().await.unwrap(), on_a.next().await.unwrap()];
    let on_b = FrameReader::new(reconnect(&b, "r-stall", Some(&seen_on_a[0].0)).await);
    let mut seen_on_b = vec![seen_on_a[0].clone()];
    // Every write to Redis waits 1.5 s: longer than A waits for one.
    assert_eq!(redis.command("CLIENT PAUSE 1500 WRITE").await, "+OK");
    seen_on_a.extend(on_a.rest().await);
    assert_stitched("r-stall", &seen_on_a);
    assert_eq!(seen_on_a.last().unwrap().1["outcome"]["type"], "success");
    assert_eq!(
        texts(&events(&seen_on_a))[0].1,
        (0..20).map(|i| format!("w{i} ")).collect::<String>()
    );

    seen_on_b.extend(on_b.rest().await);
    assert_stitched("r-stall", &seen_on_b);
    let lost = &seen_on_b.last().unwrap().1;
    assert_eq!(lost["type"], "RUN_ERROR");
    assert_eq!(lost["code"], "run_lost");
    // What B got before the end is exactly what A streamed: a prefix, no gap.
    let prefix = seen_on_b.len() - 1;
    assert_eq!(seen_on_b[..prefix], seen_on_a[..prefix]);
}

async fn stop_on(b: &TestApp, run_id: &str) {
    assert_eq!(request_stop(b, run_id).await.status(), 202);
}

#[tokio::test]
async fn a_stop_whose_message_is_lost_is_found_by_the_owner_s_next_lease_renewal() {
    let redis = RedisServer::start().await;
    let lease = Duration::from_secs(3);
    let (a, b) = replicas(&redis, |s| s.runs.lease_ttl_secs = lease.as_secs()).await;
    let (reader, mut frames) = start_stalled(&a, "r-missed").await;
    // Every subscription dropped: the stop's message reaches nobody (the subscribers come back
    // a second later). The owner's renewal, every third of the lease, finds the stop flag.
    assert!(redis
        .command("CLIENT KILL TYPE pubsub")
        .await
        .starts_with(':'));
    stop_on(&b, "r-missed").await;
    assert!(
        a.fake.wait_for_disconnect(lease).await,
        "A stopped the run within the lease time"
    );
    frames.extend(reader.rest().await);
    assert_stitched("r-missed", &frames);
    assert_eq!(
        frames.last().unwrap().1["outcome"],
        json!({"type": "cancelled"})
    );

    // Once the subscriptions are back, a stop is immediate again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (reader, _) = start_stalled(&a, "r-after").await;
    let before = a.fake.disconnects();
    stop_on(&b, "r-after").await;
    let sent = Instant::now();
    while a.fake.disconnects() == before {
        assert!(
            sent.elapsed() < Duration::from_secs(1),
            "A closed its upstream within a second"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    reader.rest().await;
}
