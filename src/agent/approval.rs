//! Approvals: which server tool calls wait for a person, and the signed ids that let a later
//! run prove which call a decision is about, with no stored state.
//!
//! # Threat model
//! The client is untrusted: it may replay, forge or edit anything it sends. A decision must
//! only ever run a call the *model* made, with the arguments the model wrote (or, where the
//! tool allows it, arguments the person edited), on the same thread. So the interrupt id is a
//! keyed MAC (HMAC-SHA256, key from `security.approval_key`) over the thread id, the tool call
//! id, the tool name, the canonical arguments and the expiry time. On resume the server finds
//! the pending call in the history the client sent and recomputes the id: a call the model
//! never made, swapped arguments, another thread, or a stale id all fail to match. The history
//! itself is the client's, so a client could invent an assistant tool call in it; the MAC stops
//! that too, because only the server can mint an id for it.
//!
//! Resume is idempotent as far as the client's history can tell: a resume whose call already
//! has its result in the history (the client received it) is a replay and changes nothing.
//! What statelessness cannot give is exactly-once execution across a *lost* response: if the
//! client never received the result and resumes again, the call is still pending in its
//! history and runs again, so tools with side effects should be idempotent by tool call id.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;

use crate::settings::{AgentSettings, ApprovalPolicySetting, FixedApproval, ToolSettings};

/// When one tool needs approval.
#[derive(Clone)]
enum Policy {
    Always,
    When(Arc<jsonschema::Validator>),
}

/// The approval rules of one agent's server tools.
#[derive(Clone, Default)]
pub struct ApprovalPolicies {
    tools: BTreeMap<String, ToolApproval>,
}

#[derive(Clone)]
struct ToolApproval {
    policy: Policy,
    allow_edit: bool,
    message: Option<String>,
}

impl std::fmt::Debug for ApprovalPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ApprovalPolicies {
    /// # Errors
    /// A `when` that is not a valid JSON Schema.
    pub fn from_settings(tools: &[ToolSettings]) -> Result<Self, String> {
        let mut policies = ApprovalPolicies::default();
        for tool in tools {
            policies.add(
                &tool.name,
                &tool.approval,
                tool.allow_edit,
                tool.approval_message.clone(),
            )?;
        }
        Ok(policies)
    }

    /// The policies of an agent's configured tools and of its MCP servers' tools (by the
    /// prefixed names the model sees).
    ///
    /// # Errors
    /// A `when` that is not a valid JSON Schema.
    pub fn for_agent(agent: &AgentSettings) -> Result<Self, String> {
        let mut policies = ApprovalPolicies::from_settings(&agent.tools)?;
        for server in &agent.mcp_servers {
            for (tool, options) in &server.tools {
                let name = server.tool_name(tool).ok_or_else(|| {
                    format!(
                        "MCP server `{}`: tool `{tool}` makes a name longer than 64 characters",
                        server.name
                    )
                })?;
                policies.add(
                    &name,
                    &options.approval,
                    options.allow_edit,
                    options.approval_message.clone(),
                )?;
            }
        }
        Ok(policies)
    }

    fn add(
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

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether a call of `tool` with `arguments` must wait for a person.
    pub fn requires_approval(&self, tool: &str, arguments: &Value) -> bool {
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

/// Mints and checks approval ids.
#[derive(Clone)]
pub struct ApprovalSigner {
    key: Arc<Vec<u8>>,
    ttl_secs: u64,
}

impl std::fmt::Debug for ApprovalSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalSigner")
            .field("ttl_secs", &self.ttl_secs)
            .finish_non_exhaustive()
    }
}

/// What an approval id is about.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalSubject<'a> {
    pub thread_id: &'a str,
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    pub arguments: &'a Value,
}

/// The state a confirmation of predicted state puts back on rejection, as carried in the id: a
/// JSON array of `[key, value before (null when absent), was present]` triples, base64url.
fn encode_restore(restore: &[(String, Option<Value>)]) -> String {
    let triples: Vec<Value> = restore
        .iter()
        .map(|(key, value)| json!([key, value.clone().unwrap_or(Value::Null), value.is_some()]))
        .collect();
    base64url_encode(Value::Array(triples).to_string().as_bytes())
}

