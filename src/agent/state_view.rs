//! The server's view of the shared state, and the one function that changes it: every state
//! update becomes the event that takes the client from its state to the new one, so the two
//! views stay in step and later deltas apply.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::Value;

use crate::protocol::EventBody;
use crate::tools::StateUpdate;

/// Applies `update` to `state` and returns the events that bring the client along (none when
/// nothing changes).
///
/// A `Set` on an object state becomes `add` operations (which create or replace a member and
/// leave every other key alone); on any other state it becomes a snapshot of just those keys.
///
/// # Errors
/// A delta that does not apply to `state`; `state` is then unchanged, also for `Many`.
pub fn apply_update(state: &mut Value, update: StateUpdate) -> Result<Vec<EventBody>, String> {
    // Work on a copy so a failing part leaves the view as it was (tool updates are rare and
    // states small; the predictive path does not come through here).
    let mut next = state.clone();
    let mut events = Vec::new();
    apply_into(&mut next, update, &mut events)?;
    *state = next;
    Ok(events)
}

fn apply_into(
    state: &mut Value,
    update: StateUpdate,
    events: &mut Vec<EventBody>,
) -> Result<(), String> {
    match update {
        StateUpdate::Many(updates) => {
            for update in updates {
                apply_into(state, update, events)?;
            }
        }
        StateUpdate::Snapshot(snapshot) => {
            *state = snapshot.clone();
            events.push(EventBody::state_snapshot(snapshot));
        }
        StateUpdate::Delta(patch) => {
            crate::state::patch::apply(state, &patch).map_err(|e| e.to_string())?;
            events.push(EventBody::state_delta(patch));
        }
        StateUpdate::SetIfAbsent(mut members) => {
            if let Value::Object(object) = state {
                members.retain(|key, _| !object.contains_key(key));
            }
            if !members.is_empty() {
                apply_into(state, StateUpdate::Set(members), events)?;
            }
        }
        StateUpdate::Set(members) => {
            let Value::Object(object) = state else {
                *state = Value::Object(members);
                events.push(EventBody::state_snapshot(state.clone()));
                return Ok(());
            };
            let patch = Patch(
                members
                    .iter()
                    .map(|(key, value)| add_member(key, value.clone()))
                    .collect(),
            );
            object.extend(members);
            events.push(EventBody::state_delta(patch));
        }
    }
    Ok(())
}

/// Brings `state` along with a state event a tool put on the stream itself (a subagent's
/// changes under its key), so that later updates and calls start from what the client holds.
/// One that does not apply leaves it as it is, as it leaves the client's.
pub(super) fn follow_event(state: &mut Value, event: &EventBody) {
    match event {
        EventBody::StateDelta(delta) => {
            let _ = crate::state::patch::apply(state, &delta.delta);
        }
        EventBody::StateSnapshot(snapshot) => snapshot.snapshot.clone_into(state),
        _ => {}
    }
}

/// `update` with each whole-state snapshot of an object given back the members of `state`
/// under `keys` that it lacks: the keys of the subagents' states, which the agent's own tools
/// do not own (a tool that snapshots the state it knew would otherwise wipe what a subagent
/// wrote meanwhile).
pub(super) fn keeping_keys(update: StateUpdate, state: &Value, keys: &[String]) -> StateUpdate {
    match update {
        StateUpdate::Snapshot(Value::Object(mut members)) => {
            for key in keys {
                if let Some(value) = state.get(key).filter(|_| !members.contains_key(key)) {
                    members.insert(key.clone(), value.clone());
                }
            }
            StateUpdate::Snapshot(Value::Object(members))
        }
        StateUpdate::Many(updates) => StateUpdate::Many(
            updates
                .into_iter()
                .map(|update| keeping_keys(update, state, keys))
                .collect(),
        ),
        other => other,
    }
}

/// An `add` of the top-level member `key` (RFC 6901-escaped by `jsonptr`): it creates or
/// replaces that member and leaves every other key of an object state alone.
pub fn add_member(key: &str, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens([key]),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_adds_members_with_escaped_paths_and_keeps_the_rest() {
        let mut state = json!({"keep": 1});
        let update = StateUpdate::Set(serde_json::Map::from_iter([("a/b~c".to_owned(), json!(2))]));
        let events = apply_update(&mut state, update).unwrap();
        let [EventBody::StateDelta(delta)] = events.as_slice() else {
            panic!("one delta: {events:?}")
        };
        assert_eq!(
            serde_json::to_value(&delta.delta).unwrap(),
            json!([{"op": "add", "path": "/a~1b~0c", "value": 2}])
        );
        let mut client = json!({"keep": 1});
        json_patch::patch(&mut client, &delta.delta).unwrap();
        assert_eq!(client, state);
        assert_eq!(state, json!({"keep": 1, "a/b~c": 2}));
    }

    #[test]
    fn a_snapshot_keeps_the_subagents_keys_it_lacks() {
        let state = json!({"flights": {"plan": "AF12"}, "hotels": 1, "old": true});
        let keys = ["flights".to_owned(), "hotels".to_owned()];
        let update = StateUpdate::Many(vec![StateUpdate::Snapshot(json!({"hotels": 2}))]);
        assert_eq!(
            keeping_keys(update, &state, &keys),
            StateUpdate::Many(vec![StateUpdate::Snapshot(
                json!({"hotels": 2, "flights": {"plan": "AF12"}})
            )])
        );
        let other = StateUpdate::Snapshot(json!([1]));
        assert_eq!(keeping_keys(other.clone(), &state, &keys), other);
    }

    #[test]
    fn a_delta_that_does_not_apply_changes_nothing() {
        let mut state = json!({"a": 1});
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "replace", "path": "/missing", "value": 1}]))
                .unwrap();
        assert!(apply_update(&mut state, StateUpdate::Delta(patch)).is_err());
        assert_eq!(state, json!({"a": 1}));
    }

    #[test]
    fn set_on_a_non_object_state_becomes_a_snapshot() {
        let mut state = json!([1, 2]);
        let update = StateUpdate::Set(serde_json::Map::from_iter([("k".to_owned(), json!(true))]));
        assert!(matches!(
            apply_update(&mut state, update).unwrap().as_slice(),
            [EventBody::StateSnapshot(_)]
        ));
        assert_eq!(state, json!({"k": true}));
    }

    #[test]
    fn set_if_absent_keeps_what_the_user_chose_and_many_is_all_or_nothing() {
        let mut state = json!({"selected": ["salt"]});
        let init = StateUpdate::SetIfAbsent(serde_json::Map::from_iter([
            ("selected".to_owned(), json!([])),
            ("available".to_owned(), json!(["salt", "pepper"])),
        ]));
        let events = apply_update(&mut state, init.clone()).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(
            state,
            json!({"selected": ["salt"], "available": ["salt", "pepper"]})
        );
        assert!(
            apply_update(&mut state, init).unwrap().is_empty(),
            "nothing left to initialise"
        );

        let bad: json_patch::Patch =
            serde_json::from_value(json!([{"op": "remove", "path": "/nope"}])).unwrap();
        let before = state.clone();
        let many = StateUpdate::Many(vec![
            StateUpdate::Set(serde_json::Map::from_iter([("x".to_owned(), json!(1))])),
            StateUpdate::Delta(bad),
        ]);
        assert!(apply_update(&mut state, many).is_err());
        assert_eq!(state, before);
    }
}
