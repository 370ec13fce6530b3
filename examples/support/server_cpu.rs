//! What the CPU benchmarks among the examples share: the CPU time of a process's threads by
//! name, runs driven at a fixed concurrency and read to their end, and the median of rounds.

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
