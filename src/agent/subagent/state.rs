//! A subagent's state: one key of its parent's state (`subagent_state`, by default the child's
//! name). This module owns the two ends of it: what the child starts from (the parent's state
//! under that key, as the client held it when the call started), and how the child's state
//! events become changes of the parent's state under that key.
//!
//! AG-UI has one state per run, so a child's `STATE_SNAPSHOT` cannot go out as it is (it would
//! replace the parent's whole state): it becomes a `STATE_DELTA` that `add`s the key with the
//! snapshot as its value. A child's `STATE_DELTA` has every operation's `path` (and `from`)
//! moved under the key. The child's state is tracked here as the client will hold it, so that
//! the first state event of a call can `add` the whole of it: the client may not have the key
//! yet, and a delta under a missing key would not apply (so too after another call of the same
//! child wrote the key: [`StateKey`]). Deltas that do not apply to the tracked state are
//! dropped, as the client would refuse them.
//!
//! A grandchild's state events, already moved under its key of the child's state, are the
//! child's state too, and are moved again like the child's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Map, Value};

use crate::protocol::{EventBody, StateDelta};
use crate::tools::ToolContext;

impl super::SubagentTool {
    /// The child's state lives under `key` of the parent's, instead of the child's name.
    pub fn with_state_key(mut self, key: &str) -> Self {
        self.state = StateKey::new(key);
        self
    }
}

/// The key of the parent's state that holds a child's, shared by the calls of its tool.
///
/// Calls of one child in one turn run at once and share the key. Each child tracks its own
/// state, so a delta of one call only applies to the key as that call left it: the calls note
/// here, per parent run, which of them wrote the key last, and a call that was not the last
/// sends its whole state again instead of a delta. The key ends as its last writer left it.
#[derive(Debug, Clone)]
pub(super) struct StateKey {
    key: String,
    /// The call (its subagent run id) that wrote the key last, by parent run id, while it runs.
    writers: Arc<Mutex<HashMap<String, String>>>,
}

impl StateKey {
    pub(super) fn new(key: &str) -> Self {
        StateKey {
            key: key.to_owned(),
            writers: Arc::default(),
        }
    }

    fn writers(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.writers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state a call's child starts from ([`input`]).
    pub(super) fn input(&self, context: &ToolContext) -> Option<Value> {
        input(&self.key, context.state.as_ref())
    }

    /// The state of the call `subagent_run_id`, from the parent's when the call started.
    pub(super) fn call(&self, context: &ToolContext, subagent_run_id: &str) -> ChildState {
        let parent = context.state.as_ref();
        ChildState::new(self.clone(), parent, &context.run_id, subagent_run_id)
    }
}

/// The state a child starts from: the parent's `key`, or an empty object when the parent's
/// state has none (its defaults, if it has a schema, are filled in as for any new state).
/// `None` when the parent's state is not an object: no key of it can hold the child's.
pub(super) fn input(key: &str, parent: Option<&Value>) -> Option<Value> {
    match parent {
        None => Some(Value::Object(Map::new())),
        Some(Value::Object(members)) => Some(
            members
                .get(key)
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
        ),
        Some(_) => None,
    }
}

/// One call's child state, under its key of the parent's. See the module docs.
#[derive(Debug)]
pub(super) struct ChildState {
    key: StateKey,
    /// The child's state as the client holds it once the events sent so far are applied;
    /// `None` when the parent's state cannot hold it (the child's state events are dropped).
    state: Option<Value>,
    parent_run_id: String,
    subagent_run_id: String,
}

impl ChildState {
    fn new(
        key: StateKey,
        parent: Option<&Value>,
        parent_run_id: &str,
        subagent_run_id: &str,
    ) -> Self {
        ChildState {
            state: input(&key.key, parent),
            key,
            parent_run_id: parent_run_id.to_owned(),
            subagent_run_id: subagent_run_id.to_owned(),
        }
    }

    /// A child's state event as a change of the parent's state under the key, keeping its
    /// attribution; any other event as it is. `None`: the event changes nothing the client
    /// can apply (see the module docs).
    pub(super) fn rebase(&mut self, body: EventBody) -> Option<EventBody> {
        let (update, subagent_run_id) = match body {
            EventBody::StateSnapshot(e) => (Update::Whole(e.snapshot), e.subagent_run_id),
            EventBody::StateDelta(e) => (Update::Patch(e.delta), e.subagent_run_id),
            other => return Some(other),
        };
        let last = self.last_writer();
        let state = self.state.as_mut()?;
        let patch = match update {
            Update::Whole(snapshot) => {
                *state = snapshot;
                Patch(vec![self.whole()?])
            }
            Update::Patch(patch) => {
                if let Err(problem) = crate::state::patch::apply(state, &patch) {
                    tracing::debug!(key = %self.key.key, %problem, "a subagent's state delta does not apply: dropped");
                    return None;
                }
                if last {
                    under(&self.key.key, patch)
                } else {
                    Patch(vec![self.whole()?])
                }
            }
        };
        if !last {
            self.key
                .writers()
                .insert(self.parent_run_id.clone(), self.subagent_run_id.clone());
        }
        Some(EventBody::StateDelta(StateDelta {
            delta: patch,
            subagent_run_id,
        }))
    }

