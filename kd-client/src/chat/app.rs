//! The chat's state: the log's entries, the input, overlays, questions,
//! the members' work. Daemon events ([`super::live`]) and user input
//! ([`super::keys`], [`super::input`]) change it, and [`Effect`]s (things
//! to ask the daemon) go out. No I/O here, so all of it is tested directly.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use kd_proto::order::{Place, message_place};
use kd_proto::types::{Message, MessageKind, Purpose, RouteType, Thread, display_order};
use kd_proto::work::Worktree;
use ratatui::text::Line;
use ratatui_textarea::TextArea;

/// What an entry of the log shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    King,
    /// A finished answer (Markdown).
    Answer,
    /// An answer being written.
    Streaming,
    /// A member expected to answer who has not started.
    Waiting,
    Error {
        timed_out: bool,
    },
    Interrupted,
    System,
}

/// One panel of the log.
#[derive(Debug)]
pub struct Entry {
    pub kind: Kind,
    pub member: String,
    pub text: String,
    pub chars: u64,
    pub seq: Option<u64>,
    pub run: Option<String>,
    pub round: Option<u32>,
    /// Where it stands in the thread (`kd_proto::order`): entries are kept
    /// sorted by it, so the live log is the log a reopened chat shows.
    pub place: Place,
    /// How a message between members was routed, and to whom.
    pub route: Option<(RouteType, Vec<String>)>,
    /// A completion's ballot, tally, synthesis or merge.
    pub purpose: Option<Purpose>,
    /// What the member is doing while it streams (a command, a plan).
    pub activity: Option<String>,
    /// A run waiting behind its member's run in flight (F-C5).
    pub queued: bool,
    /// The member's work on this thread, shown under its latest answer's
    /// panel (F-W3).
    pub work: Option<Worktree>,
    /// Why its run was stopped short, when no client cancelled it (a
    /// member's emergency broadcast): said in place of `interrupted`.
    pub stopped: Option<String>,
    /// Approvals its member's CLI asked on this run, pending or decided
    /// (the latest few; [`super::approvals`]).
    pub approvals: Vec<kd_proto::approval::Approval>,
    /// Rendered lines for a width, kept until the entry changes.
    pub cache: RefCell<Option<(u16, Vec<Line<'static>>)>>,
}

impl Entry {
    pub(super) fn new(kind: Kind, member: &str, text: String) -> Entry {
        Entry {
            activity: None,
            queued: false,
            work: None,
            stopped: None,
            approvals: Vec::new(),
            kind,
            member: member.to_string(),
            chars: text.chars().count() as u64,
            text,
            seq: None,
            run: None,
            round: None,
            place: AT_THE_END,
            route: None,
            purpose: None,
            cache: RefCell::new(None),
        }
    }

    pub(super) fn from_message(m: &Message) -> Entry {
        let kind = match m.kind {
            MessageKind::King => Kind::King,
            MessageKind::Agent => Kind::Answer,
            MessageKind::Error => Kind::Error { timed_out: m.body.contains("timed out after") },
            MessageKind::Interrupted => Kind::Interrupted,
            MessageKind::System => Kind::System,
        };
        let mut e = Entry::new(kind, &m.from, m.body.clone());
        e.place = message_place(m);
        e.seq = Some(m.seq);
        e.run = m.run.as_ref().and_then(|r| r.run_id.clone());
        e.round = m.round;
        e.route = m.route.map(|r| (r, m.to.clone()));
        e.purpose = m.purpose;
        e.stopped = m.run.as_ref().and_then(|r| r.stopped.clone());
        e
    }

    pub(super) fn changed(&self) {
        *self.cache.borrow_mut() = None;
    }
}

/// The place of a panel nothing is known of yet.
pub(super) const AT_THE_END: Place = Place { anchor: u64::MAX, class: 2, ordinal: u64::MAX, seq: u64::MAX };

/// Something the chat asks of the daemon (or of its own process).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Send {
        body: String,
        mute: Vec<String>,
    },
    /// Cancel this client's runs and stop the pending auto-turns.
    Interrupt,
    Retry,
    /// A multicast completion on this thread (`/vote`, `/synthesize`).
    Complete {
        question: String,
        vote: bool,
        chair: Option<String>,
    },
    /// Stop the thread's runs (or one member's), whoever started them.
    Cancel(Option<String>),
    /// What the thread cost.
    Cost,
    NewThread,
    ListThreads,
    Open(String),
    /// Open a thread at a message (a search hit).
    OpenAt(String, u64),
    SetTitle(String),
    /// Branch this thread (with an optional title) and open the branch.
    Fork {
        title: Option<String>,
        carry: Option<kd_proto::types::Carry>,
    },
    Search(String),
    Archive,
    Unarchive,
    /// Delete this thread (asked and confirmed).
    Delete,
    /// Give a task to members, each in a worktree of its own, and open its thread.
    Work {
        task: String,
        to: Option<Vec<String>>,
        vote: bool,
    },
    /// Fetch a member's diff and show it.
    Diff(String),
    Accept {
        member: String,
        squash: bool,
    },
    Reject(String),
    /// A line comment on a member's diff (`/comment`).
    Comment {
        member: String,
        path: String,
        lines: (u32, u32),
        text: String,
    },
    /// Run the check again on these members' work (`/check`).
    Check(Vec<String>),
    /// Bring a member's work up to date (`/rebase`).
    Rebase(String),
    /// Push a member's branch and open a pull request (`/pr`, `/accept --pr`).
    Pr {
        member: String,
        accept: bool,
    },
    /// The council reviews a member's diff (`/review`).
    Review(String),
    /// The pending line comments go to the member (`/review --send`).
    SendReview {
        member: String,
        message: Option<String>,
    },
    /// Every thread's pending approvals (`/approvals`).
    ListApprovals,
    /// The King's decision on an approval.
    Decide {
        id: String,
        decision: kd_proto::approval::Decision,
        scope: Option<kd_proto::approval::Scope>,
        message: Option<String>,
    },
    Exit,
}

