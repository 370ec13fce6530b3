//! Applying a JSON Patch to the state the server keeps (the predictive view, a thread's
//! record): `json_patch::patch`, with a direct path for the patches a predictive run sends.
//!
//! A predictive run sends one `STATE_DELTA` per argument fragment, almost always `add`s and
//! `replace`s, and the server applies each to its own copy of the state. `json_patch` resolves a
//! path by unescaping every one of its tokens into a new string (`~1`, `~0`), which cost more
//! than the rest of the delta. `add` and `replace` operations whose paths have no escapes are
//! applied here by walking the tokens in place, several in a row with what it takes to undo
//! them. Anything else, and any operation this path cannot apply, goes to `json_patch` (after
//! what was applied here is undone), which then decides, so a patch that fails still fails with
//! its error and leaves the state as it was.

use json_patch::{PatchError, PatchOperation};
use serde_json::Value;

/// Applies `patch` to `doc`, all or nothing, exactly as `json_patch::patch` does.
pub fn apply(doc: &mut Value, patch: &[PatchOperation]) -> Result<(), PatchError> {
    // What undoes each operation applied so far but the last: once the last one applied, the
    // patch has, so a patch of one operation (one per fragment at a model's pace) keeps none.
    let mut applied = Vec::new();
    for (at, operation) in patch.iter().enumerate() {
        match apply_simple(doc, operation) {
            Some(undo) if at + 1 < patch.len() => applied.push((operation, undo)),
            Some(_) => {}
            None => {
                for (operation, undo) in applied.into_iter().rev() {
                    revert(doc, operation, undo);
                }
                return json_patch::patch(doc, patch);
            }
        }
    }
    Ok(())
}

/// What puts the target of an operation applied by [`apply_simple`] back as it was: the member
/// or item the operation replaced, `None` when it added a new one.
struct Undo(Option<Value>);

/// Applies one `add` or `replace` whose path needs no unescaping; `None` (and `doc` untouched)
/// when the operation is another one, or the path does not resolve the way the operation
/// needs. Nothing is written until the target is found.
fn apply_simple(doc: &mut Value, operation: &PatchOperation) -> Option<Undo> {
    let (path, value, replace) = match operation {
        PatchOperation::Add(add) => (add.path.as_str(), &add.value, false),
        PatchOperation::Replace(op) => (op.path.as_str(), &op.value, true),
        _ => return None,
    };
    let (target, last) = parent_of(doc, path)?;
    let previous = match target {
        Value::Object(members) if replace => {
            Some(std::mem::replace(members.get_mut(last)?, value.clone()))
        }
        Value::Object(members) => members.insert(last.to_owned(), value.clone()),
        Value::Array(items) if replace => Some(std::mem::replace(
            items.get_mut(array_index(last)?)?,
            value.clone(),
        )),
        Value::Array(items) if last == "-" => {
            items.push(value.clone());
            None
        }
        Value::Array(items) => {
            let at = array_index(last).filter(|&at| at <= items.len())?;
            items.insert(at, value.clone());
            None
        }
        _ => return None,
    };
    Some(Undo(previous))
}

/// Undoes `operation`, the last one [`apply_simple`] applied that is not yet undone, so its
/// path resolves as it did then.
fn revert(doc: &mut Value, operation: &PatchOperation, undo: Undo) {
    let path = match operation {
        PatchOperation::Add(add) => add.path.as_str(),
        PatchOperation::Replace(op) => op.path.as_str(),
        _ => return,
    };
    let Some((target, last)) = parent_of(doc, path) else {
        return; // unreachable: the path resolved when the operation was applied
    };
    match (target, undo.0) {
        (Value::Object(members), Some(previous)) => {
            members.insert(last.to_owned(), previous);
        }
        // A new member is the last one, so removing it leaves the others in their order.
        (Value::Object(members), None) => {
            members.remove(last);
        }
        (Value::Array(items), Some(previous)) => {
            if let Some(item) = array_index(last).and_then(|at| items.get_mut(at)) {
                *item = previous;
            }
        }
        (Value::Array(items), None) if last == "-" => {
            items.pop();
        }
        (Value::Array(items), None) => {
            if let Some(at) = array_index(last).filter(|&at| at < items.len()) {
                items.remove(at);
            }
        }
        _ => {}
    }
}

