//! What the user types does: a submitted line (a message or a slash
//! command), `/quit`, Esc, Tab completion, and the answer to a question
//! the chat asked (`/delete`, `/cancel`).

use super::app::{App, Confirm, Effect, Overlay, new_input};
use super::commands::{self, Command};

impl App {
    /// The input was submitted: a message or a command.
    pub fn submit(&mut self) -> Vec<Effect> {
        let text = self.input.lines().join("\n");
        if text.trim().is_empty() {
            return vec![];
        }
        self.input = new_input();
        self.dirty = true;
        if !text.starts_with('/') {
            self.scroll = 0;
            self.new_below = false;
            return vec![Effect::Send { body: text, mute: self.mute.iter().cloned().collect() }];
        }
        match commands::parse(&text) {
            Ok(Command::Mute(name)) | Ok(Command::Unmute(name)) if !self.thread.members.contains(&name) => {
                self.set_notice(format!("no member {name:?}; the members are {}", self.thread.members.join(", ")));
                vec![]
            }
            Ok(Command::Mute(name)) => {
                self.mute.insert(name.clone());
                self.set_notice(format!("{name} is muted: it will not be asked until /unmute {name}"));
                vec![]
            }
            Ok(Command::Unmute(name)) => {
                self.mute.remove(&name);
                self.set_notice(format!("{name} is back"));
                vec![]
            }
            Ok(Command::Retry) => vec![Effect::Retry],
            Ok(Command::Complete { question, vote, chair }) => self.ask_completion(question, vote, chair),
            Ok(Command::Cancel(member)) => self.cancel(member),
            Ok(Command::Cost) if self.pending_new.is_some() => {
                self.set_notice("nothing spent on this thread yet");
                vec![]
            }
            Ok(Command::Cost) => vec![Effect::Cost],
            Ok(Command::Help) => {
                (self.overlay, self.help_scroll) = (Some(Overlay::Help), 0);
                vec![]
            }
            Ok(Command::Quit) => self.quit(),
            Ok(Command::New) => vec![Effect::NewThread],
            Ok(Command::Threads) => vec![Effect::ListThreads],
            Ok(Command::Title(t)) => vec![Effect::SetTitle(t)],
            Ok(Command::Fork { title, carry }) => {
                self.set_notice("forking…");
                vec![Effect::Fork { title, carry }]
            }
            Ok(Command::Search(q)) => vec![Effect::Search(q)],
            Ok(Command::Archive | Command::Unarchive | Command::Delete) if self.pending_new.is_some() => {
                self.set_notice("this thread has no message yet: there is nothing to archive or delete");
                vec![]
            }
            Ok(Command::Archive) => vec![Effect::Archive],
            Ok(Command::Unarchive) => vec![Effect::Unarchive],
            Ok(Command::Delete) => {
                self.confirm = Some(Confirm::Delete);
                self.dirty = true;
                vec![]
            }
            Ok(Command::Work { task, to, vote }) => {
                self.set_notice("giving the task to the members…");
                vec![Effect::Work { task, to, vote }]
            }
            Ok(Command::Diff(None)) => {
                self.set_notice(self.work_here());
                vec![]
            }
            Ok(
                Command::Diff(Some(m))
                | Command::Reject(m)
                | Command::Accept { member: m, .. }
                | Command::Comment { member: m, .. }
                | Command::Check(Some(m))
                | Command::Rebase(m)
                | Command::Pr { member: m, .. }
                | Command::Review(m)
                | Command::SendReview { member: m, .. },
            ) if !self.work.contains_key(&m) => {
                let notice = format!("{m} has no work on this thread; {}", self.work_here());
                self.set_notice(notice);
                vec![]
            }
            Ok(Command::Diff(Some(m))) => vec![Effect::Diff(m)],
            Ok(Command::Accept { member, squash }) => vec![Effect::Accept { member, squash }],
            Ok(Command::Reject(m)) => vec![Effect::Reject(m)],
            Ok(Command::Comment { member, path, lines, text }) => vec![Effect::Comment { member, path, lines, text }],
            Ok(Command::Check(member)) => self.check(member),
            Ok(Command::Rebase(m)) => {
                self.set_notice(format!("bringing {m}'s work up to date…"));
                vec![Effect::Rebase(m)]
            }
            Ok(Command::Pr { member, accept }) => {
                self.set_notice(format!("pushing {member}'s work…"));
                vec![Effect::Pr { member, accept }]
            }
            Ok(Command::Review(m)) => vec![Effect::Review(m)],
            Ok(Command::SendReview { member, message }) => vec![Effect::SendReview { member, message }],
            Ok(Command::Approvals) => self.list_approvals(),
            Ok(Command::Approve { id, scope }) => self.decide(id, kd_proto::approval::Decision::Approve, scope, None),
            Ok(Command::Deny { id, message }) => self.decide(id, kd_proto::approval::Decision::Deny, None, message),
            Err(msg) => {
                // What was typed stays, to be mended.
                self.give_back(&text);
                self.set_notice(msg);
                vec![]
            }
        }
    }

