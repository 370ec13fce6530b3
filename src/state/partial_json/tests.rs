//! The partial-JSON parser on fragment tables: escapes and unicode split across fragments,
//! numbers, nesting, and errors.

use serde_json::json;

use super::*;

fn parse(fragments: &[&str]) -> (Vec<Option<Value>>, Result<Value, StateError>) {
    let mut parser = PartialJson::new();
    let mut seen = Vec::new();
    for fragment in fragments {
        parser.push(fragment, &mut ());
        seen.push(parser.best_effort());
    }
    (seen, parser.finish(&mut ()))
}

/// A fragment table: each case's fragments, the best-effort value after each one, then the
/// final value.
type FragmentTable<'a> = Vec<(Vec<&'a str>, Vec<Value>, Value)>;

#[test]
fn best_effort_values_after_each_fragment_of_objects_and_arrays() {
    let cases: FragmentTable<'_> = vec![
        (
            vec![
                r#"{"ti"#,
                r#"tle": "#,
                r#""Pa"#,
                r#"sta", "#,
                r#""n": 1"#,
                "2",
                "}",
            ],
            vec![
                json!({}),
                json!({}),
                json!({"title": "Pa"}),
                json!({"title": "Pasta"}),
                json!({"title": "Pasta"}),
                json!({"title": "Pasta"}),
                json!({"title": "Pasta", "n": 12}),
            ],
            json!({"title": "Pasta", "n": 12}),
        ),
        (
            vec!["[1", ", tr", "ue, [nu", "ll, {\"a\":", " [", "]}]", "]"],
            vec![
                json!([]),
                json!([1]),
                json!([1, true, []]),
                json!([1, true, [null, {}]]),
                json!([1, true, [null, {"a": []}]]),
                json!([1, true, [null, {"a": []}]]),
                json!([1, true, [null, {"a": []}]]),
            ],
            json!([1, true, [null, {"a": []}]]),
        ),
    ];
    check_fragment_table(cases);
}

#[test]
fn best_effort_values_after_each_fragment_of_strings_numbers_and_dangling_members() {
    let cases: FragmentTable<'_> = vec![
        // Escapes split anywhere, including inside \u and between a surrogate pair.
        (
            vec![
                r#"{"s": "a\"#,
                r#""b\\c\n\u00"#,
                r#"e9 \ud83"#,
                r#"d\"#,
                r#"ude00!"}"#,
            ],
            vec![
                json!({"s": "a"}),
                json!({"s": "a\"b\\c\n"}),
                json!({"s": "a\"b\\c\né "}),
                json!({"s": "a\"b\\c\né "}),
                json!({"s": "a\"b\\c\né 😀!"}),
            ],
            json!({"s": "a\"b\\c\né 😀!"}),
        ),
        // Multi-byte UTF-8, whole in each fragment.
        (
            vec!["[\"Zü", "rich 東京\", \"", "🍰\"]"],
            vec![
                json!(["Zü"]),
                json!(["Zürich 東京", ""]),
                json!(["Zürich 東京", "🍰"]),
            ],
            json!(["Zürich 東京", "🍰"]),
        ),
        // Numbers appear only when a delimiter ends them; literals only when complete.
        (
            vec!["[-", "1.5e", "+3", " ,0", ",fal", "se", "]"],
            vec![
                json!([]),
                json!([]),
                json!([]),
                json!([-1500.0]),
                json!([-1500.0, 0]),
                json!([-1500.0, 0, false]),
                json!([-1500.0, 0, false]),
            ],
            json!([-1500.0, 0, false]),
        ),
        // A dangling key, colon or comma is left out.
        (
            vec![r#"{"a": {"b""#, ":", " ", ",", "}"],
            vec![json!({"a": {}}), json!({"a": {}}), json!({"a": {}})],
            json!(null), // not reached: `,` after a colon is an error
        ),
    ];
    check_fragment_table(cases);
}

fn check_fragment_table(cases: FragmentTable<'_>) {
    for (fragments, expected, final_value) in cases {
        let (seen, result) = parse(&fragments);
        for (i, value) in expected.iter().enumerate() {
            assert_eq!(
                seen[i].as_ref(),
                Some(value),
                "after fragment {i} of {fragments:?}"
            );
        }
        let whole: String = fragments.concat();
        match serde_json::from_str::<Value>(&whole) {
            Ok(parsed) => {
                assert_eq!(result.as_ref(), Ok(&parsed), "{whole}");
                assert_eq!(parsed, final_value);
            }
            Err(_) => assert!(result.is_err(), "{whole} must fail, got {result:?}"),
        }
    }
}

