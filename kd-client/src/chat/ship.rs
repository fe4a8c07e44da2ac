//! From a member's work to shipping it, in the chat (issue 34), as the CLI
//! does it: `/check` runs a member's check again and says its result in
//! the log as `kd check` prints it (the stat line follows the `work`
//! event), `/rebase` brings the work up to date (`kd rebase`), `/pr` and
//! `/accept --pr` push it and open a pull request (`kd pr`), `/review` has
//! the council review it and `/review --send` sends the pending line
//! comments back as one review (`kd review --send`).

use kd_client::terminal::{safe, safe_line};
use kd_proto::comment::ReviewSent;
use kd_proto::order::Place;
use kd_proto::work::{PullRequest, RebaseOutcome, Rebased, Worktree};

use super::app::{App, Effect, Entry, Kind};

use kd_proto::work::short_commit as short;

impl App {
    /// `/check [MEMBER]`: runs the check again on a member's work, or on
    /// every member's the King may still take on this thread.
    pub fn check(&mut self, member: Option<String>) -> Vec<Effect> {
        let members: Vec<String> = match member {
            Some(m) => vec![m],
            None => self
                .work
                .values()
                .filter(|w| w.state.takes_work() && w.removed_at_ms.is_none())
                .map(|w| w.member.clone())
                .collect(),
        };
        if members.is_empty() {
            let notice = format!("no work to check on this thread; {}", self.work_here());
            self.set_notice(notice);
            return vec![];
        }
        // Asked before the answer comes: a check that ends at once is told
        // by its `work` event, which may come first.
        for m in &members {
            self.checks.insert(m.clone(), None);
        }
        self.set_notice(format!("checking the work of {}…", members.join(", ")));
        vec![Effect::Check(members)]
    }

    /// `work.check` answered: each check asked runs (or has ended).
    pub fn on_checking(&mut self, trees: Vec<Worktree>) {
        for w in trees {
            let Some(c) = &w.check else {
                self.checks.remove(&w.member);
                continue;
            };
            let started = c.started_at_ms;
            if !w.checking() {
                self.checks.remove(&w.member);
                self.say_check(&w);
            } else if let Some(known) = self.work.get(&w.member).filter(|k| ended_since(k, started)).cloned() {
                // Its result came first.
                self.checks.remove(&w.member);
                self.say_check(&known);
                continue;
            } else {
                self.checks.insert(w.member.clone(), Some(started));
            }
            self.on_work(&w);
        }
    }

    /// A check asked of `/check` ended: its result is said once.
    pub(super) fn check_ended(&mut self, w: &Worktree) {
        if let Some(Some(started)) = self.checks.get(&w.member)
            && ended_since(w, *started)
        {
            self.checks.remove(&w.member);
            self.say_check(w);
        }
    }

    /// The check's result in the log, as `kd check` prints it: the line,
    /// then the tail of a failure's output.
    fn say_check(&mut self, w: &Worktree) {
        let Some(c) = &w.check else { return };
        let line = format!("{}  {}", w.member, crate::cmd::work::check_line(c, false));
        let mut text = line.clone();
        for l in crate::cmd::check::failure_tail(c) {
            text.push_str(&format!("\n  {l}"));
        }
        self.note(text);
        self.set_notice(line);
    }

    /// A note of kd's in the log, after everything there (this chat's
    /// own: not in the thread).
    pub(super) fn note(&mut self, text: String) {
        let mut e = Entry::new(Kind::System, kd_proto::names::KD, text);
        let last = self.entries.iter().filter_map(|e| e.seq).max().unwrap_or(0);
        e.place = Place { anchor: last, class: 3, ordinal: self.entries.len() as u64, seq: u64::MAX };
        self.push(e);
    }

    /// `/rebase`'s answer, as `kd rebase` says it.
    pub fn on_rebased(&mut self, r: &Rebased) {
        let m = &r.member;
        let notice = match r.outcome {
            RebaseOutcome::UpToDate => format!("{m}'s work is already up to date with {}", r.merged_in()),
            RebaseOutcome::Merged => format!(
                "{} merged into {m}'s work cleanly ({}): /accept {m} merges it",
                r.merged_in(),
                short(r.commit.as_deref().unwrap_or_default())
            ),
            RebaseOutcome::Resolving => format!(
                "{} conflicts with {m}'s work in {}: {m} is asked to resolve the conflicts in its worktree",
                r.merged_in(),
                r.conflicts.iter().map(|f| safe_line(f)).collect::<Vec<_>>().join(", ")
            ),
        };
        self.set_notice(safe(&notice).into_owned());
    }

    /// `/pr`'s (or `/accept --pr`'s) answer: what was pushed, and the pull
    /// request's URL or the page to open one, in the log.
    pub fn on_shipped(&mut self, p: &PullRequest) {
        let s = &p.shipped;
        let pushed = format!("{} pushed to {} ({})", p.branch, s.remote, short(&s.commit));
        let mut lines = vec![pushed.clone()];
        lines.extend(p.note.clone());
        let notice = match (&s.url, s.pr) {
            (Some(url), true) => {
                lines.push(format!("pull request: {url}"));
                format!("{pushed}: pull request {url}")
            }
            (url, _) => match url {
                Some(url) => {
                    lines.push(format!("open a pull request of {} into {} at: {url}", p.branch, p.base));
                    format!("{pushed}: open a pull request at {url}")
                }
                None => {
                    lines.push(format!("open a pull request of {} into {} on your host", p.branch, p.base));
                    format!("{pushed}: open a pull request on your host")
                }
            },
        };
        if p.accepted {
            let mut accepted = format!("{}'s work is accepted by its pull request", p.member);
            if !p.superseded.is_empty() {
                accepted.push_str(&format!("; the work of {} is superseded", p.superseded.join(", ")));
            }
            lines.push(accepted);
        }
        self.note(safe(&lines.join("\n")).into_owned());
        self.set_notice(safe(&notice).into_owned());
    }

    /// `/review --send`'s answer: the member revises; its run is this chat's.
    pub fn on_review_sent(&mut self, member: &str, sent: &ReviewSent) {
        self.my_runs.extend(sent.runs.iter().cloned());
        let n = sent.comments.len();
        self.set_notice(format!(
            "sent {n} comment{} to {member} (message #{}); {member} revises in its worktree",
            if n == 1 { "" } else { "s" },
            sent.seq
        ));
    }
}

/// `w`'s check has a result, of a check started at `started` or later.
fn ended_since(w: &Worktree, started: i64) -> bool {
    w.check.as_ref().is_some_and(|c| !w.checking() && c.started_at_ms >= started)
}
