//! The server's view of the shared state, and the one function that changes it: every state
//! update becomes the event that takes the client from its state to the new one, so the two
//! views stay in step and later deltas apply.

use serde_json::Value;

use crate::protocol::{EventBody, StateDelta, StateSnapshot};
use crate::tools::StateUpdate;

/// Applies `update` to `state` and returns the event that brings the client along.
///
/// A `Set` on an object state becomes `add` operations (which create or replace a member and
/// leave every other key alone); on any other state it becomes a snapshot of just those keys.
///
/// # Errors
/// A delta that does not apply to `state`; `state` is then unchanged.
pub fn apply_update(state: &mut Value, update: StateUpdate) -> Result<EventBody, String> {
    match update {
        StateUpdate::Snapshot(snapshot) => {
            *state = snapshot.clone();
            Ok(snapshot_event(snapshot))
        }
        StateUpdate::Delta(patch) => {
            let mut next = state.clone();
            json_patch::patch(&mut next, &patch).map_err(|e| e.to_string())?;
            *state = next;
            Ok(delta_event(patch))
        }
        StateUpdate::Set(members) => {
            let Value::Object(object) = state else {
                *state = Value::Object(members);
                return Ok(snapshot_event(state.clone()));
            };
            let operations: Vec<Value> = members
                .iter()
                .map(|(key, value)| {
                    serde_json::json!({"op": "add", "path": format!("/{}", escape_pointer_token(key)), "value": value})
                })
                .collect();
            let patch: json_patch::Patch = serde_json::from_value(Value::Array(operations))
                .map_err(|e| format!("internal: could not build a patch: {e}"))?;
            object.extend(members);
            Ok(delta_event(patch))
        }
    }
}

/// RFC 6901 escaping of one reference token: `~` becomes `~0`, `/` becomes `~1`.
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn snapshot_event(snapshot: Value) -> EventBody {
    EventBody::StateSnapshot(StateSnapshot {
        snapshot,
        subagent_run_id: None,
    })
}

fn delta_event(delta: json_patch::Patch) -> EventBody {
    EventBody::StateDelta(StateDelta {
        delta,
        subagent_run_id: None,
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
        let EventBody::StateDelta(delta) = apply_update(&mut state, update).unwrap() else {
            panic!("a delta")
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
            apply_update(&mut state, update).unwrap(),
            EventBody::StateSnapshot(_)
        ));
        assert_eq!(state, json!({"k": true}));
    }
}
