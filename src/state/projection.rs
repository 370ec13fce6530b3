//! `Projection`: one tool call's streaming arguments, mirrored into state keys with the smallest
//! RFC 6902 operations that take the client from what it has seen to the value so far.
//!
//! Operations are `add` for members, items and completed scalars (so none fails on a key the
//! client lacks or has) and `replace` for a string re-sent as it grows, paced by [`Coalescing`].
//! Path tokens are RFC 6901-escaped. The bound on bytes sent, and why it holds, is in
//! `docs/architecture.md` ("Operations and the bound on bytes sent").

use std::time::{Duration, Instant};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::partial_json::{Event, PartialJson, Segment, Sink};
use super::StateError;

/// Which part of a tool call's arguments a state key mirrors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Argument {
    /// The whole arguments value (`tool_argument = "*"`).
    Whole,
    /// One top-level member of the arguments object.
    Named(String),
}

impl Argument {
    /// Reads the setting's form: `*` or an argument name.
    pub fn from_setting(text: &str) -> Self {
        if text == "*" {
            Argument::Whole
        } else {
            Argument::Named(text.to_owned())
        }
    }

    /// The setting's form, for `PredictState` events and logs.
    pub fn as_setting(&self) -> &str {
        match self {
            Argument::Whole => "*",
            Argument::Named(name) => name,
        }
    }

    /// The projected part of complete arguments; `None` when a named argument is absent.
    pub fn select<'a>(&self, arguments: &'a Value) -> Option<&'a Value> {
        match self {
            Argument::Whole => Some(arguments),
            Argument::Named(name) => arguments.get(name),
        }
    }

    /// The path below the projected part, or `None` for an event outside it.
    fn relative<'p>(&self, path: &'p [Segment]) -> Option<&'p [Segment]> {
        match (self, path.first()) {
            (Argument::Whole, _) => Some(path),
            (Argument::Named(name), Some(Segment::Key(key))) if key == name => Some(&path[1..]),
            (Argument::Named(_), _) => None,
        }
    }
}

/// How often a growing string is re-sent. See the module docs for the bound this gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coalescing {
    /// Re-sent bytes of open strings never exceed this many times the argument bytes received.
    /// Higher means smoother updates of long strings and more bytes; 0 sends strings only when
    /// they close.
    pub resend_ratio: u32,
    /// An open string is (re-)sent only once it has grown by at least this many bytes, so short
    /// strings go out once, whole.
    pub min_growth_bytes: usize,
    /// Least time between two re-sends of open strings (zero: no time limit).
    pub min_interval: Duration,
}

impl Default for Coalescing {
    fn default() -> Self {
        Coalescing {
            resend_ratio: 4,
            min_growth_bytes: 32,
            min_interval: Duration::ZERO,
        }
    }
}

/// The projection of one tool call's arguments onto state keys.
#[derive(Debug)]
pub struct Projection {
    parser: PartialJson,
    emitter: Emitter,
}

/// What a finished projection hands back.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The complete arguments (an empty object for empty arguments, as the chat agent reads
    /// them).
    pub arguments: Value,
    /// Operations still owed to the client (only a number at the very end of `*` arguments).
    pub ops: Vec<PatchOperation>,
}

#[derive(Debug)]
struct Emitter {
    targets: Vec<Target>,
    coalescing: Coalescing,
    /// Argument bytes received, the base of the re-send credit.
    argument_bytes: u64,
    /// Bytes of open strings sent so far, paid from the credit.
    resent_bytes: u64,
    last_resend: Option<Instant>,
    /// The time of the fragment being parsed.
    now: Option<Instant>,
    /// Operations produced by the current fragment.
    ops: Vec<PatchOperation>,
}

#[derive(Debug)]
struct Target {
    argument: Argument,
    /// `/<state key>`, escaped.
    base: PointerBuf,
    /// The client's copy of the open string, when the string is this target's: `None` until it
    /// is first sent, then its length in bytes.
    open: Option<Option<usize>>,
}

