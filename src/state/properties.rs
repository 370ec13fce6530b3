//! Property tests of the parser and the projection: random JSON documents, written with random
//! whitespace and escapes and split at random points, and random text that is mostly not JSON.
//!
//! proptest generates the documents and a choice sequence (`test_choices`) for how each is
//! written and split, and shrinks both when a property fails. `PROPTEST_CASES` runs more cases.

use std::time::Instant;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

use super::{Argument, Coalescing, PartialJson, Projection};

use crate::test_choices::{choice_bytes, config_with_cases, Choices};

const CHARS: &[char] = &[
    'a', 'b', 'z', ' ', '"', '\\', '/', '~', '\n', '\t', '\u{1}', '\u{1f}', 'é', '東', '😀', '🍰',
    '0', '{', '}', '[', ']', ':', ',',
];

fn text(max: usize) -> impl Strategy<Value = String> {
    vec(proptest::sample::select(CHARS), 0..=max).prop_map(String::from_iter)
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(|n| json!(n)),
        (-500_i64..500).prop_map(|n| json!(n)),
        (i64::MIN..0).prop_map(|n| json!(n)),
        (-500_000_i32..500_000, -20_i32..20).prop_map(|(mantissa, exponent)| {
            Number::from_f64(f64::from(mantissa) * 10f64.powi(exponent))
                .map_or(Value::Null, Value::Number)
        }),
    ]
}

/// Any JSON document up to four levels deep, with strings from `CHARS` (sometimes long).
fn document() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        prop_oneof![7 => text(12), 1 => text(200)].prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(text(6), inner, 0..5)
                .prop_map(|members| Value::Object(Map::from_iter(members))),
        ]
    })
}

fn whitespace(rng: &mut Choices<'_>, out: &mut String) {
    if rng.one_in(3) {
        out.push_str([" ", "\n", "\t ", "\r\n  "][rng.below(4)]);
    }
}

/// Writes `value` as JSON with random whitespace, and with characters randomly written as
/// `\uXXXX` escapes (surrogate pairs beyond the BMP) or `\/`.
fn write(rng: &mut Choices<'_>, value: &Value, out: &mut String) {
    whitespace(rng, out);
    match value {
        Value::String(s) => write_string(rng, s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(rng, item, out);
            }
            whitespace(rng, out);
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                whitespace(rng, out);
                write_string(rng, key, out);
                whitespace(rng, out);
                out.push(':');
                write(rng, item, out);
            }
            whitespace(rng, out);
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
    whitespace(rng, out);
}

