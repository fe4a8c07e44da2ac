//! Who is at the other end of a connection (F-B6): the King — a person, a
//! script, any process of the user's — or a process of an agent kd runs.
//! An agent acts through kd only as itself, by its run's capability; its
//! name, its environment and its arguments can all be forged, so kdd also
//! looks at the connecting process itself. It knows each connection's peer
//! pid (`SO_PEERCRED`), and a peer that descends from kdd — from a run's
//! agent process, a long-lived codex app-server or ACP agent, or an orphan
//! one of them left, which the kernel reparents to kdd as their child
//! subreaper ([`reaper`]) — is *confined*: it may say hello, read the API's
//! description and use the member surface, with a token that agrees with
//! where kd put it (its run's; for a long-lived agent's processes, one of
//! that agent's member and workspace). Everything else — every King
//! action, acting as another member, another thread — is refused
//! (`rpc::confine`, `rpc::member`).
//!
//! Where kd put a process is its ancestry up to the agent kd spawned, or,
//! for an orphan (whose parent is now kdd), the session it is in: kd starts
//! every agent in a session of its own, which a process keeps across a
//! reparenting and cannot enter from outside. Never an environment marker:
//! `KD_RUN`, `KD_PEER` and the token can be read from another process's
//! `/proc/PID/environ` and carried by any process of the user's (the
//! markers only find what to kill when a run ends).
//!
//! - [`ancestry`]: parents from `/proc`, and a bounded walk up to kdd;
//! - [`children`]: what kdd spawned (the only way it spawns), by pid and
//!   start time;
//! - [`reaper`]: kdd as its agents' child subreaper, and the orphans' zombies
//!   reaped without taking a child tokio waits for.
//!
//! A peer is placed once, when it connects. Where `/proc` cannot be read
//! (not Linux), nothing is confined. Beyond its reach: a process an agent
//! has another program of the user's start for it (a terminal multiplexer's
//! server, the service manager, or a process it enters a container's pid
//! namespace through and double-forks in, which that namespace's init
//! adopts) does not descend from kdd — the agent CLI's own sandbox is what
//! keeps an agent from those.

pub mod ancestry;
pub mod children;
pub mod reaper;

use std::sync::OnceLock;

pub use children::Origin;

/// The environment variable that marks every process of a run, however far
/// it moves from the run's process group, so that it is killed with the
/// run: `KD_RUN=<run id>`. Never proof of whose a process is.
pub const RUN_MARKER: &str = "KD_RUN";

/// The environment variable that marks every process a long-lived agent (a
/// codex app-server, an ACP agent) starts, however far it moves from its
/// process group, even to a session of its own: `KD_PEER=<kdd pid>.<n>@<socket>`,
/// unique to that agent process, and naming the daemon's socket so that a
/// daemon started again on it finds what a killed one left
/// (`agent::process::kill_left_by_peers`).
pub const PEER_MARKER: &str = "KD_PEER";

/// The environment variable that marks every process of a work check:
/// `KD_CHECK=c-<id>@<socket>` — killed with the check, and, naming the
/// daemon's socket, by a daemon started again on it when a killed one left
/// it running (`agent::process::kill_left_by_peers`).
pub const CHECK_MARKER: &str = "KD_CHECK";

/// The member a run's, an ACP agent's or a codex app-server's process is:
/// a long-lived agent's capabilities are honoured for that member alone.
pub const MEMBER_VAR: &str = "KD_MEMBER";

/// A connection's peer, as placed when it connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// No process of an agent kd runs: the King.
    Free,
    /// A process of an agent kd runs, of the one `origin` names (none: kd
    /// cannot tell which — an orphan without a marker, a walk cut short).
    Confined { pid: u32, origin: Option<Origin> },
}

/// Places the process `pid` (`SO_PEERCRED`'s; none or 0: a process in a pid
/// namespace kdd cannot see, which is none of its descendants).
pub fn place(pid: Option<i32>) -> Peer {
    place_by(pid, |pid, kdd| Some(ancestry::walk_proc(pid, kdd))).unwrap_or(Peer::Free)
}

/// How many reads of `/proc` a connection's peer is placed with where it
/// is accepted ([`place_quickly`]).
pub const QUICK_READS: usize = 8;

/// [`place`], when a walk of at most [`QUICK_READS`] reads places `pid`:
/// cheap enough to do where a connection is accepted rather than on a
/// thread of its own (a thread's wake-up and the one back took ~0.25 ms
/// before `kd`'s upgrade was answered: issue 31, item 17). `None`: the walk
/// is longer (a deep chain of processes, one gone on the way), for
/// [`place`] to finish.
pub fn place_quickly(pid: Option<i32>) -> Option<Peer> {
    place_by(pid, |pid, kdd| ancestry::walk_proc_within(pid, kdd, QUICK_READS))
}

