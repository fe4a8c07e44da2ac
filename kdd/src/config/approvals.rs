//! The `approvals` section (issue 33): what kd answers a member's CLI that
//! asks permission to use a tool, before the King is asked — `allow`,
//! `deny` or `ask` — for everyone (`approvals.tools`), a backend
//! (`approvals.backends.B`) or a member (`approvals.members.M`), by tool
//! kind (`read`, `edit`, `execute`, `fetch`, `mcp`, `other`, or `*` for any);
//! and how long a pending approval waits for the King
//! (`approvals.timeout`, default 10 minutes). What no rule covers is
//! decided by kd's defaults (`crate::approvals::policy`).
//!
//! Like `notify` (and unlike the rest of the configuration, which is the
//! workspace's file *or* the user's), the section is the user's and the
//! workspace's together: the user's rules, then the workspace's added key
//! by key (`approvals.tools.execute`, `approvals.members.M.*`, the
//! timeout), its value winning where both set one ([`Approvals::over`],
//! [`with_users`]). Each rule's file is kept for `kd config show`.
//!
//! ```json
//! "approvals": {
//!   "timeout": "5m",
//!   "tools": {"execute": "ask", "fetch": "deny"},
//!   "backends": {"codex": {"edit": "allow"}},
//!   "members": {"reviewer": {"*": "deny", "read": "allow"}}
//! }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kd_proto::approval::ToolKind;
use serde::Deserialize;
use serde_json::Value;

use super::ConfigError;
use super::resolver::Resolver;
use super::{AgentDef, Backend};

/// How long a pending approval waits for the King by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest `approvals.timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// What the policy says of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allow,
    Deny,
    /// The King decides (when a King's client can answer; else the CLI's
    /// answer of before approvals).
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
        [Verdict::Allow, Verdict::Deny, Verdict::Ask].into_iter().find(|v| v.as_str() == s)
    }
}

/// The rules of one subject (everyone, a backend, a member): by tool kind,
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

    /// These rules with `top`'s added, `top`'s winning kind by kind.
    fn over(&mut self, top: Rules) {
        self.kinds.extend(top.kinds);
        self.any = top.any.or(self.any);
    }
}

/// The `approvals` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approvals {
    pub all: Rules,
    pub backends: BTreeMap<String, Rules>,
    pub members: BTreeMap<String, Rules>,
    pub timeout: Duration,
    /// The file each key set comes from (`approvals.timeout`,
    /// `approvals.tools.execute`, `approvals.members.M.*`, …; none: a
    /// section read from no file); keys not here are defaults.
    pub sources: BTreeMap<String, Option<PathBuf>>,
}

impl Default for Approvals {
    fn default() -> Approvals {
        Approvals {
            all: Rules::default(),
            backends: BTreeMap::new(),
            members: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
            sources: BTreeMap::new(),
        }
    }
}

impl Approvals {
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

    /// These settings (the user's) with `top`'s (the workspace's) added key
    /// by key, `top`'s value winning where both set one.
    pub fn over(mut self, top: Approvals) -> Approvals {
        self.all.over(top.all);
        for (b, r) in top.backends {
            self.backends.entry(b).or_default().over(r);
        }
        for (m, r) in top.members {
            self.members.entry(m).or_default().over(r);
        }
        if top.sources.contains_key(TIMEOUT) {
            self.timeout = top.timeout;
        }
        self.sources.extend(top.sources);
        self
    }

    /// Every rule set, as `kd config show` lists them: the dotted key
    /// (`approvals.tools.execute`), the verdict, and its file.
    pub fn rules(&self) -> Vec<(String, Verdict, Option<&Path>)> {
        let subjects = std::iter::once(("approvals.tools".to_string(), &self.all))
            .chain(self.backends.iter().map(|(b, r)| (format!("approvals.backends.{b}"), r)))
            .chain(self.members.iter().map(|(m, r)| (format!("approvals.members.{m}"), r)));
        let mut out = Vec::new();
        for (prefix, rules) in subjects {
            let kinds = rules.kinds.iter().map(|(k, v)| (k.as_str(), *v)).chain(rules.any.map(|v| ("*", v)));
            for (kind, v) in kinds {
                let key = format!("{prefix}.{kind}");
                let file = self.sources.get(&key).and_then(|f| f.as_deref());
                out.push((key, v, file));
            }
        }
        out
    }

    /// The file `approvals.timeout` comes from, when one set it.
    pub fn timeout_source(&self) -> Option<Option<&Path>> {
        self.sources.get(TIMEOUT).map(|f| f.as_deref())
    }
}

const TIMEOUT: &str = "approvals.timeout";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApprovals {
    /// Seconds, or "30s", "10m", "1h".
    pub timeout: Option<Value>,
    pub tools: Option<BTreeMap<String, String>>,
    pub backends: Option<BTreeMap<String, BTreeMap<String, String>>>,
    pub members: Option<BTreeMap<String, BTreeMap<String, String>>>,
}

