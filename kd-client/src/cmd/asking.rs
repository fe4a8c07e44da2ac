//! An approval one of the command's own runs waits on, asked inline
//! (`kd ask`, `kd work`; issue 33): said on stderr as it is requested and
//! answered with a key without leaving the command — `y` allow once, `a`
//! allow for the rest of the member's run (offered when its CLI can be
//! told so), `n` deny. When several wait, one is asked at a time, oldest
//! first. One decided elsewhere (another client, the timeout, its run
//! ended) is said so, and the next is asked. Without a terminal to take
//! keys from, it says how to answer (`kd approve ID`). What the agent
//! wrote is escaped before the terminal.

use std::collections::VecDeque;
use std::io::{self, Write};

use kd_client::keys::Keys;
use kd_client::prelude::*;
use kd_client::style::{bold, dim};
use kd_client::terminal::safe;
use kd_client::{Client, ClientError};
use kd_proto::approval::{Approval, ApprovalState, Decision, Scope, ToolKind};
use kd_proto::types::ThreadEvent;

use super::answers::View;

/// The approvals the command's runs wait on, and the keys that answer
/// the one asked.
pub struct Asking {
    waiting: VecDeque<Approval>,
    /// Keys are taken: stdin is a terminal in the foreground.
    interactive: bool,
    /// The terminal, taking keys while something waits.
    keys: Option<Keys>,
    /// A choice on the one asked went out and is not decided yet.
    sent: bool,
    styled: bool,
}

/// The King's choice on the approval asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub id: String,
    pub decision: Decision,
    pub scope: Option<Scope>,
}

/// What a key chooses for `a`: `y` once, `a` for the run (when offered),
/// `n` deny; any other key nothing.
pub fn choice_of(key: char, a: &Approval) -> Option<Choice> {
    let (decision, scope) = match key.to_ascii_lowercase() {
        'y' => (Decision::Approve, Some(Scope::Once)),
        'a' if a.scopes.contains(&Scope::Run) => (Decision::Approve, Some(Scope::Run)),
        'n' => (Decision::Deny, None),
        _ => return None,
    };
    Some(Choice { id: a.id.clone(), decision, scope })
}

/// What the tool does, said as a verb: `run`, `edit`, `fetch`.
fn verb(kind: ToolKind) -> &'static str {
    match kind {
        ToolKind::Read => "read",
        ToolKind::Edit => "edit",
        ToolKind::Execute => "run",
        ToolKind::Fetch => "fetch",
        ToolKind::Mcp | ToolKind::Other => "use",
    }
}

/// How `a` was decided, in a line.
pub fn decided_line(a: &Approval) -> String {
    let how = crate::approval_text::decided(a).unwrap_or_else(|| a.state.as_str().to_string());
    let scope = match a.scope {
        Some(Scope::Run) => " for the rest of its run",
        Some(Scope::Thread) => " for it on this thread",
        _ => "",
    };
    let why = match (a.state, &a.message) {
        (ApprovalState::Approved, _) | (_, None) => String::new(),
        (_, Some(m)) => format!(": {}", safe(m)),
    };
    format!("kd: {} {} {how}{scope}{why}", a.id, safe(&a.member))
}

impl Asking {
    /// `interactive`: take keys when stdin is a terminal in the foreground.
    pub fn new(interactive: bool, styled: bool) -> Asking {
        Asking { waiting: VecDeque::new(), interactive, keys: None, sent: false, styled }
    }

    /// Whether `e` is something this says: a request of one of the
    /// command's runs (`ours`), or the decision of one it waits on.
    pub fn concerns(&self, e: &ThreadEvent, ours: impl Fn(&Approval) -> bool) -> bool {
        match e {
            ThreadEvent::ApprovalRequested { approval } => approval.state.is_pending() && ours(approval),
            ThreadEvent::ApprovalDecided { approval } => self.waiting.iter().any(|a| a.id == approval.id),
            _ => false,
        }
    }

