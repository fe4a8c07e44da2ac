//! The `approvals` policy: what kd answers a member's CLI that asks to use a
//! tool, before anyone is asked — `allow`, `deny` or `ask` (the King) — by
//! member, backend and tool kind, and the built-in defaults that keep the
//! safety kd had before approvals: reads allowed, edits inside the run's own
//! worktree allowed, anything else asked.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use kd_proto::approval::ToolKind;

use crate::config::Backend;

/// What the policy says of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allow,
    Deny,
    /// The King decides (when a King's client can answer; else the CLI's
    /// policy of before).
    Ask,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Ask => "ask",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "allow" => Some(Verdict::Allow),
            "deny" => Some(Verdict::Deny),
            "ask" => Some(Verdict::Ask),
            _ => None,
        }
    }
}

/// Rules of one subject (every member, a backend, a member): by tool kind,
/// and for any kind (`*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    pub kinds: BTreeMap<ToolKind, Verdict>,
    pub any: Option<Verdict>,
}

impl Rules {
    fn of(&self, kind: ToolKind) -> Option<Verdict> {
        self.kinds.get(&kind).copied().or(self.any)
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.any.is_none()
    }
}

/// The configured rules (`approvals.tools`, `approvals.backends.B`,
/// `approvals.members.M`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub all: Rules,
    pub backends: BTreeMap<String, Rules>,
    pub members: BTreeMap<String, Rules>,
}

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A rule of the configuration.
    Rule,
    /// kd's built-in default.
    Default,
}

impl Policy {
    /// The configured rule for `member` (of `backend`) and `kind`: the
    /// member's own, else its backend's, else everyone's; within each, the
    /// kind's rule before `*`.
    pub fn rule(&self, member: &str, backend: Backend, kind: ToolKind) -> Option<Verdict> {
        self.members
            .get(member)
            .and_then(|r| r.of(kind))
            .or_else(|| self.backends.get(backend.as_str()).and_then(|r| r.of(kind)))
            .or_else(|| self.all.of(kind))
    }

    /// The verdict on a call: a rule, else the default.
    pub fn verdict(
        &self,
        member: &str,
        backend: Backend,
        kind: ToolKind,
        paths: &[String],
        worktree: Option<&Path>,
    ) -> (Verdict, Source) {
        match self.rule(member, backend, kind) {
            Some(v) => (v, Source::Rule),
            None => (default_verdict(kind, paths, worktree), Source::Default),
        }
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
    fn a_member_rule_beats_its_backend_and_everyone_and_a_kind_beats_any() {
        let mut p = Policy::default();
        p.all.any = Some(Verdict::Deny);
        p.all.kinds.insert(ToolKind::Read, Verdict::Allow);
        p.backends.insert("claude".into(), Rules { kinds: [(ToolKind::Execute, Verdict::Ask)].into(), any: None });
        p.members.insert("c2".into(), Rules { kinds: BTreeMap::new(), any: Some(Verdict::Allow) });
        assert_eq!(p.rule("c1", Backend::Claude, ToolKind::Execute), Some(Verdict::Ask));
        assert_eq!(p.rule("c1", Backend::Claude, ToolKind::Fetch), Some(Verdict::Deny));
        assert_eq!(p.rule("c1", Backend::Claude, ToolKind::Read), Some(Verdict::Allow));
        assert_eq!(p.rule("c2", Backend::Claude, ToolKind::Execute), Some(Verdict::Allow));
        assert_eq!(p.rule("x", Backend::Codex, ToolKind::Execute), Some(Verdict::Deny));
        assert_eq!(
            Policy::default().verdict("x", Backend::Codex, ToolKind::Read, &[], None),
            (Verdict::Allow, Source::Default)
        );
    }
}
