//! Keeps the documentation navigable: every relative Markdown link in `README.md`,
//! `CHANGELOG.md`, `SECURITY.md` and `docs/*.md` must name a file that exists and, when it carries a `#fragment` into a Markdown
//! file, a heading of that file; and the README must stay a front page (at most 250 lines).
//! Links inside fenced code blocks and code spans are not links, and web and mail links are
//! not checked (that would need the network).

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

const README_MAX_LINES: usize = 250;

/// A link found in a Markdown file: its target as written and the line it starts on.
#[derive(Debug, PartialEq)]
struct Link {
    target: String,
    line: usize,
}

/// The Markdown files the check covers: the README, the release files and every page in `docs/`.
fn documentation_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![
        root.join("README.md"),
        root.join("CHANGELOG.md"),
        root.join("SECURITY.md"),
    ];
    let mut pages: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The text with fenced code blocks blanked out (line breaks kept, so line numbers stay right).
fn without_fenced_code(markdown: &str) -> String {
    let mut fence: Option<&str> = None;
    let mut out = String::with_capacity(markdown.len());
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match fence {
            Some(marker) if trimmed.starts_with(marker) => fence = None,
            Some(_) => {}
            None if trimmed.starts_with("```") => fence = Some("```"),
            None if trimmed.starts_with("~~~") => fence = Some("~~~"),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The text with code spans blanked out: a run of backticks opens a span that the next run of
/// the same length closes. Line breaks inside a span are kept.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        match find_backtick_run(&chars, i + run, run) {
            Some(close) => {
                for &c in &chars[i..close + run] {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                }
                i = close + run;
            }
            None => {
                // An unmatched run is literal text.
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// Where the next run of exactly `len` backticks starts, from `from` on.
fn find_backtick_run(chars: &[char], from: usize, len: usize) -> Option<usize> {
    let mut i = from;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|&&c| c == '`').count();
            if run == len {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// Every inline link `[text](target)` (and image `![alt](target)`) outside code. The text may
/// span lines; a target may be followed by a title (`[t](file.md "title")`) or be written in
/// angle brackets.
fn links(markdown: &str) -> Vec<Link> {
    let prose = without_code_spans(&without_fenced_code(markdown));
    let chars: Vec<char> = prose.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\n' => line += 1,
            '[' => {
                if let Some((target, end)) = link_at(&chars, i) {
                    found.push(Link { target, line });
                    line += chars[i..end].iter().filter(|&&c| c == '\n').count();
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// If an inline link starts at the `[` at `open`, its target and the index just past it.
fn link_at(chars: &[char], open: usize) -> Option<(String, usize)> {
    let mut depth = 0usize;
    let mut close = None;
    for (offset, &c) in chars[open..].iter().enumerate() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + offset);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close?;
    if chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let start = close + 2;
    let end = start + chars[start..].iter().position(|&c| c == ')')?;
    let inside: String = chars[start..end].iter().collect();
    let target = inside.split_whitespace().next().unwrap_or("");
    let target = target.trim_start_matches('<').trim_end_matches('>');
    Some((target.to_owned(), end + 1))
}

/// GitHub's anchor for a heading: lowercase, punctuation other than `-` and `_` dropped
/// (backticks included), spaces turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading outside code, with GitHub's `-1`, `-2` suffixes for repeats.
fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in without_fenced_code(markdown).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(match *count {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// What is wrong with one link of `file`, if anything.
fn link_problem(file: &Path, target: &str) -> Option<String> {
    let (path_part, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let linked = if path_part.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().expect("a file has a folder").join(path_part)
    };
    if !linked.exists() {
        return Some(format!("`{target}`: no file {}", linked.display()));
    }
    let fragment = fragment.filter(|f| !f.is_empty())?;
    if linked.extension().is_none_or(|ext| ext != "md") {
        return None;
    }
    let text = fs::read_to_string(&linked).expect("linked Markdown is readable");
    if heading_anchors(&text).contains(fragment) {
        None
    } else {
        Some(format!(
            "`{target}`: no heading `#{fragment}` in {}",
            linked.display()
        ))
    }
}

/// The links of `file` that point inside the repository (not to the web or a mail address).
fn relative_links(file: &Path) -> Vec<Link> {
    let text = fs::read_to_string(file).expect("documentation is readable");
    links(&text)
        .into_iter()
        .filter(|link| {
            let target = link.target.to_ascii_lowercase();
            !(target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:"))
        })
        .collect()
}

/// Every broken relative link of `file`, as `file:line: what is wrong`.
fn broken_links(file: &Path) -> Vec<String> {
    relative_links(file)
        .into_iter()
        .filter_map(|link| {
            link_problem(file, &link.target)
                .map(|problem| format!("{}:{}: {problem}", file.display(), link.line))
        })
        .collect()
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let files = documentation_files();
    assert!(files.len() > 5, "found only {files:?}");
    // A parser that stopped finding links would pass the check below without checking anything.
    let checked: usize = files.iter().map(|file| relative_links(file).len()).sum();
    assert!(checked >= 40, "only {checked} relative links found");
    let broken: Vec<String> = files.iter().flat_map(|file| broken_links(file)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_a_front_page() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let lines = fs::read_to_string(readme)
        .expect("README.md")
        .lines()
        .count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a page in docs/"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Protocol versions"), "protocol-versions");
    assert_eq!(
        slug("One spelling, bounded size"),
        "one-spelling-bounded-size"
    );
    assert_eq!(
        slug("Images: `/agentic_chat_multimodal`"),
        "images-agentic_chat_multimodal"
    );
    assert_eq!(
        slug("The offline model's script"),
        "the-offline-models-script"
    );
    assert_eq!(slug("Deploy and operations"), "deploy-and-operations");
}

#[test]
fn repeated_headings_get_numbered_anchors() {
    let anchors = heading_anchors("# Setup\n## Setup\n### Setup\n");
    assert_eq!(
        anchors.into_iter().collect::<Vec<_>>(),
        ["setup", "setup-1", "setup-2"]
    );
}

#[test]
fn links_in_code_are_not_links_and_text_may_span_lines() {
    let markdown = "See [the\nAPI](api.md#errors), `[x](gone.md)` and ``[y](gone.md)``.\n\
                    ```md\n[z](gone.md)\n# Not a heading\n```\n\
                    ![shot](images/a.png) and [web](https://example.com \"title\")\n";
    assert_eq!(
        links(markdown),
        [
            Link {
                target: "api.md#errors".into(),
                line: 1
            },
            Link {
                target: "images/a.png".into(),
                line: 7
            },
            Link {
                target: "https://example.com".into(),
                line: 7
            },
        ]
    );
    assert!(heading_anchors(markdown).is_empty());
}

#[test]
fn a_missing_file_and_a_missing_heading_are_reported() {
    let dir = std::env::temp_dir().join(format!("docs-links-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temporary folder");
    fs::write(dir.join("page.md"), "# Page\n\n## Known heading\n").expect("page.md");
    let index = dir.join("index.md");
    fs::write(
        &index,
        "# Index\n[ok](page.md#known-heading) [self](#index)\n\
         [gone](missing.md)\n[no such heading](page.md#unknown)\n[self too](#nowhere)\n",
    )
    .expect("index.md");
    let broken = broken_links(&index);
    fs::remove_dir_all(&dir).expect("temporary folder removed");
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(broken[0].contains(":3:") && broken[0].contains("no file"));
    assert!(broken[1].contains(":4:") && broken[1].contains("#unknown"));
    assert!(broken[2].contains(":5:") && broken[2].contains("#nowhere"));
}
