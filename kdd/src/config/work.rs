//! Members' work settings (F-W1, F-W2): the top-level `work` object —
//! `work.allowed_tools` (claude's tools allowed beside `acceptEdits` in a
//! worktree), `work.copy` (paths of the King's tree copied into a new
//! worktree; default the entries of `.worktreeinclude`), `work.setup` (a
//! command run once in each new worktree, as an argv), `work.remote` (the
//! git remote `kd pr` pushes to, default `origin`) — and the default of
//! `council.work_preamble`.

use serde_json::Value;

use super::ConfigError;
use super::raw::RawWork;
use super::resolver::Resolver;

/// The preamble of a run in a member's worktree (the default
/// `council.work_preamble`); `{dir}` and `{branch}` become the worktree
/// and its branch.
pub const WORK_PREAMBLE: &str = "You are a member of a council of AI coding agents working for the King, the human \
who leads. You work in your own git worktree at {dir}, on branch {branch}: write files only there, never in the \
King's tree or anywhere else. Do the task you are given, and run the project's checks where you can. \
kd commits your changes on your branch when your run ends: do not run git add or git commit. \
End by saying what you did, what you checked, and what is left.";

/// Most entries of `work.copy` and `work.allowed_tools`, and of an argv.
const MAX_ENTRIES: usize = 256;

/// Claude tools that write anywhere (claude has no OS sandbox): refused in
/// `work.allowed_tools`.
const UNCONFINED: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"];

/// Programs that, allowed as `Bash(PROG:*)`, can write anywhere: warned of.
const WRITE_ANYWHERE: &[&str] = &[
    "sh", "bash", "zsh", "dash", "fish", "env", "sudo", "xargs", "find", "python", "python3", "node", "deno", "bun",
    "perl", "ruby", "php", "lua", "cp", "mv", "rm", "ln", "mkdir", "touch", "tee", "dd", "install", "rsync", "chmod",
    "git", "make", "npx", "npm", "pnpm", "yarn", "cargo", "go", "tar", "unzip", "sed", "awk", "curl", "wget",
];

/// The default `work.check_timeout`.
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
/// The longest `work.check_timeout`.
const MAX_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// The most `work.fix_rounds` (and `kd work --until-green`).
pub const MAX_FIX_ROUNDS: u32 = 20;

/// The `work` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    /// claude's `--allowedTools` of work runs, e.g. `Bash(cargo test:*)`.
    pub allowed_tools: Vec<String>,
    /// Repository-relative paths copied into a new worktree; none: the
    /// entries of `.worktreeinclude` at the repository's top, if any.
    pub copy: Option<Vec<String>>,
    /// The command run once in each new worktree (an argv; never a shell
    /// unless it says `["sh", "-c", …]`).
    pub setup: Option<Vec<String>>,
    /// The check run in a worktree after each commit of the member's work
    /// (an argv; never a shell unless it says so).
    pub check: Option<Vec<String>>,
    /// How long a check may run before it is killed.
    pub check_timeout: std::time::Duration,
    /// How many times a member whose check fails is sent back to fix it.
    pub fix_rounds: u32,
    /// The git remote `kd pr` pushes a member's branch to (default
    /// `origin`).
    pub remote: String,
}

impl Default for Work {
    fn default() -> Work {
        Work {
            allowed_tools: Vec::new(),
            copy: None,
            setup: None,
            check: None,
            check_timeout: CHECK_TIMEOUT,
            fix_rounds: 0,
            remote: "origin".into(),
        }
    }
}