fn write_string(rng: &mut Choices<'_>, s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' if rng.one_in(2) => out.push_str("\\n"),
            '/' if rng.one_in(2) => out.push_str("\\/"),
            c if (c as u32) < 0x20 || rng.one_in(4) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Splits at random character boundaries: mostly 1 to 8 characters, sometimes more.
fn split<'a>(rng: &mut Choices<'_>, text: &'a str) -> Vec<&'a str> {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let mut fragments = Vec::new();
    let mut at = 0;
    while at + 1 < boundaries.len() {
        let step = if rng.one_in(10) {
            1 + rng.below(40)
        } else {
            1 + rng.below(8)
        };
        let end = (at + step).min(boundaries.len() - 1);
        fragments.push(&text[boundaries[at]..boundaries[end]]);
        at = end;
    }
    fragments
}

/// Whether `partial` says nothing `complete` contradicts: strings may be prefixes, arrays may
/// be shorter, objects may lack members; everything else is equal.
fn consistent(partial: &Value, complete: &Value) -> bool {
    match (partial, complete) {
        (Value::String(p), Value::String(c)) => c.starts_with(p.as_str()),
        (Value::Array(p), Value::Array(c)) => {
            p.len() <= c.len() && p.iter().zip(c).all(|(p, c)| consistent(p, c))
        }
        (Value::Object(p), Value::Object(c)) => p
            .iter()
            .all(|(k, p)| c.get(k).is_some_and(|c| consistent(p, c))),
        (p, c) => p == c,
    }
}

proptest! {
    #![proptest_config(config_with_cases(1_000))]

    #[test]
    fn random_documents_split_anywhere_parse_consistently_and_patch_to_the_final_state(
        document in document(),
        choices in choice_bytes(4_096),
    ) {
        document_property(&document, &mut Choices::new(&choices));
    }

    #[test]
    fn arbitrary_text_never_panics_and_agrees_with_serde_json(
        text in prop_oneof![
            // Arbitrary bytes, made into a string the way a lossy decoder would.
            1 => vec(any::<u8>(), 0..40).prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            3 => vec(proptest::sample::select(NOISE), 0..16).prop_map(|pieces| pieces.concat()),
        ],
        choices in choice_bytes(64),
    ) {
        text_property(&text, &mut Choices::new(&choices));
    }
}

fn document_property(document: &Value, rng: &mut Choices<'_>) {
    let mut text = String::new();
    write(rng, document, &mut text);
    let expected: Value = serde_json::from_str(&text).expect("the generator writes JSON");

    let named = match &expected {
        Value::Object(map) if !map.is_empty() && !rng.one_in(4) => map
            .keys()
            .nth(rng.below(map.len()))
            .cloned()
            .unwrap_or_default(),
        _ => "missing".to_owned(),
    };
    let coalescing = Coalescing {
        resend_ratio: *rng.pick(&[0, 1, 4, 100]),
        min_growth_bytes: *rng.pick(&[0, 1, 32]),
        ..Coalescing::default()
    };
    let baseline = [
        json!({}),
        json!({"all": "old", "named/~": [1, 2], "other": true}),
        json!({"other": {"x": 1}}),
    ][rng.below(3)]
    .clone();
    let mut projection = Projection::new(
        [
            ("all".to_owned(), Argument::Whole),
            ("named/~".to_owned(), Argument::Named(named.clone())),
        ],
        coalescing,
    );

    let mut client = baseline.clone();
    let mut string_bytes = 0;
    let now = Instant::now();
    for fragment in split(rng, &text) {
        let ops = projection.push(fragment, now);
        string_bytes += ops
            .iter()
            .filter_map(|op| match op {
                json_patch::PatchOperation::Add(json_patch::AddOperation { value, .. })
                | json_patch::PatchOperation::Replace(json_patch::ReplaceOperation {
                    value, ..
                }) if value.is_string() => Some(value.to_string().len()),
                _ => None,
            })
            .sum::<usize>();
        json_patch::patch(&mut client, &ops)
            .unwrap_or_else(|e| panic!("a patch fails ({e}): {ops:?} on {client} for {text:?}"));
        if let Some(partial) = projection.best_effort() {
            assert!(
                consistent(&partial, &expected),
                "{partial} contradicts {expected} ({text:?})"
            );
        }
    }
    // The documented bound: re-sends within `resend_ratio` × the argument bytes, plus each
    // string once more per key when it closes (two keys here).
    let bound = (coalescing.resend_ratio as usize + 2) * text.len();
    assert!(
        string_bytes <= bound,
        "{string_bytes} string bytes sent for {} argument bytes",
        text.len()
    );
    let finished = projection
        .finish()
        .unwrap_or_else(|e| panic!("{e} for {text:?}"));
    assert_eq!(finished.arguments, expected, "{text:?}");
    json_patch::patch(&mut client, &finished.ops).expect("the owed ops apply");

    let mut wanted = baseline;
    wanted["all"] = expected.clone();
    if let Some(value) = Argument::Named(named).select(&expected) {
        wanted["named/~"] = value.clone();
    }
    assert_eq!(client, wanted, "{text:?}");
}

const NOISE: &[&str] = &[
    "{", "}", "[", "]", "\"", ":", ",", " ", "\\", "\\u", "d83d", "\\ude00", "dc00", "0", "-", "1",
    "e", ".", "+", "true", "fals", "null", "x", "é", "😀", "\u{1}", "\n", "\"a\"", "nu",
];

fn text_property(text: &str, rng: &mut Choices<'_>) {
    let mut parser = PartialJson::new();
    let mut projection =
        Projection::new([("k".to_owned(), Argument::Whole)], Coalescing::default());
    let mut client = json!({});
    for fragment in split(rng, text) {
        parser.push(fragment, &mut ());
        let _ = parser.best_effort();
        let ops = projection.push(fragment, Instant::now());
        assert!(
            json_patch::patch(&mut client, &ops).is_ok(),
            "{ops:?} on {client} for {text:?}"
        );
    }
    let ours = parser.finish(&mut ());
    let _ = projection.finish();
    match serde_json::from_str::<Value>(text) {
        Ok(value) => assert_eq!(ours, Ok(value), "{text:?}"),
        Err(_) => assert!(ours.is_err(), "{text:?} gave {ours:?}"),
    }
}
