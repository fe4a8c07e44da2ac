//! Race detection on shared resources (F-X5): members declare the reads
//! and writes they make of anything named — a file, a branch — and a write
//! holds the resource for a window. A second writer inside the window is
//! rejected with the holders and a backoff after which the window has
//! passed; a read inside it is allowed with a warning. Both are events.
//! (The registry's own writes go through one writer and never race.)

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kd_proto::types::{Access, RaceCheck, RaceStatus};

/// How long a declared write holds its resource, by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(5);
/// The longest window a write may ask for.
pub const MAX_WINDOW: Duration = Duration::from_secs(3600);
/// Resources tracked at once; past it, new writes are refused.
pub const MAX_RESOURCES: usize = 10_000;

struct Write {
    agent: String,
    until: Instant,
}

/// The writes held now, per resource.
#[derive(Default)]
pub struct Races {
    writes: Mutex<HashMap<String, Vec<Write>>>,
}

impl Races {
    /// Declares an access of `resource` by `agent`; a write that does not
    /// race is held for `window`.
    pub fn check(&self, resource: &str, agent: &str, access: Access, window: Duration) -> RaceCheck {
        let now = Instant::now();
        let mut map = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, ws| {
            ws.retain(|w| w.until > now);
            !ws.is_empty()
        });
        let held: Vec<&Write> =
            map.get(resource).map(|ws| ws.iter().filter(|w| w.agent != agent).collect()).unwrap_or_default();
        let writers: Vec<String> = held.iter().map(|w| w.agent.clone()).collect();
        let wait = held.iter().map(|w| w.until.saturating_duration_since(now)).max();
        let mut check = RaceCheck {
            resource: resource.to_string(),
            agent: agent.to_string(),
            access,
            status: RaceStatus::Ok,
            writers,
            held_until_ms: None,
            backoff_ms: None,
        };
        match (access, wait) {
            (Access::Write, Some(wait)) => {
                check.status = RaceStatus::Rejected;
                // Retry once every holder's window has passed.
                check.backoff_ms = Some(wait.as_millis() as u64 + 50);
            }
            (Access::Read, Some(_)) => check.status = RaceStatus::Warning,
            (Access::Write, None) if map.len() >= MAX_RESOURCES && !map.contains_key(resource) => {
                check.status = RaceStatus::Rejected;
                check.backoff_ms = Some(DEFAULT_WINDOW.as_millis() as u64);
            }
            (Access::Write, None) => {
                let until_ms = crate::db::now_ms() + window.as_millis() as i64;
                let ws = map.entry(resource.to_string()).or_default();
                ws.retain(|w| w.agent != agent);
                ws.push(Write { agent: agent.to_string(), until: now + window });
                check.held_until_ms = Some(until_ms);
            }
            (Access::Read, None) => {}
        }
        check
    }

    /// The event kind recording a check.
    pub fn event_kind(check: &RaceCheck) -> &'static str {
        match (check.access, check.status) {
            (Access::Write, RaceStatus::Rejected) => "race.write_write",
            (Access::Read, RaceStatus::Warning) => "race.read_write",
            (Access::Write, _) => "resource.write",
            (Access::Read, _) => "resource.read",
        }
    }

    #[cfg(test)]
    fn writers(&self, resource: &str) -> usize {
        let map = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        map.get(resource).map(Vec::len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_in_the_window_is_rejected_and_a_reader_warned() {
        let r = Races::default();
        let w = Duration::from_secs(60);
        assert_eq!(r.check("src/a.rs", "claude", Access::Write, w).status, RaceStatus::Ok);
        assert_eq!(r.check("src/a.rs", "claude", Access::Write, w).status, RaceStatus::Ok, "its own write renews");
        let second = r.check("src/a.rs", "codex", Access::Write, w);
        assert_eq!((second.status, second.writers.clone()), (RaceStatus::Rejected, vec!["claude".to_string()]));
        assert!(second.backoff_ms.is_some_and(|b| b > 59_000), "{second:?}");
        assert_eq!(r.check("src/a.rs", "cursor", Access::Read, w).status, RaceStatus::Warning);
        assert_eq!(r.check("src/b.rs", "codex", Access::Write, w).status, RaceStatus::Ok, "another resource");
        assert_eq!(r.writers("src/a.rs"), 1);
    }

    #[test]
    fn a_write_is_free_again_once_its_window_passed() {
        let r = Races::default();
        assert_eq!(r.check("x", "claude", Access::Write, Duration::ZERO).status, RaceStatus::Ok);
        assert_eq!(r.check("x", "codex", Access::Write, Duration::from_secs(1)).status, RaceStatus::Ok);
    }
}
