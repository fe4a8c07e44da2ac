//! The thread history in the exact format of F-A5 and the prompt around it
//! (F-A6).

use kd_proto::names::{ALL, KING};
use kd_proto::order::message_place;
use kd_proto::types::{Message, MessageKind, Purpose, display_order};

/// Whether a message is part of the conversation agents see: what the King
/// and the members said (an interrupted answer included), a branch's
/// context bundle and the summaries kd posts, not errors or notices.
pub fn is_history(m: &Message) -> bool {
    matches!(m.kind, MessageKind::King | MessageKind::Agent | MessageKind::Interrupted)
        || matches!(m.purpose, Some(Purpose::Bundle | Purpose::Summary))
}

/// The thread as a run answering message `reply_to` is given it: every
/// message up to that one, and the answers to earlier messages written
/// since (by runs that were in flight when it came). So the members of a
/// parallel round do not see each other's answers, while a run that waited
/// behind its member's run in flight sees the answer that run gave.
/// Without a `reply_to`, the whole thread. Borrowed when every message is
/// given (a run answering the latest one): the thread read once for a
/// round is not copied for each of its runs (issue 31, item 17).
pub fn as_of(messages: &[Message], reply_to: Option<u64>) -> std::borrow::Cow<'_, [Message]> {
    let Some(upto) = reply_to else { return messages.into() };
    let given = |m: &Message| m.seq <= upto || message_place(m).anchor < upto;
    if messages.iter().all(given) {
        return messages.into();
    }
    messages.iter().filter(|m| given(m)).cloned().collect::<Vec<_>>().into()
}

/// The thread as a multi-party conversation, for `target`:
///
/// ```text
/// [Previous conversation]
/// king: What should we do about X?
///
/// claude: I think …
///
/// codex (to claude): I disagree because …
///
/// ---
/// You are cursor. Continue the discussion.
/// ```
///
/// Bodies verbatim, every history message in seq order (a retried answer
/// in the place of the failure it replaces), no truncation;
/// `(to NAME)` only for messages directed at specific members (not `all`,
/// not `king`); `suffix` replaces the last line when given.
pub fn format_thread_history(messages: &[Message], target: &str, suffix: Option<&str>) -> String {
    let mut out = String::from("[Previous conversation]\n");
    let said = format_conversation(messages);
    out.push_str(&said);
    out.push_str(if said.is_empty() { "\n---\n" } else { "\n\n---\n" });
    match suffix {
        Some(s) => out.push_str(s),
        None => out.push_str(&format!("You are {target}. Continue the discussion.")),
    }
    out
}

/// The conversation alone, as [`format_thread_history`] gives it between
/// its head and its last lines (`king: …\n\nclaude: …`): what a fork
/// carries into its branch. Empty when nothing was said.
pub fn format_conversation(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in display_order(messages).into_iter().filter(|m| is_history(m)) {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&m.from);
        let directed: Vec<&str> = m.to.iter().map(String::as_str).filter(|t| *t != KING && *t != ALL).collect();
        if !directed.is_empty() && !m.to.iter().any(|t| t == ALL) {
            out.push_str(&format!(" (to {})", directed.join(", ")));
        }
        out.push_str(": ");
        out.push_str(&m.body);
    }
    out
}

/// The messages a resumed session of `member` has not been given: every
/// history message after `seen` (the last seq it was given) that it did
/// not write, in the order they are shown. Without a `seen` (a session
/// from before kd tracked it), what came after its own last message.
pub fn unseen(messages: &[Message], member: &str, seen: Option<u64>) -> Vec<Message> {
    let shown = display_order(messages);
    let after = match seen {
        Some(seen) => seen,
        None => shown.iter().rev().find(|m| m.from == member).map(|m| m.seq).unwrap_or(0),
    };
    shown.into_iter().filter(|m| m.seq > after && m.from != member && is_history(m)).cloned().collect()
}

