//! What a tool answers: short text a model reads (and a CLI may show its
//! user), bounded, with control characters shown rather than obeyed.

use kd_proto::types::{
    Access, Ack, Delivery, DeliveryStatus, InboxItem, RaceCheck, RaceStatus, Role, Routed, SearchHit,
};

use crate::ClientError;
use crate::terminal::safe;

/// The longest text a tool answers, in bytes: what is longer is cut (a
/// thread from its start, anything else at its end), and says so.
pub const MAX_TEXT: usize = 32 * 1024;

/// What a tool answered: its text, and whether it is a failure
/// (`isError`), so the model knows its call did not do what it asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    pub is_error: bool,
}

impl Reply {
    pub fn ok(text: String) -> Reply {
        Reply { text: bounded(&text), is_error: false }
    }

    pub fn error(text: String) -> Reply {
        Reply { text: bounded(&text), is_error: true }
    }
}

/// `text` made safe and cut to [`MAX_TEXT`].
fn bounded(text: &str) -> String {
    let text = safe(text);
    if text.len() <= MAX_TEXT {
        return text.into_owned();
    }
    const NOTE: &str = "\n… (cut: longer than 32 KiB)";
    let mut end = MAX_TEXT - NOTE.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{NOTE}", &text[..end])
}

/// `sent #12 to codex (it answers now)`.
pub fn sent(r: &Routed) -> Reply {
    if r.deliveries.is_empty() {
        return Reply::ok(format!("sent #{} (no member to deliver it to)", r.message.seq));
    }
    let each: Vec<String> = r.deliveries.iter().map(|d| format!("{} ({})", d.member, delivery(d))).collect();
    Reply::ok(format!("sent #{} to {}", r.message.seq, each.join(", ")))
}

fn delivery(d: &Delivery) -> String {
    let what = match d.status {
        DeliveryStatus::Started => "it answers now".to_string(),
        DeliveryStatus::AfterRun => "it answers after its current run".to_string(),
        DeliveryStatus::Queued => format!("queued in its inbox, {} pending", d.queue_size.unwrap_or(1)),
        DeliveryStatus::Copied => "copied".to_string(),
        DeliveryStatus::Rejected => {
            format!("refused: {}", d.reason.as_deref().unwrap_or("its inbox is full"))
        }
    };
    let cc = if d.role == Role::Cc && d.status != DeliveryStatus::Copied { "cc, " } else { "" };
    let dropped = d.dropped.map(|id| format!("; its oldest inbox entry {id} was dropped")).unwrap_or_default();
    format!("{cc}{what}{dropped}")
}

/// The inbox as numbered lines, oldest first.
pub fn inbox(items: &[InboxItem], unread: bool, marked: bool) -> Reply {
    if items.is_empty() {
        return Reply::ok(if unread { "no unread messages in your inbox" } else { "your inbox is empty" }.into());
    }
    let mut out = String::new();
    for (i, x) in items.iter().enumerate() {
        let copied = if x.role == Role::Cc { ", copied to you" } else { "" };
        let body = x.body.trim_end().replace('\n', "\n   ");
        out.push_str(&format!("{}. #{} from {} ({}{copied}): {body}\n", i + 1, x.seq, x.from, x.route_type.as_str()));
    }
    if marked {
        out.push_str("(marked read)\n");
    }
    Reply::ok(out.trim_end().to_string())
}

/// `acknowledged e-… (message #12)`, one line each.
pub fn acked(acks: &[Ack]) -> Reply {
    if acks.is_empty() {
        return Reply::ok("you owe no acknowledgement".into());
    }
    let lines: Vec<String> =
        acks.iter().map(|a| format!("acknowledged {} (message #{})", a.broadcast, a.seq)).collect();
    Reply::ok(lines.join("\n"))
}

/// `claimed src/lib.rs for writing`; a write another member holds is a
/// failure.
pub fn claimed(c: &RaceCheck) -> Reply {
    let writers = c.writers.join(", ");
    match (c.access, c.status) {
        (_, RaceStatus::Rejected) => Reply::error(format!(
            "refused: {} is being written by {writers}; retry in {} ms",
            c.resource,
            c.backoff_ms.unwrap_or(0)
        )),
        (Access::Write, _) => Reply::ok(format!("claimed {} for writing", c.resource)),
        (Access::Read, RaceStatus::Warning) => {
            Reply::ok(format!("warning: {} is being written by {writers}; what you read may be stale", c.resource))
        }
        (Access::Read, RaceStatus::Ok) => {
            Reply::ok(format!("claimed {} for reading; no one is writing it", c.resource))
        }
    }
}

