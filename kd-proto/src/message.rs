//! Messages (`MessageApiServer`, `MessageApiClient`): one message of a
//! thread, what it is (its kind, how it was routed, its purpose to a
//! completion), appending one (`message.append`) and reading a thread's
//! messages a page at a time (`thread.messages`).
//!
//! [`Messages`], the answer of `thread.messages`, is a JSON array of
//! [`Message`] on the wire. A client gets the messages. The daemon may
//! instead hand over the page already written as JSON, straight from its
//! rows, so that a 10,000-message thread is not built as values and then
//! serialised a second time.

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use std::ops::{Deref, DerefMut};

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::RpcResult;

/// What a message is, which decides how it is shown and whether it is history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// From the human.
    King,
    /// A finished answer from a member.
    Agent,
    /// A notice from kd itself.
    System,
    /// A failed or timed-out run, with the reason.
    Error,
    /// A run cut short (cancelled, daemon stopped); holds the text streamed so far.
    Interrupted,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::King => "king",
            MessageKind::Agent => "agent",
            MessageKind::System => "system",
            MessageKind::Error => "error",
            MessageKind::Interrupted => "interrupted",
        }
    }
}

/// What the backend reported about the run that produced a message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Token usage as the backend reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// The run that produced the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The run's start order ([`RunInfo::ordinal`]): with `reply_to` it
    /// fixes the answer's place in the thread (see [`crate::order`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u64>,
    /// The model, when the backend (or an imported file) names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why the run was stopped short, when neither a client's cancel nor
    /// kdd stopping did it: `stopped by a member's emergency broadcast`
    /// (its message is `interrupted`; `run_cancelled` says it live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// One message of a thread. `seq` is dense per thread: 1, 2, 3 …
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    pub thread: String,
    pub seq: u64,
    pub from: String,
    /// Addressees; `["all"]` for a broadcast.
    pub to: Vec<String>,
    pub cc: Vec<String>,
    /// The seq of the message this one answers.
    pub reply_to: Option<u64>,
    pub kind: MessageKind,
    pub body: String,
    /// Council round the message belongs to, when it is part of one.
    pub round: Option<u32>,
    pub created_at_ms: i64,
    pub run: Option<RunMeta>,
    /// The failed message this one replaces (a retry): shown in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<u64>,
    /// Files the message refers to (Kingdom's `refs:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<String>,
    /// How it was routed, for a message between members (`message.route`,
    /// a hand-off, an emergency broadcast).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteType>,
    /// What it is to a multicast completion: a ballot, the tally, the
    /// synthesis, the merged answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<Purpose>,
}

impl Message {
    /// Whether this is kd's word answering message `seq` — not its notice
    /// that the exchange reached its budget.
    pub fn is_kd_answer_to(&self, seq: u64) -> bool {
        self.from == crate::names::KD
            && self.reply_to == Some(seq)
            && !self.body.starts_with(crate::names::BUDGET_NOTICE)
    }

    /// A plain message of `thread`: the King's to all, a member's to the
    /// King; no reply, round or run.
    pub fn new(thread: &str, seq: u64, from: &str, body: &str) -> Message {
        let king = from == crate::names::KING;
        Message {
            thread: thread.to_string(),
            seq,
            from: from.to_string(),
            to: vec![if king { crate::names::ALL } else { crate::names::KING }.to_string()],
            cc: vec![],
            reply_to: None,
            kind: if king { MessageKind::King } else { MessageKind::Agent },
            body: body.to_string(),
            round: None,
            created_at_ms: 0,
            run: None,
            replaces: None,
            refs: vec![],
            route: None,
            purpose: None,
        }
    }
}

/// A lock token to present with a write that must only happen while the
/// lock is held (fencing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Fence {
    pub resource: String,
    pub token: u64,
}

/// What kind of conversation a routed message is (seed 002).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RouteType {
    /// One sender, one addressee.
    PointToPoint,
    /// One sender, several named addressees.
    Multicast,
    /// One sender, every member.
    Broadcast,
    /// An answer to a given message (`reply_to`), to its sender.
    Reply,
    /// An emergency broadcast: bypasses queues and delivery modes.
    Emergency,
}

impl RouteType {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteType::PointToPoint => "point_to_point",
            RouteType::Multicast => "multicast",
            RouteType::Broadcast => "broadcast",
            RouteType::Reply => "reply",
            RouteType::Emergency => "emergency",
        }
    }

    pub fn parse(s: &str) -> Option<RouteType> {
        [RouteType::PointToPoint, RouteType::Multicast, RouteType::Broadcast, RouteType::Reply, RouteType::Emergency]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// What a message (or the run writing it) is to a multicast completion
/// (F-X2), when it is more than an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A member's ranking of the others' anonymised answers.
    Ballot,
    /// The vote's tally, written by kd.
    Tally,
    /// The chair's one final answer.
    Synthesis,
    /// Every answer under its member's name, written by kd.
    Merge,
    /// A branch's context bundle (F-L1): the identity and policy files read
    /// when it was forked, and its parent's summary; given to the members.
    Bundle,
    /// A thread's summary (F-L2): the summarizer's answer, or a branch's
    /// summary offered to its trunk; given to the members.
    Summary,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Ballot => "ballot",
            Purpose::Tally => "tally",
            Purpose::Synthesis => "synthesis",
            Purpose::Merge => "merge",
            Purpose::Bundle => "bundle",
            Purpose::Summary => "summary",
        }
    }

    pub fn parse(s: &str) -> Option<Purpose> {
        [Purpose::Ballot, Purpose::Tally, Purpose::Synthesis, Purpose::Merge, Purpose::Bundle, Purpose::Summary]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// A page of messages, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    list: Vec<Message>,
    /// The same page as a JSON array, when the daemon wrote it directly;
    /// then `list` is empty.
    json: Option<String>,
}

