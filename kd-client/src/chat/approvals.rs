//! The King's approvals in the chat (issue 33): a pending approval of the
//! thread is shown in the asking member's panel (who asks, the tool's kind
//! and command, the choices) and the status bar is its prompt, naming the
//! keys. The keys act only while the input is empty, so they never eat the
//! King's typing: `y` allows once, `a` for the rest of the run (when the
//! CLI can honour it), `n` denies, `N` starts `/deny ID ` for a message,
//! Esc leaves it for later (until `/approvals`). The oldest is asked first,
//! the others counted. Decided anywhere — here, another client, the
//! policy, a timeout, its run ending — the prompt goes and the panel says
//! how, from `ApprovalDecided`. The thread's pending ones are fetched
//! (`approval.list`) whenever the chat opens it, so nothing waiting is
//! missed.

use std::collections::BTreeSet;

use kd_proto::approval::{Approval, ApprovalState, Decision, Scope};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::app::{App, Effect, Kind, new_input};
use crate::approval_text;

/// Approvals a panel keeps (its latest; the oldest decided go first).
const PER_PANEL: usize = 4;
/// Decided approvals remembered, so a late request of one is not asked again.
const REMEMBERED: usize = 1024;
/// Characters of a decided approval's line.
const DECIDED_LINE: usize = 120;

/// The thread's approvals as the chat knows them.
#[derive(Debug, Default)]
pub struct Approvals {
    /// Pending, oldest first.
    pub pending: Vec<Approval>,
    /// Left for later (Esc): not prompted until `/approvals`.
    pub later: BTreeSet<String>,
    /// Decisions sent and not answered yet.
    pub deciding: BTreeSet<String>,
    /// Pending ones no panel shows yet (their run's panel is not there).
    unplaced: BTreeSet<String>,
    /// Decided ones (the newest [`REMEMBERED`]).
    ended: BTreeSet<String>,
}

impl App {
    /// The thread's pending approvals as the daemon lists them (on open,
    /// after a reconnect, with `/approvals`, which lists every thread's).
    pub fn set_approvals(&mut self, listed: &[Approval]) {
        let mut mine: Vec<Approval> =
            listed.iter().filter(|a| a.thread == self.thread.id && a.state.is_pending()).cloned().collect();
        mine.sort_by(|a, b| (a.requested_at_ms, &a.id).cmp(&(b.requested_at_ms, &b.id)));
        // Pending before, not now: decided while the chat did not see it.
        let gone: Vec<String> = self
            .approvals
            .pending
            .iter()
            .filter(|a| !mine.iter().any(|m| m.id == a.id))
            .map(|a| a.id.clone())
            .collect();
        for e in self.entries.iter_mut() {
            let before = e.approvals.len();
            e.approvals.retain(|a| !gone.contains(&a.id));
            if e.approvals.len() != before {
                e.changed();
            }
        }
        self.approvals.pending.clear();
        for a in mine {
            self.on_approval(&a);
        }
        self.dirty = true;
    }

    /// An approval of the thread requested or decided (its event, or the
    /// answer to this chat's decision).
    pub fn on_approval(&mut self, a: &Approval) {
        if a.thread != self.thread.id {
            return;
        }
        let ap = &mut self.approvals;
        if a.state.is_pending() {
            if ap.ended.contains(&a.id) {
                return;
            }
            match ap.pending.iter_mut().find(|p| p.id == a.id) {
                Some(p) => *p = a.clone(),
                None => {
                    ap.pending.push(a.clone());
                    ap.pending.sort_by(|a, b| (a.requested_at_ms, &a.id).cmp(&(b.requested_at_ms, &b.id)));
                }
            }
        } else {
            ap.pending.retain(|p| p.id != a.id);
            ap.later.remove(&a.id);
            ap.deciding.remove(&a.id);
            ap.unplaced.remove(&a.id);
            if ap.ended.len() >= REMEMBERED {
                ap.ended.pop_first();
            }
            ap.ended.insert(a.id.clone());
        }
        self.show_approval(a);
        self.dirty = true;
    }

