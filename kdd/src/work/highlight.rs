//! A member's patch as a page draws it (`work.diff` with `highlight`, for
//! kd web): parsed file by file into hunks and numbered lines, each line
//! cut into tokens classed by syntect's Sublime grammars (its default
//! syntaxes, pure-Rust regexes, no themes: a [`TokenClass`] per grammar
//! scope, the page styles them). The page gets text and classes, never
//! HTML.
//!
//! The grammars are loaded on the first highlight only (kdd idles
//! without them). Bounded: a line longer than [`MAX_LINE`] and whatever
//! is left once [`BUDGET`] has passed are plain text; the caller runs it
//! off the async threads.

use std::path::Path;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use kd_proto::work::{DiffFile, DiffHunk, DiffLine, LineKind, Token, TokenClass};
use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxReference, SyntaxSet};

use super::hunks;

/// Longest line highlighted, in bytes (a longer one is plain text).
pub const MAX_LINE: usize = 2000;

/// Most time spent highlighting one patch: what is left after is plain.
pub const BUDGET: Duration = Duration::from_secs(2);

static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// Grammar scopes to classes, most specific first: a token takes the class
/// of its innermost scope that one of these is a prefix of.
static CLASSES: LazyLock<Vec<(Scope, TokenClass)>> = LazyLock::new(|| {
    use TokenClass::*;
    [
        ("comment", Comment),
        ("string", String),
        ("constant.numeric", Number),
        ("constant", Constant),
        ("support.constant", Constant),
        ("variable.language", Constant),
        ("keyword.operator", Operator),
        ("keyword", Keyword),
        ("storage", Keyword),
        ("entity.name.function", Function),
        ("support.function", Function),
        ("variable.function", Function),
        ("entity.name.tag", Tag),
        ("entity.other.attribute-name", Attribute),
        ("entity.name", Type),
        ("support.type", Type),
        ("support.class", Type),
        ("entity.other.inherited-class", Type),
        ("variable.parameter", Variable),
        ("markup.heading", Heading),
        ("markup.inserted", Inserted),
        ("markup.deleted", Deleted),
    ]
    .into_iter()
    .filter_map(|(s, c)| Scope::new(s).ok().map(|s| (s, c)))
    .collect()
});

/// The class of text under `stack`.
fn class_of(stack: &ScopeStack) -> Option<TokenClass> {
    stack
        .as_slice()
        .iter()
        .rev()
        .find_map(|scope| CLASSES.iter().find(|(prefix, _)| prefix.is_prefix_of(*scope)).map(|(_, c)| *c))
}

/// One side of a file (old or new) as the grammar reads it, line by line.
struct Side {
    state: ParseState,
    stack: ScopeStack,
    /// The grammar failed: the rest of this side is plain.
    broken: bool,
}

impl Side {
    fn new(syntax: &SyntaxReference) -> Side {
        Side { state: ParseState::new(syntax), stack: ScopeStack::new(), broken: false }
    }

    /// `line`'s tokens, the grammar's state carried to the next line.
    fn tokens(&mut self, line: &str, plain: bool) -> Vec<Token> {
        if plain || self.broken || line.len() > MAX_LINE {
            return plain_tokens(line);
        }
        let with_newline = format!("{line}\n");
        let Ok(ops) = self.state.parse_line(&with_newline, &SYNTAXES) else {
            self.broken = true;
            return plain_tokens(line);
        };
        let mut out: Vec<Token> = Vec::new();
        let mut at = 0;
        for (i, op) in ops {
            let i = i.min(line.len());
            if i > at {
                push(&mut out, &line[at..i], class_of(&self.stack));
                at = i;
            }
            if self.stack.apply(&op).is_err() {
                self.broken = true;
                return plain_tokens(line);
            }
        }
        if at < line.len() {
            push(&mut out, &line[at..], class_of(&self.stack));
        }
        out
    }
}

fn plain_tokens(line: &str) -> Vec<Token> {
    if line.is_empty() { Vec::new() } else { vec![Token { text: line.to_string(), class: None }] }
}

/// Appends a token, joined to the last one when their classes are the same.
fn push(out: &mut Vec<Token>, text: &str, class: Option<TokenClass>) {
    match out.last_mut() {
        Some(last) if last.class == class => last.text.push_str(text),
        _ => out.push(Token { text: text.to_string(), class }),
    }
}

