//! Instants a configured duration away. A setting may hold any number of seconds, and adding
//! one too large to an instant panics; here it saturates to a time that never comes, as tokio's
//! own `sleep` and `timeout` do. A leaf: it uses nothing else of the crate.

use std::time::Duration;

use tokio::time::Instant;

/// About a hundred years: later than any run, lease or stored thread can matter.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// `limit` after `from`, or as good as never when `limit` is too large to add.
pub fn after(from: Instant, limit: Duration) -> Instant {
    from.checked_add(limit).unwrap_or_else(|| from + NEVER)
}
