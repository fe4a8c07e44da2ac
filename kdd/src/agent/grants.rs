//! Capabilities (F-B6): the unguessable token kd gives each run — or each
//! codex thread an app-server keeps loaded, or each ACP session — standing
//! for one member on one thread. An agent acts through kd only by its
//! token (`kd mcp`'s tools, `kd send` with `KD_RUN_TOKEN`), never by a name
//! it claims. A token is valid while its run is in flight (a grant without
//! a run: while its member has a run in flight on its thread); it is
//! forgotten when its run ends, its process ends or its thread goes.
//! In memory only: a daemon that restarts has no run a token could name.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::registry::Registry;

/// Bytes of randomness in a token (256 bits).
const TOKEN_BYTES: usize = 32;
/// What every token starts with, so that one is recognisable in a log or an
/// environment (and never mistaken for a thread or run id).
pub const TOKEN_PREFIX: &str = "kdcap_";

/// What a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub thread: String,
    pub member: String,
    /// The run it was given to; `None` for a grant that outlives a run (a
    /// codex thread or an ACP session kept across the member's runs).
    pub run: Option<String>,
    pub workspace: String,
}

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("unknown capability: kd gave no run this token")]
    Unknown,
    #[error("the capability's run has ended ({member} on thread {thread})")]
    Ended { member: String, thread: String },
}

#[derive(Default)]
pub struct Grants {
    by_token: Mutex<HashMap<String, Grant>>,
}

impl Grants {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Grant>> {
        self.by_token.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh token standing for `grant`. `None` when the system gives no
    /// randomness (then the run goes without a capability).
    pub fn issue(&self, grant: Grant) -> Option<String> {
        let token = fresh_token()?;
        self.map().insert(token.clone(), grant);
        Some(token)
    }

    /// The grant `token` stands for, if its run (or, for a grant without a
    /// run, a run of its member on its thread) is in flight.
    pub fn check(&self, token: &str, runs: &Registry) -> Result<Grant, Refused> {
        let grant = self.map().get(token).cloned().ok_or(Refused::Unknown)?;
        let live = runs.list(Some(&grant.thread)).iter().any(|r| match &grant.run {
            Some(run) => &r.id == run,
            None => r.member == grant.member,
        });
        if live { Ok(grant) } else { Err(Refused::Ended { member: grant.member, thread: grant.thread }) }
    }

    pub fn revoke(&self, token: &str) {
        self.map().remove(token);
    }

    /// Forgets the tokens given to `run`.
    pub fn revoke_run(&self, run: &str) {
        self.map().retain(|_, g| g.run.as_deref() != Some(run));
    }

    /// Forgets every token of `thread` (it was deleted or archived).
    pub fn revoke_thread(&self, thread: &str) {
        self.map().retain(|_, g| g.thread != thread);
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `kdcap_` and 256 random bits from the kernel, as lower-case hex.
fn fresh_token() -> Option<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    let mut filled = 0;
    while filled < TOKEN_BYTES {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                tracing::error!("no randomness for a capability: {e}");
                return None;
            }
        }
    }
    let mut token = String::with_capacity(TOKEN_PREFIX.len() + 2 * TOKEN_BYTES);
    token.push_str(TOKEN_PREFIX);
    for b in bytes {
        token.push_str(&format!("{b:02x}"));
    }
    Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::registry::{Place, Run};

    fn grant(run: Option<&str>) -> Grant {
        Grant { thread: "t".into(), member: "claude".into(), run: run.map(str::to_string), workspace: "/w".into() }
    }

    fn run(id: &str, member: &str) -> Run {
        Run::new(id.into(), 1, "t".into(), member.into(), "claude", Place::default(), None)
    }

    #[test]
    fn tokens_are_long_random_and_distinct() {
        let g = Grants::default();
        let a = g.issue(grant(Some("r1"))).unwrap();
        let b = g.issue(grant(Some("r1"))).unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 64, "{a}");
    }

    #[test]
    fn a_token_is_valid_while_its_run_is_in_flight() {
        let g = Grants::default();
        let runs = Registry::default();
        let token = g.issue(grant(Some("r1"))).unwrap();
        assert!(matches!(g.check(&token, &runs), Err(Refused::Ended { .. })), "no run yet");
        let r = runs.claim("t", "claude", &Place::default(), |_| run("r1", "claude")).into_run();
        assert_eq!(g.check(&token, &runs), Ok(grant(Some("r1"))));
        assert_eq!(g.check("kdcap_forged", &runs), Err(Refused::Unknown));
        r.set_status(kd_proto::types::RunStatus::Done);
        assert!(matches!(g.check(&token, &runs), Err(Refused::Ended { .. })), "ended");
        g.revoke_run("r1");
        assert_eq!(g.check(&token, &runs), Err(Refused::Unknown));
    }

    #[test]
    fn a_grant_without_a_run_is_valid_while_its_member_runs_on_its_thread() {
        let g = Grants::default();
        let runs = Registry::default();
        let token = g.issue(grant(None)).unwrap();
        let other = runs.claim("t", "codex", &Place::default(), |_| run("r1", "codex")).into_run();
        assert!(g.check(&token, &runs).is_err(), "another member's run is not claude's");
        let _mine = runs.claim("t", "claude", &Place::default(), |_| run("r2", "claude"));
        assert!(g.check(&token, &runs).is_ok());
        drop(other);
        g.revoke_thread("t");
        assert_eq!(g.check(&token, &runs), Err(Refused::Unknown));
    }
}
