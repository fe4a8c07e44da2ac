//! A check in every worktree, and fix until green (issue 34 items 1-2).
//!
//! With `work.check` set (an argv, e.g. `["cargo", "test"]`), after each
//! run of a member's work is committed kd runs the check in that worktree
//! on that commit — confined to the worktree as the member is
//! ([`sandbox`]: it writes nowhere else), bounded in time
//! (`work.check_timeout`, killed as a process group) and in the output it
//! keeps (the tail, 16 KiB) ([`run`]). The result (`pass`, `fail`,
//! `timeout`, `error`; exit code, duration, commit, output) is on the work
//! in the registry, told on the thread as a `work` event. The check is
//! marked `running` when the run's work is committed
//! ([`crate::agent::work::after`]), runs beside every other run (never on
//! the King's tree, never holding a run or shutdown: a newer check of the
//! same work, and the daemon stopping, kill it), and a check a stopped
//! daemon left running runs again at the next start ([`Checks::resume`]).
//!
//! With `kd work --until-green N` (`work.fix_rounds`), a member whose
//! check does not pass is sent back, in its worktree, with the failure's
//! tail — a King's message to it alone, so a work run like any other
//! (cancel, timeout, cost, journaled and resumed across a restart) — up to
//! N times; the work counts its tries (`fixes`). `kd check MEMBER`
//! (`work.check`) runs the check again ([`Checks::check_now`]).

pub mod run;
pub mod sandbox;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::types::{RunStatus, ThreadEvent};
use kd_proto::work::{CheckStatus, WorkCheck, WorkState, Worktree};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::council::{Council, send};
use crate::db::check::{CheckEnded, Fix, Started};
use crate::db::{now_ms, random_id};

/// Bytes of a failed check's output a member sent back to fix it is given,
/// and a reviewer or voter sees.
const PROMPT_TAIL: usize = 4 * 1024;

/// The checks in flight, by thread and member (each with its stop and a
/// number telling it from a newer check of the same work).
pub struct Checks {
    me: Weak<Checks>,
    council: Weak<Council>,
    running: Mutex<Running>,
    next: std::sync::atomic::AtomicU64,
    stop: CancellationToken,
}

type Running = HashMap<(String, String), (u64, CancellationToken, JoinHandle<()>)>;

