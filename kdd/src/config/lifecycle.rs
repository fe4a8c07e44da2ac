//! The thread lifecycle's settings (SPEC §8, F-L1, F-L2):
//! `lifecycle.idle_after` and `lifecycle.archive_after`, as seconds or a
//! duration such as `90s`, `30m`, `24h`, `3d`; what a fork gives its branch
//! (`lifecycle.bundle`, `lifecycle.fork_carry`); summaries.

use std::time::Duration;

use serde_json::Value;

use super::ConfigError;
use super::raw::RawLifecycle;
use super::resolver::Resolver;

/// A thread without activity this long goes idle, by default.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(24 * 3600);
/// … and a branch is archived after this long, by default.
pub const DEFAULT_ARCHIVE_AFTER: Duration = Duration::from_secs(72 * 3600);
/// The longest either may be: ten years.
const MAX_AFTER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The files a fork gives its branch, by default (those present).
pub const DEFAULT_BUNDLE: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    pub idle_after: Duration,
    pub archive_after: Duration,
    /// Workspace-relative paths of the context bundle (F-L1).
    pub bundle: Vec<String>,
    /// The member who writes summaries (the extractive one without).
    pub summarizer: Option<String>,
    /// Whether a branch's summary is posted to its parent at archive.
    pub summary_to_trunk: bool,
    /// What a fork carries of its parent when it is not told.
    pub fork_carry: kd_proto::types::Carry,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle {
            idle_after: DEFAULT_IDLE_AFTER,
            archive_after: DEFAULT_ARCHIVE_AFTER,
            bundle: DEFAULT_BUNDLE.iter().map(|s| s.to_string()).collect(),
            summarizer: None,
            summary_to_trunk: true,
            fork_carry: kd_proto::types::Carry::default(),
        }
    }
}

pub(super) fn lifecycle(r: &mut Resolver, raw: RawLifecycle) -> Result<Lifecycle, ConfigError> {
    for (key, set) in [
        ("lifecycle.idle_after", raw.idle_after.is_some()),
        ("lifecycle.archive_after", raw.archive_after.is_some()),
        ("lifecycle.bundle", raw.bundle.is_some()),
        ("lifecycle.summarizer", raw.summarizer.is_some()),
        ("lifecycle.summary_to_trunk", raw.summary_to_trunk.is_some()),
        ("lifecycle.fork_carry", raw.fork_carry.is_some()),
    ] {
        r.set(key, set);
    }
    if let Some(m) = &raw.summarizer {
        kd_proto::names::check_member_name(m).map_err(|e| r.err("lifecycle.summarizer", e.to_string()))?;
    }
    if let Some(bad) = raw.bundle.iter().flatten().find(|p| {
        let path = std::path::Path::new(p.as_str());
        p.is_empty() || path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir)
    }) {
        return Err(r.err("lifecycle.bundle", format!("{bad:?}: give paths inside the workspace, such as AGENTS.md")));
    }
    let fork_carry = match raw.fork_carry.as_deref() {
        None => kd_proto::types::Carry::default(),
        Some(s) => kd_proto::types::Carry::parse(s)
            .ok_or_else(|| r.err("lifecycle.fork_carry", format!("{s:?}: use conversation, summary or none")))?,
    };
    let read = |key: &str, v: Option<&Value>, default: Duration| match v {
        None => Ok(default),
        Some(v) => duration(v).map_err(|e| r.err(key, e)),
    };
    let idle_after = read("lifecycle.idle_after", raw.idle_after.as_ref(), DEFAULT_IDLE_AFTER)?;
    let archive_after = read("lifecycle.archive_after", raw.archive_after.as_ref(), DEFAULT_ARCHIVE_AFTER)?;
    if archive_after < idle_after {
        return Err(r.err("lifecycle.archive_after", "must not be shorter than lifecycle.idle_after"));
    }
    Ok(Lifecycle {
        idle_after,
        archive_after,
        bundle: raw.bundle.unwrap_or_else(|| Lifecycle::default().bundle),
        summarizer: raw.summarizer,
        summary_to_trunk: raw.summary_to_trunk.unwrap_or(true),
        fork_carry,
    })
}

/// `90`, `"90"`, `"90s"`, `"30m"`, `"24h"`, `"3d"`: at least one second.
pub fn duration(v: &Value) -> Result<Duration, String> {
    let bad = || format!("a duration such as 90 (seconds), \"30m\", \"24h\" or \"3d\" is expected, got {v}");
    let secs = match v {
        Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        Value::String(s) => kd_proto::duration::parse_secs(s).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    let d = Duration::from_secs(secs);
    if d.is_zero() || d > MAX_AFTER {
        return Err(format!("must be between 1 second and 10 years, got {v}"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_are_seconds_or_a_number_with_a_unit() {
        assert_eq!(duration(&json!(90)), Ok(Duration::from_secs(90)));
        assert_eq!(duration(&json!("90")), Ok(Duration::from_secs(90)));
        assert_eq!(duration(&json!("30m")), Ok(Duration::from_secs(1800)));
        assert_eq!(duration(&json!("24h")), Ok(Duration::from_secs(86_400)));
        assert_eq!(duration(&json!("3d")), Ok(Duration::from_secs(3 * 86_400)));
        for bad in [json!(0), json!("-1h"), json!("1w"), json!("h"), json!(1.5), json!(null), json!("99999999999d")] {
            assert!(duration(&bad).is_err(), "{bad}");
        }
    }
}