fn decode_restore(encoded: &str) -> Option<Vec<(String, Option<Value>)>> {
    let bytes = base64url_decode(encoded)?;
    let Value::Array(triples) = serde_json::from_slice(&bytes).ok()? else {
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

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Unpadded base64url (RFC 4648 §5): ids stay one opaque token of URL-safe characters.
fn base64url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64URL[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let digit = BASE64URL.iter().position(|b| b == c)? as u32;
            n |= digit << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// Why an id does not check out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdCheck {
    Valid,
    Expired,
    Mismatch,
}

impl ApprovalSigner {
    /// `key` is the secret every replica shares (`security.approval_key`); ids minted with one
    /// key check only with the same key. `ttl_secs` 0 mints ids that never expire.
    pub fn new(key: &str, ttl_secs: u64) -> Self {
        ApprovalSigner {
            key: Arc::new(key.as_bytes().to_vec()),
            ttl_secs,
        }
    }

    /// A fresh id for `subject`: `apr_<expiry>_<tag>`, expiry in Unix seconds (0: none), then
    /// `_<restore>` when it confirms predicted state: the values to put back on rejection,
    /// base64url JSON, covered by the tag like everything else. Nothing is stored server-side.
    pub fn mint(
        &self,
        subject: ApprovalSubject<'_>,
        restore: Option<&[(String, Option<Value>)]>,
    ) -> String {
        let expires = if self.ttl_secs == 0 {
            0
        } else {
            unix_now().saturating_add(self.ttl_secs)
        };
        let restore = restore.map(encode_restore);
        let tag = self.tag(subject, expires, restore.as_deref().unwrap_or(""));
        match restore {
            Some(restore) => format!("apr_{expires}_{tag}_{restore}"),
            None => format!("apr_{expires}_{tag}"),
        }
    }

    /// The state to restore on rejection, when `id` confirms predicted state. Only meaningful
    /// for an id that [`check`](Self::check)s.
    pub fn restore_state(id: &str) -> Option<Vec<(String, Option<Value>)>> {
        decode_restore(parse_id(id)?.2?)
    }

    /// The expiry of an id as an ISO-8601 string (for `Interrupt.expiresAt`), if it has one.
    pub fn expires_at(id: &str) -> Option<String> {
        let expires = parse_id(id)?.0;
        (expires != 0).then(|| iso8601(expires))
    }

    /// Checks that `id` was minted for `subject` and has not expired.
    pub fn check(&self, id: &str, subject: ApprovalSubject<'_>) -> IdCheck {
        let Some((expires, tag, restore)) = parse_id(id) else {
            return IdCheck::Mismatch;
        };
        let expected = self.tag(subject, expires, restore.unwrap_or(""));
        if !constant_time_eq(expected.as_bytes(), tag.as_bytes()) {
            return IdCheck::Mismatch;
        }
        if expires != 0 && unix_now() > expires {
            return IdCheck::Expired;
        }
        IdCheck::Valid
    }

    fn tag(&self, subject: ApprovalSubject<'_>, expires: u64, restore: &str) -> String {
        // HMAC accepts keys of any length, so this cannot fail.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return String::new();
        };
        for part in [
            "agui-host/approval/v1",
            subject.thread_id,
            subject.tool_call_id,
            subject.tool_name,
            &canonical_json(subject.arguments),
            &expires.to_string(),
            restore,
        ] {
            // Length-prefixed, so no two different subjects share a byte string.
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        let digest = mac.finalize().into_bytes();
        let mut hex = String::with_capacity(32);
        for byte in &digest[..16] {
            let _ = write!(hex, "{byte:02x}");
        }
        hex
    }
}

/// `(expiry, tag, restore)` of an id. base64url uses `_` too, so the restore part is whatever
/// follows the (fixed-length, hex) tag.
fn parse_id(id: &str) -> Option<(u64, &str, Option<&str>)> {
    let rest = id.strip_prefix("apr_")?;
    let (expires, rest) = rest.split_once('_')?;
    let (tag, restore) = match rest.split_once('_') {
        Some((tag, restore)) => (tag, Some(restore)),
        None => (rest, None),
    };
    Some((expires.parse().ok()?, tag, restore))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

#[cfg(test)]
mod tests {
    use super::*;

    fn subject<'a>(args: &'a Value) -> ApprovalSubject<'a> {
        ApprovalSubject {
            thread_id: "t1",
            tool_call_id: "c1",
            tool_name: "transfer_money",
            arguments: args,
        }
    }

    #[test]
    fn an_id_checks_only_for_its_own_call() {
        let signer = ApprovalSigner::new("a-long-enough-secret-for-the-tests!", 60);
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
        let other_key = ApprovalSigner::new("another-secret-of-a-good-length!!!", 60);
        assert_eq!(other_key.check(&id, subject(&args)), IdCheck::Mismatch);
        assert_eq!(
            signer.check("apr_0_deadbeef", subject(&args)),
            IdCheck::Mismatch
        );
        assert_eq!(signer.check("garbage", subject(&args)), IdCheck::Mismatch);
    }

    #[test]
    fn a_tampered_expiry_is_a_mismatch_and_an_old_one_expires() {
        let signer = ApprovalSigner::new("a-long-enough-secret-for-the-tests!", 60);
        let args = json!({});
        let id = signer.mint(subject(&args), None);
        let (expires, tag, _) = parse_id(&id).unwrap();
        let extended = format!("apr_{}_{tag}", expires + 1000);
        assert_eq!(signer.check(&extended, subject(&args)), IdCheck::Mismatch);
        let past = format!("apr_1_{}", signer.tag(subject(&args), 1, ""));
        assert_eq!(signer.check(&past, subject(&args)), IdCheck::Expired);
    }

    #[test]
    fn restore_data_rides_in_the_id_and_is_covered_by_the_tag() {
        let signer = ApprovalSigner::new("a-long-enough-secret-for-the-tests!", 60);
        let args = json!({"document": "new"});
        let restore = vec![
            ("document".to_owned(), Some(json!("old text ü"))),
            ("draft".to_owned(), None),
        ];
        let id = signer.mint(subject(&args), Some(&restore));
        assert_eq!(signer.check(&id, subject(&args)), IdCheck::Valid);
        assert_eq!(ApprovalSigner::restore_state(&id), Some(restore));
        let (expires, tag, _) = parse_id(&id).unwrap();
        let other = encode_restore(&[("document".to_owned(), Some(json!("forged")))]);
        let swapped = format!("apr_{expires}_{tag}_{other}");
        assert_eq!(signer.check(&swapped, subject(&args)), IdCheck::Mismatch);
        for bytes in [&b""[..], b"f", b"fo", b"foo", b"foob", b"\xff\x00\x10"] {
            assert_eq!(
                base64url_decode(&base64url_encode(bytes)).as_deref(),
                Some(bytes)
            );
        }
        assert!(base64url_decode("a").is_none());
        assert!(base64url_decode("a*b=").is_none());
    }

    #[test]
    fn iso8601_matches_known_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_796_035_323), "2026-11-30T10:42:03Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn policies_decide_by_arguments() {
        let tools: Vec<ToolSettings> = serde_json::from_value(json!([
            {"name": "check_balance", "kind": "static", "result": 1},
            {"name": "cancel_subscription", "kind": "static", "result": 1, "approval": "always"},
            {"name": "transfer_money", "kind": "static", "result": 1, "allow_edit": true,
             "approval": {"when": {"properties": {"amount": {"exclusiveMinimum": 100}}, "required": ["amount"]}}}
        ]))
        .unwrap();
        let policies = ApprovalPolicies::from_settings(&tools).unwrap();
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