impl Checks {
    /// The checks of `council`'s work runs, told each work run's end
    /// ([`super::after`]).
    pub fn new(council: &Arc<Council>) -> Arc<Checks> {
        Arc::new_cyclic(|me| Checks {
            me: me.clone(),
            council: Arc::downgrade(council),
            running: Mutex::default(),
            next: Default::default(),
            stop: CancellationToken::new(),
        })
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the check recorded `running` on `member`'s work on `thread`,
    /// replacing (killing) a check of the same work still in flight.
    /// `fix`: a failure sends the member back when it has tries left.
    fn spawn(&self, thread: &str, member: &str, path: Option<String>, fix: bool) {
        if self.stop.is_cancelled() {
            return;
        }
        let (Some(council), Some(me)) = (self.council.upgrade(), self.me.upgrade()) else { return };
        let stop = self.stop.child_token();
        let key = (thread.to_string(), member.to_string());
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (k, token) = (key.clone(), stop.clone());
        // Held while the task is registered, so that it cannot remove
        // itself before it is there.
        let mut running = self.running();
        let task = tokio::spawn(async move {
            check(&council, &k.0, &k.1, path, fix, &token).await;
            let mut running = me.running();
            if running.get(&k).is_some_and(|(m, _, _)| *m == n) {
                running.remove(&k);
            }
        });
        if let Some((_, old, _)) = running.insert(key, (n, stop, task)) {
            old.cancel();
        }
    }

    /// `work.check`: runs the check again on the member's last commit.
    pub async fn check_now(
        &self,
        thread: &str,
        member: &str,
        path: Option<String>,
    ) -> Result<Worktree, ErrorObjectOwned> {
        let council = self.council.upgrade().ok_or_else(|| ErrorCode::ShuttingDown.error("the daemon is stopping"))?;
        if self.stop.is_cancelled() || council.agents.is_closed() {
            return Err(ErrorCode::ShuttingDown.error("the daemon is shutting down"));
        }
        let db = &council.agents.db;
        let w = super::worktree(db, thread, member).await?;
        if w.state == WorkState::Working {
            return Err(
                ErrorCode::Conflict.error(format!("{member} is still working: its work is checked when its run ends"))
            );
        }
        if !w.state.takes_work() || w.removed_at_ms.is_some() {
            let what = if w.removed_at_ms.is_some() { "removed".to_string() } else { w.state.as_str().to_string() };
            return Err(ErrorCode::Conflict.error(format!("{member}'s work is {what}: there is nothing to check")));
        }
        let workspace = db.thread(thread.to_string()).await?.workspace;
        let config = crate::council::send::read_config(&workspace, path.as_deref())?;
        if config.work.check.is_none() {
            return Err(ErrorCode::InvalidArgument.error(format!(
                "no check is configured for {workspace}: set work.check in its .kd/config.json, e.g. \
                 \"work\": {{\"check\": [\"cargo\", \"test\"]}}"
            )));
        }
        match db.begin_check(thread.to_string(), member.to_string(), now_ms()).await? {
            Started::Begun(w) => {
                self.spawn(thread, member, path, false);
                Ok(w)
            }
            Started::Settled(w) => {
                Err(ErrorCode::Conflict.error(format!("{member}'s work is {}: nothing to check", w.state.as_str())))
            }
            Started::NoWork => Err(ErrorCode::NotFound.error(format!("{member} has no work on thread {thread}"))),
        }
    }

    /// kd changed the member's work itself (a clean `kd rebase` committed
    /// a merge): with a check configured, the check of its new head runs,
    /// as after a run — a failure sends the member back when it has tries
    /// left. Nothing without a check.
    pub async fn after_change(&self, thread: &str, member: &str, path: Option<String>) {
        let Some(council) = self.council.upgrade() else { return };
        let db = &council.agents.db;
        let configured = match db.thread(thread.to_string()).await {
            Ok(t) => {
                crate::config::load_for(Path::new(&t.workspace), path.as_deref()).is_ok_and(|c| c.work.check.is_some())
            }
            Err(_) => false,
        };
        if !configured || self.stop.is_cancelled() {
            return;
        }
        match db.begin_check(thread.to_string(), member.to_string(), now_ms()).await {
            Ok(Started::Begun(_)) => self.spawn(thread, member, path, true),
            Ok(_) => {}
            Err(e) => tracing::warn!(thread, member, "cannot check the work kd changed: {e}"),
        }
    }

    /// At start: the checks a stopped daemon left running (of worktrees on
    /// this host) run again.
    pub async fn resume(&self) -> usize {
        let Some(council) = self.council.upgrade() else { return 0 };
        let trees = match council.agents.db.running_checks().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("cannot read the checks left running: {e}");
                return 0;
            }
        };
        let mut n = 0;
        for w in trees.iter().filter(|w| Path::new(&w.path).is_dir()) {
            self.spawn(&w.thread, &w.member, None, true);
            n += 1;
        }
        n
    }

    /// The daemon stops: every check in flight is killed (each within the
    /// runner's kill grace) and left `running`, to run again at the next
    /// start.
    pub async fn stop(&self, grace: Duration) {
        self.stop.cancel();
        let tasks: Vec<JoinHandle<()>> = self.running().drain().map(|(_, (_, _, t))| t).collect();
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(grace + Duration::from_secs(3), all).await.is_err() {
            tracing::warn!("a check did not stop in time");
        }
    }
}

impl Checks {
    /// A member's work run ended with `status` and its work was committed
    /// (its check marked running when one is configured): the check runs.
    pub fn committed(&self, thread: &str, member: &str, status: RunStatus, path: Option<String>) {
        // A run the King cancelled, or the daemon cut, is not sent back.
        let fix = !matches!(status, RunStatus::Cancelled | RunStatus::Interrupted);
        self.spawn(thread, member, path, fix);
    }
}

