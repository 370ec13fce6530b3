//! What the CPU benchmarks among the examples share: the fake upstream and the app each served
//! on a runtime of its own (so their threads are named apart), the CPU time of a process's
//! threads by name, runs driven at a fixed concurrency and read to their end, and the median
//! of rounds.

use futures_util::{stream, StreamExt};
use serde_json::Value;

/// Nanoseconds on the CPU of this process's threads whose name starts with `prefix`.
pub(crate) fn cpu_ns(prefix: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with(prefix))
        })
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// `runs` POSTs of `body` to `url`, `concurrency` at a time, each read to its end; fails
/// unless every stream ends with `RUN_FINISHED` (`check_finished`) or at all.
pub(crate) async fn drive(
    client: &reqwest::Client,
    url: &str,
    runs: usize,
    body: impl Fn() -> Value,
    check_finished: bool,
    concurrency: usize,
) -> Result<(), String> {
    let bodies: Vec<Value> = (0..runs).map(|_| body()).collect();
    let results: Vec<Result<(), String>> = stream::iter(bodies)
        .map(|body| async move {
            let response = client
                .post(url)
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let text = response.text().await.map_err(|e| e.to_string())?;
            if check_finished
                && !text
                    .trim_end()
                    .rsplit("data: ")
                    .next()
                    .is_some_and(|last| last.contains("\"RUN_FINISHED\""))
            {
                return Err(format!(
                    "a run did not finish: {}",
                    &text[text.len().saturating_sub(300)..]
                ));
            }
            Ok(())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    results.into_iter().collect()
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Serves `router` on a free local port of `runtime`; its base URL.
pub(crate) fn serve_upstream(runtime: &tokio::runtime::Runtime, router: axum::Router) -> String {
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{address}")
    })
}

/// Builds and serves the app of `settings` on `runtime`; its base URL.
pub(crate) fn serve_app(
    runtime: &tokio::runtime::Runtime,
    settings: agui_host::settings::Settings,
) -> String {
    runtime.block_on(async {
        let app = agui_host::App::build(settings)
            .await
            .expect("the app builds");
        let address = format!("http://{}", app.local_addr());
        tokio::spawn(app.run_until(std::future::pending()));
        address
    })
}