    /// Puts `text`, which was submitted and refused (a command the chat
    /// does not know, a message kdd refused), back in the input when
    /// nothing was typed since, to be mended.
    pub fn give_back(&mut self, text: &str) {
        if self.input.lines().iter().all(|l| l.is_empty()) {
            self.input = new_input();
            self.input.insert_str(text);
            self.dirty = true;
        }
    }

    /// Who has work on this thread, for a notice.
    pub fn work_here(&self) -> String {
        if self.work.is_empty() {
            return "no member has work on this thread: /work TASK gives them some".into();
        }
        let who: Vec<String> =
            self.work.values().map(|w| format!("{} ({})", w.member, super::diff::stat_text(w))).collect();
        format!("work here: {} · /diff MEMBER opens one", who.join(", "))
    }

    /// `/quit`: now, or once this client's runs are done.
    pub fn quit(&mut self) -> Vec<Effect> {
        if self.my_runs_in_flight() == 0 {
            return vec![Effect::Exit];
        }
        self.quitting = true;
        self.set_notice("quitting when your runs finish · Esc to stop them and quit now");
        vec![]
    }

    /// Esc: interrupt; during /quit, force it.
    pub fn escape(&mut self) -> Vec<Effect> {
        if self.overlay.take().is_some() {
            self.dirty = true;
            return vec![];
        }
        if self.quitting {
            return vec![Effect::Interrupt, Effect::Exit];
        }
        self.set_notice("interrupted: your runs are cancelled and the pending turns stopped");
        vec![Effect::Interrupt]
    }

    /// Tab: completes the `@member` or `/command` before the cursor.
    pub fn complete(&mut self) {
        let ratatui_textarea::DataCursor(row, col) = self.input.cursor();
        let line = self.input.lines().get(row).cloned().unwrap_or_default();
        let before: String = line.chars().take(col).collect();
        let word_start = before.rfind(char::is_whitespace).map(|i| i + 1).unwrap_or(0);
        let word = &before[word_start..];
        let candidates: Vec<String> = if let Some(partial) = word.strip_prefix('@') {
            std::iter::once("all".to_string())
                .chain(self.thread.members.iter().cloned())
                .filter(|m| m.starts_with(&partial.to_lowercase()))
                .map(|m| format!("@{m} "))
                .collect()
        } else if word.starts_with('/') && word_start == 0 && row == 0 {
            commands::NAMES.iter().filter(|c| c.starts_with(word)).map(|c| format!("{c} ")).collect()
        } else {
            vec![]
        };
        match candidates.as_slice() {
            [one] => {
                for _ in 0..word.chars().count() {
                    self.input.delete_char();
                }
                self.input.insert_str(one);
            }
            [] => {}
            many => self.set_notice(many.iter().map(|c| c.trim()).collect::<Vec<_>>().join("  ")),
        }
        self.dirty = true;
    }

    /// The question the chat is asking, for the status bar.
    pub fn question(&self) -> Option<String> {
        match self.confirm.as_ref()? {
            Confirm::Cancel { others, .. } => Some(App::cancel_question(others)),
            Confirm::Delete => {
                let t = &self.thread;
                let title =
                    t.title.as_deref().map(|x| format!(" ({})", kd_client::terminal::safe(x))).unwrap_or_default();
                Some(format!(
                    "Delete thread {}{title} and its {}? y deletes it, any other key keeps it",
                    t.id,
                    crate::fmt::count(t.last_seq, "message")
                ))
            }
        }
    }

    /// The key that answers the question asked: `y` does it, any other
    /// key (Esc included) does nothing else than keep the thread.
    pub fn answer(&mut self, yes: bool) -> Vec<Effect> {
        let Some(asked) = self.confirm.take() else { return vec![] };
        self.dirty = true;
        match (asked, yes) {
            (Confirm::Cancel { member, .. }, yes) => self.answer_cancel(member, yes),
            (Confirm::Delete, true) => {
                self.set_notice(format!("deleting thread {}…", self.thread.id));
                vec![Effect::Delete]
            }
            (Confirm::Delete, false) => {
                self.set_notice(format!("kept thread {}", self.thread.id));
                vec![]
            }
        }
    }
}
