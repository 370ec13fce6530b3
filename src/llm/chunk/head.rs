//! The fields a stream repeats before `"choices"` in every chunk, read once.
//!
//! OpenAI-compatible servers open every chunk of a reply with the same members: `id`,
//! `object`, `created`, `model`, `system_fingerprint` (`created` moves once a second at most).
//! The parser ignores all of them, yet reading them is about a third of the cost of a chunk,
//! and a reply is hundreds of chunks. So the head of a chunk (everything before its first
//! `,"choices":`) is remembered once it is known to hold only members the parser ignores, and
//! a later chunk that starts with exactly those bytes is read from `"choices"` on.
//!
//! Reading `{` + the rest gives the same chunk as reading the whole: a JSON object's members
//! are independent, and the head's members set nothing. The head is checked by reading it as
//! an object of its own, which also proves that its `,"choices":` is the top-level member (an
//! unescaped quote cannot occur inside a string, and a nested one would leave the head's
//! brackets open).

use memchr::memmem;

use super::fast;

/// What separates a chunk's head from its `choices`.
const CHOICES: &[u8] = b",\"choices\":";

/// The last head seen, whether it may be skipped, and a buffer for the rest of a chunk.
#[derive(Debug, Default)]
pub(super) struct SharedHead {
    /// The bytes before `,"choices":` of the last chunk read whole, `{` included.
    head: String,
    /// Whether `head` holds only members the parser ignores. Kept for a head that does not, so
    /// that a server repeating it is not checked again on every chunk.
    skippable: bool,
    /// `{` and the chunk from `"choices"` on.
    rest: String,
}

impl SharedHead {
    /// `data` after the remembered head (from `,"choices":` on), when it starts with it and
    /// the head may be skipped. Borrowed: nothing is copied.
    pub(super) fn tail<'a>(&self, data: &'a str) -> Option<&'a str> {
        if !self.skippable {
            return None;
        }
        let after = data.strip_prefix(self.head.as_str())?;
        after.as_bytes().starts_with(CHOICES).then_some(after)
    }

    /// `tail` (what [`Self::tail`] gave) as an object of its own.
    pub(super) fn as_object(&mut self, tail: &str) -> &str {
        self.rest.clear();
        self.rest.push('{');
        // After the comma: `"choices":…}`.
        self.rest.push_str(&tail[1..]);
        &self.rest
    }

    /// Remembers the head of `data`, a chunk that was just read whole, and whether it holds only
    /// members the parser ignores (checked once per distinct head).
    pub(super) fn learn(&mut self, data: &str) {
        let Some(at) = memmem::find(data.as_bytes(), CHOICES) else {
            self.head.clear();
            self.skippable = false;
            return;
        };
        let head = &data[..at];
        if head == self.head {
            return;
        }
        self.head.clear();
        self.head.push_str(head);
        self.rest.clear();
        self.rest.push_str(head);
        self.rest.push('}');
        self.skippable = fast::head_is_ignored(&self.rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m""#;

    fn chunk(head: &str, choices: &str) -> String {
        format!(r#"{head},"choices":[{choices}]}}"#)
    }

    /// `data` without the remembered head, as an object of its own, when it starts with it.
    fn strip(shared: &mut SharedHead, data: &str) -> Option<String> {
        let tail = shared.tail(data)?;
        Some(shared.as_object(tail).to_owned())
    }

    #[test]
    fn a_learnt_head_is_skipped_in_the_chunks_that_start_with_it() {
        let mut shared = SharedHead::default();
        let first = chunk(HEAD, r#"{"delta":{"content":"a"}}"#);
        assert_eq!(
            strip(&mut shared, &first),
            None,
            "nothing is skipped before a head is learnt"
        );
        shared.learn(&first);
        let next = chunk(HEAD, r#"{"delta":{"content":"b"}}"#);
        assert_eq!(
            strip(&mut shared, &next).as_deref(),
            Some(r#"{"choices":[{"delta":{"content":"b"}}]}"#)
        );
        let other = chunk(&HEAD.replace(":1,", ":2,"), "");
        assert_eq!(
            strip(&mut shared, &other),
            None,
            "another head is read whole"
        );
    }

    #[test]
    fn a_head_that_sets_something_is_not_learnt() {
        for head in [
            r#"{"id":"c","usage":{"prompt_tokens":1}"#,
            r#"{"id":"c","object":"error""#,
            r#"{"error":{"message":"x"}"#,
            r#"{"meta":{"a":1"#, // the `,"choices":` found is nested in `meta`
        ] {
            let mut shared = SharedHead::default();
            shared.learn(&chunk(HEAD, ""));
            let data = chunk(head, "");
            // Twice: a head seen again is not checked again, and stays unskippable.
            shared.learn(&data);
            shared.learn(&data);
            assert_eq!(strip(&mut shared, &data), None, "{head}");
        }
    }
}
