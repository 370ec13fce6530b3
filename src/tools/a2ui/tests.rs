//! The component check, one finding at a time, and the envelopes the kind and `prior_surface`
//! build and read.

use super::*;

fn codes(problems: &[Problem]) -> Vec<&'static str> {
    problems.iter().map(|p| p.code).collect()
}

fn catalog() -> Catalog {
    let value = json!({
        "catalogId": "https://example.test/catalog.json",
        "components": {
            "Column": {"properties": {"children": {}}},
            "Text": {"required": ["text"], "properties": {"text": {}}},
            "Modal": {"properties": {
                "trigger": {"format": "componentRef"},
                "content": {"format": "componentRef"}
            }},
            "Tabs": {"properties": {"tabItems": {"type": "array", "items": {
                "type": "object",
                "properties": {"title": {}, "child": {"format": "componentRef"}}
            }}}}
        }
    });
    Catalog::from_context(&[Context {
        description: SCHEMA_CONTEXT_DESCRIPTION.into(),
        value: value.to_string(),
    }])
    .expect("a catalog")
}

#[test]
fn a_well_formed_tree_passes_with_and_without_the_catalog() {
    let components = json!([
        {"id": "root", "component": "Column", "children": ["title", "list"]},
        {"id": "title", "component": "Text", "text": {"path": "/heading"}},
        {"id": "list", "component": "Column", "children": {"componentId": "item", "path": "/items"}},
        {"id": "item", "component": "Text", "text": {"path": "name"}}
    ]);
    let data = json!({"heading": "Hotels", "items": [{"name": "Ritz"}]});
    assert_eq!(validate(&components, Some(&data), Some(&catalog())), []);
    assert_eq!(validate(&components, None, None), []);
}

#[test]
fn each_structural_fault_is_named() {
    assert_eq!(
        codes(&validate(&json!([]), None, None)),
        ["empty_components"]
    );
    assert_eq!(
        codes(&validate(&json!({"id": "root"}), None, None)),
        ["empty_components"]
    );
    let components = json!([
        {"id": "root", "component": "Column", "children": ["a", "ghost"]},
        {"id": "a", "component": "Column", "child": "root"},
        {"id": "a", "component": "Text"},
        {"component": "Text"},
        {"id": "typeless"}
    ]);
    let problems = validate(&components, None, None);
    assert_eq!(
        codes(&problems),
        [
            "duplicate_id",
            "unresolved_child",
            "missing_id",
            "missing_component_type",
            "child_cycle"
        ],
        "{problems:#?}"
    );
    let cycle = problems.iter().find(|p| p.code == "child_cycle").unwrap();
    assert_eq!(
        cycle.message,
        "Child reference cycle detected: a -> root -> a"
    );
    assert_eq!(
        codes(&validate(
            &json!([{"id": "main", "component": "Column"}]),
            None,
            None
        )),
        ["no_root"]
    );
}

#[test]
fn the_catalog_names_the_types_their_required_props_and_their_reference_fields() {
    let components = json!([
        {"id": "root", "component": "Modal", "trigger": "button", "content": "body"},
        {"id": "body", "component": "Text"},
        {"id": "tabs", "component": "Tabs", "tabItems": [{"title": "A", "child": "nowhere"}]},
        {"id": "chart", "component": "Chart"}
    ]);
    let problems = validate(&components, None, Some(&catalog()));
    assert_eq!(
        problems
            .iter()
            .map(|p| (p.code, p.path.as_str()))
            .collect::<Vec<_>>(),
        [
            ("unresolved_child", "components[0].trigger"),
            ("missing_required_prop", "components[1].text"),
            ("unresolved_child", "components[2].tabItems[0].child"),
            ("unknown_component", "components[3].component"),
        ]
    );
    // Without the catalog, `trigger` is data like any other string.
    assert_eq!(
        codes(&validate(&components, None, None)),
        Vec::<&str>::new()
    );
}

#[test]
fn an_absolute_binding_must_resolve_in_the_data_and_a_relative_one_is_left_alone() {
    let components = json!([
        {"id": "root", "component": "Column", "children": {"componentId": "row", "path": "/rows"}},
        {"id": "row", "component": "Text", "text": {"path": "label"}, "extra": {"path": "/rows/3/x"}}
    ]);
    let problems = validate(&components, Some(&json!({"rows": [{"label": "a"}]})), None);
    assert_eq!(codes(&problems), ["unresolved_binding"]);
    assert!(problems[0].message.contains("/rows/3/x"));
    assert_eq!(
        codes(&validate(&components, Some(&json!({})), None)),
        ["unresolved_binding", "unresolved_binding"]
    );
}

