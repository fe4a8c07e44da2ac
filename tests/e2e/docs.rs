//! The documentation holds together: every link in README.md and docs/
//! that points inside the repository resolves — the file exists, and an
//! `#anchor` names a heading of it (GitHub's slugs) — and every page of
//! docs/ is reached from the README.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository")
}

/// README.md and every Markdown page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let docs = root().join("docs");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&docs)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "md")).collect()
        })
        .unwrap_or_default();
    found.sort();
    pages.extend(found);
    pages
}

/// GitHub's anchor for a heading: lower case, punctuation dropped but for
/// `-` and `_`, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A page's heading anchors (GitHub numbers repeats: `x`, `x-1`, …) and
/// its links.
fn read(page: &Path) -> (BTreeSet<String>, Vec<String>) {
    let text = std::fs::read_to_string(page).expect("a page");
    let (mut anchors, mut links) = (BTreeSet::new(), Vec::new());
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { level, .. }) if level != HeadingLevel::H6 => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let mut anchor = base.clone();
                let mut n = 0;
                while anchors.contains(&anchor) {
                    n += 1;
                    anchor = format!("{base}-{n}");
                }
                anchors.insert(anchor);
            }
            Event::Start(Tag::Link { dest_url, .. }) => links.push(dest_url.to_string()),
            _ => {}
        }
    }
    (anchors, links)
}

#[test]
fn every_link_inside_the_repository_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let (own, links) = read(&page);
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            let anchors = if file.is_empty() { own.clone() } else { read(&target).0 };
            if target.extension().is_some_and(|e| e == "md") && !anchors.contains(anchor) {
                broken.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_docs_is_linked_from_the_readme() {
    let (_, links) = read(&root().join("README.md"));
    let linked: BTreeSet<String> =
        links.iter().filter_map(|l| l.split('#').next()).map(|l| l.trim_start_matches("./").to_string()).collect();
    let missing: Vec<String> = pages()
        .iter()
        .skip(1)
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .filter(|p| !linked.contains(p))
        .collect();
    assert!(missing.is_empty(), "not linked from README.md: {missing:?}");
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug("Trunk, branches, titles, ageing, archive and delete"),
        "trunk-branches-titles-ageing-archive-and-delete"
    );
    assert_eq!(slug("`daemon.hello`"), "daemonhello");
    assert_eq!(slug("The crash loop"), "the-crash-loop");
}

/// JSON with `//` comments to the end of a line (the docs' `jsonc`
/// blocks) as plain JSON.
fn without_comments(jsonc: &str) -> String {
    let mut out = String::new();
    for line in jsonc.lines() {
        let (mut in_string, mut escaped, mut end) = (false, false, line.len());
        for (i, c) in line.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_string => escaped = true,
                '"' => in_string = !in_string,
                '/' if !in_string && line[i..].starts_with("//") => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        out.push_str(&line[..end]);
        out.push('\n');
    }
    out
}

/// The JSON configuration examples of README.md and docs/: every fenced
/// `json` or `jsonc` block whose keys are all top-level configuration keys,
/// with where it is.
fn configuration_examples() -> Vec<(String, serde_json::Value)> {
    const KEYS: [&str; 7] = ["council", "agents", "prompts", "peasant", "lord", "lifecycle", "notify"];
    let mut examples = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let mut block: Option<String> = None;
        for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
            match event {
                Event::Start(Tag::CodeBlock(pulldown_cmark::CodeBlockKind::Fenced(lang)))
                    if matches!(&*lang, "json" | "jsonc") =>
                {
                    block = Some(String::new())
                }
                Event::Text(t) => {
                    if let Some(b) = block.as_mut() {
                        b.push_str(&t)
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    let Some(b) = block.take() else { continue };
                    let Ok(serde_json::Value::Object(o)) =
                        serde_json::from_str::<serde_json::Value>(&without_comments(&b))
                    else {
                        continue;
                    };
                    if !o.is_empty() && o.keys().all(|k| KEYS.contains(&k.as_str())) {
                        examples.push((page.display().to_string(), serde_json::Value::Object(o)));
                    }
                }
                _ => {}
            }
        }
    }
    examples
}

/// Every configuration example of the docs is one kdd takes as it is:
/// `kd config check` accepts it with no warning but that a program it
/// names is not installed here.
#[tokio::test(flavor = "multi_thread")]
async fn every_configuration_example_in_the_docs_is_accepted() {
    let examples = configuration_examples();
    assert!(examples.len() >= 6, "the README and docs/configuration.md show configurations: {examples:?}");
    let kdd = kd_tests::Kdd::start();
    for (page, example) in examples {
        let ws = kd_tests::Workspace::new(&[]);
        ws.write_config(&example);
        let mut cmd = kdd.kd();
        cmd.current_dir(ws.dir.path()).args(["config", "check"]);
        let out = kd_tests::run(cmd).await;
        assert!(out.status.success(), "{page}: {example}\n{}{}", out.stdout, out.stderr);
        let warnings: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("warning: ") && !l.contains("not found") && !l.contains("no kd found"))
            .collect();
        assert!(warnings.is_empty(), "{page}: {example}\n{}", out.stdout);
    }
}

#[test]
fn comments_are_taken_out_of_jsonc_but_not_out_of_strings() {
    let jsonc = "{\"a\": \"http://x\", // the default\n \"b\": \"\\\"//\"}";
    let json: serde_json::Value = serde_json::from_str(&without_comments(jsonc)).expect(jsonc);
    assert_eq!(json, serde_json::json!({"a": "http://x", "b": "\"//"}));
}