    /// Whether this call wrote the key last: the client then holds it as this call left it,
    /// and a delta of it applies.
    fn last_writer(&self) -> bool {
        self.key.writers().get(&self.parent_run_id) == Some(&self.subagent_run_id)
    }

    /// An `add` of the key with the child's whole state.
    fn whole(&self) -> Option<PatchOperation> {
        Some(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens([self.key.key.as_str()]),
            value: self.state.clone()?,
        }))
    }
}

/// A call over forgets it wrote the key: a later call sends its whole state first anyway.
impl Drop for ChildState {
    fn drop(&mut self) {
        let mut writers = self.key.writers();
        if writers.get(&self.parent_run_id) == Some(&self.subagent_run_id) {
            writers.remove(&self.parent_run_id);
        }
    }
}

enum Update {
    Whole(Value),
    Patch(Patch),
}

/// `patch` moved under the top-level member `key` (RFC 6901-escaped): each path and `from`
/// gets `/<key>` in front.
fn under(key: &str, mut patch: Patch) -> Patch {
    for operation in &mut patch.0 {
        match operation {
            PatchOperation::Add(op) => op.path.push_front(key),
            PatchOperation::Remove(op) => op.path.push_front(key),
            PatchOperation::Replace(op) => op.path.push_front(key),
            PatchOperation::Test(op) => op.path.push_front(key),
            PatchOperation::Move(op) => {
                op.from.push_front(key);
                op.path.push_front(key);
            }
            PatchOperation::Copy(op) => {
                op.from.push_front(key);
                op.path.push_front(key);
            }
        }
    }
    patch
}

/// A state event without its attribution, for a client shown nothing attributed (`inline`,
/// `hidden`): the state is real whatever is shown of the child's work.
pub fn unattributed(body: EventBody) -> EventBody {
    match body {
        EventBody::StateDelta(mut e) => {
            e.subagent_run_id = None;
            EventBody::StateDelta(e)
        }
        EventBody::StateSnapshot(mut e) => {
            e.subagent_run_id = None;
            EventBody::StateSnapshot(e)
        }
        other => other,
    }
}

