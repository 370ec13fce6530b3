//! Approvals: which server tool calls wait for a person, and the signed ids that let a later
//! run prove which call a decision is about, with no stored state.
//!
//! # Threat model
//! The client is untrusted: it may replay, forge or edit anything it sends. A decision must
//! only ever run a call the *model* made, with the arguments the model wrote (or, where the
//! tool allows it, arguments the person edited), on the same thread and agent. So the id (an
//! [`ApprovalId`]) carries a keyed MAC (HMAC-SHA256 truncated to 128 bits, key from
//! `security.approval_keys`) over the agent name, the key id, the caller's scope (so one
//! user's id never answers for another on the same client-chosen thread id), the thread id,
//! the tool call id,
//! the tool name, the canonical arguments, the expiry and any restore data. On resume the server
//! finds the pending call in the history the client sent and recomputes the tag: a call the
//! model never made, swapped arguments, another thread or agent, an unknown key or a stale id
//! all fail to match. A decision is acted on only while its call has no result in the history
//! and, with a thread store, only once its claim in the server's decision ledger is the first
//! (see the approval gate), so a replayed answer changes nothing. Without a store, across a
//! *lost* response delivery is at least once, so tools with side effects should dedupe by
//! call (the `http` tool kind sends an `Idempotency-Key`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::approval_id::{ApprovalId, KEY_ID_LEN, MAX_RESTORE_BYTES, TAG_LEN};
use super::config::{ApprovalPolicySetting, FixedApproval};
use super::input::InputSpec;
use super::RestoreState;
pub use crate::text::canonical_json;

/// When one tool needs approval.
#[derive(Clone)]
enum Policy {
    Always,
    When(Arc<jsonschema::Validator>),
}

/// The approval rules of one agent's server tools, and its input tools (which always ask: see
/// [`crate::agent::input`]).
#[derive(Clone, Default)]
pub struct ApprovalPolicies {
    tools: BTreeMap<String, ToolApproval>,
    inputs: BTreeMap<String, Arc<InputSpec>>,
}

#[derive(Clone)]
struct ToolApproval {
    policy: Policy,
    allow_edit: bool,
    message: Option<String>,
}

impl std::fmt::Debug for ApprovalPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tools.keys().chain(self.inputs.keys()))
            .finish()
    }
}

impl ApprovalPolicies {
    /// Adds `tool`'s policy (nothing for one that never needs approval).
    ///
    /// # Errors
    /// A `when` that is not a valid JSON Schema.
    pub fn add(
        &mut self,
        tool: &str,
        approval: &ApprovalPolicySetting,
        allow_edit: bool,
        message: Option<String>,
    ) -> Result<(), String> {
        let policy = match approval {
            ApprovalPolicySetting::Unset | ApprovalPolicySetting::Fixed(FixedApproval::Never) => {
                return Ok(())
            }
            ApprovalPolicySetting::Fixed(FixedApproval::Always) => Policy::Always,
            ApprovalPolicySetting::When { when } => {
                Policy::When(Arc::new(jsonschema::validator_for(when).map_err(|e| {
                    format!("tool `{tool}`: approval.when is not a valid JSON Schema: {e}")
                })?))
            }
        };
        self.tools.insert(
            tool.to_owned(),
            ToolApproval {
                policy,
                allow_edit,
                message,
            },
        );
        Ok(())
    }

    /// Adds an input tool: every call of it asks the user.
    pub fn add_input(&mut self, tool: &str, spec: InputSpec) {
        self.inputs.insert(tool.to_owned(), Arc::new(spec));
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.inputs.is_empty()
    }

    /// The question an input tool asks, when `tool` is one.
    pub fn input(&self, tool: &str) -> Option<&InputSpec> {
        self.inputs.get(tool).map(Arc::as_ref)
    }

    /// What the model reads for a call the person declined (or, for an input tool, a question
    /// the user cancelled), when `tool` says so itself.
    pub fn declined_result(&self, tool: &str) -> Option<&str> {
        self.input(tool).map(InputSpec::cancelled_result)
    }