    /// Puts `a` in its member's panel: the one holding it already, else its
    /// run's, else (pending) the member's panel in flight; with none, it
    /// waits for one ([`App::place_approvals`]).
    fn show_approval(&mut self, a: &Approval) {
        let holding = self.entries.iter().rposition(|e| e.approvals.iter().any(|x| x.id == a.id));
        let at = holding
            .or_else(|| a.run.as_ref().and_then(|r| self.entries.iter().rposition(|e| e.run.as_ref() == Some(r))))
            .or_else(|| {
                a.state.is_pending().then(|| {
                    self.entries
                        .iter()
                        .rposition(|e| e.member == a.member && matches!(e.kind, Kind::Waiting | Kind::Streaming))
                })?
            });
        let Some(i) = at else {
            if a.state.is_pending() {
                self.approvals.unplaced.insert(a.id.clone());
            }
            return;
        };
        self.approvals.unplaced.remove(&a.id);
        let e = &mut self.entries[i];
        match e.approvals.iter_mut().find(|x| x.id == a.id) {
            Some(x) => *x = a.clone(),
            None => {
                e.approvals.push(a.clone());
                while e.approvals.len() > PER_PANEL {
                    let old = e.approvals.iter().position(|x| !x.state.is_pending()).unwrap_or(0);
                    e.approvals.remove(old);
                }
            }
        }
        e.changed();
        self.grew();
    }

    /// Shows the pending approvals no panel showed yet, once their run's
    /// panel is there.
    pub(super) fn place_approvals(&mut self) {
        if self.approvals.unplaced.is_empty() {
            return;
        }
        let waiting: Vec<Approval> =
            self.approvals.pending.iter().filter(|a| self.approvals.unplaced.contains(&a.id)).cloned().collect();
        self.approvals.unplaced.clear();
        for a in waiting {
            self.show_approval(&a);
        }
    }

    /// The log was loaded again: every pending approval waits for its panel.
    pub(super) fn approvals_reloaded(&mut self, same_thread: bool) {
        if !same_thread {
            self.approvals = Approvals::default();
            return;
        }
        self.approvals.unplaced = self.approvals.pending.iter().map(|a| a.id.clone()).collect();
        self.place_approvals();
    }

    /// The approval the prompt is about: the oldest pending one not left
    /// for later nor being decided.
    pub fn asked(&self) -> Option<&Approval> {
        let ap = &self.approvals;
        ap.pending.iter().find(|a| !ap.later.contains(&a.id) && !ap.deciding.contains(&a.id))
    }

    /// Pending approvals besides the one asked (left for later included).
    fn more_pending(&self) -> usize {
        let ap = &self.approvals;
        ap.pending.iter().filter(|a| !ap.deciding.contains(&a.id)).count().saturating_sub(1)
    }

    /// A key while an approval is asked and the input is empty (nothing
    /// else over the log): the approval's keys act, any other key does
    /// what it always does (None).
    pub fn approval_key(&mut self, key: KeyEvent) -> Option<Vec<Effect>> {
        if key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT)
            || !self.input.is_empty()
            || self.overlay.is_some()
            || self.confirm.is_some()
            || self.diff.is_some()
        {
            return None;
        }
        let a = self.asked()?.clone();
        Some(match key.code {
            KeyCode::Char('y') => self.decide(a.id, Decision::Approve, Some(Scope::Once), None),
            KeyCode::Char('a') if a.scopes.contains(&Scope::Run) => {
                self.decide(a.id, Decision::Approve, Some(Scope::Run), None)
            }
            KeyCode::Char('a') => {
                self.set_notice(format!("{}'s CLI cannot be allowed for the run: y allows this once", a.member));
                vec![]
            }
            KeyCode::Char('n') => self.decide(a.id, Decision::Deny, None, None),
            KeyCode::Char('N') => {
                self.input = new_input();
                self.input.insert_str(format!("/deny {} ", a.id));
                self.set_notice(format!("type what {} is told, then Enter denies it", a.member));
                vec![]
            }
            KeyCode::Esc => {
                self.approvals.later.insert(a.id.clone());
                self.set_notice(format!("{} left for later: /approvals lists it again", a.id));
                vec![]
            }
            _ => return None,
        })
    }

    /// The King's decision goes to the daemon (`/approve`, `/deny`, the keys).
    pub fn decide(
        &mut self,
        id: String,
        decision: Decision,
        scope: Option<Scope>,
        message: Option<String>,
    ) -> Vec<Effect> {
        self.approvals.deciding.insert(id.clone());
        self.set_notice(match decision {
            Decision::Approve => format!("approving {id}…"),
            Decision::Deny => format!("denying {id}…"),
        });
        vec![Effect::Decide { id, decision, scope, message }]
    }

    /// The daemon's answer to a decision: the approval as decided, or why not.
    pub fn on_decided(&mut self, id: &str, answer: Result<Approval, String>) {
        match answer {
            Ok(a) => {
                self.on_approval(&a);
                self.set_notice(format!("{}: {}", a.id, outcome(&a)));
            }
            Err(e) => {
                self.approvals.deciding.remove(id);
                self.set_notice(kd_client::terminal::safe(&e).into_owned());
            }
        }
    }

    /// `/approvals`: the prompt asks again what was left for later.
    pub fn list_approvals(&mut self) -> Vec<Effect> {
        self.approvals.later.clear();
        self.dirty = true;
        vec![Effect::ListApprovals]
    }

    /// The status bar's prompt for the approval asked, at `width` columns.
    pub fn approval_prompt(&self, width: u16) -> Option<String> {
        let a = self.asked()?;
        let member = kd_client::terminal::safe(&a.member);
        let more = match self.more_pending() {
            0 => String::new(),
            n => format!(" · {n} more pending"),
        };
        if !self.input.is_empty() {
            return Some(format!(
                "{member} asks ({}): empty the input to answer y/n, or /approve · /deny it{more}",
                a.id
            ));
        }
        let run = a.scopes.contains(&Scope::Run);
        let full = format!(
            "{member} asks: y allow once{} · n deny · N deny with a message · Esc later{more}",
            if run { " · a allow for the rest of the run" } else { "" }
        );
        let short = format!(
            "{member} asks: y once{} · n deny · N deny, saying why · Esc later{more}",
            if run { " · a for the run" } else { "" }
        );
        let tiny = format!("{member} asks: y{} · n · N · Esc{}", if run { " · a" } else { "" }, {
            let n = self.more_pending();
            if n > 0 { format!(" · +{n}") } else { String::new() }
        });
        let fits = |s: &String| super::wrap::display_width(s) < width as usize;
        Some([full, short].into_iter().find(fits).unwrap_or(tiny))
    }
}