/// Whether `body` changes the state.
pub fn is_state_event(body: &EventBody) -> bool {
    matches!(body, EventBody::StateDelta(_) | EventBody::StateSnapshot(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta(ops: Value) -> EventBody {
        EventBody::state_delta(serde_json::from_value(ops).unwrap())
    }

    /// The state of a call `sa_1` of a run `r1` under `key` of `parent`.
    fn call(key: &str, parent: Option<&Value>) -> ChildState {
        ChildState::new(StateKey::new(key), parent, "r1", "sa_1")
    }

    /// The operations of a rebased event, and its attribution.
    #[track_caller]
    fn ops(body: Option<EventBody>) -> (Value, Option<String>) {
        match body {
            Some(EventBody::StateDelta(e)) => {
                (serde_json::to_value(&e.delta).unwrap(), e.subagent_run_id)
            }
            other => panic!("a delta: {other:?}"),
        }
    }

    /// The parent's state as a client holds it after `events`.
    fn client(mut state: Value, events: &[Option<EventBody>]) -> Value {
        for event in events.iter().flatten() {
            if let EventBody::StateDelta(e) = event {
                json_patch::patch(&mut state, &e.delta).expect("every delta applies");
            }
        }
        state
    }

    #[test]
    fn the_child_starts_from_its_key_of_the_parents_state() {
        let parent = json!({"plan": {"legs": 2}, "other": 1});
        assert_eq!(input("plan", Some(&parent)), Some(json!({"legs": 2})));
        assert_eq!(input("missing", Some(&parent)), Some(json!({})));
        assert_eq!(input("plan", None), Some(json!({})));
        assert_eq!(input("plan", Some(&json!([1]))), None);
    }

    #[test]
    fn the_first_delta_adds_the_whole_state_and_later_ones_move_under_the_key() {
        let parent = json!({"keep": true});
        let mut child = call("flights", Some(&parent));
        let first = child.rebase(delta(json!([{"op": "add", "path": "/a", "value": 1}])));
        assert_eq!(
            ops(first.clone()).0,
            json!([{"op": "add", "path": "/flights", "value": {"a": 1}}])
        );
        let second = child.rebase(delta(json!([
            {"op": "replace", "path": "/a", "value": 2},
            {"op": "copy", "from": "/a", "path": "/b"},
            {"op": "move", "from": "/b", "path": "/c"},
            {"op": "test", "path": "/c", "value": 2},
            {"op": "remove", "path": "/a"}
        ])));
        assert_eq!(
            ops(second.clone()).0,
            json!([
                {"op": "replace", "path": "/flights/a", "value": 2},
                {"op": "copy", "from": "/flights/a", "path": "/flights/b"},
                {"op": "move", "from": "/flights/b", "path": "/flights/c"},
                {"op": "test", "path": "/flights/c", "value": 2},
                {"op": "remove", "path": "/flights/a"}
            ])
        );
        assert_eq!(
            client(parent, &[first, second]),
            json!({"keep": true, "flights": {"c": 2}})
        );
    }

    #[test]
    fn a_snapshot_becomes_an_add_of_the_key_and_keeps_the_rest_of_the_parents_state() {
        let parent = json!({"keep": 1, "plan": {"old": true}});
        let mut child = call("plan", Some(&parent));
        let snapshot = child.rebase(EventBody::state_snapshot(json!({"new": [1]})));
        let delta = child.rebase(delta(json!([{"op": "add", "path": "/new/-", "value": 2}])));
        assert_eq!(
            ops(delta.clone()).0,
            json!([{"op": "add", "path": "/plan/new/-", "value": 2}])
        );
        assert_eq!(
            client(parent, &[snapshot, delta]),
            json!({"keep": 1, "plan": {"new": [1, 2]}})
        );
    }

    #[test]
    fn the_key_is_escaped_and_a_root_path_names_the_key() {
        let mut child = call("a/b~c", None);
        let first = child.rebase(EventBody::state_snapshot(json!(1)));
        assert_eq!(
            ops(first).0,
            json!([{"op": "add", "path": "/a~1b~0c", "value": 1}])
        );
        let root = child.rebase(delta(json!([{"op": "replace", "path": "", "value": 2}])));
        assert_eq!(
            ops(root).0,
            json!([{"op": "replace", "path": "/a~1b~0c", "value": 2}])
        );
    }

    #[test]
    fn a_grandchilds_delta_moves_under_the_key_and_stays_the_grandchilds() {
        let mut child = call("flights", None);
        let mut event = delta(json!([{"op": "add", "path": "/hotels", "value": {"n": 1}}]));
        event.attribute_to("sa_grandchild");
        let (first, owner) = ops(child.rebase(event));
        assert_eq!(
            first,
            json!([{"op": "add", "path": "/flights", "value": {"hotels": {"n": 1}}}])
        );
        assert_eq!(owner.as_deref(), Some("sa_grandchild"));
    }

    #[test]
    fn what_cannot_apply_is_dropped() {
        let mut child = call("k", Some(&json!({"k": {"a": 1}})));
        let bad = delta(json!([{"op": "remove", "path": "/missing"}]));
        assert!(child.rebase(bad).is_none());
        // The parent's state is an array: no key of it can hold the child's.
        let mut nowhere = call("k", Some(&json!([])));
        assert!(nowhere
            .rebase(EventBody::state_snapshot(json!({})))
            .is_none());
        // Other events pass as they are.
        let text = EventBody::text_end("m".to_owned());
        assert_eq!(nowhere.rebase(text.clone()), Some(text));
    }

    #[test]
    fn attribution_is_taken_off_a_state_event_only() {
        let mut event = delta(json!([]));
        event.attribute_to("sa_1");
        assert!(unattributed(event).subagent_run_id().is_none());
        let mut text = EventBody::text_end("m".to_owned());
        text.attribute_to("sa_1");
        assert_eq!(unattributed(text).subagent_run_id(), Some("sa_1"));
    }

    #[test]
    fn calls_of_one_child_at_once_take_turns_with_the_whole_state() {
        let key = StateKey::new("flights");
        let parent = json!({});
        let mut a = ChildState::new(key.clone(), Some(&parent), "r1", "sa_a");
        let mut b = ChildState::new(key.clone(), Some(&parent), "r1", "sa_b");
        let add =
            |path: &str, value: Value| delta(json!([{"op": "add", "path": path, "value": value}]));
        let sent = vec![
            a.rebase(add("/a", json!(1))),
            b.rebase(add("/b", json!(1))),
            // Not the last writer: its whole state, which a delta of it would not apply to.
            a.rebase(delta(json!([{"op": "replace", "path": "/a", "value": 2}]))),
            a.rebase(add("/more", json!(true))),
        ];
        let whole = |event: &Option<EventBody>| ops(event.clone()).0[0]["path"] == "/flights";
        assert!(whole(&sent[0]) && whole(&sent[1]) && whole(&sent[2]));
        assert_eq!(
            ops(sent[3].clone()).0,
            json!([{"op": "add", "path": "/flights/more", "value": true}])
        );
        assert_eq!(
            client(parent, &sent),
            json!({"flights": {"a": 2, "more": true}})
        );
        // Another run's calls are not these.
        let mut other = ChildState::new(key.clone(), None, "r2", "sa_c");
        assert!(whole(&Some(other.rebase(add("/c", json!(1))).unwrap())));
        drop((a, other));
        assert!(
            key.writers.lock().unwrap().is_empty(),
            "a call over is forgotten"
        );
    }
}