/// A question the chat asks before it acts; the next key answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    Delete,
    /// `/cancel` would stop runs other clients started (their members).
    Cancel {
        member: Option<String>,
        others: Vec<String>,
    },
}

/// Where an exchange stands, for the header.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub exchange: u64,
    pub round: u32,
    pub rounds: u32,
    pub running: bool,
    pub expected: Vec<String>,
}

/// A list overlaid on the log.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    Help,
    /// Recent threads to open; index 0 is "new thread".
    Threads {
        threads: Vec<Thread>,
        selected: usize,
    },
    /// Search hits to open.
    Search {
        hits: Vec<kd_proto::types::SearchHit>,
        selected: usize,
    },
    /// Every thread's pending approvals (`/approvals`); any key closes it.
    Approvals(Vec<kd_proto::approval::Approval>),
}

pub struct App {
    pub thread: Thread,
    pub entries: Vec<Entry>,
    pub input: TextArea<'static>,
    /// How many log lines the view is scrolled up from the bottom.
    pub scroll: usize,
    /// New content arrived while scrolled up.
    pub new_below: bool,
    pub mute: BTreeSet<String>,
    /// A one-line notice for the status bar.
    pub notice: Option<String>,
    /// What the thread's answers cost so far (US dollars, as reported).
    pub cost_usd: f64,
    /// A message to bring into view at the next draw (a search hit).
    pub jump: Option<u64>,
    pub round: Option<Round>,
    pub connected: bool,
    /// `/quit` waits for this client's runs; a second Esc forces it.
    pub quitting: bool,
    pub overlay: Option<Overlay>,
    /// Runs this client started (an interrupt cancels them; /quit waits for them).
    pub my_runs: BTreeSet<String>,
    /// Something changed since the last frame.
    pub dirty: bool,
    /// The height of the log area at the last frame.
    pub log_height: usize,
    /// Members' colours (the council's, with `agents.NAME.color`).
    pub palette: kd_client::style::Palette,
    /// Colours on the screen (off with NO_COLOR).
    pub colors: bool,
    /// The thread is not created yet: its first message creates it so.
    pub pending_new: Option<kd_proto::types::NewThread>,
    /// An emergency broadcast not yet acknowledged by everyone: who sent
    /// it and who still owes an acknowledgement.
    pub emergency: Option<(String, Vec<String>)>,
    /// A question asked (`/delete`): the next key answers it.
    pub confirm: Option<Confirm>,
    /// The members' work on this thread, by member.
    pub work: BTreeMap<String, Worktree>,
    /// A member's diff shown over the log (`/diff MEMBER`).
    pub diff: Option<super::diff::DiffView>,
    /// This chat's completion in flight (`/vote`, `/synthesize`): its runs
    /// are this chat's.
    pub completing: Option<super::council::Completing>,
    /// What rings the bell and sets the terminal's title (issue 33).
    pub attention: super::attention::Attention,
    /// The thread's approvals: pending ones, the one asked (issue 33).
    pub approvals: super::approvals::Approvals,
    /// Checks `/check` asked, by member, whose result is to be said: when
    /// the one asked started (unknown until `work.check` answers).
    pub checks: BTreeMap<String, Option<i64>>,
    /// Lines the help is scrolled down (kept within it when drawn).
    pub help_scroll: usize,
}