#[test]
fn a_long_chain_and_a_huge_tree_are_checked_without_recursion() {
    let mut chain: Vec<Value> = (0..MAX_COMPONENTS - 1)
        .map(|i| json!({"id": format!("n{i}"), "component": "Column", "child": format!("n{}", i + 1)}))
        .collect();
    chain.push(json!({"id": "root", "component": "Column", "child": "n0"}));
    // The last link closes the chain on itself: one cycle through all of it.
    chain[MAX_COMPONENTS - 2]["child"] = json!("n0");
    let problems = validate(&Value::Array(chain), None, None);
    assert_eq!(codes(&problems), ["child_cycle"]);
    let huge = Value::Array(vec![
        json!({"id": "root", "component": "Text"});
        MAX_COMPONENTS + 1
    ]);
    assert_eq!(codes(&validate(&huge, None, None)), ["too_many_components"]);
}

#[test]
fn the_catalog_is_read_from_the_inline_and_the_older_list_form() {
    let inline = catalog();
    assert_eq!(
        inline.id.as_deref(),
        Some("https://example.test/catalog.json")
    );
    assert!(inline.components.contains_key("Tabs"));
    let listed = Catalog::from_context(&[Context {
        description: SCHEMA_CONTEXT_DESCRIPTION.into(),
        value: json!([{"name": "Card", "props": {"required": ["title"]}}]).to_string(),
    }])
    .expect("the list form");
    assert_eq!(listed.id, None);
    assert_eq!(listed.components["Card"], json!({"required": ["title"]}));
    let other = Context {
        description: "something else".into(),
        value: "{}".into(),
    };
    assert_eq!(Catalog::from_context(&[other]), None);
    let broken = Context {
        description: SCHEMA_CONTEXT_DESCRIPTION.into(),
        value: "not json".into(),
    };
    assert_eq!(Catalog::from_context(&[broken]), None);
}

#[tokio::test]
async fn the_kind_fills_its_fixed_surface_with_the_arguments() {
    let components = json!([{"id": "root", "component": "FlightList", "children": {"componentId": "card", "path": "/flights"}},
                            {"id": "card", "component": "FlightCard"}]);
    let tool = FixedSurfaceTool::new(
        "search_flights",
        "Shows flights",
        json!({"type": "object"}),
        "flight-search-results",
        Some("https://example.test/fixed.json"),
        components.clone(),
    )
    .expect("a valid tool");
    let context = ToolContext {
        scope: "s".into(),
        agent: "a".into(),
        thread_id: "t".into(),
        run_id: "r".into(),
        tool_call_id: "c".into(),
        message_id: None,
        state: None,
        progress: None,
        input: None,
        events: None,
    };
    let output = tool
        .call(json!({"flights": [{"id": "UA 123"}]}), context)
        .await
        .expect("a result");
    assert_eq!(
        output.content,
        json!({"a2ui_operations": [
            {"version": "v0.9", "createSurface": {"surfaceId": "flight-search-results", "catalogId": "https://example.test/fixed.json"}},
            {"version": "v0.9", "updateComponents": {"surfaceId": "flight-search-results", "components": components}},
            {"version": "v0.9", "updateDataModel": {"surfaceId": "flight-search-results", "path": "/", "value": {"flights": [{"id": "UA 123"}]}}}
        ]})
    );
    let broken = FixedSurfaceTool::new(
        "broken",
        "",
        json!({"type": "object"}),
        "s",
        None,
        json!([{"id": "main", "component": "Column"}]),
    );
    assert!(broken.unwrap_err().contains("No component has id 'root'"));
}

#[test]
fn a_prior_surface_is_the_last_state_its_envelopes_left() {
    let first = operations(
        "s1",
        Some("cat"),
        json!([{"id": "root"}]),
        Some(json!({"a": 1})),
    );
    let other = operations("s2", Some("cat"), json!([{"id": "other"}]), None);
    let update = operations("s1", None, json!([{"id": "root", "v": 2}]), None);
    let texts = [
        first.to_string(),
        other.to_string(),
        "plain text".into(),
        update.to_string(),
    ];
    let prior = prior_surface(texts.iter().map(String::as_str), "s1").expect("found");
    assert_eq!(prior.catalog_id.as_deref(), Some("cat"));
    assert_eq!(prior.components, json!([{"id": "root", "v": 2}]));
    assert_eq!(prior.data, Some(json!({"a": 1})));
    assert_eq!(prior_surface(texts.iter().map(String::as_str), "s3"), None);
}

#[test]
fn required_props_and_reference_fields_are_read_through_all_of() {
    // The shape CopilotKit's catalogs send: the component's own schema inside `allOf`.
    let value = json!({"catalogId": "c", "components": {
        "Card": {"allOf": [
            {"type": "object", "properties": {"weight": {}}},
            {"required": ["title"], "properties": {"title": {}, "footer": {"format": "componentRef"}}}
        ]},
        "Column": {"properties": {"children": {}}}
    }});
    let catalog = Catalog::from_context(&[Context {
        description: SCHEMA_CONTEXT_DESCRIPTION.into(),
        value: value.to_string(),
    }])
    .expect("a catalog");
    let components = json!([
        {"id": "root", "component": "Column", "children": ["card"]},
        {"id": "card", "component": "Card", "footer": "nowhere"}
    ]);
    assert_eq!(
        codes(&validate(&components, None, Some(&catalog))),
        ["missing_required_prop", "unresolved_child"]
    );
}
