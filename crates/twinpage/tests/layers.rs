//! The layering rule of ARCHITECTURE.md ("Layers"), checked on the source:
//! a module may import only from its own layer or the layers below it, so
//! the imports form no cycle; the tree and the pager never name a mode;
//! the engine crate depends only on what an embedded engine needs.
//!
//! The check reads `crate::<module>` paths outside comments. Paths through
//! the crate root's re-exports (`crate::Error`) and grouped root imports
//! (`use crate::{a, b}`) are rejected, because they would hide the layer.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules of the engine, bottom to top. Same number = same layer.
const LAYERS: &[(&str, u32)] = &[
    ("base", 0),
    ("keys", 0),
    ("storage", 1),
    ("node", 2),
    ("page", 3),
    ("btree", 4),
    ("cc", 5),
    ("journal", 6),
    ("pager", 7),
    ("db", 8),
];

/// Modules that must not name a journal mode (`JournalMode::Wal`): the
/// registry describes each mode, and these layers act on what it says.
const MODE_BLIND: &[&str] = &[
    "base", "storage", "node", "page", "btree", "cc", "pager", "db",
];

/// Modules that must not even name the type: they see a `ModeSpec`.
const SPEC_ONLY: &[&str] = &["base", "storage", "node", "page", "btree", "cc", "pager"];

/// Whether `code` names a particular mode (`JournalMode::Upper...`).
fn names_a_mode(code: &str) -> bool {
    code.match_indices("JournalMode::")
        .any(|(i, m)| code[i + m.len()..].starts_with(|c: char| c.is_ascii_uppercase()))
}

/// The engine's allowed normal dependencies.
const ENGINE_DEPS: &[&str] = &["thiserror", "parking_lot", "crc32c", "libc"];

/// Optional dependencies that only a test-only feature turns on (the
/// schedule explorer behind `base::sync`); they must be `optional = true`.
const TEST_ONLY_OPTIONAL: &[&str] = &["shuttle"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("read src dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without `//` comments (doc comments included) and string
/// literals' contents, so prose and messages never count as imports.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut prev = '\0';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_str && c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' && prev != '\'' {
                in_str = !in_str;
            }
            if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// Every `crate::name` in `code`, with its line number.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `twinpage_crate::`
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '{')
                .collect();
            found.push((n + 1, name));
        }
    }
    found
}

/// All violations of the layer rule in the engine's source tree.
fn violations(src: &Path) -> Vec<String> {
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let top = rel
            .components()
            .next()
            .expect("component")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue; // the crate root only declares and re-exports
        }
        let Some(&mine) = layer.get(top.as_str()) else {
            bad.push(format!(
                "{}: module `{top}` has no layer in tests/layers.rs",
                rel.display()
            ));
            continue;
        };
        let code = code_only(&fs::read_to_string(&f).expect("read source"));
        for (line, target) in crate_paths(&code) {
            let at = format!("{}:{line}", rel.display());
            match layer.get(target.as_str()) {
                _ if target == top => {}
                Some(&theirs) if theirs < mine => {}
                Some(&theirs) if theirs == mine => bad.push(format!(
                    "{at}: `{top}` imports `crate::{target}`, a sibling in the same layer"
                )),
                Some(_) => bad.push(format!(
                    "{at}: `{top}` (layer {mine}) imports `crate::{target}` from a layer above"
                )),
                None => bad.push(format!(
                    "{at}: `crate::{target}` is not a module path; import from the defining module"
                )),
            }
        }
        if MODE_BLIND.contains(&top.as_str()) && names_a_mode(&code) {
            bad.push(format!(
                "{}: `{top}` names a journal mode; it must act on the registry's ModeSpec",
                rel.display()
            ));
        }
        if SPEC_ONLY.contains(&top.as_str()) && code.contains("JournalMode") {
            bad.push(format!(
                "{}: `{top}` names JournalMode; it sees modes only as a ModeSpec",
                rel.display()
            ));
        }
    }
    bad
}

#[test]
fn imports_follow_the_layers() {
    let bad = violations(&src_dir());
    assert!(bad.is_empty(), "layer rule violated:\n{}", bad.join("\n"));
}

#[test]
fn the_check_catches_an_upward_import() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node");
    fs::create_dir_all(&node).unwrap();
    fs::write(
        node.join("mod.rs"),
        "//! uses crate::pager in prose only\nuse crate::base::Result;\nuse crate::pager::Pager;\n",
    )
    .unwrap();
    fs::write(dir.path().join("pager.rs"), "use crate::{base, node};\n").unwrap();
    let bad = violations(dir.path());
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(bad[0].contains("node/mod.rs:3") && bad[0].contains("from a layer above"));
    assert!(bad[1].contains("pager.rs:1") && bad[1].contains("not a module path"));
}

#[test]
fn engine_depends_only_on_what_an_embedded_engine_needs() {
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap().trim();
            let optional = line.replace(' ', "").contains("optional=true");
            if TEST_ONLY_OPTIONAL.contains(&name) && optional {
                continue;
            }
            deps.push(name.to_string());
        }
    }
    for d in &deps {
        assert!(
            ENGINE_DEPS.contains(&d.as_str()),
            "engine dependency `{d}` is not in the allowed list {ENGINE_DEPS:?}; \
             tools, SQL and bindings belong in crates of their own"
        );
    }
}