    /// Whether a call of `tool` with `arguments` must wait for a person: an input tool always
    /// does.
    pub fn requires_approval(&self, tool: &str, arguments: &Value) -> bool {
        if self.inputs.contains_key(tool) {
            return true;
        }
        match self.tools.get(tool).map(|t| &t.policy) {
            None => false,
            Some(Policy::Always) => true,
            Some(Policy::When(validator)) => validator.is_valid(arguments),
        }
    }

    pub fn allows_edit(&self, tool: &str) -> bool {
        self.tools.get(tool).is_some_and(|t| t.allow_edit)
    }

    /// The question shown to the person.
    pub fn message(&self, tool: &str, arguments: &Value) -> String {
        let arguments_json = canonical_json(arguments);
        match self.tools.get(tool).and_then(|t| t.message.as_deref()) {
            Some(template) => template.replace("{arguments}", &arguments_json),
            None => format!("Allow `{tool}` to run with {arguments_json}?"),
        }
    }

    /// The `responseSchema` of an interrupt for `tool`.
    pub fn response_schema(&self, tool: &str) -> Map<String, Value> {
        let mut properties = Map::new();
        properties.insert("approved".into(), json!({"type": "boolean"}));
        if self.allows_edit(tool) {
            properties.insert("editedArgs".into(), json!({"type": "object"}));
        }
        let schema = json!({"type": "object", "properties": properties, "required": ["approved"]});
        match schema {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}

/// One key of `security.approval_keys`, with the id that names it inside approval ids.
struct SigningKey {
    id: [u8; KEY_ID_LEN],
    secret: Vec<u8>,
}

impl SigningKey {
    /// The key id is a digest of the secret: nothing to configure, the same on every
    /// replica, and it says nothing useful about a secret of 32+ characters.
    fn new(secret: &str) -> SigningKey {
        let digest = Sha256::new()
            .chain_update(b"agui-host/approval-key-id\0")
            .chain_update(secret.as_bytes())
            .finalize();
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        SigningKey {
            id,
            secret: secret.as_bytes().to_vec(),
        }
    }
}

/// Mints and checks the approval ids of one agent.
#[derive(Clone)]
pub struct ApprovalSigner {
    /// Signs with the first, verifies with any: a key is rotated by putting the new one
    /// first and dropping the old one once its ids have expired.
    keys: Arc<Vec<SigningKey>>,
    agent: Arc<str>,
    ttl_secs: u64,
}

impl std::fmt::Debug for ApprovalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalSigner")
            .field("agent", &self.agent)
            .field("keys", &self.keys.len())
            .field("ttl_secs", &self.ttl_secs)
            .finish_non_exhaustive()
    }
}

/// What an approval id is about.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalSubject<'a> {
    /// Who asked: the request's scope (see [`crate::agent::RunRequest::scope`]).
    pub scope: &'a str,
    pub thread_id: &'a str,
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    pub arguments: &'a Value,
}

/// The state a confirmation of predicted state puts back on rejection, as carried in the id:
/// the canonical JSON of `[key, value before (null when absent), was present]` triples.
fn encode_restore(restore: &[(String, Option<Value>)]) -> Vec<u8> {
    let triples: Vec<Value> = restore
        .iter()
        .map(|(key, value)| json!([key, value.clone().unwrap_or(Value::Null), value.is_some()]))
        .collect();
    canonical_json(&Value::Array(triples)).into_bytes()
}

fn decode_restore(bytes: &[u8]) -> Option<RestoreState> {
    let Value::Array(triples) = serde_json::from_slice(bytes).ok()? else {
        return None;
    };
    triples
        .into_iter()
        .map(|triple| {
            let key = triple.get(0)?.as_str()?.to_owned();
            let present = triple.get(2)?.as_bool()?;
            let value = triple.get(1)?.clone();
            Some((key, present.then_some(value)))
        })
        .collect()
}