/// The grammar for `path`: by its extension, its name (`Makefile`), else its
/// first line (`#!/bin/sh`); plain text otherwise.
fn syntax_for(path: &str, first_line: Option<&str>) -> &'static SyntaxReference {
    let p = Path::new(path);
    let by =
        |s: Option<&std::ffi::OsStr>| s.and_then(|s| s.to_str()).and_then(|s| SYNTAXES.find_syntax_by_extension(s));
    by(p.extension())
        .or_else(|| by(p.file_name()))
        .or_else(|| first_line.and_then(|l| SYNTAXES.find_syntax_by_first_line(l)))
        .unwrap_or_else(|| SYNTAXES.find_syntax_plain_text())
}

/// The patch (`git diff`, many files), each file parsed and highlighted;
/// after `deadline`, plain text.
pub fn files(patch: &str, deadline: Instant) -> Vec<DiffFile> {
    split(patch).into_iter().map(|(path, text)| file(path, text, deadline)).collect()
}

/// The patch cut at each `diff --git`, with each file's path: the new one
/// (`+++ b/…`), else the old one (`--- a/…`, a deleted file), else the
/// header's.
fn split(patch: &str) -> Vec<(String, &str)> {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in patch.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            starts.push(at);
        }
        at += line.len();
    }
    starts.push(patch.len());
    starts
        .windows(2)
        .map(|w| {
            let text = &patch[w[0]..w[1]];
            let mut path =
                text.lines().next().and_then(|l| l.rsplit_once(" b/")).map(|(_, p)| p.to_string()).unwrap_or_default();
            for l in text.lines().take_while(|l| !l.starts_with("@@")) {
                if let Some(p) = l.strip_prefix("+++ b/") {
                    path = p.to_string();
                } else if let Some(p) = l.strip_prefix("--- a/")
                    && text.contains("\n+++ /dev/null")
                {
                    path = p.to_string();
                }
            }
            (path, text)
        })
        .collect()
}

