//! The one retry policy every retry loop uses (the model client's retries before a stream, MCP
//! reconnections, the terminal client's resumes): exponential backoff with jitter, from
//! `backon`, so the loops differ only in their numbers.
//!
//! The loops keep their own control flow (a `Retry-After` that wins over the backoff, a reset
//! after a healthy connection, a shutdown that cuts a wait short) and take only the waits from
//! here, as an iterator: `None` means the attempts are spent.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// How long to wait before each retry, and how many retries there are.
///
/// The n-th wait (from 0) is `first_wait × 2ⁿ`, held at `max_wait` once it gets there, plus a
/// random part of up to the same again, so callers that failed together do not retry together:
/// every wait lies in `[base, 2 × base)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    first_wait: Duration,
    max_wait: Duration,
    max_retries: Option<usize>,
}

impl RetryPolicy {
    /// Retries without end (until the caller stops asking), the base wait doubling from
    /// `first_wait` up to `max_wait`.
    pub const fn new(first_wait: Duration, max_wait: Duration) -> Self {
        RetryPolicy {
            first_wait,
            max_wait,
            max_retries: None,
        }
    }

    /// At most `retries` waits, then the iterator ends.
    pub const fn with_max_retries(self, retries: usize) -> Self {
        RetryPolicy {
            max_retries: Some(retries),
            ..self
        }
    }

    /// The number of retries, if bounded.
    pub const fn max_retries(&self) -> Option<usize> {
        self.max_retries
    }

    /// The waits of one series of attempts, from the first; start a new series after a success.
    pub fn waits(&self) -> impl Iterator<Item = Duration> + Send + 'static {
        let builder = ExponentialBuilder::new()
            .with_min_delay(self.first_wait)
            .with_max_delay(self.max_wait)
            .with_factor(2.0)
            .with_jitter();
        let builder = match self.max_retries {
            Some(retries) => builder.with_max_times(retries),
            None => builder.without_max_times(),
        };
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_wait_doubles_up_to_the_cap_with_up_to_as_much_again_of_jitter() {
        let policy = RetryPolicy::new(100 * MS, 800 * MS).with_max_retries(6);
        for _ in 0..200 {
            let waits: Vec<Duration> = policy.waits().collect();
            assert_eq!(waits.len(), 6);
            for (wait, base) in waits.iter().zip([100, 200, 400, 800, 800, 800]) {
                assert!(
                    *wait >= base * MS && *wait < 2 * base * MS,
                    "{wait:?} outside [{base} ms, {} ms)",
                    2 * base
                );
            }
        }
    }

    #[test]
    fn the_waits_are_spread_not_equal() {
        let policy = RetryPolicy::new(100 * MS, 800 * MS);
        let firsts: std::collections::BTreeSet<Duration> = (0..50)
            .map(|_| policy.waits().next().expect("a first wait"))
            .collect();
        assert!(firsts.len() > 10, "jitter spreads the waits: {firsts:?}");
    }

    #[test]
    fn an_unbounded_policy_keeps_waiting_and_a_bounded_one_stops() {
        let endless = RetryPolicy::new(MS, 4 * MS);
        assert_eq!(endless.max_retries(), None);
        assert_eq!(endless.waits().take(1000).count(), 1000);
        let none = RetryPolicy::new(MS, 4 * MS).with_max_retries(0);
        assert_eq!(none.waits().next(), None);
    }
}