/// Whether restore data this size fits in an id (see [`MAX_RESTORE_BYTES`]).
pub fn restore_fits(restore: &[(String, Option<Value>)]) -> bool {
    encode_restore(restore).len() <= MAX_RESTORE_BYTES
}

/// Why an id does not check out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdCheck {
    Valid,
    Expired,
    Mismatch,
}

impl ApprovalSigner {
    /// `keys`: the secrets every replica shares (`security.approval_keys`), the first signs;
    /// must not be empty. `agent`: the agent whose ids these are, bound into every tag.
    /// `ttl_secs` 0 mints ids that never expire.
    pub fn new(keys: &[String], agent: &str, ttl_secs: u64) -> Self {
        ApprovalSigner {
            keys: Arc::new(keys.iter().map(|key| SigningKey::new(key)).collect()),
            agent: agent.into(),
            ttl_secs,
        }
    }

    /// A fresh id for `subject`, carrying (and signing) `restore` when it confirms predicted
    /// state: the values to put back on rejection. Nothing is stored server-side. Restore data
    /// over [`MAX_RESTORE_BYTES`] is left out (callers check [`restore_fits`] first).
    pub fn mint(
        &self,
        subject: ApprovalSubject<'_>,
        restore: Option<&[(String, Option<Value>)]>,
    ) -> ApprovalId {
        self.mint_carrying(subject, restore.map(encode_restore))
    }

    /// A fresh id for `subject` that carries (and signs) `data`: restore data, or a tool's
    /// question (see [`crate::agent::elicitation`]). Data over [`MAX_RESTORE_BYTES`] is left
    /// out.
    pub fn mint_carrying(&self, subject: ApprovalSubject<'_>, data: Option<Vec<u8>>) -> ApprovalId {
        let expires = if self.ttl_secs == 0 {
            0
        } else {
            unix_now().saturating_add(self.ttl_secs)
        };
        let restore = data.filter(|bytes| !bytes.is_empty() && bytes.len() <= MAX_RESTORE_BYTES);
        let mut id = ApprovalId {
            key_id: self.keys.first().map(|key| key.id).unwrap_or_default(),
            expires,
            tag: [0; TAG_LEN],
            restore,
        };
        if let Some(mac) = self
            .keys
            .first()
            .and_then(|key| self.mac(key, subject, &id))
        {
            id.tag
                .copy_from_slice(&mac.finalize().into_bytes()[..TAG_LEN]);
        }
        id
    }

    /// The state to restore on rejection, when `id` confirms predicted state. Only meaningful
    /// for an id that [`check`](Self::check)s.
    pub fn restore_state(id: &ApprovalId) -> Option<RestoreState> {
        decode_restore(id.restore.as_deref()?)
    }

    /// The data an id carries, signed with it (see [`ApprovalSigner::mint_carrying`]). Only
    /// meaningful for an id that [`check`](Self::check)s.
    pub fn carried(id: &ApprovalId) -> Option<&[u8]> {
        id.restore.as_deref()
    }

    /// The expiry of an id in Unix seconds, if it has one: until then a decision it carries
    /// must be remembered (see the decision ledger).
    pub fn expires_unix(id: &ApprovalId) -> Option<u64> {
        (id.expires != 0).then_some(id.expires)
    }

    /// The expiry of an id as an ISO-8601 string (for `Interrupt.expiresAt`), if it has one.
    pub fn expires_at(id: &ApprovalId) -> Option<String> {
        (id.expires != 0).then(|| iso8601(id.expires))
    }

    /// Checks that `id` was minted by this agent, with one of its keys, for `subject`, and
    /// has not expired. The tag is compared in constant time.
    pub fn check(&self, id: &ApprovalId, subject: ApprovalSubject<'_>) -> IdCheck {
        let Some(key) = self.keys.iter().find(|key| key.id == id.key_id) else {
            return IdCheck::Mismatch;
        };
        let Some(mac) = self.mac(key, subject, id) else {
            return IdCheck::Mismatch;
        };
        if mac.verify_truncated_left(&id.tag).is_err() {
            return IdCheck::Mismatch;
        }
        if id.expires != 0 && unix_now() > id.expires {
            return IdCheck::Expired;
        }
        IdCheck::Valid
    }