pub(super) fn work(r: &mut Resolver, raw: RawWork) -> Result<Work, ConfigError> {
    for (key, set) in [
        ("work.allowed_tools", raw.allowed_tools.is_some()),
        ("work.copy", raw.copy.is_some()),
        ("work.setup", raw.setup.is_some()),
        ("work.check", raw.check.is_some()),
        ("work.check_timeout", raw.check_timeout.is_some()),
        ("work.fix_rounds", raw.fix_rounds.is_some()),
        ("work.remote", raw.remote.is_some()),
    ] {
        r.set(key, set);
    }
    let allowed_tools = raw.allowed_tools.unwrap_or_default();
    if allowed_tools.len() > MAX_ENTRIES {
        return Err(r.err("work.allowed_tools", format!("at most {MAX_ENTRIES} entries")));
    }
    for t in &allowed_tools {
        if let Some(why) = unconfined(t) {
            return Err(r.err("work.allowed_tools", format!("{t:?} {why}")));
        }
        if let Some(prog) = writes_anywhere(t) {
            r.warnings.push(format!(
                "work.allowed_tools: {t:?} lets claude run {prog}, which can write outside the member's worktree \
                 (claude has no sandbox); allow a narrower command, e.g. Bash({prog} test:*)"
            ));
        }
    }
    if let Some(copy) = &raw.copy {
        if copy.len() > MAX_ENTRIES {
            return Err(r.err("work.copy", format!("at most {MAX_ENTRIES} entries")));
        }
        if let Some(bad) = copy.iter().find(|p| !inside(p)) {
            return Err(r.err("work.copy", format!("{bad:?}: give paths inside the repository, such as .env")));
        }
    }
    let setup = match raw.setup {
        None | Some(Value::Null) => None,
        Some(v) => Some(argv(&v).map_err(|e| r.err("work.setup", e))?),
    };
    let check = match raw.check {
        None | Some(Value::Null) => None,
        Some(v) => Some(argv(&v).map_err(|e| r.err("work.check", e))?),
    };
    let check_timeout = match &raw.check_timeout {
        None | Some(Value::Null) => CHECK_TIMEOUT,
        Some(v) => {
            let d = super::lifecycle::duration(v).map_err(|e| r.err("work.check_timeout", e))?;
            if d.is_zero() || d > MAX_CHECK_TIMEOUT {
                return Err(r.err("work.check_timeout", "give a time between 1 second and 24 hours, e.g. \"10m\""));
            }
            d
        }
    };
    let fix_rounds = raw.fix_rounds.unwrap_or(0);
    if fix_rounds > MAX_FIX_ROUNDS {
        return Err(r.err("work.fix_rounds", format!("at most {MAX_FIX_ROUNDS}")));
    }
    if fix_rounds > 0 && check.is_none() {
        r.warnings.push("work.fix_rounds is set but work.check is not: no member is sent back".into());
    }
    let remote = raw.remote.unwrap_or_else(|| "origin".into());
    let named = !remote.is_empty()
        && remote.len() <= 100
        && !remote.starts_with('-')
        && remote.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if !named {
        return Err(r.err("work.remote", format!("{remote:?}: name a git remote, such as origin")));
    }
    Ok(Work { allowed_tools, copy: raw.copy, setup, check, check_timeout, fix_rounds, remote })
}

/// Why a `work.allowed_tools` entry is refused: a tool with no rule
/// (`Write`, `Bash`, …) writes anywhere, and so does a directory added.
fn unconfined(tool: &str) -> Option<&'static str> {
    let t = tool.trim();
    if t.is_empty() {
        return Some("is empty");
    }
    if t.starts_with('-') || t.contains("add-dir") || t.contains("dangerously") {
        return Some("is a command-line option, which would let claude write outside the member's worktree");
    }
    let bare = t.strip_suffix("(*)").or_else(|| t.strip_suffix("()")).unwrap_or(t);
    UNCONFINED.contains(&bare).then_some(
        "lets claude write anywhere (claude has no sandbox; acceptEdits already lets it edit in its worktree): \
         allow a command, e.g. Bash(cargo test:*)",
    )
}

/// The program of a `Bash(PROG …:*)` entry that can write anywhere.
fn writes_anywhere(tool: &str) -> Option<String> {
    let inner = tool.trim().strip_prefix("Bash(")?.strip_suffix(')')?;
    let inner = inner.strip_suffix(":*").unwrap_or(inner);
    let words: Vec<&str> = inner.split_whitespace().collect();
    let prog = words.first()?.rsplit('/').next()?.to_string();
    let base = prog.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    // `git status` and `cargo test` are one command; `git:*` is any.
    let any = words.len() == 1 || words.get(1).is_some_and(|w| w.starts_with('-') || w.contains('*'));
    (any && (WRITE_ANYWHERE.contains(&prog.as_str()) || WRITE_ANYWHERE.contains(&base))).then_some(prog)
}

/// A relative path with no `..`.
fn inside(p: &str) -> bool {
    let path = std::path::Path::new(p);
    !p.trim().is_empty()
        && !path.is_absolute()
        && !path.components().any(|c| matches!(c, std::path::Component::ParentDir | std::path::Component::Prefix(_)))
}

/// `work.setup` as an argv: a list of strings, or a string of plain words
/// (split on spaces; no shell, so no quotes or shell syntax).
fn argv(v: &Value) -> Result<Vec<String>, String> {
    let words: Vec<String> = match v {
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string).ok_or("must be a list of strings (an argv)"))
            .collect::<Result<_, _>>()?,
        Value::String(s) => {
            if let Some(c) = s.chars().find(|c| "'\"\\$`|&;<>()*?~{}".contains(*c)) {
                return Err(format!(
                    "{s:?} has {c:?}: the command runs without a shell; give an argv list, and for a shell say so: \
                     [\"sh\", \"-c\", {s:?}]"
                ));
            }
            s.split_whitespace().map(str::to_string).collect()
        }
        _ => return Err("must be a command: a list of strings, e.g. [\"npm\", \"ci\"]".into()),
    };
    if words.is_empty() || words[0].trim().is_empty() {
        return Err("names no program".into());
    }
    if words.len() > MAX_ENTRIES || words.iter().any(|w| w.contains('\0')) {
        return Err("is not a command kd can run".into());
    }
    Ok(words)
}

