//! A thread's branches: every run it kept, with the `parentRunId` it named and how far into
//! the conversation it reached, on the branch the record's `messages` are (the current one) or
//! on one of the others a fork left behind.
//!
//! A run whose `parentRunId` names a kept run continues the conversation as it stood after
//! that run. When the run's history is that conversation and more, the run continues its
//! branch; when it leaves out what followed that run (a regenerated answer, an edited earlier
//! message), the run forks: the branch it left stays kept, and the new conversation becomes the
//! current one. A run that names no kept run continues the current branch when its history
//! starts with the current conversation, and otherwise replaces it (the client's own edit,
//! under `threads.history = "trust_client"`), the old one kept as a branch. At most
//! [`MAX_BRANCHES`] branches besides the current one are kept, the least recently current
//! dropped first.
//!
//! The history check uses the same record: a request naming a kept run is checked against
//! that run's conversation, so a client that goes back to an earlier branch, whose server
//! tool results the current branch does not hold, is not told it forged them.

use serde::{Deserialize, Serialize};

use crate::protocol::Message;

/// How many branches a thread keeps besides the current one. Each is a copy of its
/// conversation, so the bound keeps a thread that is regenerated often within its size.
pub const MAX_BRANCHES: usize = 8;

/// A kept run: its id, the run it named as its parent, and how many messages the conversation
/// held once it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunMark {
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    pub messages: usize,
}

/// A branch other than the current one: its runs and its conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Branch {
    pub runs: Vec<RunMark>,
    pub messages: Vec<Message>,
}

/// The runs of the current branch and the other branches (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lineage {
    /// The current branch's runs, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunMark>,
    /// The other branches, the most recently current first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<Branch>,
}

/// Where a kept run is: on the current branch, or on the other branch at this index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    Current,
    Branch(usize),
}

/// A kept run found: its branch, its place among the branch's runs, and its message count.
#[derive(Debug, Clone, Copy)]
struct Found {
    on: On,
    index: usize,
    messages: usize,
}

impl Lineage {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.branches.is_empty()
    }

    fn find(&self, run_id: &str) -> Option<Found> {
        let position = |runs: &[RunMark]| {
            runs.iter()
                .rposition(|run| run.run_id == run_id)
                .map(|index| (index, runs[index].messages))
        };
        if let Some((index, messages)) = position(&self.runs) {
            return Some(Found {
                on: On::Current,
                index,
                messages,
            });
        }
        self.branches.iter().enumerate().find_map(|(branch, kept)| {
            position(&kept.runs).map(|(index, messages)| Found {
                on: On::Branch(branch),
                index,
                messages,
            })
        })
    }

    /// The conversation as it stood after kept run `run_id` (`current`: the record's
    /// messages); `None` when the thread kept no such run.
    pub fn conversation_after<'a>(
        &'a self,
        current: &'a [Message],
        run_id: &str,
    ) -> Option<&'a [Message]> {
        let found = self.find(run_id)?;
        let messages = match found.on {
            On::Current => current,
            On::Branch(branch) => &self.branches[branch].messages,
        };
        messages.get(..found.messages)
    }

    /// The lineage once run `run` has ended with `conversation`, the record before it having
    /// held `current` (see the module docs for which branch the run lands on).
    #[must_use]
    pub fn after_run(
        mut self,
        current: Vec<Message>,
        mut run: RunMark,
        conversation: &[Message],
    ) -> Lineage {
        run.messages = conversation.len();
        let parent = run
            .parent_run_id
            .as_deref()
            .and_then(|parent| self.find(parent))
            .filter(|found| {
                let messages = match found.on {
                    On::Current => &current,
                    On::Branch(branch) => &self.branches[branch].messages,
                };
                extends(
                    conversation,
                    &messages[..found.messages.min(messages.len())],
                )
            });
        let continues_current = !current.is_empty() && extends(conversation, &current);
        let runs = match parent {
            Some(Found {
                on: On::Current,
                index,
                messages,
            }) if messages < current.len() => {
                // A fork off the current branch: it stays, as the most recent other branch.
                let runs = self.runs[..=index].to_vec();
                self.keep_current(current);
                runs
            }
            Some(Found {
                on: On::Branch(branch),
                index,
                messages,
            }) => {
                let kept = &self.branches[branch];
                let runs = kept.runs[..=index].to_vec();
                if messages >= kept.messages.len() {
                    // Back on a branch left earlier, where it ended: it is current again.
                    self.branches.remove(branch);
                }
                self.keep_current(current);
                runs
            }
            Some(_) => std::mem::take(&mut self.runs),
            None if continues_current => std::mem::take(&mut self.runs),
            None => {
                self.keep_current(current);
                Vec::new()
            }
        };
        self.runs = runs;
        // Exactly: the recorder holds the lineage for the run's whole stream, and a store keeps
        // it with the thread, where a doubled vector's slack (three marks for a new thread's
        // one) would be kept too.
        self.runs.reserve_exact(1);
        self.runs.push(run);
        self
    }

    /// Keeps the current branch, about to be replaced, as the most recent other branch.
    fn keep_current(&mut self, current: Vec<Message>) {
        let runs = std::mem::take(&mut self.runs);
        if current.is_empty() {
            return;
        }
        self.branches.insert(
            0,
            Branch {
                runs,
                messages: current,
            },
        );
        self.branches.truncate(MAX_BRANCHES);
    }
}