    /// The MAC over everything an id binds, before finalizing.
    fn mac(
        &self,
        key: &SigningKey,
        subject: ApprovalSubject<'_>,
        id: &ApprovalId,
    ) -> Option<Hmac<Sha256>> {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = Hmac::<Sha256>::new_from_slice(&key.secret).ok()?;
        for part in [
            // v3: the scope joined the subject (ids of version 1 of the spelling do not parse).
            &b"agui-host/approval/v3"[..],
            &key.id,
            self.agent.as_bytes(),
            subject.scope.as_bytes(),
            subject.thread_id.as_bytes(),
            subject.tool_call_id.as_bytes(),
            subject.tool_name.as_bytes(),
            canonical_json(subject.arguments).as_bytes(),
            &id.expires.to_be_bytes(),
            id.restore.as_deref().unwrap_or_default(),
        ] {
            // Length-prefixed, so no two different subjects share a byte string.
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        Some(mac)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian).
fn iso8601(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "a-long-enough-secret-for-the-tests!";
    const OTHER_KEY: &str = "another-secret-of-a-good-length!!!";

    fn signer(keys: &[&str], agent: &str, ttl_secs: u64) -> ApprovalSigner {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        ApprovalSigner::new(&keys, agent, ttl_secs)
    }

    fn subject<'a>(args: &'a Value) -> ApprovalSubject<'a> {
        ApprovalSubject {
            scope: "token:a",
            thread_id: "t1",
            tool_call_id: "c1",
            tool_name: "transfer_money",
            arguments: args,
        }
    }

    #[test]
    fn an_id_checks_only_for_its_own_call_agent_and_key() {
        let signer = signer(&[KEY], "bank", 60);
        let args = json!({"amount": 100, "to": "bob"});
        let id = signer.mint(subject(&args), None);
        assert_eq!(signer.check(&id, subject(&args)), IdCheck::Valid);
        let reordered = json!({"to": "bob", "amount": 100});
        assert_eq!(
            signer.check(&id, subject(&reordered)),
            IdCheck::Valid,
            "key order is not meaning"
        );
        let swapped = json!({"amount": 100000, "to": "mallory"});
        assert_eq!(signer.check(&id, subject(&swapped)), IdCheck::Mismatch);
        let other_thread = ApprovalSubject {
            thread_id: "t2",
            ..subject(&args)
        };
        assert_eq!(signer.check(&id, other_thread), IdCheck::Mismatch);
        let other_scope = ApprovalSubject {
            scope: "token:b",
            ..subject(&args)
        };
        assert_eq!(signer.check(&id, other_scope), IdCheck::Mismatch);
        let other_agent = self::signer(&[KEY], "shop", 60);
        assert_eq!(other_agent.check(&id, subject(&args)), IdCheck::Mismatch);
        let other_key = self::signer(&[OTHER_KEY], "bank", 60);
        assert_eq!(other_key.check(&id, subject(&args)), IdCheck::Mismatch);
        let mut flipped = id.clone();
        flipped.tag[TAG_LEN - 1] ^= 1;
        assert_eq!(signer.check(&flipped, subject(&args)), IdCheck::Mismatch);
    }

    #[test]
    fn a_rotated_key_still_verifies_the_ids_it_signed() {
        let args = json!({"amount": 100});
        let old = signer(&[OTHER_KEY], "bank", 60).mint(subject(&args), None);
        let rotated = signer(&[KEY, OTHER_KEY], "bank", 60);
        assert_eq!(rotated.check(&old, subject(&args)), IdCheck::Valid);
        let new = rotated.mint(subject(&args), None);
        assert_eq!(
            signer(&[KEY], "bank", 60).check(&new, subject(&args)),
            IdCheck::Valid,
            "the first key signs"
        );
        assert_eq!(
            signer(&[KEY], "bank", 60).check(&old, subject(&args)),
            IdCheck::Mismatch,
            "a dropped key verifies nothing"
        );
        let mut relabelled = old.clone();
        relabelled.key_id = new.key_id;
        assert_eq!(
            rotated.check(&relabelled, subject(&args)),
            IdCheck::Mismatch
        );
    }