/// The preamble of a work run: `template` with its worktree and branch.
pub fn work_preamble(template: &str, dir: &std::path::Path, branch: &str) -> String {
    template.replace("{dir}", &dir.display().to_string()).replace("{branch}", branch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(v: Value) -> (Result<Work, ConfigError>, Vec<String>) {
        let mut r = Resolver::new(None);
        let raw: RawWork = serde_json::from_value(v).unwrap();
        let w = work(&mut r, raw);
        (w, r.warnings)
    }

    #[test]
    fn tools_that_write_anywhere_are_refused_naming_the_entry() {
        for bad in ["Write", "Edit", "MultiEdit", "Bash", "Bash(*)", "--add-dir", "--add-dir=/"] {
            let (w, _) = resolve(json!({"allowed_tools": ["Bash(cargo test:*)", bad]}));
            let e = w.unwrap_err();
            assert_eq!(e.key, "work.allowed_tools");
            assert!(e.message.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn programs_that_write_anywhere_are_warned_of_and_narrow_commands_pass() {
        for (entry, warned) in [
            ("Bash(python:*)", true),
            ("Bash(python3 -c:*)", true),
            ("Bash(sh:*)", true),
            ("Bash(git:*)", true),
            ("Bash(/usr/bin/rm:*)", true),
            ("Bash(node *:*)", true),
            ("Bash(cargo test:*)", false),
            ("Bash(git status)", false),
            ("Bash(npm test:*)", false),
            ("Read", false),
            ("mcp__kd", false),
        ] {
            let (w, warnings) = resolve(json!({"allowed_tools": [entry]}));
            assert_eq!(w.unwrap().allowed_tools, [entry]);
            assert_eq!(!warnings.is_empty(), warned, "{entry}: {warnings:?}");
            if warned {
                assert!(warnings[0].contains(entry), "{warnings:?}");
            }
        }
    }

    #[test]
    fn setup_is_an_argv_and_copy_stays_inside() {
        let (w, _) = resolve(json!({"setup": ["npm", "ci"], "copy": [".env", "config/local.toml"]}));
        let w = w.unwrap();
        assert_eq!(w.setup, Some(vec!["npm".into(), "ci".into()]));
        assert_eq!(w.copy, Some(vec![".env".into(), "config/local.toml".into()]));
        let (w, _) = resolve(json!({"setup": "npm ci --silent"}));
        assert_eq!(w.unwrap().setup, Some(vec!["npm".into(), "ci".into(), "--silent".into()]));
        for bad in [json!("npm ci && make"), json!("echo $HOME"), json!([]), json!(3), json!([1])] {
            let (w, _) = resolve(json!({"setup": bad}));
            assert_eq!(w.unwrap_err().key, "work.setup", "{bad}");
        }
        for bad in ["../x", "/etc/passwd", "a/../../b", ""] {
            let (w, _) = resolve(json!({"copy": [bad]}));
            assert_eq!(w.unwrap_err().key, "work.copy", "{bad}");
        }
    }

    #[test]
    fn the_check_is_an_argv_with_a_bounded_timeout_and_fix_rounds() {
        let (w, _) = resolve(json!({}));
        let w = w.unwrap();
        assert_eq!((w.check, w.check_timeout, w.fix_rounds), (None, CHECK_TIMEOUT, 0));
        let (w, _) = resolve(json!({"check": ["cargo", "test"], "check_timeout": "90s", "fix_rounds": 2}));
        let w = w.unwrap();
        assert_eq!(w.check, Some(vec!["cargo".into(), "test".into()]));
        assert_eq!((w.check_timeout.as_secs(), w.fix_rounds), (90, 2));
        let (w, _) = resolve(json!({"check": "make test"}));
        assert_eq!(w.unwrap().check, Some(vec!["make".into(), "test".into()]));
        for (bad, key) in [
            (json!({"check": "cargo test && echo"}), "work.check"),
            (json!({"check": []}), "work.check"),
            (json!({"check": ["ok"], "check_timeout": 0}), "work.check_timeout"),
            (json!({"check": ["ok"], "check_timeout": "2d"}), "work.check_timeout"),
            (json!({"check": ["ok"], "fix_rounds": 21}), "work.fix_rounds"),
        ] {
            let (w, _) = resolve(bad.clone());
            assert_eq!(w.unwrap_err().key, key, "{bad}");
        }
        let (_, warnings) = resolve(json!({"fix_rounds": 1}));
        assert!(warnings.iter().any(|w| w.contains("work.check")), "{warnings:?}");
    }

    #[test]
    fn the_preamble_names_the_worktree_and_branch() {
        let p = work_preamble(WORK_PREAMBLE, std::path::Path::new("/d/w/claude"), "kd/t1/claude");
        assert!(p.contains("/d/w/claude") && p.contains("kd/t1/claude") && p.contains("git commit"), "{p}");
    }
}
