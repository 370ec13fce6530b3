//! Property tests of the parser and the projection: random JSON documents, written with random
//! whitespace and escapes and split at random points, and random text that is mostly not JSON.
//!
//! A seeded generator rather than a property-testing crate: the properties need documents and
//! their serialization under our control (escapes split across fragments), and a failure
//! prints the seed, which reproduces it exactly.

use std::time::Instant;

use serde_json::{json, Map, Number, Value};

use super::{Argument, Coalescing, PartialJson, Projection};

use crate::test_rng::Rng;

const CHARS: &[char] = &[
    'a', 'b', 'z', ' ', '"', '\\', '/', '~', '\n', '\t', '\u{1}', '\u{1f}', 'é', '東', '😀', '🍰',
    '0', '{', '}', '[', ']', ':', ',',
];

fn string(rng: &mut Rng, max: usize) -> String {
    (0..rng.below(max + 1))
        .map(|_| CHARS[rng.below(CHARS.len())])
        .collect()
}

fn value(rng: &mut Rng, depth: usize) -> Value {
    let kinds = if depth >= 4 { 5 } else { 7 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => match rng.below(4) {
            0 => json!(rng.next()),
            1 => json!(rng.below(1000) as i64 - 500),
            2 => json!(-((rng.next() >> 1) as i64)),
            _ => {
                let mantissa = rng.below(1_000_000) as f64 - 500_000.0;
                let exponent = rng.below(40) as i32 - 20;
                Number::from_f64(mantissa * 10f64.powi(exponent)).map_or(Value::Null, Value::Number)
            }
        },
        3 | 4 => {
            let max = if rng.one_in(8) { 200 } else { 12 };
            Value::String(string(rng, max))
        }
        5 => Value::Array((0..rng.below(5)).map(|_| value(rng, depth + 1)).collect()),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.below(5) {
                map.insert(string(rng, 6), value(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

fn whitespace(rng: &mut Rng, out: &mut String) {
    if rng.one_in(3) {
        out.push_str([" ", "\n", "\t ", "\r\n  "][rng.below(4)]);
    }
}

/// Writes `value` as JSON with random whitespace, and with characters randomly written as
/// `\uXXXX` escapes (surrogate pairs beyond the BMP) or `\/`.
fn write(rng: &mut Rng, value: &Value, out: &mut String) {
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

fn write_string(rng: &mut Rng, s: &str, out: &mut String) {
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
fn split<'a>(rng: &mut Rng, text: &'a str) -> Vec<&'a str> {
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

#[test]
fn random_documents_split_anywhere_parse_consistently_and_patch_to_the_final_state() {
    for seed in 0..3000_u64 {
        let mut rng = Rng::new(seed);
        let document = value(&mut rng, 0);
        let mut text = String::new();
        write(&mut rng, &document, &mut text);
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
            resend_ratio: [0, 1, 4, 100][rng.below(4)],
            min_growth_bytes: [0, 1, 32][rng.below(3)],
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
        for fragment in split(&mut rng, &text) {
            let ops = projection.push(fragment, now);
            string_bytes += ops
                .iter()
                .filter_map(|op| match op {
                    json_patch::PatchOperation::Add(json_patch::AddOperation { value, .. })
                    | json_patch::PatchOperation::Replace(json_patch::ReplaceOperation {
                        value,
                        ..
                    }) if value.is_string() => Some(value.to_string().len()),
                    _ => None,
                })
                .sum::<usize>();
            json_patch::patch(&mut client, &ops).unwrap_or_else(|e| {
                panic!("seed {seed}: a patch fails ({e}): {ops:?} on {client} for {text:?}")
            });
            if let Some(partial) = projection.best_effort() {
                assert!(
                    consistent(&partial, &expected),
                    "seed {seed}: {partial} contradicts {expected} ({text:?})"
                );
            }
        }
        // The documented bound: re-sends within `resend_ratio` × the argument bytes, plus each
        // string once more per key when it closes (two keys here).
        let bound = (coalescing.resend_ratio as usize + 2) * text.len();
        assert!(
            string_bytes <= bound,
            "seed {seed}: {string_bytes} string bytes sent for {} argument bytes",
            text.len()
        );
        let finished = projection
            .finish()
            .unwrap_or_else(|e| panic!("seed {seed}: {e} for {text:?}"));
        assert_eq!(finished.arguments, expected, "seed {seed}: {text:?}");
        json_patch::patch(&mut client, &finished.ops).expect("the owed ops apply");

        let mut wanted = baseline;
        wanted["all"] = expected.clone();
        if let Some(value) = Argument::Named(named).select(&expected) {
            wanted["named/~"] = value.clone();
        }
        assert_eq!(client, wanted, "seed {seed}: {text:?}");
    }
}

const NOISE: &[&str] = &[
    "{", "}", "[", "]", "\"", ":", ",", " ", "\\", "\\u", "d83d", "\\ude00", "dc00", "0", "-", "1",
    "e", ".", "+", "true", "fals", "null", "x", "é", "😀", "\u{1}", "\n", "\"a\"", "nu",
];

#[test]
fn arbitrary_text_never_panics_and_agrees_with_serde_json() {
    for seed in 0..20_000_u64 {
        let mut rng = Rng::new(seed);
        let text: String = if rng.one_in(4) {
            // Arbitrary bytes, made into a string the way a lossy decoder would.
            let bytes: Vec<u8> = (0..rng.below(40)).map(|_| rng.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            (0..rng.below(16))
                .map(|_| NOISE[rng.below(NOISE.len())])
                .collect()
        };
        let mut parser = PartialJson::new();
        let mut projection =
            Projection::new([("k".to_owned(), Argument::Whole)], Coalescing::default());
        let mut client = json!({});
        for fragment in split(&mut rng, &text) {
            parser.push(fragment, &mut ());
            let _ = parser.best_effort();
            let ops = projection.push(fragment, Instant::now());
            assert!(
                json_patch::patch(&mut client, &ops).is_ok(),
                "seed {seed}: {ops:?} on {client} for {text:?}"
            );
        }
        let ours = parser.finish(&mut ());
        let _ = projection.finish();
        match serde_json::from_str::<Value>(&text) {
            Ok(value) => assert_eq!(ours, Ok(value), "seed {seed}: {text:?}"),
            Err(_) => assert!(ours.is_err(), "seed {seed}: {text:?} gave {ours:?}"),
        }
    }
}
