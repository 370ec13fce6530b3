//! Text helpers shared by the server, the model client and the terminal client: text grown
//! piece by piece without doubling, fresh ids,
//! digests that name stored things, cutting text for a log line, an error message or a
//! preview without splitting a character, URLs with their secrets redacted for printing, and
//! JSON spelt one way whatever the map order (what signatures are computed over).
//! A leaf: it uses nothing else of the crate.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Appends `piece` to `text`, growing it by a quarter of its length when it is full rather than
/// doubling it: a text built piece by piece and then held for a whole stream (a reply, a log's
/// fragments) keeps at most a quarter of its length spare instead of up to all of it. Still
/// amortized constant time per byte.
pub fn push_growing(text: &mut String, piece: &str) {
    let spare = text.capacity() - text.len();
    if spare < piece.len() {
        text.reserve_exact(piece.len().max(text.len() / 4).max(64));
    }
    text.push_str(piece);
}

/// A fresh opaque id with a readable prefix (`msg_…`, `call_…`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// JSON with object keys sorted at every level, whatever map type serde_json was built with:
/// the same arguments always sign the same way.
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (key, value)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(value, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// The hex SHA-256 of `parts`, each prefixed by its length so that no two lists of parts
/// collide (`["ab", "c"]` and `["a", "bc"]` differ): a store key that names a (scope, agent,
/// id) without putting client text in it.
pub fn key_digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hex(&hasher.finalize())
}

/// At most `max` characters of `text`, marking a cut with `…` (never inside a character).
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// What a redacted secret reads as.
const REDACTED: &str = "redacted";

/// Query parameters whose value is a secret, by a part of their name (compared in lower case):
/// `api-key`, `key`, `access_token`, `sig`, `X-Amz-Signature`, `password`, `client_secret`...
const SECRET_QUERY_PARTS: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "sig",
    "auth",
    "credential",
    "session",
    "code",
];

/// `url` fit to print: the userinfo's password (or a lone username, often a token such as
/// `https://<token>@host`) replaced, and the value of every secret-looking query parameter
/// (see [`SECRET_QUERY_PARTS`]) and any fragment replaced too. Other parameters stay, so the
/// printed URL still says where it points. Text that is not a URL is cut before any `@` and any
/// `?`, which is where a secret would be.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url.trim()) else {
        return redact_unparsed(url);
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some(REDACTED));
    } else if !parsed.username().is_empty() {
        let _ = parsed.set_username(REDACTED);
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let lower = name.to_ascii_lowercase();
                let secret = SECRET_QUERY_PARTS.iter().any(|part| lower.contains(part));
                let value = if secret {
                    REDACTED.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    if parsed.fragment().is_some() {
        parsed.set_fragment(Some(REDACTED));
    }
    parsed.to_string()
}

/// The scheme and host of text that does not parse as a URL, without userinfo and query.
fn redact_unparsed(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), text),
    };
    let rest = match rest.rsplit_once('@') {
        Some((_, host)) => format!("{REDACTED}@{host}"),
        None => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((before, _)) => format!("{before}?{REDACTED}"),
        None => rest,
    };
    format!("{scheme}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text built from many pieces holds them all, in order, with at most a quarter of its
    /// length (or one piece, or 64 bytes) spare.
    #[test]
    fn a_growing_text_keeps_little_spare() {
        let mut text = String::new();
        let mut expected = String::new();
        for i in 0..2_000 {
            let piece = format!(" word{i}");
            push_growing(&mut text, &piece);
            expected.push_str(&piece);
            let spare = text.capacity() - text.len();
            assert!(
                spare <= (text.len() / 4).max(piece.len()).max(64),
                "{spare} of {}",
                text.len()
            );
        }
        assert_eq!(text, expected);
    }

    #[test]
    fn a_url_keeps_where_it_points_and_loses_its_secrets() {
        for (url, printed) in [
            (
                "https://user:hunter2@llm.example.com/v1?api-key=sk-1&region=eu",
                "https://user:redacted@llm.example.com/v1?api-key=redacted&region=eu",
            ),
            (
                "redis://:pa%40ss@redis.internal:6379/0",
                "redis://:redacted@redis.internal:6379/0",
            ),
            (
                "https://ghp_token@gateway.example/v1",
                "https://redacted@gateway.example/v1",
            ),
            (
                "https://x.example/v1?key=a&sig=b&access_token=c&X-Amz-Signature=d&deployment=gpt",
                "https://x.example/v1?key=redacted&sig=redacted&access_token=redacted&\
                 X-Amz-Signature=redacted&deployment=gpt",
            ),
            ("http://localhost:11434/v1", "http://localhost:11434/v1"),
            (
                "https://x.example/#token=abc",
                "https://x.example/#redacted",
            ),
        ] {
            assert_eq!(redact_url(url), printed, "{url}");
        }
    }

    #[test]
    fn text_that_is_not_a_url_is_cut_at_its_userinfo_and_query() {
        let printed = redact_url("redis://us er:secret@host:6379?password=x y");
        assert!(
            !printed.contains("secret") && !printed.contains("x y"),
            "{printed}"
        );
        assert!(printed.contains("host:6379"), "{printed}");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn ids_are_fresh_and_keep_their_prefix() {
        let (a, b) = (new_id("call"), new_id("call"));
        assert!(
            a.starts_with("call_") && a.len() == "call_".len() + 32,
            "{a}"
        );
        assert_ne!(a, b);
    }

    #[test]
    fn cuts_at_a_character_boundary_and_marks_the_cut() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hé", 2), "hé");
        assert_eq!(truncate_chars("abcdef", 3), "abc…");
        assert_eq!(truncate_chars("ééé", 3), "ééé");
        assert_eq!(truncate_chars("", 0), "");
    }
}
