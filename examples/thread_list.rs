//! The thread list's time, store by store: the real app in this process on the offline model,
//! filled through its own run endpoint with 100,000 threads (10,000 in one scope, the rest in
//! 900 scopes of 100), then `GET /assistant/threads` timed as the big scope and as a small one.
//! Loopback only; bounded in requests; prints medians and 90th percentiles.
//!
//! ```sh
//! cargo run --release --example thread_list                        # the memory store only
//! cargo run --release --example thread_list -- \
//!     --redis-url redis://127.0.0.1:6379 --postgres-url postgres://agui@127.0.0.1:5432/agui
//! cargo run --release --example thread_list -- --threads 20000 --big 2000   # a smaller run
//! ```
//!
//! The Redis and Postgres URLs must name scratch servers: the benchmark empties them first
//! (`FLUSHDB`; the `agui_*` tables dropped). Quotas are off, so filling measures the runs and
//! the list alone. What each line times: `first page` (the newest 20), `deep page` (20 after
//! the big scope's middle, at most its 5,000th thread, reached by following cursors),
//! `archived=all` (the first page of both).

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use agui_host::settings::{Settings, ThreadStoreKind};
use agui_host::App;
use serde_json::{json, Value};

/// Requests timed per line.
const SAMPLES: usize = 200;

/// Runs in flight while filling.
const CONCURRENCY: usize = 32;

