//! Holds the layout `docs/architecture.md` describes: the dependency rule between the
//! library's top-level modules, no two files of one module importing each other, and no source
//! file over 800 lines. Test code (`tests.rs`, `*_tests.rs`, `#[cfg(test)]` items) is free to
//! reach anywhere and is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Which top-level modules each module may name with `crate::`. `text`, `clock` and `retry` are
/// leaves any module may use, and any module may use `telemetry` for spans; `settings` may name the
/// domain's own configuration types, which it deserializes; `app` wires everything.
const ALLOWED: &[(&str, &[&str])] = &[
    ("protocol", &[]),
    ("state", &[]),
    ("text", &[]),
    ("clock", &[]),
    ("retry", &[]),
    ("telemetry", &["settings"]),
    ("llm", &["settings"]),
    ("tools", &["protocol", "settings"]),
    ("threads", &["protocol", "state"]),
    ("runs", &["protocol"]),
    ("agent", &["protocol", "llm", "state", "tools"]),
    ("session", &["agent", "protocol", "runs", "threads"]),
    ("metrics", &["agent", "protocol", "session"]),
    (
        "http",
        &[
            "agent", "metrics", "protocol", "runs", "session", "settings", "threads",
        ],
    ),
    ("settings", &["agent", "protocol", "session", "threads"]),
    ("app", &["*"]),
];

/// Modules every module may use.
const EVERYONE_MAY_USE: &[&str] = &["text", "clock", "retry", "telemetry"];

const MAX_LINES: usize = 800;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every library source file (the binary's `main.rs` and `cli/` aside).
fn library_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&src(), &mut files);
    files.retain(|path| {
        let relative = path.strip_prefix(src()).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        first != "main.rs" && first != "cli"
    });
    files.sort();
    files
}

/// Test code: `tests.rs`, `*_tests.rs`, a `tests/` directory, or a file its parent declares
/// only under `#[cfg(test)]`.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|part| part.as_os_str() == "tests")
        || declared_for_tests_only(path)
}

/// Whether the file's module is declared as `#[cfg(test)] mod <name>;` by its parent.
fn declared_for_tests_only(path: &Path) -> bool {
    let stem = path.file_stem().unwrap().to_string_lossy().to_string();
    let dir = path.parent().unwrap();
    let parents = [
        dir.join("mod.rs"),
        dir.with_extension("rs"),
        dir.join("lib.rs"),
    ];
    parents.iter().any(|parent| {
        let Ok(text) = fs::read_to_string(parent) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines
            .windows(2)
            .any(|pair| pair[0] == "#[cfg(test)]" && pair[1] == format!("mod {stem};"))
    })
}

/// The file's code lines without comments and without `#[cfg(test)]` items.
fn code_lines(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).expect("readable source");
    let mut lines = Vec::new();
    let mut all = text.lines();
    while let Some(line) = all.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            // The item it guards: one line, or a block up to its closing brace.
            let Some(item) = all.next() else { break };
            if item.trim_end().ends_with('{') {
                let indent = item.len() - item.trim_start().len();
                for rest in all.by_ref() {
                    let rest_indent = rest.len() - rest.trim_start().len();
                    if rest.trim() == "}" && rest_indent == indent {
                        break;
                    }
                }
            }
            continue;
        }
        let code = match line.find(" //") {
            Some(comment) if !line[..comment].contains('"') => &line[..comment],
            _ => line,
        };
        lines.push(code.to_owned());
    }
    lines
}

/// The top-level module a file belongs to (`src/http/run.rs` and `src/http.rs`: `http`).
fn top_module(path: &Path) -> String {
    let relative = path.strip_prefix(src()).unwrap();
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The top-level modules `line` names with `crate::`, including `crate::{a, b}`.
fn crate_paths(line: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `agui_host_crate::` or the like
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

#[test]
fn modules_use_only_what_the_dependency_rule_allows() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut broken = BTreeSet::new();
    for path in library_files().into_iter().filter(|p| !is_test_file(p)) {
        let module = top_module(&path);
        if module == "lib" {
            continue;
        }
        let may = allowed
            .get(module.as_str())
            .unwrap_or_else(|| panic!("module `{module}` is missing from the rule"));
        for line in code_lines(&path) {
            for used in crate_paths(&line) {
                let ok = used == module
                    || may.contains(&"*")
                    || may.contains(&used.as_str())
                    || EVERYONE_MAY_USE.contains(&used.as_str());
                if !ok {
                    let file = path.strip_prefix(src()).unwrap().display().to_string();
                    broken.insert(format!("{module} -> {used} ({file})"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "uses the dependency rule (docs/architecture.md) does not allow:\n{}",
        broken.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn no_two_files_of_one_module_import_each_other() {
    // For each file, the sibling files (same directory, not its parent or children) it names.
    let files: Vec<PathBuf> = library_files()
        .into_iter()
        .filter(|p| !is_test_file(p))
        .collect();
    let mut uses: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for path in &files {
        let dir = path.parent().unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        if stem == "mod" || stem == "lib" {
            continue; // a parent, not a sibling of its own children
        }
        let siblings: BTreeMap<String, PathBuf> = files
            .iter()
            .filter(|other| other.parent() == Some(dir) && *other != path)
            .filter_map(|other| {
                let name = other.file_stem()?.to_string_lossy().to_string();
                (name != "mod" && name != "lib").then(|| (name, other.clone()))
            })
            .collect();
        for line in code_lines(path) {
            let named = super_names(&line);
            for (name, sibling) in &siblings {
                if named.contains(name) {
                    uses.entry(path.clone())
                        .or_default()
                        .insert(sibling.clone());
                }
            }
        }
    }
    let mut cycles = BTreeSet::new();
    for (file, used) in &uses {
        for other in used {
            if uses.get(other).is_some_and(|back| back.contains(file)) {
                let mut pair = [file.clone(), other.clone()];
                pair.sort();
                cycles.insert(format!(
                    "{} <-> {}",
                    pair[0].strip_prefix(src()).unwrap().display(),
                    pair[1].strip_prefix(src()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "files importing each other:\n{cycles:#?}"
    );
}

/// The modules a line names under `super::`: `super::a::X`, `super::a;`, and each item of
/// `super::{a, b::X, c}`.
fn super_names(line: &str) -> BTreeSet<String> {
    let ident = |text: &str| -> String {
        text.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = BTreeSet::new();
    let mut rest = line;
    while let Some(at) = rest.find("super::") {
        rest = &rest[at + "super::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            names.extend(group[..end].split(',').map(ident));
        } else {
            names.insert(ident(rest));
        }
    }
    names.retain(|name| !name.is_empty());
    names
}

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<String> = library_files()
        .into_iter()
        .filter(|path| !is_test_file(path))
        .filter_map(|path| {
            let lines = fs::read_to_string(&path).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines})", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}

#[test]
fn the_rule_sees_a_use_it_does_not_allow() {
    assert_eq!(crate_paths("use crate::settings::Settings;"), ["settings"]);
    assert_eq!(
        crate_paths("use crate::{agent::Agent, protocol};"),
        ["agent", "protocol"]
    );
    assert_eq!(
        crate_paths("let x = agui_host_crate::y;"),
        Vec::<String>::new()
    );
}
