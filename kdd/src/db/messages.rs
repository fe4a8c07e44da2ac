//! Messages: dense per-thread `seq`, handed out by the writer in commit order.

use kd_proto::types::{Fence, Message, MessageKind, Purpose, RouteType, RunMeta};
use serde_json::json;

use super::events::NewEvent;
use super::row::Columns;
use super::{DbError, DbResult};

/// Parameters of [`append`], already validated.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub thread: String,
    pub from: String,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub reply_to: Option<u64>,
    pub kind: MessageKind,
    pub body: String,
    pub round: Option<u32>,
    pub run: Option<RunMeta>,
    pub correlation_id: Option<String>,
    pub fence: Option<Fence>,
    /// The failed message a retry replaces.
    pub replaces: Option<u64>,
    /// Files the message refers to.
    pub refs: Vec<String>,
    /// How it was routed (messages between members).
    pub route: Option<RouteType>,
    /// What it is to a multicast completion.
    pub purpose: Option<Purpose>,
}

impl NewMessage {
    /// A message of `thread` with only its sender, addressees, kind and
    /// body set; the rest (reply, round, run, routing …) is set with `..`.
    /// The `message` event its append records (the body is the
    /// message's: `events.list` reads it from there).
    pub(crate) fn event(&self, seq: u64) -> NewEvent<'_> {
        NewEvent {
            kind: "message",
            thread: Some(&self.thread),
            from: Some(&self.from),
            to: &self.to,
            correlation_id: self.correlation_id.as_deref(),
            data: json!({
                "seq": seq,
                "kind": self.kind.as_str(),
                "cc": self.cc,
                "reply_to": self.reply_to,
                "round": self.round,
                "replaces": self.replaces,
                "route": self.route,
                "purpose": self.purpose,
            }),
            ..Default::default()
        }
    }

    /// The message it is once appended as `seq` at `now`.
    pub(crate) fn into_message(self, seq: u64, now: i64) -> Message {
        Message {
            thread: self.thread,
            seq,
            from: self.from,
            to: self.to,
            cc: self.cc,
            reply_to: self.reply_to,
            kind: self.kind,
            body: self.body,
            round: self.round,
            created_at_ms: now,
            run: self.run,
            replaces: self.replaces,
            refs: self.refs,
            route: self.route,
            purpose: self.purpose,
        }
    }

    pub fn new(thread: &str, from: &str, to: Vec<String>, kind: MessageKind, body: String) -> NewMessage {
        NewMessage {
            thread: thread.to_string(),
            from: from.to_string(),
            to,
            cc: vec![],
            reply_to: None,
            kind,
            body,
            round: None,
            run: None,
            correlation_id: None,
            fence: None,
            replaces: None,
            refs: vec![],
            route: None,
            purpose: None,
        }
    }
}

/// Which messages of a thread [`list`] reads, and how much of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Only seqs above this.
    pub after: u64,
    /// Only seqs below this.
    pub before: Option<u64>,
    pub limit: Option<u32>,
    /// The newest messages of the range rather than the oldest (still
    /// returned oldest first).
    pub from_end: bool,
    /// Whether the bodies are read (the outline has none).
    pub bodies: bool,
    /// Bytes of messages a page holds at most (at least one message), each
    /// counted as its body and [`ROW_BYTES`] more.
    pub budget: usize,
}

/// What a message costs in a page besides its body.
pub const ROW_BYTES: usize = 256;

/// Messages a [`Page::small`] holds at most.
pub const SMALL_ROWS: u32 = 32;
/// Bytes a [`Page::small`] holds at most (one message at least).
pub const SMALL_BYTES: usize = 64 * 1024;

impl Page {
    /// Every message after `after`, bodies and all, however many.
    pub fn all_after(after: u64) -> Page {
        Page { after, before: None, limit: None, from_end: false, bodies: true, budget: usize::MAX }
    }

