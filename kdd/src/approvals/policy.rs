//! The policy's verdict on a tool call: the configured rule
//! ([`crate::config::approvals`]), else kd's defaults, which keep the safety
//! kd had before approvals — reads allowed, edits inside the run's own
//! worktree allowed, anything else asked.

use std::path::{Component, Path, PathBuf};

use kd_proto::approval::ToolKind;

use crate::config::Backend;
pub use crate::config::approvals::{Approvals as Policy, Rules, Verdict};

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A rule of the configuration.
    Rule,
    /// kd's built-in default.
    Default,
}

/// The verdict on a call: a rule, else the default.
pub fn verdict(
    policy: &Policy,
    member: &str,
    backend: Backend,
    kind: ToolKind,
    paths: &[String],
    worktree: Option<&Path>,
) -> (Verdict, Source) {
    match policy.rule(member, backend, kind) {
        Some(v) => (v, Source::Rule),
        None => (default_verdict(kind, paths, worktree), Source::Default),
    }
}

/// kd's default: reads are allowed; an edit whose every path is inside the
/// run's worktree is allowed; anything else is asked.
pub fn default_verdict(kind: ToolKind, paths: &[String], worktree: Option<&Path>) -> Verdict {
    match (kind, worktree) {
        (ToolKind::Read, _) => Verdict::Allow,
        (ToolKind::Edit, Some(root)) if !paths.is_empty() && paths.iter().all(|p| inside(root, p)) => Verdict::Allow,
        _ => Verdict::Ask,
    }
}

/// Whether `path` (absolute, or relative to `root`) names something inside
/// `root`, read lexically (`..` resolved, no link followed: a path that
/// climbs out is outside).
pub fn inside(root: &Path, path: &str) -> bool {
    let p = Path::new(path);
    let joined = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return false;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_reads_and_edits_in_the_worktree_are_allowed_and_the_rest_asked() {
        let wt = Path::new("/w/tree");
        let d = |k, p: &[&str], w| default_verdict(k, &p.iter().map(|s| s.to_string()).collect::<Vec<_>>(), w);
        assert_eq!(d(ToolKind::Read, &["/etc/passwd"], None), Verdict::Allow);
        assert_eq!(d(ToolKind::Edit, &["/w/tree/a.rs", "b/c.rs"], Some(wt)), Verdict::Allow);
        assert_eq!(d(ToolKind::Edit, &["/w/tree/../x"], Some(wt)), Verdict::Ask);
        assert_eq!(d(ToolKind::Edit, &["/w/treehouse/x"], Some(wt)), Verdict::Ask);
        assert_eq!(d(ToolKind::Edit, &[], Some(wt)), Verdict::Ask, "an edit that names no path");
        assert_eq!(d(ToolKind::Edit, &["/w/tree/a"], None), Verdict::Ask, "no worktree: a council run");
        assert_eq!(d(ToolKind::Execute, &[], Some(wt)), Verdict::Ask);
        assert_eq!(d(ToolKind::Fetch, &[], None), Verdict::Ask);
    }

    #[test]
    fn a_rule_beats_the_default() {
        let mut p = Policy::default();
        assert_eq!(verdict(&p, "x", Backend::Codex, ToolKind::Read, &[], None), (Verdict::Allow, Source::Default));
        p.all.kinds.insert(ToolKind::Read, Verdict::Deny);
        assert_eq!(verdict(&p, "x", Backend::Codex, ToolKind::Read, &[], None), (Verdict::Deny, Source::Rule));
    }
}