fn file(path: String, text: &str, deadline: Instant) -> DiffFile {
    let parsed = hunks::parse(text);
    // A file that begins in the diff: its first line names its grammar
    // when its name does not.
    let first = parsed
        .hunks
        .first()
        .filter(|h| h.new_start <= 1)
        .and_then(|h| h.lines.iter().find(|l| !l.starts_with('-')))
        .map(|l| l.get(1..).unwrap_or_default());
    let syntax = syntax_for(&path, first);
    let mut old = Side::new(syntax);
    let mut new = Side::new(syntax);
    let hunks = parsed
        .hunks
        .iter()
        .map(|h| {
            let (mut o, mut n) = (h.old_start, h.new_start);
            let lines = h
                .lines
                .iter()
                .map(|l| {
                    let plain = Instant::now() > deadline;
                    let (sign, body) = l.split_at(l.chars().next().map_or(0, char::len_utf8));
                    match sign {
                        "+" => {
                            n += 1;
                            DiffLine {
                                kind: LineKind::Added,
                                old: None,
                                new: Some(n - 1),
                                tokens: new.tokens(body, plain),
                            }
                        }
                        "-" => {
                            o += 1;
                            DiffLine {
                                kind: LineKind::Removed,
                                old: Some(o - 1),
                                new: None,
                                tokens: old.tokens(body, plain),
                            }
                        }
                        "\\" => DiffLine { kind: LineKind::Note, old: None, new: None, tokens: plain_tokens(l) },
                        _ => {
                            old.tokens(body, plain);
                            o += 1;
                            n += 1;
                            DiffLine {
                                kind: LineKind::Context,
                                old: Some(o - 1),
                                new: Some(n - 1),
                                tokens: new.tokens(body, plain),
                            }
                        }
                    }
                })
                .collect();
            DiffHunk { header: h.header.clone(), lines }
        })
        .collect();
    DiffFile { path, deleted: parsed.deleted, binary: parsed.binary, syntax: syntax.name.clone(), hunks }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four files: Rust changed, Python deleted, a binary, plain text added.
    const PATCH: &str = concat!(
        "diff --git a/src/lib.rs b/src/lib.rs\n",
        "index 1111111..2222222 100644\n",
        "--- a/src/lib.rs\n",
        "+++ b/src/lib.rs\n",
        "@@ -1,3 +1,3 @@\n",
        " // The answer.\n",
        "-fn answer() -> u32 { 41 }\n",
        "+fn answer() -> u32 { \"42\".len() as u32 * 21 }\n",
        " \n",
        "diff --git a/gone.py b/gone.py\n",
        "deleted file mode 100644\n",
        "index 3333333..0000000\n",
        "--- a/gone.py\n",
        "+++ /dev/null\n",
        "@@ -1 +0,0 @@\n",
        "-print('bye')\n",
        "\\ No newline at end of file\n",
        "diff --git a/logo.png b/logo.png\n",
        "index 4444444..5555555 100644\n",
        "Binary files a/logo.png and b/logo.png differ\n",
        "diff --git a/notes b/notes\n",
        "new file mode 100644\n",
        "--- /dev/null\n",
        "+++ b/notes\n",
        "@@ -0,0 +1 @@\n",
        "+plain words\n",
    );

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn classes(l: &DiffLine) -> Vec<(String, Option<TokenClass>)> {
        l.tokens.iter().map(|t| (t.text.clone(), t.class)).collect()
    }

    #[test]
    fn each_file_is_parsed_numbered_and_highlighted_by_its_grammar() {
        let f = files(PATCH, far());
        let paths: Vec<&str> = f.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["src/lib.rs", "gone.py", "logo.png", "notes"]);
        let rs = &f[0];
        assert_eq!(rs.syntax, "Rust");
        let lines = &rs.hunks[0].lines;
        let nums: Vec<(LineKind, Option<u32>, Option<u32>)> = lines.iter().map(|l| (l.kind, l.old, l.new)).collect();
        assert_eq!(
            nums,
            [
                (LineKind::Context, Some(1), Some(1)),
                (LineKind::Removed, Some(2), None),
                (LineKind::Added, None, Some(2)),
                (LineKind::Context, Some(3), Some(3)),
            ]
        );
        assert_eq!(classes(&lines[0]), [("// The answer.".to_string(), Some(TokenClass::Comment))]);
        let added = classes(&lines[2]);
        let text: String = added.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(text, "fn answer() -> u32 { \"42\".len() as u32 * 21 }", "the line, whole");
        for (piece, class) in [
            ("fn", TokenClass::Keyword),
            ("answer", TokenClass::Function),
            ("\"42\"", TokenClass::String),
            ("21", TokenClass::Number),
        ] {
            assert!(added.iter().any(|(t, c)| t.contains(piece) && *c == Some(class)), "{piece}: {added:?}");
        }
        assert_eq!(classes(&lines[1]).iter().find(|(t, _)| t == "41").map(|(_, c)| *c), Some(Some(TokenClass::Number)));

        let py = &f[1];
        assert!(py.deleted && py.syntax == "Python", "{py:?}");
        assert_eq!(py.hunks[0].lines[1].kind, LineKind::Note);
        assert!(f[2].binary && f[2].hunks.is_empty());
        assert_eq!(f[3].syntax, "Plain Text");
        assert_eq!(classes(&f[3].hunks[0].lines[0]), [("plain words".to_string(), None)]);
    }

    #[test]
    fn past_the_budget_or_the_longest_line_the_text_is_plain() {
        let late = files(PATCH, Instant::now());
        assert!(late[0].hunks[0].lines.iter().flat_map(|l| &l.tokens).all(|t| t.class.is_none()), "{late:?}");
        let long = format!("// {}", "x".repeat(MAX_LINE));
        let patch = format!("diff --git a/a.rs b/a.rs\n--- a/a.rs\n+++ b/a.rs\n@@ -1 +1 @@\n-fn a() {{}}\n+{long}\n");
        let f = files(&patch, far());
        assert_eq!(classes(&f[0].hunks[0].lines[1]), [(long, None)]);
        assert_eq!(f[0].hunks[0].lines[0].tokens[0].class, Some(TokenClass::Keyword));
    }

    #[test]
    fn a_shebang_names_the_grammar_of_a_file_without_an_extension() {
        let patch = "diff --git a/run b/run\nnew file mode 100755\n--- /dev/null\n+++ b/run\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+echo \"hi\"\n";
        let f = files(patch, far());
        assert!(f[0].syntax.contains("Bash") || f[0].syntax.contains("Shell"), "{}", f[0].syntax);
    }
}