/// Whether `conversation` starts with the messages of `prefix`, by id: a client may send a
/// message back spelt a little differently (a field it fills in, a number's form), which is
/// still the same message of the same branch; a regenerated answer has a new id.
/// Activity messages are left out on both sides: the record keeps them, but a 1.0 client never
/// sends them back.
fn extends(conversation: &[Message], prefix: &[Message]) -> bool {
    let said = |message: &&Message| !matches!(message, Message::Activity(_));
    let mut conversation = conversation.iter().filter(said);
    prefix.iter().filter(said).all(|kept| {
        conversation
            .next()
            .is_some_and(|message| message.id() == kept.id())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(ids: &[&str]) -> Vec<Message> {
        ids.iter()
            .map(|id| {
                let role = if id.starts_with('u') {
                    "user"
                } else {
                    "assistant"
                };
                serde_json::from_value(json!({"role": role, "id": id, "content": id})).unwrap()
            })
            .collect()
    }

    fn mark(run: &str, parent: Option<&str>) -> RunMark {
        RunMark {
            run_id: run.into(),
            parent_run_id: parent.map(str::to_owned),
            messages: 0,
        }
    }

    /// Runs `run` (naming `parent`) on `lineage` over `current`, ending with `ids`.
    fn step(
        lineage: Lineage,
        current: &[&str],
        (run, parent): (&str, Option<&str>),
        ids: &[&str],
    ) -> Lineage {
        lineage.after_run(messages(current), mark(run, parent), &messages(ids))
    }

    fn run_ids(runs: &[RunMark]) -> Vec<&str> {
        runs.iter().map(|run| run.run_id.as_str()).collect()
    }

    #[test]
    fn an_activity_the_client_never_sends_back_is_no_divergence() {
        let activity: Message = serde_json::from_value(
            json!({"role": "activity", "id": "act_c1", "activityType": "agui-host.tool", "content": {}}),
        )
        .unwrap();
        let mut recorded = messages(&["u1", "a1"]);
        recorded.insert(1, activity);
        assert!(extends(&messages(&["u1", "a1", "u2"]), &recorded));
        assert!(!extends(&messages(&["u1", "a2", "u2"]), &recorded));
        assert!(!extends(&messages(&["u1"]), &recorded));
    }

    #[test]
    fn runs_that_continue_stay_on_one_branch() {
        let lineage = step(Lineage::default(), &[], ("r1", None), &["u1", "a1"]);
        let lineage = step(
            lineage,
            &["u1", "a1"],
            ("r2", Some("r1")),
            &["u1", "a1", "u2", "a2"],
        );
        let lineage = step(
            lineage,
            &["u1", "a1", "u2", "a2"],
            ("r3", None),
            &["u1", "a1", "u2", "a2", "u3", "a3"],
        );
        assert_eq!(run_ids(&lineage.runs), ["r1", "r2", "r3"]);
        assert!(lineage.branches.is_empty());
        let current = messages(&["u1", "a1", "u2", "a2", "u3", "a3"]);
        assert_eq!(
            lineage.conversation_after(&current, "r2"),
            Some(&current[..4])
        );
        assert_eq!(lineage.conversation_after(&current, "r9"), None);
    }

    #[test]
    fn a_regenerated_answer_forks_and_the_first_answer_stays_kept() {
        let lineage = step(Lineage::default(), &[], ("r1", None), &["u1", "a1"]);
        let lineage = step(
            lineage,
            &["u1", "a1"],
            ("r2", Some("r1")),
            &["u1", "a1", "u2", "a2"],
        );
        // Regenerate: the last answer dropped, the same parent.
        let lineage = step(
            lineage,
            &["u1", "a1", "u2", "a2"],
            ("r2b", Some("r1")),
            &["u1", "a1", "u2", "b2"],
        );
        assert_eq!(run_ids(&lineage.runs), ["r1", "r2b"]);
        assert_eq!(lineage.branches.len(), 1);
        assert_eq!(run_ids(&lineage.branches[0].runs), ["r1", "r2"]);
        let current = messages(&["u1", "a1", "u2", "b2"]);
        assert_eq!(
            lineage.conversation_after(&current, "r2"),
            Some(&messages(&["u1", "a1", "u2", "a2"])[..])
        );
        // Back on the first answer, going on from it: that branch is current again.
        let lineage = step(
            lineage,
            &["u1", "a1", "u2", "b2"],
            ("r3", Some("r2")),
            &["u1", "a1", "u2", "a2", "u3", "a3"],
        );
        assert_eq!(run_ids(&lineage.runs), ["r1", "r2", "r3"]);
        assert_eq!(lineage.branches.len(), 1);
        assert_eq!(run_ids(&lineage.branches[0].runs), ["r1", "r2b"]);
    }

    #[test]
    fn an_edit_without_a_known_parent_replaces_the_branch_and_keeps_the_old_one() {
        let lineage = step(Lineage::default(), &[], ("r1", None), &["u1", "a1"]);
        let lineage = step(
            lineage,
            &["u1", "a1"],
            ("r2", Some("unknown")),
            &["u1x", "a1x"],
        );
        assert_eq!(run_ids(&lineage.runs), ["r2"]);
        assert_eq!(run_ids(&lineage.branches[0].runs), ["r1"]);
    }

    #[test]
    fn at_most_so_many_branches_are_kept() {
        let mut lineage = step(Lineage::default(), &[], ("r0", None), &["u1", "a0"]);
        let mut current = vec!["u1".to_owned(), "a0".to_owned()];
        for n in 1..=MAX_BRANCHES + 3 {
            let answer = format!("a{n}");
            let ids: Vec<&str> = current.iter().map(String::as_str).collect();
            lineage = step(lineage, &ids, (&format!("r{n}"), None), &["u1", &answer]);
            current = vec!["u1".to_owned(), answer];
        }
        assert_eq!(lineage.branches.len(), MAX_BRANCHES);
    }
}
