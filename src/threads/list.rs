//! The thread list: what one entry of `GET /<agent>/threads` says of a thread
//! ([`ThreadSummary`], computed from the record when it is saved, so a list never decodes
//! records), which page is asked for ([`ListQuery`]), and the opaque cursor between pages.
//!
//! Every store orders a scope's threads the same way, newest first: `updatedAt` descending, then
//! thread id ascending (byte order), so a cursor names one place in that order, the last thread
//! of the page before, and the next page starts strictly after it. A thread saved while a
//! client pages moves to the front; it is then either seen twice or not at all, never half.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::ThreadRecord;
use crate::protocol::Message;

/// The longest derived title, in characters (a title set by `PATCH` has its own bound).
pub const DERIVED_TITLE_CHARS: usize = 80;

/// Most threads one page holds.
pub const MAX_PAGE: usize = 100;

/// A thread as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSummary {
    pub thread_id: String,
    /// Set by `PATCH`, else the start of the first user message; `None` when neither exists.
    pub title: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_run_id: String,
    pub status: ThreadStatus,
    pub archived: bool,
    pub message_count: usize,
}

/// Whether the thread waits on someone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// Nothing is open.
    Idle,
    /// The last run ended with interrupts still open.
    Interrupted,
    /// A run holds the thread's lease now.
    Running,
}

/// Which threads by their archived flag (`?archived=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchivedFilter {
    /// Only threads not archived (the default).
    #[default]
    #[serde(rename = "false")]
    Active,
    /// Only archived threads.
    #[serde(rename = "true")]
    Archived,
    /// Both.
    All,
}

impl ArchivedFilter {
    /// Whether a thread with this flag is listed.
    pub fn admits(self, archived: bool) -> bool {
        match self {
            ArchivedFilter::Active => !archived,
            ArchivedFilter::Archived => archived,
            ArchivedFilter::All => true,
        }
    }
}

/// One place in the list's order: the last thread a page showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub updated_at: i64,
    pub thread_id: String,
}

impl ListCursor {
    /// The cursor of the thread a page ended on.
    pub fn after(summary: &ThreadSummary) -> ListCursor {
        ListCursor {
            updated_at: summary.updated_at,
            thread_id: summary.thread_id.clone(),
        }
    }

    /// Whether a thread at (`updated_at`, `thread_id`) comes after this cursor in the order.
    pub fn precedes(&self, updated_at: i64, thread_id: &str) -> bool {
        updated_at < self.updated_at
            || (updated_at == self.updated_at && thread_id > self.thread_id.as_str())
    }

    /// The opaque form a client sends back: base64url of `<updatedAt>:<threadId>`.
    pub fn encode(&self) -> String {
        let plain = format!("{}:{}", self.updated_at, self.thread_id);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(plain)
    }

    /// The cursor `encode` made; `None` for anything else.
    pub fn decode(text: &str) -> Option<ListCursor> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let plain = String::from_utf8(bytes).ok()?;
        let (updated_at, thread_id) = plain.split_once(':')?;
        Some(ListCursor {
            updated_at: updated_at.parse().ok()?,
            thread_id: thread_id.to_owned(),
        })
    }
}

/// A page of one scope's threads of one agent.
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub scope: String,
    pub agent: String,
    pub archived: ArchivedFilter,
    /// 1 to [`MAX_PAGE`].
    pub limit: usize,
    /// Start after this place; `None`: from the newest.
    pub after: Option<ListCursor>,
}

/// What a store answers a [`ListQuery`] with.
#[derive(Debug, Clone, Default)]
pub struct ThreadPage {
    pub threads: Vec<ThreadSummary>,
    /// Where the next page starts; `None` on the last page. A store that stops scanning early
    /// (Redis bounds one call's work) may return a short page with a cursor.
    pub next: Option<ListCursor>,
}

impl ThreadPage {
    /// The page of `limit` from `found`, which holds up to `limit + 1` threads in list order:
    /// one more than fits means there is a next page.
    pub fn from_overfetch(mut found: Vec<ThreadSummary>, limit: usize) -> ThreadPage {
        let more = found.len() > limit;
        found.truncate(limit);
        let next = more.then(|| found.last().map(ListCursor::after)).flatten();
        ThreadPage {
            threads: found,
            next,
        }
    }
}

impl ThreadRecord {
    /// The list entry of this record under `thread_id` (`Running` is the leases' to say).
    pub fn summary(&self, thread_id: &str) -> ThreadSummary {
        ThreadSummary {
            thread_id: thread_id.to_owned(),
            title: self.title.clone().or_else(|| derived_title(&self.messages)),
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_run_id: self.last_run_id.clone(),
            status: if self.interrupts.is_empty() {
                ThreadStatus::Idle
            } else {
                ThreadStatus::Interrupted
            },
            archived: self.archived,
            message_count: self.messages.len(),
        }
    }
}

/// The first user message's text, whitespace trimmed and cut on a character boundary at
/// [`DERIVED_TITLE_CHARS`]; `None` without a user message with text.
fn derived_title(messages: &[Message]) -> Option<String> {
    messages.iter().find_map(|message| match message {
        Message::User(user) => {
            let text = user.content.text();
            let trimmed = text.trim();
            (!trimmed.is_empty()).then(|| crate::text::truncate_chars(trimmed, DERIVED_TITLE_CHARS))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_saved_before_titles_existed_loads_untitled_and_not_archived() {
        let stored = serde_json::json!({
            "agent": "a", "messages": [], "lastRunId": "r", "createdAt": 1, "updatedAt": 2
        });
        let record: ThreadRecord = serde_json::from_value(stored).unwrap();
        assert_eq!((record.title, record.archived), (None, false));
    }

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let cursor = ListCursor {
            updated_at: 1_700_000_000_123,
            thread_id: "t:with:colons/and ünïcode".into(),
        };
        assert_eq!(ListCursor::decode(&cursor.encode()), Some(cursor));
        for bad in ["", "!!", "bm90LWEtY3Vyc29y", "YWJjOmRlZg"] {
            assert_eq!(ListCursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_order_is_newest_first_then_thread_id() {
        let cursor = ListCursor {
            updated_at: 10,
            thread_id: "b".into(),
        };
        assert!(cursor.precedes(9, "a"));
        assert!(cursor.precedes(10, "c"));
        assert!(!cursor.precedes(10, "b"));
        assert!(!cursor.precedes(10, "a"));
        assert!(!cursor.precedes(11, "z"));
    }

    #[test]
    fn a_derived_title_is_the_first_user_text_trimmed_and_cut_on_a_char_boundary() {
        let user =
            |id: &str, text: &str| Message::User(crate::protocol::UserMessage::text(id, text));
        let long = format!("  {}  ", "é".repeat(100));
        let title = derived_title(&[user("1", "   "), user("2", &long)]).unwrap();
        assert_eq!(
            title.chars().count(),
            DERIVED_TITLE_CHARS + 1,
            "80 and the ellipsis"
        );
        assert!(title.starts_with('é') && title.ends_with('…'));
        assert_eq!(derived_title(&[user("1", " hi ")]).as_deref(), Some("hi"));
        assert_eq!(derived_title(&[]), None);
    }
}