impl Projection {
    /// A projection onto `targets`: each state key with the part of the arguments it mirrors.
    pub fn new(
        targets: impl IntoIterator<Item = (String, Argument)>,
        coalescing: Coalescing,
    ) -> Self {
        let targets = targets
            .into_iter()
            .map(|(state_key, argument)| Target {
                argument,
                base: PointerBuf::from_tokens([state_key.as_str()]),
                open: None,
            })
            .collect();
        Projection {
            parser: PartialJson::new(),
            emitter: Emitter {
                targets,
                coalescing,
                argument_bytes: 0,
                resent_bytes: 0,
                last_resend: None,
                now: None,
                ops: Vec::new(),
            },
        }
    }

    /// Parses the next fragment and returns the operations that bring the client up to date
    /// (often none: see [`Coalescing`]). `now` is only compared with earlier calls' `now`.
    pub fn push(&mut self, fragment: &str, now: Instant) -> Vec<PatchOperation> {
        self.emitter.argument_bytes += fragment.len() as u64;
        self.emitter.now = Some(now);
        self.parser.push(fragment, &mut self.emitter);
        std::mem::take(&mut self.emitter.ops)
    }

    /// The arguments so far (see [`PartialJson::best_effort`]).
    pub fn best_effort(&self) -> Option<Value> {
        self.parser.best_effort()
    }

    /// Ends the arguments.
    ///
    /// # Errors
    /// The arguments are not one complete JSON value (empty arguments are an empty object).
    pub fn finish(mut self) -> Result<Finished, StateError> {
        if !self.parser.started() && !self.parser.failed() {
            return Ok(Finished {
                arguments: Value::Object(Map::new()),
                ops: Vec::new(),
            });
        }
        let arguments = self.parser.finish(&mut self.emitter)?;
        Ok(Finished {
            arguments,
            ops: self.emitter.ops,
        })
    }
}

impl Emitter {
    /// Whether an open string of `len` bytes, last sent at `sent` and taking `raw_len` bytes of
    /// the arguments, goes out now.
    fn resend_now(&self, len: usize, sent: Option<usize>, raw_len: usize) -> bool {
        let grown = len.saturating_sub(sent.unwrap_or(0));
        let credit = u64::from(self.coalescing.resend_ratio)
            .saturating_mul(self.argument_bytes)
            .saturating_sub(self.resent_bytes);
        let rested = match (self.last_resend, self.now) {
            (Some(last), Some(now)) => {
                now.saturating_duration_since(last) >= self.coalescing.min_interval
            }
            _ => true,
        };
        grown > 0
            && grown >= self.coalescing.min_growth_bytes
            && resend_cost(raw_len) <= credit
            && rested
    }
}

/// What sending an open string costs from the credit: an upper bound of its length as JSON in
/// the patch (its input bytes so far, plus the closing quote the output adds).
fn resend_cost(raw_len: usize) -> u64 {
    raw_len as u64 + 1
}

impl Sink for Emitter {
    fn event(&mut self, path: &[Segment], event: Event<'_>) {
        for index in 0..self.targets.len() {
            let target = &self.targets[index];
            let Some(relative) = target.argument.relative(path) else {
                continue;
            };
            let op = match event {
                Event::Value(value) => add(pointer(&target.base, relative), value.clone()),
                Event::String {
                    content,
                    raw_len,
                    closed,
                } => {
                    let sent = target.open.flatten();
                    let send = if closed {
                        sent != Some(content.len())
                    } else {
                        self.resend_now(content.len(), sent, raw_len)
                    };
                    let target = &mut self.targets[index];
                    target.open = if closed {
                        None
                    } else if send {
                        Some(Some(content.len()))
                    } else {
                        Some(sent)
                    };
                    if !send {
                        continue;
                    }
                    if !closed {
                        self.resent_bytes += resend_cost(raw_len);
                        self.last_resend = self.now;
                    }
                    let path = pointer(&self.targets[index].base, relative);
                    let value = Value::String(content.to_owned());
                    if sent.is_some() {
                        PatchOperation::Replace(ReplaceOperation { path, value })
                    } else {
                        add(path, value)
                    }
                }
            };
            self.ops.push(op);
        }
    }
}

