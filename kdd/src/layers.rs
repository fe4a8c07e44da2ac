//! The layering of ARCHITECTURE.md, checked on the source: a module
//! imports only the layers below it, and the registry's engines import
//! only its interface, never each other.

use std::path::{Path, PathBuf};

/// kdd's top-level modules by layer, highest first: a module may use
/// those after it, not those before.
const LAYERS: &[&[&str]] = &[
    &["server", "web"],
    &["rpc"],
    &["state"],
    &["resume", "cluster", "summary"],
    &["work"],
    &["coord"],
    &["council"],
    &["lifecycle"],
    &["agent"],
    &["prompt"],
    &["approvals"],
    &["git", "config", "identity"],
    &["db"],
    &["hub"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source directory").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments and its test modules (tests
/// may reach anywhere).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read a source file");
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The crate-level modules a file's code names (`crate::NAME`, and each
/// NAME of `crate::{NAME::…, NAME}`).
fn named(code: &str) -> Vec<String> {
    let ident =
        |text: &str| -> String { text.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            names.push(ident(rest));
            continue;
        };
        // The top-level names of the group: after `{` and after each `,` at depth 0.
        let mut depth = 0;
        let mut start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => start = true,
                c if start && !c.is_whitespace() => {
                    names.push(ident(&group[i..]));
                    start = false;
                }
                _ => {}
            }
        }
    }
    names
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).expect("under src");
        let top = relative.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or_default();
        let Some(own) = rank(top.trim_end_matches(".rs")) else { continue };
        for other in named(&code(file)) {
            if let Some(theirs) = rank(&other)
                && theirs < own
            {
                wrong.push(format!("{} uses crate::{other}", relative.display()));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "imports up the layers:\n{}", wrong.join("\n"));
}

#[test]
fn the_engines_import_only_the_interface() {
    let db = root().join("db");
    for (engine, other) in [("sqlite", "pg"), ("pg", "sqlite")] {
        let dir = db.join(engine);
        if !dir.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        sources(&dir, &mut files);
        for file in files {
            let code = code(&file);
            assert!(
                !code.contains(&format!("db::{other}")) && !code.contains(&format!("super::{other}")),
                "{} imports the {other} engine",
                file.display()
            );
        }
    }
}

#[test]
fn the_rule_reads_what_a_file_names() {
    assert_eq!(named("use crate::db::Db;\nlet x = crate::hub::Hub::new();"), ["db", "hub"]);
    assert_eq!(named("use crate::{db::{Db, Page}, hub::Hub,\n    state};"), ["db", "hub", "state"]);
    assert_eq!(rank("server"), Some(0));
    assert!(rank("db") < rank("hub"));
    assert_eq!(rank("log"), None);
}
