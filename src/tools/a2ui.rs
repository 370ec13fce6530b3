//! A2UI v0.9 surfaces: the operations envelope a tool result carries
//! (`{"a2ui_operations": [createSurface, updateComponents, updateDataModel]}`), the catalog a
//! client registered (sent as a `context` entry), the check of a component tree against it,
//! and the `a2ui` tool kind, whose fixed components are filled with the call's arguments.
//!
//! A client's A2UI middleware (CopilotKit's runtime applies one) finds the envelope in a
//! `TOOL_CALL_RESULT` and paints the surface as an `a2ui-surface` activity; this module only
//! builds and checks what the server sends. Components come from configuration or from a model
//! (the `generate_a2ui` tool of the chat agent): the check runs on untrusted trees, so it is
//! iterative and bounded, and its findings are data a model can be asked to fix.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};
use crate::protocol::Context;

/// The key of a tool result that carries A2UI operations.
pub const OPERATIONS_KEY: &str = "a2ui_operations";
/// The A2UI version of every operation sent.
pub const VERSION: &str = "v0.9";
/// The catalog a surface names when neither the configuration nor the client names one.
pub const BASIC_CATALOG_ID: &str = "https://a2ui.org/specification/v0_9/basic_catalog.json";
/// The `description` of the `context` entry in which a client's A2UI middleware sends the
/// catalog it registered (`{"catalogId", "components"}` as JSON text).
pub const SCHEMA_CONTEXT_DESCRIPTION: &str = "A2UI Component Schema — available components for generating UI surfaces. Use these component names and properties when creating A2UI operations.";
/// The most components a surface may have: past this, a model's tree is refused unread.
pub const MAX_COMPONENTS: usize = 500;

/// The component catalog a client registered.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// The catalog's id, which a surface's `createSurface` must name for the client to find it.
    pub id: Option<String>,
    /// Component name → its JSON Schema (`required`, and `properties` whose `format` is
    /// `componentRef` / `componentRefList` name children).
    pub components: BTreeMap<String, Value>,
    /// The catalog as the client sent it, for a model's prompt.
    pub text: String,
}

impl Catalog {
    /// The catalog in a run's `context`, if the client sent one that parses: the v0.9 inline
    /// form (`components` keyed by name) or the older list of `{name, props}`.
    pub fn from_context(context: &[Context]) -> Option<Catalog> {
        let entry = context
            .iter()
            .find(|entry| entry.description == SCHEMA_CONTEXT_DESCRIPTION)?;
        let parsed: Value = serde_json::from_str(&entry.value).ok()?;
        let (id, listed) = match &parsed {
            Value::Object(object) => (
                object
                    .get("catalogId")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned),
                object.get("components")?,
            ),
            Value::Array(_) => (None, &parsed),
            _ => return None,
        };
        let components = match listed {
            Value::Object(by_name) => by_name
                .iter()
                .map(|(name, schema)| (name.clone(), flattened(schema)))
                .collect(),
            Value::Array(list) => list
                .iter()
                .filter_map(|item| {
                    let name = item.get("name")?.as_str()?;
                    let props = item.get("props").cloned().unwrap_or_else(|| json!({}));
                    Some((name.to_owned(), props))
                })
                .collect(),
            _ => return None,
        };
        Some(Catalog {
            id,
            components,
            text: entry.value.clone(),
        })
    }
}

/// A component's schema with the `required` names and `properties` of its `allOf` parts (as
/// CopilotKit's catalogs wrap them) gathered at the top, where the check reads them. Parts are
/// followed a few levels deep: a catalog is untrusted input.
fn flattened(schema: &Value) -> Value {
    const MAX_DEPTH: usize = 4;
    let mut required: Vec<Value> = Vec::new();
    let mut properties = Map::new();
    let mut pending = vec![(schema, 0)];
    while let Some((part, depth)) = pending.pop() {
        for name in part
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !required.contains(name) {
                required.push(name.clone());
            }
        }
        for (name, property) in part
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            properties
                .entry(name.clone())
                .or_insert_with(|| property.clone());
        }
        if depth < MAX_DEPTH {
            let parts = part.get("allOf").and_then(Value::as_array);
            pending.extend(parts.into_iter().flatten().map(|p| (p, depth + 1)));
        }
    }
    json!({"required": required, "properties": properties})
}

/// One thing wrong with a component tree, in the form a model can be asked to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub code: &'static str,
    pub path: String,
    pub message: String,
}