/// `base` followed by `path`, each token escaped.
fn pointer(base: &PointerBuf, path: &[Segment]) -> PointerBuf {
    let mut pointer = base.clone();
    for segment in path {
        match segment {
            Segment::Key(key) => pointer.push_back(key.as_str()),
            Segment::Index(index) => pointer.push_back(*index),
        }
    }
    pointer
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(
        targets: &[(&str, Argument)],
        coalescing: Coalescing,
        fragments: &[&str],
    ) -> (Vec<Vec<Value>>, Result<Finished, StateError>) {
        let mut projection = Projection::new(
            targets.iter().map(|(k, a)| (k.to_string(), a.clone())),
            coalescing,
        );
        let now = Instant::now();
        let patches = fragments
            .iter()
            .map(|f| {
                let ops = projection.push(f, now);
                ops.iter()
                    .map(|op| serde_json::to_value(op).unwrap())
                    .collect()
            })
            .collect();
        (patches, projection.finish())
    }

    #[test]
    fn members_and_items_are_added_and_strings_replaced_only_once_sent() {
        let coalescing = Coalescing {
            resend_ratio: 100,
            min_growth_bytes: 1,
            min_interval: Duration::ZERO,
        };
        let (patches, finished) = run(
            &[("recipe", Argument::Named("recipe".into()))],
            coalescing,
            &[
                r#"{"other": 1, "recipe": {"ti"#,
                r#"tle": "Pa"#,
                r#"sta", "tags": ["#,
                r#""a", 2"#,
                r#"]}}"#,
            ],
        );
        assert_eq!(
            patches,
            vec![
                vec![json!({"op": "add", "path": "/recipe", "value": {}})],
                vec![json!({"op": "add", "path": "/recipe/title", "value": "Pa"})],
                vec![
                    json!({"op": "replace", "path": "/recipe/title", "value": "Pasta"}),
                    json!({"op": "add", "path": "/recipe/tags", "value": []}),
                ],
                vec![json!({"op": "add", "path": "/recipe/tags/0", "value": "a"})],
                vec![json!({"op": "add", "path": "/recipe/tags/1", "value": 2})],
            ]
        );
        assert_eq!(
            finished.unwrap().arguments,
            json!({"other": 1, "recipe": {"title": "Pasta", "tags": ["a", 2]}})
        );
    }

    #[test]
    fn paths_are_escaped_and_the_whole_arguments_can_be_projected() {
        let (patches, _) = run(
            &[("a/b~c", Argument::Whole)],
            Coalescing::default(),
            &[r#"{"x/y": {"~": true}}"#],
        );
        assert_eq!(
            patches[0],
            vec![
                json!({"op": "add", "path": "/a~1b~0c", "value": {}}),
                json!({"op": "add", "path": "/a~1b~0c/x~1y", "value": {}}),
                json!({"op": "add", "path": "/a~1b~0c/x~1y/~0", "value": true}),
            ]
        );
    }

    #[test]
    fn short_strings_go_out_once_whole_and_long_ones_within_the_credit() {
        // Default coalescing: nothing before 32 bytes of growth, then re-sends paid from credit.
        let document: String = "word ".repeat(400);
        let text = format!(r#"{{"document": "{document}"}}"#);
        let fragments: Vec<String> = text
            .as_bytes()
            .chunks(4)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let fragments: Vec<&str> = fragments.iter().map(String::as_str).collect();
        let (patches, finished) = run(
            &[("doc", Argument::Named("document".into()))],
            Coalescing::default(),
            &fragments,
        );
        let ops: Vec<&Value> = patches.iter().flatten().collect();
        assert!(ops.len() > 5 && ops.len() < 60, "{} ops", ops.len());
        assert_eq!(ops[0]["op"], "add");
        assert!(ops[0]["value"].as_str().unwrap().len() >= 32);
        assert!(ops[1..].iter().all(|op| op["op"] == "replace"));
        assert_eq!(ops.last().unwrap()["value"], document.as_str());
        let sent: usize = ops
            .iter()
            .map(|op| op["value"].as_str().unwrap().len())
            .sum();
        assert!(sent <= 5 * text.len(), "{sent} bytes for {}", text.len());
        assert!(finished.is_ok());

        // A short string: one add when it closes.
        let (patches, _) = run(
            &[("t", Argument::Named("t".into()))],
            Coalescing::default(),
            &[r#"{"t": "ab"#, "cd", r#"ef"}"#],
        );
        assert_eq!(
            patches,
            vec![
                vec![],
                vec![],
                vec![json!({"op": "add", "path": "/t", "value": "abcdef"})]
            ]
        );
    }

    #[test]
    fn a_time_budget_spaces_re_sends() {
        let mut projection = Projection::new(
            [("t".to_owned(), Argument::Named("t".into()))],
            Coalescing {
                resend_ratio: 100,
                min_growth_bytes: 1,
                min_interval: Duration::from_secs(10),
            },
        );
        let start = Instant::now();
        let kinds = |ops: Vec<PatchOperation>| -> Vec<String> {
            ops.iter()
                .map(|op| serde_json::to_value(op).unwrap()["op"].to_string())
                .collect()
        };
        assert_eq!(kinds(projection.push(r#"{"t": "ab"#, start)), [r#""add""#]);
        assert!(projection.push("cd", start).is_empty(), "too soon");
        assert!(projection
            .push("ef", start + Duration::from_secs(9))
            .is_empty());
        assert_eq!(
            kinds(projection.push("gh", start + Duration::from_secs(10))),
            [r#""replace""#]
        );
        // The end of a string is a boundary: it goes out whatever the clock says.
        assert_eq!(
            kinds(projection.push(r#"i"}"#, start + Duration::from_secs(10))),
            [r#""replace""#]
        );
    }

    #[test]
    fn a_named_argument_ignores_the_rest_and_a_missing_one_projects_nothing() {
        let (patches, finished) = run(
            &[("doc", Argument::Named("document".into()))],
            Coalescing::default(),
            &[r#"{"title": "x", "n": [1, {"document": 2}]}"#],
        );
        assert_eq!(patches, vec![Vec::<Value>::new()]);
        let arguments = finished.unwrap().arguments;
        assert_eq!(Argument::Named("document".into()).select(&arguments), None);
    }

    #[test]
    fn empty_arguments_are_an_empty_object_and_invalid_ones_an_error() {
        let (_, finished) = run(&[("k", Argument::Whole)], Coalescing::default(), &["  "]);
        assert_eq!(finished.unwrap().arguments, json!({}));
        let (_, finished) = run(
            &[("k", Argument::Whole)],
            Coalescing::default(),
            &["{\"a\":"],
        );
        assert_eq!(finished, Err(StateError::Incomplete));
    }

    #[test]
    fn a_number_ending_star_arguments_is_owed_at_finish() {
        let (patches, finished) = run(
            &[("k", Argument::Whole)],
            Coalescing::default(),
            &["4", "2"],
        );
        assert_eq!(patches, vec![Vec::<Value>::new(), vec![]]);
        let finished = finished.unwrap();
        assert_eq!(finished.arguments, json!(42));
        assert_eq!(
            serde_json::to_value(&finished.ops).unwrap(),
            json!([{"op": "add", "path": "/k", "value": 42}])
        );
    }
}