/// Runs the check of `member`'s work on `thread` recorded `running`, records
/// its result, and sends the member back when it failed and `fix` and its
/// tries allow. Nothing is recorded when `stop` fires (a newer check, the
/// daemon stopping).
async fn check(
    council: &Arc<Council>,
    thread: &str,
    member: &str,
    path: Option<String>,
    fix: bool,
    stop: &CancellationToken,
) {
    let db = &council.agents.db;
    let w = match db.worktree(thread.to_string(), member.to_string()).await {
        Ok(Some(w)) => w,
        Ok(None) => return,
        Err(e) => return tracing::warn!(thread, member, "cannot read the work to check: {e}"),
    };
    let Some(begun) = w.check.clone().filter(|c| c.status == CheckStatus::Running) else { return };
    let settings = match db.thread(thread.to_string()).await {
        Ok(t) => crate::config::load_for(Path::new(&t.workspace), path.as_deref()).map(|c| c.work),
        Err(e) => return tracing::warn!(thread, member, "cannot read the thread of the work to check: {e}"),
    };
    let outcome = match settings {
        Err(e) => Some(error(format!("configuration: {e}"))),
        Ok(work) => match work.check {
            None => Some(error("work.check is not set (any more): nothing was run".into())),
            Some(argv) => {
                let dir = PathBuf::from(&w.path);
                let tmp = crate::agent::work::make_tmp_dir_of(&dir).ok();
                // Its marker names kdd's socket: what a killed kdd's check
                // left is found at the next start (`agent::recover`).
                let id = format!("c-{}@{}", random_id(10), council.agents.socket.display());
                let spec = run::Spec {
                    argv: &argv,
                    dir: &dir,
                    tmp: tmp.as_deref(),
                    path: path.as_deref(),
                    timeout: work.check_timeout,
                    grace: council.agents.kill_grace,
                    id: &id,
                };
                if dir.is_dir() {
                    run::run(&spec, stop).await
                } else {
                    Some(error(format!("the worktree {} is gone", dir.display())))
                }
            }
        },
    };
    let Some(o) = outcome else { return };
    let result = WorkCheck {
        status: o.status,
        commit: begun.commit.clone(),
        exit_code: o.exit_code,
        duration_ms: o.duration_ms,
        output: o.output,
        started_at_ms: begun.started_at_ms,
    };
    tracing::info!(thread, member, status = result.status.as_str(), ms = result.duration_ms, "work checked");
    let fix = if fix { Fix::Yes { fixes: w.fixes } } else { Fix::No };
    let ended = db
        .until_back(
            &format!("the check of {member}'s work"),
            || council.agents.is_closed(),
            // A try after a failure may follow a commit whose answer was lost.
            |again| db.end_check(thread.to_string(), member.to_string(), result.clone(), fix, again),
        )
        .await;
    match ended {
        Ok(CheckEnded::Recorded { worktree, fixing: true }) => send_fix(council, &worktree, path).await,
        Ok(_) => {}
        Err(e) => tracing::warn!(thread, member, "cannot record the check: {e}"),
    }
}

fn error(output: String) -> run::Outcome {
    run::Outcome { status: CheckStatus::Error, exit_code: None, duration_ms: 0, output }
}

/// Sends the member back to fix its work: a King's message to it alone
/// on the work thread, so a work run like any other. When it cannot be
/// sent, the work is done again and the log says why.
async fn send_fix(council: &Arc<Council>, w: &Worktree, path: Option<String>) {
    let mut req = crate::work::to_member(&w.thread, &w.member, fix_message(w), (None, path));
    req.correlation_id = Some(format!("fix-{}-{}", w.member, w.fixes));
    // A vote over the task waits for the fix: it is not superseded.
    req.beside = true;
    if let Err(e) = send::send(council, req).await {
        tracing::warn!(
            thread = w.thread,
            member = w.member,
            "cannot send the member back to fix its work: {}",
            e.message()
        );
        let db = &council.agents.db;
        match db.move_worktree_state(w.thread.clone(), w.member.clone(), WorkState::Done).await {
            Ok(Some(w)) => council.agents.hub.publish(&w.thread.clone(), ThreadEvent::Work { worktree: Box::new(w) }),
            Ok(None) => {}
            Err(e) => tracing::warn!(thread = w.thread, "cannot record the work done: {e}"),
        }
    }
}

/// What a member sent back to fix its work is told: the check failed on
/// its commit, which try this is, and the output's tail.
pub fn fix_message(w: &Worktree) -> String {
    let c = w.check.as_ref();
    let how = c.map(|c| c.summary()).unwrap_or_else(|| "check fail".into());
    let commit = c.map(|c| short(&c.commit)).unwrap_or_default();
    let output = c.map(|c| run::tail(&c.output, PROMPT_TAIL)).unwrap_or_default();
    format!(
        "The check of your work did not pass ({how}, on your commit {commit}). Fix your work in your worktree so \
         that it passes: this is try {} of {}. kd runs the check again when you are done.\n\nThe end of what the \
         check printed:\n```\n{}\n```",
        w.fixes,
        w.until_green,
        output.trim_end()
    )
}

/// The check of a member's work as a reviewer or voter reads it, beside
/// its diff: its result, and for one that did not pass the end of its
/// output (the worktree's path and branch, which name the member, left
/// out). None when no check ran.
pub fn prompt_text(w: &Worktree) -> Option<String> {
    let c = w.check.as_ref()?;
    let secs = c.duration_ms as f64 / 1000.0;
    let mut out = match c.status {
        CheckStatus::Running => "Check (work.check): still running.".to_string(),
        _ => format!(
            "Check (work.check) on its last commit: {} in {secs:.1} s.",
            c.summary().trim_start_matches("check ")
        ),
    };
    if matches!(c.status, CheckStatus::Fail | CheckStatus::Timeout | CheckStatus::Error) && !c.output.trim().is_empty()
    {
        let tail = run::tail(&c.output, PROMPT_TAIL / 2).replace(&w.path, ".").replace(&w.branch, "its branch");
        out.push_str(&format!(" The end of its output:\n```\n{}\n```", tail.trim_end()));
    }
    Some(out)
}