/// How a decided approval ended, in a sentence's words:
/// `approved by king, for the run`, `denied by king: not this one`.
pub fn outcome(a: &Approval) -> String {
    let Some(how) = approval_text::decided(a) else { return "pending".into() };
    let more = match (a.state, a.scope, &a.message) {
        (ApprovalState::Approved, Some(Scope::Run), _) => ", for the rest of the run".to_string(),
        (ApprovalState::Approved, Some(Scope::Thread), _) => ", for this member on this thread".to_string(),
        (ApprovalState::Approved, _, _) => ", once".to_string(),
        (_, _, Some(m)) => format!(": {}", crate::fmt::one_line(m)),
        _ => String::new(),
    };
    kd_client::terminal::safe(&format!("{how}{more}")).into_owned()
}

/// The lines of a panel's approvals, under its text: a pending one asks
/// (who, what, the choices), a decided one says how it ended.
pub fn lines(member: &str, approvals: &[Approval]) -> Vec<Line<'static>> {
    let dim = Style::default().fg(Color::DarkGray);
    let mut out = Vec::new();
    for a in approvals {
        if out.is_empty() {
            out.push(Line::default());
        }
        if a.state.is_pending() {
            let ask = Style::default().fg(Color::Yellow).add_modifier(Modifier::BOLD);
            let name =
                a.tool.name.as_deref().map(|n| format!(" ({})", kd_client::terminal::safe(n))).unwrap_or_default();
            out.push(Line::from(vec![
                Span::styled(format!("⚠ {} asks to {}{name}", safe_one(member), a.tool.kind.as_str()), ask),
                Span::styled(format!(" · {}", a.id), dim),
            ]));
            let what = a.tool.command.as_deref().unwrap_or(&a.tool.title);
            for l in kd_client::terminal::safe(what).split('\n') {
                out.push(Line::from(format!("  {l}")));
            }
            if let Some(why) = &a.tool.reason {
                out.push(Line::from(Span::styled(format!("  why: {}", safe_one(why)), dim)));
            }
            let run = if a.scopes.contains(&Scope::Run) { " · a for the run" } else { "" };
            let keys = format!("  y allow once{run} · n deny · N with a message · Esc later");
            out.push(Line::from(Span::styled(keys, dim)));
            if a.scopes.contains(&Scope::Thread) {
                let thread = format!("  /approve {} thread: for {} on this thread", a.id, safe_one(member));
                out.push(Line::from(Span::styled(thread, dim)));
            }
        } else {
            let (mark, style) = match a.state {
                ApprovalState::Approved => ("✓", Style::default().fg(Color::Green)),
                ApprovalState::Denied => ("✗", Style::default().fg(Color::Red)),
                _ => ("✗", dim),
            };
            let what: String = crate::fmt::one_line(&approval_text::what(a)).chars().take(DECIDED_LINE).collect();
            out.push(Line::from(vec![
                Span::styled(format!("{mark} {what}"), style),
                Span::styled(format!(" — {}", outcome(a)), style),
            ]));
        }
    }
    out
}

fn safe_one(s: &str) -> String {
    crate::fmt::one_line(&kd_client::terminal::safe(s))
}