impl App {
    pub fn new(thread: Thread) -> App {
        App {
            thread,
            entries: Vec::new(),
            input: new_input(),
            scroll: 0,
            new_below: false,
            mute: BTreeSet::new(),
            notice: None,
            cost_usd: 0.0,
            jump: None,
            round: None,
            connected: true,
            quitting: false,
            overlay: None,
            my_runs: BTreeSet::new(),
            dirty: true,
            log_height: 20,
            pending_new: None,
            emergency: None,
            confirm: None,
            work: BTreeMap::new(),
            diff: None,
            completing: None,
            attention: Default::default(),
            approvals: Default::default(),
            checks: BTreeMap::new(),
            help_scroll: 0,
            palette: kd_client::style::Palette::default(),
            colors: std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// Replaces the log with the thread's messages (on open and after a reconnect).
    pub fn load(&mut self, thread: Thread, messages: &[Message]) {
        let same = thread.id == self.thread.id;
        self.thread = thread;
        self.entries = display_order(messages).into_iter().map(Entry::from_message).collect();
        // A long thread is opened at its end: say what is not shown.
        let earlier = messages.first().map_or(0, |m| m.seq.saturating_sub(1));
        if earlier > 0 {
            let note = format!(
                "{earlier} earlier message{} not shown here; `kd show {}` has the whole thread",
                if earlier == 1 { " is" } else { "s are" },
                self.thread.id
            );
            let mut e = Entry::new(Kind::System, "kd", note);
            e.place = Place { anchor: 0, class: 0, ordinal: 0, seq: 0 };
            self.entries.insert(0, e);
        }
        self.scroll = 0;
        self.new_below = false;
        self.round = None;
        self.work.clear();
        self.diff = None;
        self.approvals_reloaded(same);
        self.dirty = true;
    }

    /// The thread's worktrees (`work.list` when it is opened).
    pub fn set_work(&mut self, trees: Vec<Worktree>) {
        self.work = trees.into_iter().filter(|w| w.thread == self.thread.id).map(|w| (w.member.clone(), w)).collect();
        self.place_work();
        self.dirty = true;
    }

    /// A member's work changed (a `Work` event, or a reject's answer).
    pub fn on_work(&mut self, w: &Worktree) {
        if w.thread != self.thread.id {
            return;
        }
        self.work.insert(w.member.clone(), w.clone());
        self.check_ended(w);
        self.place_work();
        self.dirty = true;
    }

    /// Puts each member's work under its latest answer's panel (one of
    /// its own runs, not a ballot, a review or kd's) and nowhere else.
    pub(super) fn place_work(&mut self) {
        if self.work.is_empty() && self.entries.iter().all(|e| e.work.is_none()) {
            return;
        }
        let mut latest: HashMap<String, usize> = HashMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            let answer = matches!(
                e.kind,
                Kind::Answer | Kind::Streaming | Kind::Waiting | Kind::Error { .. } | Kind::Interrupted
            );
            if answer && e.purpose.is_none() && self.work.contains_key(&e.member) {
                latest.insert(e.member.clone(), i);
            }
        }
        for (i, e) in self.entries.iter_mut().enumerate() {
            let want = match latest.get(&e.member) {
                Some(at) if *at == i => self.work.get(&e.member).cloned(),
                _ => None,
            };
            if e.work != want {
                e.work = want;
                e.changed();
                self.dirty = true;
            }
        }
    }

    /// Brings message `seq` into view at the next draw, or says why not.
    pub fn jump_to(&mut self, seq: u64) {
        if self.index_of_seq(seq).is_some() {
            self.jump = Some(seq);
            self.set_notice(format!("#{seq}"));
        } else {
            self.set_notice(format!("#{seq} is earlier than what is shown; `kd show {}` has it", self.thread.id));
        }
    }

    pub fn set_notice(&mut self, text: impl Into<String>) {
        self.notice = Some(text.into());
        self.dirty = true;
    }

    pub fn scroll_up(&mut self, lines: usize) {
        self.scroll = self.scroll.saturating_add(lines);
        self.dirty = true;
    }

    pub fn scroll_down(&mut self, lines: usize) {
        self.scroll = self.scroll.saturating_sub(lines);
        if self.scroll == 0 {
            self.new_below = false;
        }
        self.dirty = true;
    }

    pub fn scroll_to_bottom(&mut self) {
        self.scroll = 0;
        self.new_below = false;
        self.dirty = true;
    }

    /// Members and kinds of the panels, for tests.
    #[cfg(test)]
    pub fn kinds(&self) -> Vec<(String, Kind)> {
        self.entries.iter().map(|e| (e.member.clone(), e.kind)).collect()
    }
}

pub fn new_input() -> TextArea<'static> {
    let mut t = TextArea::default();
    t.set_placeholder_text("Message the council · @name to address · /help");
    t.set_cursor_line_style(ratatui::style::Style::default());
    t.set_wrap_mode(ratatui_textarea::WrapMode::WordOrGlyph);
    t
}

/// Panels waiting or streaming per member (for the header).
pub fn activity(app: &App) -> HashMap<String, Kind> {
    app.entries
        .iter()
        .filter(|e| matches!(e.kind, Kind::Waiting | Kind::Streaming))
        .map(|e| (e.member.clone(), e.kind))
        .collect()
}