/// A diff as a voter reads it, its check's result first.
pub fn with_diff(w: &Worktree, diff: String) -> String {
    match prompt_text(w) {
        Some(c) => format!("{c}\n\n{diff}"),
        None => diff,
    }
}

/// Waits until no check of `thread`'s work runs and no member sent back
/// to fix its work is still at it (at most `longest`), so that a vote
/// sees every diff as its last try left it, with its check's result.
pub async fn settled(council: &Council, thread: &str, longest: Duration) {
    let db = &council.agents.db;
    let mut events = council.agents.hub.subscribe(thread);
    let deadline = tokio::time::Instant::now() + longest;
    loop {
        let busy = match db.worktrees_of(thread.to_string()).await {
            Ok(trees) => trees.iter().any(unsettled),
            Err(_) => false,
        };
        if !busy || council.agents.is_closed() {
            return;
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => return tracing::warn!(thread, "a check or a fix still runs: the vote goes on without it"),
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
            Ok(_) => {}
        }
    }
}

/// Whether `w` is still to change before a vote: its check runs, or it
/// was sent back to fix its work (the failed check and the try counted
/// at once, so no moment falls between them).
fn unsettled(w: &Worktree) -> bool {
    w.checking() || (w.state == WorkState::Working && w.fixes > 0)
}

/// The longest a vote over `config`'s work waits for it to settle: each
/// try (the first and every fix) a run and a check, at their timeouts.
pub fn settle_time(config: &crate::config::Config, members: &[String], until_green: u32) -> Duration {
    let run = members.iter().map(|m| config.timeout_s(m)).max().unwrap_or(config.council.timeout_s);
    let one_try = Duration::from_secs(run) + config.work.check_timeout;
    one_try * (until_green + 1) + Duration::from_secs(30)
}

/// How many times a member of a new task whose check fails is sent back:
/// `asked` (`kd work --until-green N`), else `work.fix_rounds`. Refused
/// with no check configured. With a vote, the ballots wait for the fixes
/// ([`settled`]).
pub fn until_green(config: &crate::config::Config, asked: Option<u32>) -> Result<u32, ErrorObjectOwned> {
    let n = asked.unwrap_or(config.work.fix_rounds);
    if n == 0 {
        return Ok(0);
    }
    if config.work.check.is_none() {
        if asked.is_some() {
            return Err(ErrorCode::InvalidArgument.error(
                "--until-green needs a check: set work.check in .kd/config.json, e.g. \"work\": {\"check\":                  [\"cargo\", \"test\"]}",
            ));
        }
        return Ok(0);
    }
    Ok(n)
}

use kd_proto::work::short_commit as short;

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> Worktree {
        let mut w = crate::db::fixtures::worktree("claude", 1);
        w.until_green = 2;
        w.fixes = 1;
        w.check = Some(WorkCheck {
            status: CheckStatus::Fail,
            commit: "c".repeat(40),
            exit_code: Some(1),
            duration_ms: 1500,
            output: format!("test a ... FAILED in {}/src/a.rs on kd/t1/claude\n", w.path),
            started_at_ms: 1,
        });
        w
    }

    #[test]
    fn a_member_sent_back_is_told_the_try_and_the_failures_tail() {
        let text = fix_message(&failed());
        assert!(text.contains("check fail (exit 1)") && text.contains("cccccccccccc"), "{text}");
        assert!(text.contains("try 1 of 2") && text.contains("test a ... FAILED"), "{text}");
    }

    #[test]
    fn a_ballot_shows_the_check_without_naming_the_member() {
        let text = prompt_text(&failed()).unwrap();
        assert!(
            text.contains("fail (exit 1) in 1.5 s") && text.contains("FAILED in ./src/a.rs on its branch"),
            "{text}"
        );
        assert!(!text.contains("claude"), "{text}");
        let mut pass = failed();
        pass.check.as_mut().unwrap().status = CheckStatus::Pass;
        assert_eq!(prompt_text(&pass).unwrap(), "Check (work.check) on its last commit: pass in 1.5 s.");
        assert_eq!(prompt_text(&crate::db::fixtures::worktree("codex", 1)), None);
    }
}
