//! The completion's `id` and the `model` that answered, which traces report: every chunk's
//! head repeats them, so they are read from the first chunk that names either, and sent once
//! as [`LlmEvent::Response`].

use serde::Deserialize;

use super::lenient;
use crate::llm::LlmEvent;

/// Whether the reply has been named yet.
#[derive(Debug, Default)]
pub(super) struct ResponseNamer {
    named: bool,
}

/// The members of a chunk's head that name the completion.
#[derive(Debug, Default, Deserialize)]
struct ResponseNames {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    model: Option<String>,
}

impl ResponseNamer {
    /// Reads `data`, a chunk, for the names until a chunk with a choice has been read
    /// (`choice_seen`; Azure's first chunk, its prompt filter results, names nothing), so a
    /// reply costs one or two extra reads of a chunk at most. Empty names are no names.
    pub(super) fn name(&mut self, data: &str, choice_seen: bool, out: &mut Vec<LlmEvent>) {
        if self.named || choice_seen {
            return;
        }
        let names = serde_json::from_str::<ResponseNames>(data).unwrap_or_default();
        let id = names.id.filter(|id| !id.is_empty());
        let model = names.model.filter(|model| !model.is_empty());
        if id.is_some() || model.is_some() {
            self.named = true;
            out.push(LlmEvent::Response { id, model });
        }
    }
}
