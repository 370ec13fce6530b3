//! Text helpers shared by the server, the model client and the terminal client: fresh ids,
//! digests that name stored things, and cutting text for a log line, an error message or a
//! preview without splitting a character. A leaf: it uses nothing else of the crate.

use sha2::{Digest, Sha256};

/// A fresh opaque id with a readable prefix (`msg_…`, `call_…`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
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

#[cfg(test)]
mod tests {
    use super::*;

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
