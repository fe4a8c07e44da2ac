//! The `approvals` section (issue 33): what kd answers a member's CLI that
//! asks permission to use a tool, before the King is asked — `allow`,
//! `deny` or `ask` — for everyone (`approvals.tools`), a backend
//! (`approvals.backends.B`) or a member (`approvals.members.M`), by tool
//! kind (`read`, `edit`, `execute`, `fetch`, `mcp`, `other`, or `*` for any);
//! and how long a pending approval waits for the King
//! (`approvals.timeout`, default 10 minutes). What no rule covers is
//! decided by kd's defaults (`crate::approvals::policy`).
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
}

/// The `approvals` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approvals {
    pub all: Rules,
    pub backends: BTreeMap<String, Rules>,
    pub members: BTreeMap<String, Rules>,
    pub timeout: Duration,
}

impl Default for Approvals {
    fn default() -> Approvals {
        Approvals {
            all: Rules::default(),
            backends: BTreeMap::new(),
            members: BTreeMap::new(),
            timeout: DEFAULT_TIMEOUT,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApprovals {
    /// Seconds, or "30s", "10m", "1h".
    pub timeout: Option<Value>,
    pub tools: Option<BTreeMap<String, String>>,
    pub backends: Option<BTreeMap<String, BTreeMap<String, String>>>,
    pub members: Option<BTreeMap<String, BTreeMap<String, String>>>,
}

fn rules(r: &Resolver, key: &str, raw: BTreeMap<String, String>) -> Result<Rules, ConfigError> {
    let mut out = Rules::default();
    for (kind, verdict) in raw {
        let v = Verdict::parse(&verdict)
            .ok_or_else(|| r.err(format!("{key}.{kind}"), format!("{verdict:?}: give allow, deny or ask")))?;
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
    let all = rules(r, "approvals.tools", raw.tools.unwrap_or_default())?;
    let mut backends = BTreeMap::new();
    for (b, raw) in raw.backends.unwrap_or_default() {
        if Backend::parse(&b).is_none() {
            return Err(r.err(format!("approvals.backends.{b}"), "not a backend kd runs"));
        }
        backends.insert(b.clone(), rules(r, &format!("approvals.backends.{b}"), raw)?);
    }
    let mut members = BTreeMap::new();
    for (m, raw) in raw.members.unwrap_or_default() {
        if !agents.contains_key(&m) {
            r.warnings.push(format!("approvals.members.{m}: no agent of that name is configured"));
        }
        members.insert(m.clone(), rules(r, &format!("approvals.members.{m}"), raw)?);
    }
    Ok(Approvals { all, backends, members, timeout })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<Approvals, ConfigError> {
        let raw: RawApprovals = serde_json::from_value(v).unwrap();
        approvals(&mut Resolver::new(None), raw, &BTreeMap::new())
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