/// Places `pid` by where `walk` from it to kdd led (`None`: it did not end).
fn place_by(pid: Option<i32>, walk: impl FnOnce(u32, u32) -> Option<ancestry::Walk>) -> Option<Peer> {
    let Some(pid) = pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0) else { return Some(Peer::Free) };
    if !enabled() {
        return Some(Peer::Free);
    }
    Some(match walk(pid, std::process::id())? {
        ancestry::Walk::Elsewhere => Peer::Free,
        ancestry::Walk::Unknown => Peer::Confined { pid, origin: None },
        ancestry::Walk::Below { child } => Peer::Confined { pid, origin: origin_of(child) },
    })
}

/// Whether ancestry can be read here (`/proc`); said once when it cannot.
fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let readable = ancestry::stat(std::process::id()).is_some();
        if !readable {
            tracing::warn!("cannot read /proc: the agents' processes are not confined by their ancestry");
        }
        readable
    })
}

/// What kdd's child `child` is: a process kdd spawned, or else an orphan
/// reparented to kdd, by the session it is in — that of the agent whose
/// process it was, which kd started in a session of its own
/// (`agent::process`). Never by what it carries: any process of the user's
/// can read another's environment (`/proc/PID/environ`), marker and token,
/// and carry them; none can enter another's session. An orphan that left
/// its agent's session (`setsid`), or whose agent is gone, is no one's.
fn origin_of(child: u32) -> Option<Origin> {
    children::origin_of(child).or_else(|| by_session(child))
}

/// The origin of the agent leading the session `pid` is in: kd started it
/// there, and it is still that process (its pid and start time).
fn by_session(pid: u32) -> Option<Origin> {
    let session = ancestry::stat(pid)?.session;
    children::origin_of(session).filter(|o| !matches!(o, Origin::Tool))
}

impl Peer {
    /// Whose process it is, for a refusal.
    fn whose(&self) -> String {
        match self {
            Peer::Free => "this process is the King's".into(),
            Peer::Confined { origin: Some(Origin::Run { run, member: Some(m) }), .. } => {
                format!("this process is {m}'s agent's (run {run})")
            }
            Peer::Confined { origin: Some(Origin::Run { run, member: None }), .. } => {
                format!("this process is an agent's (run {run})")
            }
            Peer::Confined { origin: Some(Origin::Peer { member: Some(m), .. }), .. } => {
                format!("this process is {m}'s agent's")
            }
            Peer::Confined { origin: Some(Origin::Peer { workspace, .. }), .. } => {
                format!("this process is a long-lived agent's, in {workspace}")
            }
            Peer::Confined { origin: Some(Origin::Tool), .. } => "this process was started by kdd".into(),
            Peer::Confined { origin: None, .. } => "this process descends from an agent kd runs".into(),
        }
    }

    /// Why a confined peer may not call `method` (one line).
    pub fn refusal(&self, method: &str) -> String {
        format!(
            "{method} is refused: {}, and an agent acts through kd only as itself, on its thread — with kd's \
             tools (send, inbox, ack, claim, thread, search) or kd send, kd inbox, kd ack and kd claim with its \
             run's KD_RUN_TOKEN",
            self.whose()
        )
    }