/// The thread's recent messages; when too long, its latest part.
pub fn thread(history: &str) -> Reply {
    let history = history.trim();
    if history.is_empty() {
        return Reply::ok("the thread has no messages yet".into());
    }
    const NOTE: &str = "… (earlier messages cut: ask for fewer with last)\n";
    if history.len() <= MAX_TEXT {
        return Reply::ok(history.to_string());
    }
    let mut start = history.len() - (MAX_TEXT - NOTE.len());
    while !history.is_char_boundary(start) {
        start += 1;
    }
    Reply::ok(format!("{NOTE}{}", &history[start..]))
}

/// Search hits as numbered lines, best first.
pub fn found(query: &str, hits: &[SearchHit]) -> Reply {
    if hits.is_empty() {
        return Reply::ok(format!("no match for {query:?}"));
    }
    let lines: Vec<String> = hits
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let at = h.seq.map(|s| format!(" #{s}")).unwrap_or_default();
            format!("{}. thread {}{at} {}: {}", i + 1, h.thread, h.from, h.snippet.replace('\n', " "))
        })
        .collect();
    Reply::ok(lines.join("\n"))
}

/// A call kdd refused or could not take, with the reason.
pub fn failure(e: &ClientError) -> Reply {
    Reply::error(match e {
        ClientError::Rpc { code, message, .. } => {
            let name = kd_proto::ErrorCode::from_code(*code).map(|c| c.name().to_string()).unwrap_or(code.to_string());
            format!("refused by kd ({name}): {message}")
        }
        other => other.to_string(),
    })
}

/// No token: kd mcp was not started by kd for a run.
pub const NO_TOKEN: &str = "kd mcp has no capability to act with: KD_RUN_TOKEN is not set. kd gives one to each \
agent run it starts (with this server); kd's tools work only inside such a run.";

#[cfg(test)]
mod tests {
    use kd_proto::types::{DeliveryMode, InboxStatus, Message, RouteType};

    use super::*;

    fn delivery(member: &str, role: Role, status: DeliveryStatus) -> Delivery {
        Delivery {
            member: member.into(),
            role,
            mode: DeliveryMode::Immediate,
            status,
            run: None,
            inbox: None,
            queue_size: None,
            dropped: None,
            reason: None,
        }
    }

    fn routed(deliveries: Vec<Delivery>) -> Routed {
        Routed {
            message: Message::new("t1", 12, "claude", "hello"),
            route_type: RouteType::PointToPoint,
            deliveries,
            participants: vec![],
            correlation_id: "m-1".into(),
        }
    }

    fn item(seq: u64, from: &str, role: Role, body: &str) -> InboxItem {
        InboxItem {
            id: seq * 10,
            member: "claude".into(),
            thread: "t1".into(),
            seq,
            from: from.into(),
            route_type: RouteType::Multicast,
            role,
            status: InboxStatus::Pending,
            queued_at_ms: 0,
            read_at_ms: None,
            body: body.into(),
        }
    }

    #[test]
    fn a_send_says_what_became_of_it_for_each_member() {
        let one = sent(&routed(vec![delivery("codex", Role::To, DeliveryStatus::Started)]));
        assert_eq!(one, Reply { text: "sent #12 to codex (it answers now)".into(), is_error: false });
        let mut queued = delivery("gemini", Role::To, DeliveryStatus::Queued);
        queued.queue_size = Some(3);
        queued.dropped = Some(7);
        let mut refused = delivery("cursor", Role::To, DeliveryStatus::Rejected);
        refused.reason = Some("inbox full (reject_new)".into());
        let many = sent(&routed(vec![
            delivery("codex", Role::To, DeliveryStatus::AfterRun),
            queued,
            refused,
            delivery("claude", Role::Cc, DeliveryStatus::Copied),
        ]));
        assert_eq!(
            many.text,
            "sent #12 to codex (it answers after its current run), gemini (queued in its inbox, 3 pending; its \
             oldest inbox entry 7 was dropped), cursor (refused: inbox full (reject_new)), claude (copied)"
        );
        assert_eq!(sent(&routed(vec![])).text, "sent #12 (no member to deliver it to)");
    }