    #[test]
    fn a_tampered_expiry_is_a_mismatch_and_an_old_one_expires() {
        let signer = signer(&[KEY], "bank", 60);
        let args = json!({});
        let id = signer.mint(subject(&args), None);
        let mut extended = id.clone();
        extended.expires += 1000;
        assert_eq!(signer.check(&extended, subject(&args)), IdCheck::Mismatch);
        let mut past = id;
        past.expires = 1;
        let mac = signer.mac(&signer.keys[0], subject(&args), &past).unwrap();
        past.tag
            .copy_from_slice(&mac.finalize().into_bytes()[..TAG_LEN]);
        assert_eq!(signer.check(&past, subject(&args)), IdCheck::Expired);
    }

    #[test]
    fn restore_data_rides_in_the_id_and_is_covered_by_the_tag() {
        let signer = signer(&[KEY], "bank", 60);
        let args = json!({"document": "new"});
        let restore = vec![
            ("document".to_owned(), Some(json!("old text ü"))),
            ("draft".to_owned(), None),
        ];
        let id = signer.mint(subject(&args), Some(&restore));
        let id: ApprovalId = id.to_string().parse().unwrap();
        assert_eq!(signer.check(&id, subject(&args)), IdCheck::Valid);
        assert_eq!(ApprovalSigner::restore_state(&id), Some(restore));
        let mut swapped = id.clone();
        swapped.restore = Some(encode_restore(&[(
            "document".to_owned(),
            Some(json!("forged")),
        )]));
        assert_eq!(signer.check(&swapped, subject(&args)), IdCheck::Mismatch);
        let mut dropped = id;
        dropped.restore = None;
        assert_eq!(signer.check(&dropped, subject(&args)), IdCheck::Mismatch);
    }

    #[test]
    fn restore_data_over_the_cap_is_left_out_of_the_id() {
        let signer = signer(&[KEY], "bank", 60);
        let args = json!({});
        let big = vec![("document".to_owned(), Some(json!("x".repeat(256 * 1024))))];
        assert!(!restore_fits(&big));
        let id = signer.mint(subject(&args), Some(&big));
        assert!(id.restore.is_none());
        assert!(id.to_string().len() < 64, "{id}");
        assert!(restore_fits(&[(
            "document".to_owned(),
            Some(json!("small"))
        )]));
    }

    #[test]
    fn iso8601_matches_known_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_796_035_323), "2026-11-30T10:42:03Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn policies_decide_by_arguments() {
        let tools: Vec<crate::settings::ToolSettings> = serde_json::from_value(json!([
            {"name": "check_balance", "kind": "static", "result": 1},
            {"name": "cancel_subscription", "kind": "static", "result": 1, "approval": "always"},
            {"name": "transfer_money", "kind": "static", "result": 1, "allow_edit": true,
             "approval": {"when": {"properties": {"amount": {"exclusiveMinimum": 100}}, "required": ["amount"]}}}
        ]))
        .unwrap();
        let mut policies = ApprovalPolicies::default();
        for tool in &tools {
            let message = tool.approval_message.clone();
            policies
                .add(&tool.name, &tool.approval, tool.allow_edit, message)
                .unwrap();
        }
        assert!(!policies.requires_approval("check_balance", &json!({})));
        assert!(policies.requires_approval("cancel_subscription", &json!({})));
        assert!(!policies.requires_approval("transfer_money", &json!({"amount": 50})));
        assert!(policies.requires_approval("transfer_money", &json!({"amount": 500})));
        assert!(policies.response_schema("transfer_money")["properties"]
            .get("editedArgs")
            .is_some());
        assert!(
            policies.response_schema("cancel_subscription")["properties"]
                .get("editedArgs")
                .is_none()
        );
    }
}