    /// Takes in an event [`Asking::concerns`] said it is about, saying on
    /// `err` what the King should know.
    pub fn on_event(&mut self, e: &ThreadEvent, err: &mut impl Write) -> io::Result<()> {
        match e {
            ThreadEvent::ApprovalRequested { approval } if !self.waiting.iter().any(|a| a.id == approval.id) => {
                self.waiting.push_back((**approval).clone());
                if self.waiting.len() == 1 {
                    self.ask(err)?;
                }
            }
            ThreadEvent::ApprovalDecided { approval } => {
                let Some(i) = self.waiting.iter().position(|a| a.id == approval.id) else { return Ok(()) };
                self.waiting.remove(i);
                writeln!(err, "{}", decided_line(approval))?;
                if i == 0 {
                    self.sent = false;
                    if self.waiting.is_empty() {
                        // The terminal is given back as it was.
                        self.keys = None;
                    } else {
                        self.ask(err)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// After a reconnect: what waits is what the daemon says is pending
    /// (`pending`, of the command's runs); what was decided meanwhile is
    /// forgotten, what was asked meanwhile is asked.
    pub fn resync(&mut self, pending: Vec<Approval>, err: &mut impl Write) -> io::Result<()> {
        let asked = self.waiting.front().map(|a| a.id.clone());
        self.waiting.retain(|a| pending.iter().any(|p| p.id == a.id));
        for p in pending {
            if !self.waiting.iter().any(|a| a.id == p.id) {
                self.waiting.push_back(p);
            }
        }
        if self.waiting.front().map(|a| &a.id) != asked.as_ref() {
            self.sent = false;
            match self.waiting.is_empty() {
                true => self.keys = None,
                false => self.ask(err)?,
            }
        }
        Ok(())
    }

    /// A choice sent was refused (decided meanwhile, the daemon away):
    /// keys are taken again.
    pub fn refused(&mut self, why: &str, err: &mut impl Write) -> io::Result<()> {
        self.sent = false;
        writeln!(err, "kd: {}", safe(why))
    }

    /// Says `e` when it is about an approval of a run `view` follows,
    /// after ending the line an answer streams on.
    pub fn follow(&mut self, e: &ThreadEvent, view: &mut View, out: &mut impl Write) -> io::Result<()> {
        if !self.concerns(e, |a| a.run.as_deref().is_some_and(|r| view.owns(r))) {
            return Ok(());
        }
        view.break_line(out)?;
        self.on_event(e, &mut io::stderr().lock())
    }

    /// Sends the King's choice; a refusal is said and keys are taken again.
    pub async fn decide(&mut self, c: Choice, client: &Client) -> io::Result<()> {
        match client.approval_decide(c.id, c.decision, c.scope, None).await {
            Ok(_) => Ok(()),
            Err(e) => self.refused(&ClientError::from(e).to_string(), &mut io::stderr().lock()),
        }
    }

    /// After a reconnect: asks the daemon what still waits on `thread`
    /// among the approvals of the command's runs (`ours`).
    pub async fn reconnected(
        &mut self,
        client: &Client,
        thread: &str,
        ours: impl Fn(&Approval) -> bool,
    ) -> io::Result<()> {
        let Ok(pending) = client.approval_list(Some(false), Some(thread.to_string()), None).await else {
            return Ok(());
        };
        let pending = pending.into_iter().filter(|a| a.state.is_pending() && ours(a)).collect();
        self.resync(pending, &mut io::stderr().lock())
    }

    /// Says the oldest waiting approval and how to answer it.
    fn ask(&mut self, err: &mut impl Write) -> io::Result<()> {
        let Some(a) = self.waiting.front() else { return Ok(()) };
        if self.interactive && self.keys.is_none() {
            self.keys = Keys::open();
        }
        let what = a.tool.command.as_deref().unwrap_or(&a.tool.title);
        let s = self.styled;
        writeln!(
            err,
            "{} {} asks to {}: {}  [{}]",
            bold(s, "?"),
            bold(s, &safe(&a.member)),
            verb(a.tool.kind),
            safe(what),
            a.id
        )?;
        if let Some(why) = &a.tool.reason {
            writeln!(err, "  {}", dim(s, &format!("why: {}", safe(why))))?;
        }
        let more = match self.waiting.len() {
            1 => String::new(),
            n => format!(" ({} more waiting)", n - 1),
        };
        let keys = if self.keys.is_some() {
            let run = if a.scopes.contains(&Scope::Run) { " · a allow for the rest of its run" } else { "" };
            format!("y allow{run} · n deny — or later: kd approve {}{more}", a.id)
        } else {
            format!("answer with: kd approve {id} · kd deny {id}{more}", id = a.id)
        };
        writeln!(err, "  {}", dim(s, &keys))
    }

    /// The King's choice on the approval asked, once a key makes it;
    /// pending while nothing waits, a choice is on its way, or no keys
    /// are taken. Cancel-safe: a key read is kept for the next call.
    pub async fn choice(&mut self) -> Choice {
        loop {
            let (Some(keys), Some(a), false) = (self.keys.as_mut(), self.waiting.front(), self.sent) else {
                return std::future::pending().await;
            };
            let Some(key) = keys.next().await else {
                // The terminal cannot be read: answer with kd approve.
                self.keys = None;
                continue;
            };
            if let Some(c) = choice_of(key, a) {
                self.sent = true;
                return c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::approval::ApprovalTool;

    fn approval(id: &str, scopes: Vec<Scope>) -> Approval {
        let mut tool = ApprovalTool::new(ToolKind::Execute, "touch x");
        tool.command = Some("touch \u{1b}[2Jx".into());
        Approval {
            id: id.into(),
            thread: "t1".into(),
            member: "claude".into(),
            run: Some("r1".into()),
            tool,
            scopes,
            state: ApprovalState::Pending,
            decided_by: None,
            scope: None,
            message: None,
            requested_at_ms: 0,
            decided_at_ms: None,
            expires_at_ms: None,
        }
    }

    fn requested(a: &Approval) -> ThreadEvent {
        ThreadEvent::ApprovalRequested { approval: Box::new(a.clone()) }
    }

    fn decided(a: &Approval, state: ApprovalState) -> ThreadEvent {
        let mut a = a.clone();
        a.state = state;
        a.decided_by = Some(kd_proto::approval::DecidedBy::King);
        ThreadEvent::ApprovalDecided { approval: Box::new(a) }
    }

    #[test]
    fn keys_choose_once_the_run_or_deny_and_a_only_where_offered() {
        let both = approval("ap-1", vec![Scope::Once, Scope::Run]);
        let once = approval("ap-2", vec![Scope::Once]);
        assert_eq!(choice_of('y', &both).map(|c| c.scope), Some(Some(Scope::Once)));
        assert_eq!(choice_of('a', &both).map(|c| (c.decision, c.scope)), Some((Decision::Approve, Some(Scope::Run))));
        assert_eq!(choice_of('a', &once), None, "not offered");
        assert_eq!(choice_of('N', &once).map(|c| c.decision), Some(Decision::Deny));
        assert_eq!(choice_of('x', &once), None);
    }

    #[test]
    fn one_is_asked_at_a_time_and_the_next_when_it_is_decided() {
        let (a, b) = (approval("ap-1", vec![Scope::Once]), approval("ap-2", vec![Scope::Once, Scope::Run]));
        let mut asking = Asking::new(false, false);
        let mut err = Vec::new();
        for e in [requested(&a), requested(&b)] {
            assert!(asking.concerns(&e, |_| true));
            asking.on_event(&e, &mut err).unwrap();
        }
        let said = String::from_utf8(std::mem::take(&mut err)).unwrap();
        assert!(said.contains("claude asks to run: touch ␛[2Jx  [ap-1]"), "escaped, the first asked: {said}");
        assert!(said.contains("kd approve ap-1 · kd deny ap-1") && !said.contains("ap-2"), "{said}");
        // The second decided elsewhere first: said, the first still asked.
        asking.on_event(&decided(&b, ApprovalState::Approved), &mut err).unwrap();
        let said = String::from_utf8(std::mem::take(&mut err)).unwrap();
        assert_eq!(said, "kd: ap-2 claude approved by king\n");
        asking.on_event(&decided(&a, ApprovalState::Denied), &mut err).unwrap();
        assert!(!asking.concerns(&decided(&a, ApprovalState::Denied), |_| true), "forgotten once decided");
        assert!(!asking.concerns(&requested(&a), |_| false), "not one of ours");
    }

    #[test]
    fn after_a_reconnect_what_waits_is_what_the_daemon_says() {
        let (a, b) = (approval("ap-1", vec![Scope::Once]), approval("ap-2", vec![Scope::Once]));
        let mut asking = Asking::new(false, false);
        let mut err = Vec::new();
        asking.on_event(&requested(&a), &mut err).unwrap();
        err.clear();
        asking.resync(vec![b.clone()], &mut err).unwrap();
        let said = String::from_utf8(err).unwrap();
        assert!(said.contains("[ap-2]") && !said.contains("ap-1"), "{said}");
        assert!(asking.concerns(&decided(&b, ApprovalState::Expired), |_| false));
    }
}
