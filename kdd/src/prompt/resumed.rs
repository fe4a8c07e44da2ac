//! What a member is told when kd asks it again for an answer a restart cut
//! (F-J2): what it had written so far, given back as context, and that its
//! whole answer is wanted again — the interrupted text is replaced by it.

/// The placeholder kd stores for a run cut before it said anything.
const NOTHING_SAID: &str = "(interrupted before it said anything)";

/// The turn given to a member's own backend session, resumed: it already
/// holds the question.
pub fn resumed_turn(partial: &str) -> String {
    format!("[kd restarted while you were answering]\n{}", again(partial))
}

/// Appended to a prompt given whole (no backend session to resume).
pub fn resumed_suffix(partial: &str) -> String {
    format!("\n\n---\n[kd restarted while you were answering this]\n{}", again(partial))
}

fn again(partial: &str) -> String {
    let partial = partial.trim();
    if partial.is_empty() || partial == NOTHING_SAID {
        return "You had not written anything yet. Give your whole answer.".to_string();
    }
    format!(
        "What you had written so far:\n\n{partial}\n\n---\nGive your whole answer again, continuing from where it \
         stopped; it replaces the interrupted one."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_is_given_back_unless_there_was_none() {
        let t = resumed_turn("half an ans");
        assert!(t.starts_with("[kd restarted") && t.contains("half an ans") && t.contains("whole answer again"), "{t}");
        for empty in ["", "  ", NOTHING_SAID] {
            let s = resumed_suffix(empty);
            assert!(s.contains("had not written anything") && !s.contains(NOTHING_SAID), "{s}");
        }
    }
}