    /// Whether a capability for `member` on a thread of `workspace`, given
    /// to `run` (none: kept across the member's runs), may be used by this
    /// peer; why not, when it may not.
    pub fn may_use(&self, run: Option<&str>, member: &str, workspace: &str) -> Result<(), String> {
        let Peer::Confined { origin, .. } = self else { return Ok(()) };
        let agrees = match origin {
            Some(Origin::Run { run: own, .. }) => run == Some(own.as_str()),
            Some(Origin::Peer { member: own, workspace: w, .. }) => {
                w == workspace && own.as_deref().is_none_or(|m| m == member)
            }
            Some(Origin::Tool) | None => false,
        };
        if agrees {
            return Ok(());
        }
        Err(match origin {
            None => "kd cannot tell which agent this process belongs to (it left its agent's process tree and \
                     session, or its agent is gone): it may not act as a member"
                .into(),
            _ => format!("{}: that capability is not its run's — an agent acts only as itself", self.whose()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> Peer {
        Peer::Confined { pid: 7, origin: Some(Origin::Run { run: id.into(), member: Some("claude".into()) }) }
    }

    #[test]
    fn a_confined_process_uses_only_a_capability_its_ancestry_agrees_with() {
        assert!(Peer::Free.may_use(Some("r1"), "claude", "/w").is_ok(), "the King may present any");
        assert!(run("r1").may_use(Some("r1"), "claude", "/w").is_ok());
        let e = run("r1").may_use(Some("r2"), "codex", "/w").unwrap_err();
        assert!(e.contains("claude's agent's (run r1)") && e.contains("not its run's"), "{e}");
        assert!(run("r1").may_use(None, "claude", "/w").is_err(), "a grant kept across runs is not a run's");
        let acp = Peer::Confined {
            pid: 7,
            origin: Some(Origin::Peer {
                marker: "1.1@/s".into(),
                member: Some("claude".into()),
                workspace: "/w".into(),
            }),
        };
        assert!(acp.may_use(None, "claude", "/w").is_ok() && acp.may_use(Some("r9"), "claude", "/w").is_ok());
        assert!(acp.may_use(None, "codex", "/w").is_err(), "another member");
        assert!(acp.may_use(None, "claude", "/elsewhere").is_err(), "another workspace");
        let codex = Peer::Confined {
            pid: 7,
            origin: Some(Origin::Peer { marker: "1.2@/s".into(), member: None, workspace: "/w".into() }),
        };
        assert!(codex.may_use(None, "codex", "/w").is_ok() && codex.may_use(None, "codex2", "/w").is_ok());
        assert!(codex.may_use(None, "codex", "/v").is_err());
        let lost = Peer::Confined { pid: 7, origin: None };
        assert!(lost.may_use(Some("r1"), "claude", "/w").unwrap_err().contains("cannot tell"));
    }

    #[test]
    fn a_refusal_names_whose_process_it_is_and_what_to_use() {
        let why = run("r1").refusal("message.route");
        assert!(why.starts_with("message.route is refused: this process is claude's agent's (run r1)"), "{why}");
        assert!(why.contains("KD_RUN_TOKEN") && !why.contains('\n'), "{why}");
    }

    #[tokio::test]
    async fn a_child_of_this_process_is_confined_to_what_it_was_spawned_as() {
        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("30").kill_on_drop(true);
        let origin = Origin::Run { run: "r-place-test".into(), member: Some("claude".into()) };
        let mut child = children::spawn(&mut cmd, origin.clone()).unwrap();
        let pid = child.id().unwrap();
        // Placed as kdd places its agents' processes, this process standing for kdd.
        let walk = ancestry::walk_proc(pid, std::process::id());
        assert_eq!(walk, ancestry::Walk::Below { child: pid });
        assert_eq!(origin_of(pid), Some(origin));
        assert!(matches!(place(Some(pid as i32)), Peer::Confined { origin: Some(Origin::Run { .. }), .. }));
        child.kill().await.unwrap();
    }

    #[tokio::test]
    async fn a_process_is_placed_by_the_session_kd_started_its_agent_in_whatever_it_carries() {
        use crate::agent::process::Invocation;
        let tmp = tempfile::tempdir().unwrap();
        let pid_file = tmp.path().join("pid");
        // The agent starts a process that carries another run's marker.
        let script = format!("KD_RUN=r-other KD_MEMBER=codex sleep 30 & echo $! > {}; wait", pid_file.display());
        let inv = Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), script],
            stdin: None,
            env: vec![(RUN_MARKER.into(), "r-session-test".into()), (MEMBER_VAR.into(), "claude".into())],
        };
        let mut agent = crate::agent::process::spawn(&inv, tmp.path()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let child: u32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse().ok()) {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the agent never started its child");
            tokio::task::yield_now().await;
        };
        let leader = agent.id().unwrap();
        let stat = ancestry::stat(child).unwrap();
        assert_eq!(stat.session, leader, "the agent leads its own session");
        let origin = Origin::Run { run: "r-session-test".into(), member: Some("claude".into()) };
        assert_eq!(by_session(child), Some(origin), "the session's, not the marker's");
        assert_eq!(by_session(std::process::id()), None, "a process outside is no one's");
        crate::agent::process::signal_group(leader, rustix::process::Signal::KILL);
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(child as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        agent.wait().await.unwrap();
    }

    #[test]
    fn this_test_process_is_the_kings() {
        assert_eq!(place(Some(std::process::id() as i32)), Peer::Free);
        assert_eq!(place(None), Peer::Free);
        assert_eq!(place(Some(0)), Peer::Free);
    }
}