fn rules(
    r: &Resolver,
    key: &str,
    raw: BTreeMap<String, String>,
    sources: &mut BTreeMap<String, Option<PathBuf>>,
) -> Result<Rules, ConfigError> {
    let mut out = Rules::default();
    for (kind, verdict) in raw {
        let v = Verdict::parse(&verdict)
            .ok_or_else(|| r.err(format!("{key}.{kind}"), format!("{verdict:?}: give allow, deny or ask")))?;
        sources.insert(format!("{key}.{kind}"), r.file.clone());
        if kind == "*" {
            out.any = Some(v);
        } else {
            let k = ToolKind::parse(&kind).ok_or_else(|| {
                r.err(
                    format!("{key}.{kind}"),
                    "not a tool kind: give read, edit, execute, fetch, mcp, other or * (any)".to_string(),
                )
            })?;
            out.kinds.insert(k, v);
        }
    }
    Ok(out)
}

pub(super) fn approvals(
    r: &mut Resolver,
    raw: RawApprovals,
    agents: &BTreeMap<String, AgentDef>,
) -> Result<Approvals, ConfigError> {
    for (key, set) in [
        ("approvals.timeout", raw.timeout.is_some()),
        ("approvals.tools", raw.tools.is_some()),
        ("approvals.backends", raw.backends.is_some()),
        ("approvals.members", raw.members.is_some()),
    ] {
        r.set(key, set);
    }
    let timeout = match &raw.timeout {
        None => DEFAULT_TIMEOUT,
        Some(v) => {
            let d = super::lifecycle::duration(v).map_err(|e| r.err("approvals.timeout", e))?;
            if d.is_zero() || d > MAX_TIMEOUT {
                return Err(r.err("approvals.timeout", "give a time between 1 second and 24 hours, e.g. \"10m\""));
            }
            d
        }
    };
    let mut sources = BTreeMap::new();
    if raw.timeout.is_some() {
        sources.insert(TIMEOUT.to_string(), r.file.clone());
    }
    let all = rules(r, "approvals.tools", raw.tools.unwrap_or_default(), &mut sources)?;
    let mut backends = BTreeMap::new();
    for (b, raw) in raw.backends.unwrap_or_default() {
        if Backend::parse(&b).is_none() {
            return Err(r.err(format!("approvals.backends.{b}"), "not a backend kd runs"));
        }
        backends.insert(b.clone(), rules(r, &format!("approvals.backends.{b}"), raw, &mut sources)?);
    }
    let mut members = BTreeMap::new();
    for (m, raw) in raw.members.unwrap_or_default() {
        if !agents.contains_key(&m) {
            r.warnings.push(format!("approvals.members.{m}: no agent of that name is configured"));
        }
        members.insert(m.clone(), rules(r, &format!("approvals.members.{m}"), raw, &mut sources)?);
    }
    Ok(Approvals { all, backends, members, timeout, sources })
}

