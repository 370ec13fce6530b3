//! The release artefacts stay in step with the crate: both licence files its `license` field
//! names, a changelog in Keep a Changelog form, a security policy that says how to report, and
//! an image whose OCI version label is the crate's version.

use std::fs;
use std::path::Path;

fn read(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn both_licences_the_manifest_names_are_in_the_repository() {
    assert_eq!(env!("CARGO_PKG_LICENSE"), "MIT OR Apache-2.0");
    assert!(read("LICENSE-MIT").starts_with("MIT License"));
    assert!(read("LICENSE-APACHE").contains("Apache License\n                        Version 2.0"));
}

#[test]
fn the_image_labels_carry_the_crate_version_and_licence() {
    let dockerfile = read("Dockerfile");
    let label = |key: &str| {
        let needle = format!("{key}=\"");
        let start = dockerfile
            .find(&needle)
            .unwrap_or_else(|| panic!("the Dockerfile has no {key} label"))
            + needle.len();
        let end = start + dockerfile[start..].find('"').expect("a closing quote");
        dockerfile[start..end].to_owned()
    };
    assert_eq!(
        label("org.opencontainers.image.version"),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        label("org.opencontainers.image.licenses"),
        env!("CARGO_PKG_LICENSE")
    );
    assert_eq!(
        label("org.opencontainers.image.title"),
        env!("CARGO_PKG_NAME")
    );
    assert_eq!(
        label("org.opencontainers.image.description"),
        env!("CARGO_PKG_DESCRIPTION")
    );
}

#[test]
fn the_changelog_keeps_an_unreleased_section_above_the_releases() {
    let changelog = read("CHANGELOG.md");
    assert!(changelog.starts_with("# Changelog\n"));
    assert!(changelog.contains("keepachangelog.com"));
    let headings: Vec<&str> = changelog
        .lines()
        .filter(|line| line.starts_with("## "))
        .collect();
    assert_eq!(headings.first(), Some(&"## [Unreleased]"), "{headings:?}");
    for release in &headings[1..] {
        // `## [1.2.3] - 2027-01-31`
        let (version, date) = release[3..]
            .split_once(" - ")
            .unwrap_or_else(|| panic!("`{release}` is not `## [X.Y.Z] - YYYY-MM-DD`"));
        assert!(
            version.starts_with('[') && version.ends_with(']'),
            "{release}"
        );
        assert_eq!(date.len(), 10, "{release}");
    }
    // Only Keep a Changelog's kinds of change.
    for kind in changelog
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
    {
        assert!(
            [
                "Added",
                "Changed",
                "Deprecated",
                "Removed",
                "Fixed",
                "Security"
            ]
            .contains(&kind),
            "`### {kind}` is not a Keep a Changelog section"
        );
    }
}

#[test]
fn the_security_policy_says_how_to_report_and_links_the_threat_model() {
    let policy = read("SECURITY.md");
    assert!(policy.contains("## Reporting a vulnerability"));
    assert!(policy.contains("(docs/security.md)"));
}