#[test]
fn scalars_at_the_root() {
    for (text, value) in [
        ("12", json!(12)),
        ("-0.5", json!(-0.5)),
        ("1e3", json!(1000.0)),
        (" true ", json!(true)),
        ("null", json!(null)),
        ("\"x\"", json!("x")),
        ("18446744073709551615", json!(18446744073709551615_u64)),
        ("-9223372036854775808", json!(-9223372036854775808_i64)),
    ] {
        let mut parser = PartialJson::new();
        for c in text.chars() {
            parser.push(&c.to_string(), &mut ());
        }
        assert_eq!(parser.finish(&mut ()), Ok(value), "{text}");
    }
    // An unfinished root number is not shown before the end.
    let mut parser = PartialJson::new();
    parser.push("12", &mut ());
    assert_eq!(parser.best_effort(), None);
}

#[test]
fn invalid_documents_fail_at_the_end_and_never_panic() {
    for text in [
        "",
        "   ",
        "{",
        "[1,]",
        "{\"a\" 1}",
        "{\"a\":}",
        "{,}",
        "[01]",
        "[1.]",
        "[-]",
        "[tru]",
        "[trux]",
        "nul",
        "\"a",
        "\"\\x\"",
        "\"\\u12g4\"",
        "\"\\ud800\"",
        "\"\\ud800\\u0041\"",
        "\"\\udc00\"",
        "\"a\u{1}b\"",
        "{} {}",
        "[1 2]",
        "{\"a\":1]",
        "[}",
        "1x",
        "{1:2}",
    ] {
        let mut parser = PartialJson::new();
        parser.push(text, &mut ());
        let result = parser.finish(&mut ());
        assert!(result.is_err(), "{text:?} parsed as {result:?}");
        assert!(
            serde_json::from_str::<Value>(text).is_err(),
            "serde_json agrees that {text:?} is invalid"
        );
    }
}

#[test]
fn nesting_is_limited_like_serde_json() {
    let deep = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
    let mut parser = PartialJson::new();
    parser.push(&deep, &mut ());
    assert!(parser.finish(&mut ()).is_ok());
    let too_deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    let mut parser = PartialJson::new();
    parser.push(&too_deep, &mut ());
    assert!(parser.finish(&mut ()).is_err());
    assert!(serde_json::from_str::<Value>(&too_deep).is_err());
}

#[test]
fn duplicate_keys_keep_the_last_value_like_serde_json() {
    let text = r#"{"a": 1, "a": [2]}"#;
    let mut parser = PartialJson::new();
    parser.push(text, &mut ());
    assert_eq!(
        parser.finish(&mut ()).unwrap(),
        serde_json::from_str::<Value>(text).unwrap()
    );
}

#[derive(Default)]
struct Recorder(Vec<(Vec<Segment>, String)>);
impl Sink for Recorder {
    fn event(&mut self, path: &[Segment], event: Event<'_>) {
        let what = match event {
            Event::Value(v) => format!("value {v}"),
            Event::String {
                content, closed, ..
            } => format!("string {content:?} {closed}"),
        };
        self.0.push((path.to_vec(), what));
    }
}

#[test]
fn events_carry_paths_and_open_strings_are_reported_once_per_fragment() {
    let mut parser = PartialJson::new();
    let mut sink = Recorder::default();
    for fragment in [r#"{"a/b": [tr"#, r#"ue, "x"#, "yz", r#""], "n": 7}"#] {
        parser.push(fragment, &mut sink);
    }
    let key = |k: &str| Segment::Key(k.into());
    assert_eq!(
        sink.0,
        vec![
            (vec![], "value {}".to_string()),
            (vec![key("a/b")], "value []".to_string()),
            (
                vec![key("a/b"), Segment::Index(0)],
                "value true".to_string()
            ),
            (
                vec![key("a/b"), Segment::Index(1)],
                "string \"x\" false".to_string()
            ),
            (
                vec![key("a/b"), Segment::Index(1)],
                "string \"xyz\" false".to_string()
            ),
            (
                vec![key("a/b"), Segment::Index(1)],
                "string \"xyz\" true".to_string()
            ),
            (vec![key("n")], "value 7".to_string()),
        ]
    );
}