/// `own`, the section of the workspace's file (`own_file`, when it has
/// one), over the user's file's (`user`): the settings that apply. A bad
/// user's file refuses the configuration, naming it, as a bad workspace's
/// does: its rules cannot be known, and a denial it meant must not turn
/// into a question or an allow. Its `approvals.members` naming no member of
/// this workspace are not warned of (the file serves every workspace).
pub(super) fn with_users(
    own: Approvals,
    own_file: Option<&Path>,
    user: Option<&Path>,
    agents: &BTreeMap<String, AgentDef>,
) -> Result<Approvals, ConfigError> {
    let Some(user) = user.filter(|u| Some(*u) != own_file) else { return Ok(own) };
    let raw = super::raw::read(user)?;
    let mut r = Resolver::new(Some(user.to_path_buf()));
    let users = approvals(&mut r, raw.approvals.unwrap_or_default(), agents)?;
    Ok(users.over(own))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<Approvals, ConfigError> {
        parse_from(v, None)
    }

    fn parse_from(v: Value, file: Option<&str>) -> Result<Approvals, ConfigError> {
        let raw: RawApprovals = serde_json::from_value(v).unwrap();
        approvals(&mut Resolver::new(file.map(PathBuf::from)), raw, &BTreeMap::new())
    }

    #[test]
    fn the_workspaces_rules_add_to_the_users_and_win_key_by_key() {
        let user = parse_from(
            serde_json::json!({
                "timeout": "1h",
                "tools": {"execute": "deny", "fetch": "deny"},
                "members": {"rev": {"*": "deny"}}
            }),
            Some("/home/u/.config/kd/config.json"),
        )
        .unwrap();
        let ws = parse_from(
            serde_json::json!({"tools": {"fetch": "allow"}, "members": {"rev": {"read": "allow"}}}),
            Some("/ws/.kd/config.json"),
        )
        .unwrap();
        let p = user.over(ws);
        assert_eq!(p.rule("x", Backend::Claude, ToolKind::Execute), Some(Verdict::Deny), "the user's alone");
        assert_eq!(p.rule("x", Backend::Claude, ToolKind::Fetch), Some(Verdict::Allow), "the workspace's wins");
        assert_eq!(p.rule("rev", Backend::Claude, ToolKind::Read), Some(Verdict::Allow));
        assert_eq!(p.rule("rev", Backend::Claude, ToolKind::Edit), Some(Verdict::Deny), "the user's *");
        assert_eq!(p.timeout, Duration::from_secs(3600), "the workspace sets none");
        let from: Vec<(String, &str, Option<&str>)> =
            p.rules().into_iter().map(|(k, v, f)| (k, v.as_str(), f.and_then(|f| f.to_str()))).collect();
        let user_file = Some("/home/u/.config/kd/config.json");
        let ws_file = Some("/ws/.kd/config.json");
        assert_eq!(
            from,
            vec![
                ("approvals.tools.execute".to_string(), "deny", user_file),
                ("approvals.tools.fetch".to_string(), "allow", ws_file),
                ("approvals.members.rev.read".to_string(), "allow", ws_file),
                ("approvals.members.rev.*".to_string(), "deny", user_file),
            ]
        );
        assert_eq!(p.timeout_source(), Some(Some(Path::new("/home/u/.config/kd/config.json"))));
        let ws_timeout = parse_from(serde_json::json!({"timeout": 5}), ws_file).unwrap();
        let p = p.over(ws_timeout);
        assert_eq!(
            (p.timeout, p.timeout_source()),
            (Duration::from_secs(5), Some(Some(Path::new("/ws/.kd/config.json"))))
        );
        assert_eq!(Approvals::default().timeout_source(), None);
    }

    #[test]
    fn the_users_file_applies_beside_the_workspaces_and_a_bad_one_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.json");
        let ws = dir.path().join("ws.json");
        std::fs::write(&user, r#"{"approvals": {"tools": {"execute": "deny"}}}"#).unwrap();
        let own = parse_from(serde_json::json!({"tools": {"read": "ask"}}), ws.to_str()).unwrap();
        let agents = BTreeMap::new();
        let p = with_users(own.clone(), Some(&ws), Some(&user), &agents).unwrap();
        assert_eq!(p.rule("x", Backend::Codex, ToolKind::Execute), Some(Verdict::Deny));
        assert_eq!(p.rule("x", Backend::Codex, ToolKind::Read), Some(Verdict::Ask));
        // The user's file is the one in use: read once.
        let users = parse_from(serde_json::json!({"tools": {"execute": "deny"}}), user.to_str()).unwrap();
        assert_eq!(with_users(users.clone(), Some(&user), Some(&user), &agents).unwrap(), users);
        assert_eq!(with_users(own.clone(), Some(&ws), None, &agents).unwrap(), own);
        std::fs::write(&user, r#"{"approvals": {"tools": {"execute": "never"}}}"#).unwrap();
        let e = with_users(own, Some(&ws), Some(&user), &agents).unwrap_err();
        assert_eq!((e.key.as_str(), e.file.as_deref()), ("approvals.tools.execute", Some(user.as_path())));
    }

    #[test]
    fn a_member_rule_beats_its_backend_and_everyone_and_a_kind_beats_any() {
        let p = parse(serde_json::json!({
            "timeout": "5m",
            "tools": {"*": "deny", "read": "allow"},
            "backends": {"claude": {"execute": "ask"}},
            "members": {"c2": {"*": "allow"}}
        }))
        .unwrap();
        assert_eq!(p.timeout, Duration::from_secs(300));
        assert_eq!(p.rule("c1", Backend::Claude, ToolKind::Execute), Some(Verdict::Ask));
        assert_eq!(p.rule("c1", Backend::Claude, ToolKind::Fetch), Some(Verdict::Deny));
        assert_eq!(p.rule("c1", Backend::Claude, ToolKind::Read), Some(Verdict::Allow));
        assert_eq!(p.rule("c2", Backend::Claude, ToolKind::Execute), Some(Verdict::Allow));
        assert_eq!(p.rule("x", Backend::Codex, ToolKind::Execute), Some(Verdict::Deny));
        assert_eq!(Approvals::default().rule("x", Backend::Codex, ToolKind::Read), None);
        assert_eq!(Approvals::default().timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn bad_rules_are_refused_naming_the_key() {
        for (v, key, says) in [
            (serde_json::json!({"tools": {"write": "allow"}}), "approvals.tools.write", "not a tool kind"),
            (serde_json::json!({"tools": {"edit": "maybe"}}), "approvals.tools.edit", "allow, deny or ask"),
            (serde_json::json!({"backends": {"vim": {"*": "allow"}}}), "approvals.backends.vim", "backend"),
            (serde_json::json!({"timeout": 0}), "approvals.timeout", "between"),
            (serde_json::json!({"timeout": "soon"}), "approvals.timeout", ""),
        ] {
            let e = parse(v).unwrap_err();
            assert_eq!(e.key, key);
            assert!(e.message.contains(says), "{}", e.message);
        }
    }
}