    /// The few messages after `after`: at most [`SMALL_ROWS`] and
    /// [`SMALL_BYTES`]. An engine may read such a page on its caller's
    /// thread (SQLite does: it takes less than a hop to a reading thread).
    pub fn small(after: u64) -> Page {
        Page { limit: Some(SMALL_ROWS), budget: SMALL_BYTES, ..Page::all_after(after) }
    }

    /// Message `seq` alone.
    pub fn one(seq: u64) -> Page {
        Page { after: seq.saturating_sub(1), before: Some(seq.saturating_add(1)), ..Page::all_after(0) }
    }

    /// Whether the page is no larger than [`Page::small`].
    pub fn is_small(&self) -> bool {
        self.limit.is_some_and(|l| l <= SMALL_ROWS) && self.budget <= SMALL_BYTES
    }
}

impl Page {
    /// The page, empty, to be filled as its rows are read.
    pub(crate) fn filling(self) -> Filling {
        Filling { page: self, bytes: 0, out: Vec::new() }
    }
}

/// The messages of a [`Page`] as its rows are read: each is kept until the
/// page's byte budget is spent (one at least); read from the end, they are
/// put back oldest first.
pub(crate) struct Filling {
    page: Page,
    bytes: usize,
    out: Vec<Message>,
}

impl Filling {
    /// Keeps `m` unless the page is full: false once it is (read no more).
    pub(crate) fn keep(&mut self, m: Message) -> bool {
        self.bytes = self.bytes.saturating_add(m.body.len() + ROW_BYTES);
        if self.bytes > self.page.budget && !self.out.is_empty() {
            return false;
        }
        self.out.push(m);
        true
    }

    /// The page's messages, oldest first.
    pub(crate) fn done(mut self) -> Vec<Message> {
        if self.page.from_end {
            self.out.reverse();
        }
        self.out
    }
}

pub(crate) fn parse_kind(s: &str) -> MessageKind {
    match s {
        "king" => MessageKind::King,
        "system" => MessageKind::System,
        "error" => MessageKind::Error,
        "interrupted" => MessageKind::Interrupted,
        _ => MessageKind::Agent,
    }
}

impl NewMessage {
    /// Refuses a reply to what is not an earlier message of the thread,
    /// the message being appended as `seq`.
    pub(crate) fn check_reply(&self, seq: u64) -> DbResult<()> {
        match self.reply_to {
            Some(r) if r == 0 || r >= seq => Err(DbError::Invalid(format!(
                "reply_to {r} is not an earlier message of thread {} (it has {} messages)",
                self.thread,
                seq - 1
            ))),
            _ => Ok(()),
        }
    }

    /// The title an untitled thread takes from this message: a King's
    /// question titles it.
    pub(crate) fn title(&self) -> Option<String> {
        (self.kind == MessageKind::King).then(|| kd_proto::title::title_from(&self.body)).flatten()
    }
}

/// A message as both engines select it: thread, seq, sender, to, cc,
/// reply_to, kind, body, round, created_at, run, replaces, refs, route,
/// purpose.
pub(crate) fn read<R: Columns>(r: &R) -> Result<Message, R::Error> {
    Ok(Message {
        thread: r.text(0)?,
        seq: r.count(1)?,
        from: r.text(2)?,
        to: super::parse_list(&r.text(3)?),
        cc: super::parse_list(&r.text(4)?),
        reply_to: r.opt_count(5)?,
        kind: parse_kind(&r.text(6)?),
        body: r.text(7)?,
        round: r.opt_int(8)?.map(|v| v as u32),
        created_at_ms: r.int(9)?,
        run: r.opt_text(10)?.and_then(|s| serde_json::from_str(&s).ok()),
        replaces: r.opt_count(11)?,
        refs: super::parse_list(&r.text(12)?),
        route: r.opt_text(13)?.and_then(|t| RouteType::parse(&t)),
        purpose: r.opt_text(14)?.and_then(|t| Purpose::parse(&t)),
    })
}