impl Problem {
    fn new(code: &'static str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            code,
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Checks a flat A2UI component array: ids present and unique, a `root`, a type on each, every
/// child reference naming a component, no reference cycles; with a catalog, each type in it
/// and its required properties present; with `data`, each absolute binding path (`{"path":
/// "/a/b"}`) found in it. Relative paths resolve per item of a repeated template and are left
/// alone. An empty list means the tree is valid.
pub fn validate(
    components: &Value,
    data: Option<&Value>,
    catalog: Option<&Catalog>,
) -> Vec<Problem> {
    let list = match components.as_array() {
        Some(list) if !list.is_empty() => list,
        _ => {
            return vec![Problem::new(
                "empty_components",
                "components",
                "A2UI components must be a non-empty array",
            )]
        }
    };
    if list.len() > MAX_COMPONENTS {
        return vec![Problem::new(
            "too_many_components",
            "components",
            format!("A surface may have at most {MAX_COMPONENTS} components"),
        )];
    }
    let mut problems = Vec::new();
    let mut ids: HashSet<&str> = HashSet::new();
    for component in list {
        if let Some(id) = component.get("id").and_then(Value::as_str) {
            if !ids.insert(id) {
                problems.push(Problem::new(
                    "duplicate_id",
                    format!("components[id={id}]"),
                    format!("Duplicate component id '{id}'"),
                ));
            }
        }
    }
    let mut edges: Vec<(&str, Vec<String>)> = Vec::new();
    for (at, component) in list.iter().enumerate() {
        let id = component
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let kind = component
            .get("component")
            .and_then(Value::as_str)
            .filter(|kind| !kind.is_empty());
        if id.is_none() {
            problems.push(Problem::new(
                "missing_id",
                format!("components[{at}].id"),
                format!("Component at index {at} is missing a string 'id'"),
            ));
        }
        if kind.is_none() {
            problems.push(Problem::new(
                "missing_component_type",
                format!("components[{at}].component"),
                format!("Component at index {at} is missing a string 'component' type"),
            ));
        }
        let schema = match (catalog, kind) {
            (Some(catalog), Some(kind)) => match catalog.components.get(kind) {
                None => {
                    problems.push(Problem::new(
                        "unknown_component",
                        format!("components[{at}].component"),
                        format!("Component type '{kind}' is not in the catalog"),
                    ));
                    None
                }
                Some(schema) => {
                    let required = schema.get("required").and_then(Value::as_array);
                    for name in required.into_iter().flatten().filter_map(Value::as_str) {
                        if component.get(name).is_none() {
                            problems.push(Problem::new(
                                "missing_required_prop",
                                format!("components[{at}].{name}"),
                                format!(
                                    "Component '{kind}' (index {at}) is missing required prop '{name}'"
                                ),
                            ));
                        }
                    }
                    Some(schema)
                }
            },
            _ => None,
        };
        let references = child_references(component, schema);
        for (path, reference) in &references {
            if !ids.contains(reference.as_str()) {
                problems.push(Problem::new(
                    "unresolved_child",
                    format!("components[{at}].{path}"),
                    format!("Child reference '{reference}' does not match any component id"),
                ));
            }
        }
        if let Some(data) = data {
            let mut paths = Vec::new();
            absolute_binding_paths(component, &mut paths);
            for path in paths {
                if !resolves(path, data) {
                    problems.push(Problem::new(
                        "unresolved_binding",
                        format!("components[{at}]"),
                        format!("Binding path '{path}' does not resolve in the data model"),
                    ));
                }
            }
        }
        if let Some(id) = id {
            edges.push((id, references.into_iter().map(|(_, r)| r).collect()));
        }
    }
    for cycle in cycles(&edges) {
        let chain = cycle.join(" -> ");
        problems.push(Problem::new(
            "child_cycle",
            format!("components[id={}]", cycle[0]),
            format!("Child reference cycle detected: {chain} -> {}", cycle[0]),
        ));
    }
    if !ids.contains("root") {
        problems.push(Problem::new(
            "no_root",
            "components",
            "No component has id 'root'",
        ));
    }
    problems
}

/// The component ids a component names as children, each with where it names it: `child` and
/// `children` always; with the component's schema, properties marked `"format":
/// "componentRef"` or `"componentRefList"`, also inside the objects of an array property. An
/// unmarked property is data: a bare string could be either.
fn child_references(component: &Value, schema: Option<&Value>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    single(&mut found, "child".into(), component.get("child"));
    list(&mut found, "children", component.get("children"));
    let properties = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    for (field, property) in properties.into_iter().flatten() {
        if field == "child" || field == "children" {
            continue;
        }
        match property.get("format").and_then(Value::as_str) {
            Some("componentRef") => single(&mut found, field.clone(), component.get(field)),
            Some("componentRefList") => list(&mut found, field, component.get(field)),
            _ => {
                let item_properties = property
                    .get("items")
                    .and_then(|items| items.get("properties"))
                    .and_then(Value::as_object);
                let (Some(item_properties), Some(items)) = (
                    item_properties,
                    component.get(field).and_then(Value::as_array),
                ) else {
                    continue;
                };
                for (k, item) in items.iter().enumerate() {
                    for (sub, sub_schema) in item_properties {
                        let path = format!("{field}[{k}].{sub}");
                        match sub_schema.get("format").and_then(Value::as_str) {
                            Some("componentRef") => single(&mut found, path, item.get(sub)),
                            Some("componentRefList") => list(&mut found, &path, item.get(sub)),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    found
}

/// A reference: an id, or a repeated template's `{componentId, path}`.
fn reference(value: &Value) -> Option<&str> {
    value
        .as_str()
        .or_else(|| value.get("componentId").and_then(Value::as_str))
}

fn single(found: &mut Vec<(String, String)>, path: String, value: Option<&Value>) {
    if let Some(id) = value.and_then(reference) {
        found.push((path, id.to_owned()));
    }
}

fn list(found: &mut Vec<(String, String)>, field: &str, value: Option<&Value>) {
    match value {
        Some(Value::Array(items)) => {
            for (k, item) in items.iter().enumerate() {
                single(found, format!("{field}[{k}]"), Some(item));
            }
        }
        other => single(found, field.to_owned(), other),
    }
}

/// Every `path` value starting with `/` in a component: the bindings of its properties, and
/// the array a repeated template's `{componentId, path}` runs over.
fn absolute_binding_paths<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(object) => {
                for (key, inner) in object {
                    match inner.as_str() {
                        Some(path) if key == "path" && path.starts_with('/') => out.push(path),
                        _ => pending.push(inner),
                    }
                }
            }
            _ => {}
        }
    }
}

fn resolves(path: &str, data: &Value) -> bool {
    let mut cursor = data;
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        cursor = match cursor {
            Value::Object(object) => match object.get(segment) {
                Some(next) => next,
                None => return false,
            },
            Value::Array(items) => match segment.parse::<usize>().ok().and_then(|i| items.get(i)) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    true
}

/// The child-reference cycles, each once, rotated so that its smallest id leads. Depth-first
/// with an explicit stack: a model's tree may be a chain as long as the component limit.
fn cycles(edges: &[(&str, Vec<String>)]) -> Vec<Vec<String>> {
    // A duplicated id (reported on its own) keeps the references of each of its components.
    let mut adjacency: HashMap<&str, Vec<&str>> = HashMap::new();
    for (id, references) in edges {
        adjacency
            .entry(id)
            .or_default()
            .extend(references.iter().map(String::as_str));
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    let mut marks: HashMap<&str, Mark> = HashMap::new();
    let mut found: Vec<Vec<String>> = Vec::new();
    for (root, _) in edges {
        if marks.contains_key(root) {
            continue;
        }
        let mut frames: Vec<(&str, usize)> = vec![(root, 0)];
        let mut path: Vec<&str> = vec![root];
        marks.insert(root, Mark::OnPath);
        while let Some((node, next)) = frames.last_mut() {
            let neighbours = adjacency.get(node).map(Vec::as_slice).unwrap_or(&[]);
            let Some(&neighbour) = neighbours.get(*next) else {
                marks.insert(node, Mark::Done);
                frames.pop();
                path.pop();
                continue;
            };
            *next += 1;
            match marks.get(neighbour) {
                None if adjacency.contains_key(neighbour) => {
                    marks.insert(neighbour, Mark::OnPath);
                    path.push(neighbour);
                    frames.push((neighbour, 0));
                }
                Some(Mark::OnPath) => {
                    let start = path.iter().position(|n| *n == neighbour).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        path[start..].iter().map(|n| (*n).to_owned()).collect();
                    let smallest = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap_or(0);
                    cycle.rotate_left(smallest);
                    if !found.contains(&cycle) {
                        found.push(cycle);
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// The operations that paint a surface: `createSurface` when `catalog_id` is given (a new
/// surface; an existing one is updated in place without it), the components, and the data
/// model at `/` when there is one. Never `createSurface` alone: an empty surface makes the
/// renderer look for a root that is not there yet.
pub fn operations(
    surface_id: &str,
    catalog_id: Option<&str>,
    components: Value,
    data: Option<Value>,
) -> Value {
    // Built by hand: `json!` would copy the components and the data, which can be large.
    let operation = |name: &str, mut body: Map<String, Value>| {
        body.insert("surfaceId".into(), Value::String(surface_id.to_owned()));
        let mut operation = Map::new();
        operation.insert("version".into(), Value::String(VERSION.to_owned()));
        operation.insert(name.to_owned(), Value::Object(body));
        Value::Object(operation)
    };
    let mut operations = Vec::with_capacity(3);
    if let Some(catalog_id) = catalog_id {
        let body = Map::from_iter([("catalogId".to_owned(), json!(catalog_id))]);
        operations.push(operation("createSurface", body));
    }
    let body = Map::from_iter([("components".to_owned(), components)]);
    operations.push(operation("updateComponents", body));
    if let Some(data) = data.filter(|d| d.as_object().is_some_and(|o| !o.is_empty())) {
        let body = Map::from_iter([("path".to_owned(), json!("/")), ("value".to_owned(), data)]);
        operations.push(operation("updateDataModel", body));
    }
    Value::Object(Map::from_iter([(
        OPERATIONS_KEY.to_owned(),
        Value::Array(operations),
    )]))
}

/// A surface an earlier result painted, as the last envelope that named it left it.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorSurface {
    pub catalog_id: Option<String>,
    pub components: Value,
    pub data: Option<Value>,
}

/// Finds `surface_id` in tool results (oldest first), folding each envelope's operations for
/// it: a later `updateComponents` or data model replaces an earlier one.
pub fn prior_surface<'a>(
    results: impl IntoIterator<Item = &'a str>,
    surface_id: &str,
) -> Option<PriorSurface> {
    let mut prior: Option<PriorSurface> = None;
    for text in results {
        if !text.contains(OPERATIONS_KEY) {
            continue;
        }
        let Ok(parsed) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let Some(ops) = parsed.get(OPERATIONS_KEY).and_then(Value::as_array) else {
            continue;
        };
        for op in ops {
            let named = |key: &str| {
                op.get(key).filter(|body| {
                    body.get("surfaceId").and_then(Value::as_str) == Some(surface_id)
                })
            };
            if let Some(create) = named("createSurface") {
                prior = Some(PriorSurface {
                    catalog_id: create
                        .get("catalogId")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    components: json!([]),
                    data: None,
                });
            }
            if let Some(update) = named("updateComponents") {
                let entry = prior.get_or_insert_with(|| PriorSurface {
                    catalog_id: None,
                    components: json!([]),
                    data: None,
                });
                entry.components = update.get("components").cloned().unwrap_or(json!([]));
            }
            if let Some(update) = named("updateDataModel") {
                if let Some(entry) = prior.as_mut() {
                    entry.data = update.get("value").cloned();
                }
            }
        }
    }
    prior
}

/// The `a2ui` tool kind: a surface whose components are fixed in the configuration and whose
/// data model is the call's arguments, as a search tool shows its results as cards.
#[derive(Debug, Clone)]
pub struct FixedSurfaceTool {
    definition: ToolDefinition,
    surface_id: String,
    catalog_id: String,
    components: Value,
}

impl FixedSurfaceTool {
    /// # Errors
    /// The components are not a valid tree (checked without a catalog: the client's is not
    /// known before a run).
    pub fn new(
        name: &str,
        description: &str,
        parameters: Value,
        surface_id: &str,
        catalog_id: Option<&str>,
        components: Value,
    ) -> Result<Self, String> {
        if surface_id.is_empty() {
            return Err("`surface_id` must not be empty".into());
        }
        let problems = validate(&components, None, None);
        if let Some(first) = problems.first() {
            return Err(format!(
                "the components are not a valid A2UI tree: {} ({})",
                first.message, first.path
            ));
        }
        Ok(FixedSurfaceTool {
            definition: ToolDefinition::new(name, description, parameters),
            surface_id: surface_id.to_owned(),
            catalog_id: catalog_id
                .filter(|id| !id.is_empty())
                .unwrap_or(BASIC_CATALOG_ID)
                .to_owned(),
            components,
        })
    }
}

impl Tool for FixedSurfaceTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        _context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let data = match arguments {
            Value::Object(object) => Value::Object(object),
            _ => Value::Object(Map::new()),
        };
        let envelope = operations(
            &self.surface_id,
            Some(&self.catalog_id),
            self.components.clone(),
            Some(data),
        );
        futures_util::future::ready(Ok(ToolOutput {
            content: envelope,
            state: None,
            activity: None,
        }))
        .boxed()
    }
}

#[cfg(test)]
mod tests;
