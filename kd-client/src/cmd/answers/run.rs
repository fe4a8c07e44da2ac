//! One run as the terminal shows it: what it streamed, its stored
//! message, how it ended, and where it stands after a reconnect.

use kd_proto::types::Purpose;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Status {
    Running,
    Done,
    Failed(String),
    /// Cancelled by a client, or stopped for the reason given (a
    /// member's emergency broadcast).
    Cancelled(Option<String>),
    /// Cut short by kdd stopping (its message is `interrupted`); not a
    /// failure once a later run replaces it.
    Interrupted,
}

#[derive(Debug)]
pub(super) struct RunView {
    pub(super) id: String,
    pub(super) member: String,
    pub(super) round: Option<u32>,
    /// A ballot or synthesis run, a tally or merged message.
    pub(super) purpose: Option<Purpose>,
    pub(super) streamed: String,
    /// The stored message, when it arrived.
    pub(super) body: Option<String>,
    pub(super) status: Status,
    pub(super) shown: bool,
    /// Its message, once known (what a run asked again replaces).
    pub(super) seq: Option<u64>,
    /// Characters streamed so far, by the daemon's count (see `Delta`).
    pub(super) chars: u64,
    /// A later run answers in its place.
    pub(super) replaced: bool,
    /// It answers in place of a run whose partial answer was shown: its
    /// header says so first.
    pub(super) after_cut: Option<String>,
}

impl RunView {
    /// What of a delta is new: the daemon counts the run's characters
    /// (`chars`, after the delta; 0 from a daemon that does not), so a
    /// snapshot re-sent after a reconnect shows only its unseen tail, and
    /// one already seen nothing.
    pub(super) fn new_text(&mut self, text: &str, chars: u64) -> Option<String> {
        if chars == 0 {
            return Some(text.to_string());
        }
        if chars <= self.chars {
            return None;
        }
        let fresh = (chars - self.chars) as usize;
        self.chars = chars;
        let n = text.chars().count();
        Some(if fresh >= n { text.to_string() } else { text.chars().skip(n - fresh).collect() })
    }

    pub(super) fn new(id: String, member: String, round: Option<u32>, purpose: Option<Purpose>) -> RunView {
        RunView {
            id,
            member,
            round,
            purpose,
            streamed: String::new(),
            body: None,
            status: Status::Running,
            shown: false,
            seq: None,
            chars: 0,
            replaced: false,
            after_cut: None,
        }
    }
}