impl Messages {
    /// A page already written as a JSON array of messages (daemon side):
    /// serialised as it is, neither parsed nor checked, so `json` must be
    /// one JSON value with nothing around it, as serde_json writes one.
    pub fn written(json: String) -> Messages {
        Messages { list: Vec::new(), json: Some(json) }
    }

    /// The messages.
    pub fn into_vec(self) -> Vec<Message> {
        self.list
    }
}

impl From<Vec<Message>> for Messages {
    fn from(list: Vec<Message>) -> Messages {
        Messages { list, json: None }
    }
}

impl From<Messages> for Vec<Message> {
    fn from(m: Messages) -> Vec<Message> {
        m.list
    }
}

impl Deref for Messages {
    type Target = Vec<Message>;
    fn deref(&self) -> &Vec<Message> {
        &self.list
    }
}

impl DerefMut for Messages {
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        &mut self.list
    }
}

impl IntoIterator for Messages {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter()
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Messages) -> bool {
        self.list == other.list && self.json == other.json
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self.json.is_none() && &self.list == other
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.json {
            Some(json) => Verbatim(json).serialize(s),
            None => self.list.serialize(s),
        }
    }
}

/// JSON already written, which serde_json writes out as it is, the way it
/// writes a [`serde_json::value::RawValue`] (whose `Serialize` is the same
/// struct: one field, both named by serde_json's raw-value token), without
/// the copy into a `RawValue` and without parsing it again. Another
/// serializer would see a struct holding a string.
/// (`written_json_reads_back_as_the_messages` fails if serde_json stops
/// honouring the token.)
struct Verbatim<'a>(&'a str);

impl Serialize for Verbatim<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// serde_json's `raw::TOKEN`.
        const RAW_VALUE: &str = "$serde_json::private::RawValue";
        let mut raw = s.serialize_struct(RAW_VALUE, 1)?;
        raw.serialize_field(RAW_VALUE, self.0)?;
        raw.end()
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Messages, D::Error> {
        Vec::<Message>::deserialize(d).map(Messages::from)
    }
}

impl JsonSchema for Messages {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        Vec::<Message>::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Vec::<Message>::json_schema(generator)
    }
    fn inline_schema() -> bool {
        Vec::<Message>::inline_schema()
    }
}

/// Messages rendered in one `thread.render` call at most.
pub const MAX_RENDER: usize = 100;

/// A message's body rendered as HTML by kdd (`thread.render`): its
/// markdown turned into HTML and sanitised (no script, no event handler,
/// no `javascript:` link, no image; raw HTML in the text shows as text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Rendered {
    pub seq: u64,
    pub html: String,
}

#[rpc(server, client)]
pub trait MessageApi {
    #[method(name = "thread.messages", param_kind = map)]
    async fn thread_messages(
        &self,
        thread: String,
        since_seq: Option<u64>,
        limit: Option<u32>,
        before_seq: Option<u64>,
        bodies: Option<bool>,
    ) -> RpcResult<Messages>;

    /// The bodies of messages `seqs` rendered from markdown to sanitised
    /// HTML, for a page to show (at most [`MAX_RENDER`] at once).
    #[method(name = "thread.render", param_kind = map)]
    async fn thread_render(&self, thread: String, seqs: Vec<u64>) -> RpcResult<Vec<Rendered>>;

    #[method(name = "message.append", param_kind = map)]
    async fn message_append(
        &self,
        thread: String,
        from: String,
        body: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        kind: Option<MessageKind>,
        round: Option<u32>,
        correlation_id: Option<String>,
        fence: Option<Fence>,
    ) -> RpcResult<Message>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_json_reads_back_as_the_messages() {
        let m = vec![Message::new("t1", 1, "king", "Hi?"), Message::new("t1", 2, "claude", "Hello.")];
        let page = Messages::written(serde_json::to_string(&m).unwrap());
        let wire = serde_json::to_string(&page).unwrap();
        assert_eq!(wire, serde_json::to_string(&m).unwrap(), "written out as it is");
        // As jsonrpsee writes an answer: into a writer, inside its envelope.
        #[derive(Serialize)]
        struct Answer<'a, T> {
            id: u64,
            result: &'a T,
        }
        let mut answer = Vec::new();
        serde_json::to_writer(&mut answer, &Answer { id: 1, result: &page }).unwrap();
        assert_eq!(answer, serde_json::to_vec(&Answer { id: 1, result: &m }).unwrap());
        assert_eq!(serde_json::to_value(&page).unwrap(), serde_json::to_value(&m).unwrap());
        let back: Messages = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.into_vec(), m);
    }

    #[test]
    fn kds_answer_to_a_message_is_its_reply_not_its_budget_notice_nor_anyone_elses() {
        let reply =
            |from: &str, to: Option<u64>, body: &str| Message { reply_to: to, ..Message::new("t1", 9, from, body) };
        assert!(reply(crate::names::KD, Some(4), "kd: claude's work is up to date").is_kd_answer_to(4));
        assert!(
            !reply(crate::names::KD, Some(4), "kd: claude's work is up to date").is_kd_answer_to(5),
            "another message's"
        );
        assert!(!reply(crate::names::KD, None, "kd: claude's work is up to date").is_kd_answer_to(4), "no reply");
        assert!(!reply("claude", Some(4), "done").is_kd_answer_to(4), "a member's");
        let notice = format!("{} $0.5000, which reaches council.budget_usd ($0.5000)", crate::names::BUDGET_NOTICE);
        assert!(!reply(crate::names::KD, Some(4), &notice).is_kd_answer_to(4), "kd's budget notice");
    }
}