    #[test]
    fn an_inbox_is_numbered_lines_oldest_first() {
        assert_eq!(inbox(&[], true, false).text, "no unread messages in your inbox");
        assert_eq!(inbox(&[], false, false).text, "your inbox is empty");
        let items = [item(4, "codex", Role::To, "first\nsecond line\n"), item(9, "gemini", Role::Cc, "fyi")];
        assert_eq!(
            inbox(&items, true, true).text,
            "1. #4 from codex (multicast): first\n   second line\n2. #9 from gemini (multicast, copied to you): fyi\n(marked read)"
        );
    }

    #[test]
    fn acknowledgements_and_claims_read_as_sentences() {
        assert_eq!(acked(&[]).text, "you owe no acknowledgement");
        let ack = Ack {
            broadcast: "e-1".into(),
            thread: "t1".into(),
            seq: 5,
            member: "claude".into(),
            acknowledged: true,
            acked_at_ms: None,
            how: None,
        };
        assert_eq!(acked(&[ack]).text, "acknowledged e-1 (message #5)");
        let check = |access, status, writers: &[&str]| RaceCheck {
            resource: "src/lib.rs".into(),
            agent: "claude".into(),
            access,
            status,
            writers: writers.iter().map(|w| w.to_string()).collect(),
            held_until_ms: None,
            backoff_ms: Some(250),
        };
        assert_eq!(
            claimed(&check(Access::Write, RaceStatus::Ok, &[])),
            Reply { text: "claimed src/lib.rs for writing".into(), is_error: false }
        );
        assert_eq!(
            claimed(&check(Access::Write, RaceStatus::Rejected, &["codex"])),
            Reply { text: "refused: src/lib.rs is being written by codex; retry in 250 ms".into(), is_error: true }
        );
        let warned = claimed(&check(Access::Read, RaceStatus::Warning, &["codex"]));
        assert_eq!(warned.text, "warning: src/lib.rs is being written by codex; what you read may be stale");
        assert!(!warned.is_error);
        assert_eq!(
            claimed(&check(Access::Read, RaceStatus::Ok, &[])).text,
            "claimed src/lib.rs for reading; no one is writing it"
        );
    }

    #[test]
    fn search_hits_are_numbered_lines() {
        assert_eq!(found("lock", &[]).text, "no match for \"lock\"");
        let hit = |seq, from: &str| SearchHit {
            thread: "t1".into(),
            seq,
            from: from.into(),
            at_ms: 0,
            snippet: "the «lock»\nis held".into(),
            rank: -1.0,
        };
        assert_eq!(
            found("lock", &[hit(Some(3), "codex"), hit(None, "title")]).text,
            "1. thread t1 #3 codex: the «lock» is held\n2. thread t1 title: the «lock» is held"
        );
    }

    #[test]
    fn failures_say_why() {
        let forbidden = ClientError::Rpc {
            code: kd_proto::ErrorCode::Forbidden.code(),
            message: "unknown capability: kd gave no run this token".into(),
            data: None,
        };
        assert_eq!(
            failure(&forbidden),
            Reply {
                text: "refused by kd (forbidden): unknown capability: kd gave no run this token".into(),
                is_error: true
            }
        );
        let odd = ClientError::Rpc { code: -32602, message: "invalid params".into(), data: None };
        assert_eq!(failure(&odd).text, "refused by kd (-32602): invalid params");
        let gone = ClientError::Unreachable {
            socket: "/run/kd/kdd.sock".into(),
            reason: "no socket there (is kdd running?)".into(),
            hint: "",
            nothing_listens: true,
        };
        assert_eq!(failure(&gone).text, "cannot reach kdd at /run/kd/kdd.sock: no socket there (is kdd running?)");
    }

    #[test]
    fn text_is_bounded_and_safe() {
        let long = "x".repeat(MAX_TEXT * 2);
        let r = Reply::ok(long.clone());
        assert!(r.text.len() <= MAX_TEXT && r.text.ends_with("(cut: longer than 32 KiB)"), "{}", r.text.len());
        // Cut on a character boundary.
        let wide = "é".repeat(MAX_TEXT);
        assert!(Reply::ok(wide).text.len() <= MAX_TEXT);
        // A thread keeps its latest part.
        let history = format!("{}\nthe latest", "old ".repeat(MAX_TEXT));
        let t = thread(&history).text;
        assert!(t.len() <= MAX_TEXT && t.starts_with("… (earlier messages cut") && t.ends_with("the latest"));
        assert_eq!(thread("  \n").text, "the thread has no messages yet");
        // An escape sequence in an agent's text is shown, not obeyed.
        assert_eq!(Reply::ok("a\u{1b}[2Jb".into()).text, "a␛[2Jb");
    }
}