struct Options {
    threads: usize,
    big: usize,
    redis_url: Option<String>,
    postgres_url: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        threads: 100_000,
        big: 10_000,
        redis_url: None,
        postgres_url: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--threads" => options.threads = value()?.parse().map_err(|e| format!("{e}"))?,
            "--big" => options.big = value()?.parse().map_err(|e| format!("{e}"))?,
            "--redis-url" => options.redis_url = Some(value()?),
            "--postgres-url" => options.postgres_url = Some(value()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if options.big > options.threads {
        return Err("--big must not exceed --threads".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let mut stores = vec![(ThreadStoreKind::Memory, String::new())];
    if let Some(url) = &options.redis_url {
        stores.push((ThreadStoreKind::Redis, url.clone()));
    }
    if let Some(url) = &options.postgres_url {
        stores.push((ThreadStoreKind::Postgres, url.clone()));
    }
    println!(
        "agui-host thread list: {} threads, {} in the big scope, the rest in scopes of 100; \
         {SAMPLES} requests a line",
        options.threads, options.big
    );
    for (store, url) in stores {
        if let Err(error) = runtime.block_on(bench(&options, store, &url)) {
            eprintln!("{store:?}: {error}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

async fn bench(
    options: &Options,
    store: ThreadStoreKind,
    url: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    empty(store, url).await?;
    let mut settings = Settings::embedded_default()?;
    settings.server.host = "127.0.0.1".into();
    settings.server.port = 0;
    settings.llm.api_key = String::new();
    settings.threads.store = store;
    settings.threads.redis_url = url.to_owned();
    settings.threads.postgres_url = url.to_owned();
    settings.threads.scope_header = "X-User-Id".into();
    settings.threads.max_threads = options.threads * 2;
    settings.threads.max_threads_per_scope = 0;
    settings.threads.max_bytes_per_scope = 0;
    settings.telemetry.log_filter = "error".into();
    let app = App::build(settings).await?;
    let address = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();

    let started = Instant::now();
    fill(&client, &address, options).await?;
    let filled = started.elapsed();
    println!(
        "{store:?}: filled in {:.1} s ({:.0} runs/s)",
        filled.as_secs_f64(),
        options.threads as f64 / filled.as_secs_f64()
    );
    let deep = cursor_after(&client, &address, "big", (options.big / 2).min(5_000)).await?;
    let lines = [
        ("big scope, first page", "big", String::new()),
        ("big scope, deep page", "big", format!("&cursor={deep}")),
        ("big scope, archived=all", "big", "&archived=all".to_owned()),
        ("small scope, first page", "u0", String::new()),
    ];
    for (what, scope, query) in lines {
        let times = time_list(&client, &address, scope, &query).await?;
        println!(
            "{store:?}: {what}: median {:.2} ms, p90 {:.2} ms",
            percentile(&times, 50),
            percentile(&times, 90)
        );
    }
    let _ = stop.send(());
    server.await??;
    Ok(())
}

/// Empties a scratch Redis or Postgres, so every run starts from nothing.
async fn empty(store: ThreadStoreKind, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    match store {
        ThreadStoreKind::Redis => {
            let client = redis::Client::open(url)?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("FLUSHDB")
                .query_async::<()>(&mut connection)
                .await?;
        }
        ThreadStoreKind::Postgres => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            client
                .batch_execute(
                    "DROP TABLE IF EXISTS agui_threads, agui_thread_leases, agui_decisions, \
                     agui_schema_migrations",
                )
                .await?;
        }
        ThreadStoreKind::Memory | ThreadStoreKind::Off => {}
    }
    Ok(())
}

/// The scope of the `index`th thread: the first `big` are the big scope's.
fn scope_of(index: usize, big: usize) -> String {
    if index < big {
        "big".to_owned()
    } else {
        format!("u{}", (index - big) / 100)
    }
}

/// One run per thread, `CONCURRENCY` at a time.
async fn fill(
    client: &reqwest::Client,
    address: &str,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (0..CONCURRENCY).map(|_| {
        let (client, address, next) = (client.clone(), address.to_owned(), Arc::clone(&next));
        let (total, big) = (options.threads, options.big);
        tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return Ok::<(), String>(());
                }
                let body = json!({
                    "threadId": format!("thread-{index:06}"),
                    "runId": format!("run-{index:06}"),
                    "messages": [{"id": "m1", "role": "user",
                        "content": format!("Question number {index}")}],
                    "tools": [], "context": [], "state": {}, "forwardedProps": {}
                });
                let response = client
                    .post(format!("{address}/"))
                    .header("content-type", "application/json")
                    .header("x-user-id", scope_of(index, big))
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = response.status();
                let text = response.text().await.map_err(|e| e.to_string())?;
                if !status.is_success() || !text.contains("RUN_FINISHED") {
                    return Err(format!("run {index}: {status} {text:.200}"));
                }
            }
        })
    });
    for worker in futures_util::future::join_all(workers).await {
        worker??;
    }
    Ok(())
}

async fn list(
    client: &reqwest::Client,
    address: &str,
    scope: &str,
    query: &str,
) -> Result<Value, Box<dyn std::error::Error>> {
    let response = client
        .get(format!("{address}/assistant/threads?limit=20{query}"))
        .header("x-user-id", scope)
        .send()
        .await?;
    if !response.status().is_success() {
        return Err(format!("list: {}", response.status()).into());
    }
    let page: Value = response.json().await?;
    if page["threads"].as_array().is_none_or(Vec::is_empty) {
        return Err(format!("an empty page: {page}").into());
    }
    Ok(page)
}

/// The cursor after the `skip`th thread of `scope`, reached as a client would: page by page.
async fn cursor_after(
    client: &reqwest::Client,
    address: &str,
    scope: &str,
    skip: usize,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut cursor = String::new();
    for _ in 0..skip / 20 {
        let page = list(client, address, scope, &cursor).await?;
        let next = page["nextCursor"].as_str().ok_or("the list ended early")?;
        cursor = format!("&cursor={next}");
    }
    Ok(cursor.trim_start_matches("&cursor=").to_owned())
}

/// `SAMPLES` requests of one page, one after another (after a few to warm up): milliseconds.
async fn time_list(
    client: &reqwest::Client,
    address: &str,
    scope: &str,
    query: &str,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    for _ in 0..10 {
        list(client, address, scope, query).await?;
    }
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        list(client, address, scope, query).await?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    Ok(times)
}

fn percentile(times: &[f64], percent: usize) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[(sorted.len() - 1) * percent / 100]
}
