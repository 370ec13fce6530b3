//! Checking an A2UI surface: what `generate_a2ui` adds to each attempt after the model's
//! arguments are in, against parsing those arguments.
//!
//! `cargo bench --bench a2ui` checks a realistic surface (a `Row` repeating a card over 20
//! data items, 12 components with bindings, against a 6-component catalog), the largest tree
//! the check takes (500 components in one chain, the worst case for the cycle search), and
//! parses the realistic surface's arguments from text, as the generator does before checking.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

use agui_host::protocol::Context;
use agui_host::tools::a2ui::{validate, Catalog, MAX_COMPONENTS, SCHEMA_CONTEXT_DESCRIPTION};

fn catalog() -> Catalog {
    let string = json!({"anyOf": [{"type": "string"}, {"type": "object"}]});
    let value = json!({"catalogId": "c", "components": {
        "Row": {"required": ["children"], "properties": {"children": {}}},
        "Column": {"required": ["children"], "properties": {"children": {}}},
        "Card": {"required": ["child"], "properties": {"child": {"format": "componentRef"}}},
        "Text": {"required": ["text"], "properties": {"text": string}},
        "Image": {"required": ["url"], "properties": {"url": string}},
        "Button": {"required": ["child", "action"], "properties": {"child": {"format": "componentRef"}, "action": {}}},
    }});
    Catalog::from_context(&[Context {
        description: SCHEMA_CONTEXT_DESCRIPTION.into(),
        value: value.to_string(),
    }])
    .expect("a catalog")
}

fn realistic() -> Value {
    let mut components = vec![
        json!({"id": "root", "component": "Column", "children": ["title", "list"]}),
        json!({"id": "title", "component": "Text", "text": {"path": "/title"}}),
        json!({"id": "list", "component": "Row", "children": {"componentId": "card", "path": "/items"}}),
        json!({"id": "card", "component": "Card", "child": "body"}),
        json!({"id": "body", "component": "Column", "children": ["name", "photo", "price", "rating", "about", "book"]}),
        json!({"id": "book", "component": "Button", "child": "book-label", "action": {"event": {"name": "book", "context": {"name": {"path": "name"}}}}}),
        json!({"id": "book-label", "component": "Text", "text": "Book"}),
    ];
    for field in ["name", "price", "rating", "about"] {
        components.push(json!({"id": field, "component": "Text", "text": {"path": field}}));
    }
    components.push(json!({"id": "photo", "component": "Image", "url": {"path": "photo"}}));
    let items: Vec<Value> = (0..20)
        .map(|i| json!({"name": format!("Hotel {i}"), "price": "$200", "rating": 4.5, "about": "Near the station.", "photo": "https://example.com/p.png"}))
        .collect();
    json!({"surfaceId": "hotels", "components": components, "data": {"title": "Hotels", "items": items}})
}

fn chain() -> Value {
    let mut components: Vec<Value> = (0..MAX_COMPONENTS - 1)
        .map(|i| json!({"id": format!("n{i}"), "component": "Column", "children": [format!("n{}", i + 1)]}))
        .collect();
    components.push(json!({"id": "root", "component": "Column", "children": ["n0"]}));
    Value::Array(components)
}

fn check(c: &mut Criterion) {
    let catalog = catalog();
    let surface = realistic();
    let text = surface.to_string();
    let mut group = c.benchmark_group("a2ui");
    group.bench_function("check a 12-component surface with 20 items", |b| {
        b.iter(|| {
            validate(
                black_box(&surface["components"]),
                Some(&surface["data"]),
                Some(&catalog),
            )
        })
    });
    group.bench_function("parse the same surface's arguments", |b| {
        b.iter(|| serde_json::from_str::<Value>(black_box(&text)).unwrap())
    });
    let long = chain();
    group.bench_function("check a 500-component chain", |b| {
        b.iter(|| validate(black_box(&long), None, Some(&catalog)))
    });
    group.finish();
}

criterion_group!(benches, check);
criterion_main!(benches);