/// [`format_thread_history`] of the messages a resumed session has not
/// seen, headed `[New messages]`.
pub fn format_new_messages(messages: &[Message], target: &str) -> String {
    format_thread_history(messages, target, None).replacen("[Previous conversation]", "[New messages]", 1)
}

/// The prompt: preamble, then the agent's own prompt, then the body
/// (history or new messages), separated by blank lines.
pub fn assemble(preamble: &str, agent_prompt: Option<&str>, body: &str) -> String {
    let mut parts = vec![preamble.trim_end()];
    if let Some(p) = agent_prompt.map(str::trim_end).filter(|p| !p.is_empty()) {
        parts.push(p);
    }
    parts.push(body);
    parts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, from: &str, to: &[&str], body: &str) -> Message {
        Message { to: to.iter().map(|s| s.to_string()).collect(), ..Message::new("t", seq, from, body) }
    }

    fn answer(seq: u64, from: &str, reply_to: u64, ordinal: u64) -> Message {
        let run = kd_proto::types::RunMeta { ordinal: Some(ordinal), ..Default::default() };
        Message { reply_to: Some(reply_to), run: Some(run), ..msg(seq, from, &["king"], "a") }
    }

    fn seqs(v: &[Message]) -> Vec<u64> {
        v.iter().map(|m| m.seq).collect()
    }

    #[test]
    fn a_run_sees_the_thread_up_to_its_question_and_the_answers_to_earlier_ones() {
        // King asked A (1) and B (2); codex answered B (3) before claude,
        // busy with A, answered it (4); claude's run for B comes next.
        let t = vec![
            msg(1, "king", &["claude"], "A"),
            msg(2, "king", &["all"], "B"),
            answer(3, "codex", 2, 20),
            answer(4, "claude", 1, 10),
        ];
        assert_eq!(seqs(&as_of(&t, Some(2))), [1, 2, 4], "its own earlier answer, not codex's to B");
        assert_eq!(seqs(&as_of(&t, Some(1))), [1], "a parallel answer to A sees only A");
        assert_eq!(seqs(&as_of(&t, Some(3))), [1, 2, 3, 4], "a turn after codex's answer sees it all");
        assert_eq!(seqs(&as_of(&t, None)), [1, 2, 3, 4]);
        assert_eq!(seqs(&as_of(&t, Some(9))), [1, 2, 3, 4]);
        use std::borrow::Cow;
        assert!(matches!(as_of(&t, Some(9)), Cow::Borrowed(_)), "all of it given: not copied");
        assert!(matches!(as_of(&t, Some(1)), Cow::Owned(_)));
        // A parallel round: codex (asked second) answered first; the next
        // turn answers the last message and sees both answers.
        let round = vec![msg(1, "king", &["all"], "Q"), answer(2, "codex", 1, 20), answer(3, "claude", 1, 10)];
        assert_eq!(seqs(&as_of(&round, Some(3))), [1, 2, 3]);
    }

    #[test]
    fn empty_thread() {
        assert_eq!(
            format_thread_history(&[], "cursor", None),
            "[Previous conversation]\n\n---\nYou are cursor. Continue the discussion."
        );
    }

    #[test]
    fn single_message() {
        let h = format_thread_history(&[msg(1, "king", &["all"], "What should we do about X?")], "claude", None);
        assert_eq!(
            h,
            "[Previous conversation]\nking: What should we do about X?\n\n---\nYou are claude. Continue the discussion."
        );
    }

    #[test]
    fn multi_member_with_a_directed_message_exactly_as_the_spec() {
        let h = format_thread_history(
            &[
                msg(1, "king", &["all"], "What should we do about X?"),
                msg(2, "claude", &["king"], "I think …"),
                msg(3, "codex", &["claude"], "I disagree because …"),
            ],
            "cursor",
            None,
        );
        assert_eq!(
            h,
            "[Previous conversation]\nking: What should we do about X?\n\nclaude: I think …\n\ncodex (to claude): I disagree because …\n\n---\nYou are cursor. Continue the discussion."
        );
    }

    #[test]
    fn directed_to_several_and_broadcast() {
        let h = format_thread_history(
            &[msg(1, "king", &["claude", "codex"], "You two?"), msg(2, "codex", &["all"], "Sure.")],
            "claude",
            None,
        );
        assert!(h.contains("king (to claude, codex): You two?\n\ncodex: Sure."), "{h}");
    }

    #[test]
    fn the_conversation_a_fork_carries_is_the_history_between_its_head_and_last_lines() {
        let t = [msg(1, "king", &["all"], "Q?"), msg(2, "claude", &["king"], "A."), msg(3, "codex", &["claude"], "B.")];
        let said = format_conversation(&t);
        assert_eq!(said, "king: Q?\n\nclaude: A.\n\ncodex (to claude): B.");
        assert_eq!(format_thread_history(&t, "x", Some("S")), format!("[Previous conversation]\n{said}\n\n---\nS"));
        assert_eq!(format_conversation(&[]), "");
    }

    #[test]
    fn custom_suffix_replaces_the_last_line() {
        let h = format_thread_history(&[msg(1, "king", &["all"], "Q")], "claude", Some("Answer in one word."));
        assert_eq!(h, "[Previous conversation]\nking: Q\n\n---\nAnswer in one word.");
    }

    #[test]
    fn multiline_bodies_are_verbatim_and_errors_are_left_out() {
        let mut err = msg(2, "codex", &["all"], "codex: timed out");
        err.kind = MessageKind::Error;
        let h = format_thread_history(&[msg(1, "claude", &["all"], "line one\n\n- two\n---\nthree"), err], "x", None);
        assert_eq!(
            h,
            "[Previous conversation]\nclaude: line one\n\n- two\n---\nthree\n\n---\nYou are x. Continue the discussion."
        );
    }

    #[test]
    fn a_retried_answer_stands_where_the_failure_was() {
        let mut failed = msg(2, "codex", &["king"], "codex: timed out");
        failed.kind = MessageKind::Error;
        let mut retried = msg(4, "codex", &["king"], "On reflection, yes.");
        retried.replaces = Some(2);
        let h = format_thread_history(
            &[msg(1, "king", &["all"], "Q?"), failed, msg(3, "claude", &["king"], "Yes."), retried],
            "gemini",
            None,
        );
        assert!(h.contains("king: Q?\n\ncodex: On reflection, yes.\n\nclaude: Yes.\n\n---"), "{h}");
    }

    #[test]
    fn a_resumed_session_gets_every_message_after_what_it_was_given_but_its_own() {
        let thread = [
            msg(1, "king", &["all"], "Q1"),
            msg(2, "codex", &["king"], "codex 1"),
            msg(3, "claude", &["king"], "claude 1"),
            msg(4, "king", &["all"], "Q2"),
        ];
        // claude was given up to seq 1 (its parallel round began there).
        let new = unseen(&thread, "claude", Some(1));
        assert_eq!(new.iter().map(|m| m.seq).collect::<Vec<_>>(), [2, 4], "codex's answer is not lost");
        assert_eq!(
            format_new_messages(&new, "claude"),
            "[New messages]\ncodex: codex 1\n\nking: Q2\n\n---\nYou are claude. Continue the discussion."
        );
        assert!(unseen(&thread, "claude", Some(4)).is_empty());
        // Legacy sessions: what came after its own last message.
        assert_eq!(unseen(&thread, "claude", None).iter().map(|m| m.seq).collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn prompt_order_is_preamble_agent_prompt_body() {
        assert_eq!(assemble("P.\n", Some("A."), "H"), "P.\n\nA.\n\nH");
        assert_eq!(assemble("P.", None, "H"), "P.\n\nH");
        assert_eq!(assemble("P.", Some("  "), "H"), "P.\n\nH");
    }
}