/// The container a path's last token names a member or item of, and that token. `None` for
/// the root (an empty path), a path with escaped tokens (both left to `json_patch`), or a
/// parent that does not resolve.
fn parent_of<'a, 'p>(doc: &'a mut Value, path: &'p str) -> Option<(&'a mut Value, &'p str)> {
    let tokens = path.strip_prefix('/').filter(|rest| !rest.contains('~'))?;
    let (parents, last) = match tokens.rsplit_once('/') {
        Some((parents, last)) => (Some(parents), last),
        None => (None, tokens),
    };
    let mut target = doc;
    for token in parents.into_iter().flat_map(|parents| parents.split('/')) {
        target = match target {
            Value::Object(members) => members.get_mut(token)?,
            Value::Array(items) => items.get_mut(array_index(token)?)?,
            _ => return None,
        };
    }
    Some((target, last))
}

/// A token as an array index the way RFC 6901 spells one: decimal digits, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    let digits_only = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_patch::Patch;
    use serde_json::json;

    fn patch(ops: Value) -> Patch {
        serde_json::from_value(ops).unwrap()
    }

    /// `operations` applied to `doc` succeed or fail, and leave the document, as they do with
    /// `json_patch::patch`.
    #[track_caller]
    fn assert_applies_as_json_patch(doc: &Value, operations: &Value) {
        let ops = patch(operations.clone());
        let mut ours = doc.clone();
        let mut theirs = doc.clone();
        let ours_ok = apply(&mut ours, &ops).is_ok();
        let theirs_ok = json_patch::patch(&mut theirs, &ops).is_ok();
        assert_eq!(ours_ok, theirs_ok, "{operations}");
        assert_eq!(ours, theirs, "{operations}");
    }

    /// Every case gives the document (or the failure, with the document unchanged) that
    /// `json_patch::patch` gives.
    #[test]
    fn a_patch_applies_as_json_patch_applies_it() {
        let doc = json!({
            "recipe": {"title": "Soup", "ingredients": [{"name": "leek"}, {"name": "salt"}]},
            "a/b": 1, "m~n": 2, "": {"x": 1}, "n": null, "s": "text"
        });
        let paths = [
            "",
            "/recipe",
            "/recipe/title",
            "/recipe/missing",
            "/recipe/missing/deeper",
            "/recipe/ingredients/0/name",
            "/recipe/ingredients/1",
            "/recipe/ingredients/2",
            "/recipe/ingredients/3",
            "/recipe/ingredients/-",
            "/recipe/ingredients/-/name",
            "/recipe/ingredients/01",
            "/recipe/ingredients/+1",
            "/recipe/ingredients/1x",
            "/recipe/ingredients/99999999999999999999999",
            "/recipe/title/x",
            "/a~1b",
            "/m~0n",
            "//x",
            "/",
            "/n/x",
            "/s/0",
        ];
        for op in ["add", "replace"] {
            for path in paths {
                let operation = json!({"op": op, "path": path, "value": {"new": [1]}});
                assert_applies_as_json_patch(&doc, &json!([operation]));
            }
        }
    }

    /// Every pair of operations, including those whose second fails after the first applied,
    /// gives what `json_patch::patch` gives.
    #[test]
    fn a_patch_of_two_operations_applies_as_json_patch_applies_it() {
        let doc = json!({
            "recipe": {"title": "Soup", "ingredients": [{"name": "leek"}, {"name": "salt"}]},
            "a/b": 1, "n": null
        });
        let paths = [
            "",
            "/recipe/title",
            "/recipe/missing",
            "/recipe/missing/deeper",
            "/recipe/ingredients/0",
            "/recipe/ingredients/2",
            "/recipe/ingredients/3",
            "/recipe/ingredients/-",
            "/recipe/ingredients/2/name",
            "/a~1b",
            "/n/x",
        ];
        let mut operations = Vec::new();
        for op in ["add", "replace"] {
            for path in paths {
                operations.push(json!({"op": op, "path": path, "value": {"name": [1]}}));
            }
        }
        for first in &operations {
            for second in &operations {
                assert_applies_as_json_patch(&doc, &json!([first, second]));
            }
        }
    }

    #[test]
    fn a_patch_of_several_operations_is_all_or_nothing() {
        let mut doc = json!({"a": 1});
        let ops = patch(json!([
            {"op": "add", "path": "/b", "value": 2},
            {"op": "replace", "path": "/missing", "value": 3}
        ]));
        assert!(apply(&mut doc, &ops).is_err());
        assert_eq!(doc, json!({"a": 1}));
    }
}
