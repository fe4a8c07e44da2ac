//! The clean-up of what an agent says back: the `name: ` label it may echo
//! from the history format, stripped from the stored answer and the stream.

/// Strips the `name: ` label an agent may echo from the history format, as
/// often as it repeats (`codex: codex: …`). Only the agent's own name, only
/// at the very start, only followed by a space or line break.
pub fn strip_label<'a>(name: &str, body: &'a str) -> &'a str {
    let mut rest = body.trim_start();
    loop {
        let Some(after) = rest.strip_prefix(name).and_then(|r| r.strip_prefix(':')) else { return rest };
        if !after.starts_with([' ', '\n', '\t', '\r']) && !after.is_empty() {
            return rest;
        }
        rest = after.trim_start();
    }
}

/// [`strip_label`] for a stream: holds back the start of the text while it
/// could still be the agent's own `name: ` label, so that what subscribers
/// see matches the stored message.
#[derive(Debug)]
pub struct LabelStripper {
    label: String,
    held: String,
    decided: bool,
}

impl LabelStripper {
    pub fn new(name: &str) -> LabelStripper {
        LabelStripper { label: format!("{name}:"), held: String::new(), decided: false }
    }

    /// The part of `text` that can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        if self.decided {
            return text.to_string();
        }
        self.held.push_str(text);
        loop {
            let trimmed = self.held.trim_start();
            if trimmed.len() <= self.label.len() {
                if self.label.starts_with(trimmed) {
                    return String::new();
                }
                break;
            }
            let after = trimmed.strip_prefix(self.label.as_str());
            match after {
                Some(rest) if rest.starts_with([' ', '\n', '\t', '\r']) => self.held = rest.trim_start().to_string(),
                _ => break,
            }
            if self.held.is_empty() {
                return String::new();
            }
        }
        self.decided = true;
        std::mem::take(&mut self.held)
    }

    /// What is still held when the stream ends.
    pub fn finish(&mut self) -> String {
        self.decided = true;
        let held = std::mem::take(&mut self.held);
        if held.trim_start() == self.label { String::new() } else { held }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_labels_are_held_back_and_dropped() {
        let feed = |pieces: &[&str]| {
            let mut s = LabelStripper::new("codex");
            let mut out: String = pieces.iter().map(|p| s.push(p)).collect();
            out.push_str(&s.finish());
            out
        };
        assert_eq!(feed(&["co", "dex", ": co", "dex: I ", "agree."]), "I agree.");
        assert_eq!(feed(&["cod", "ing is fun"]), "coding is fun");
        assert_eq!(feed(&["claude: hi"]), "claude: hi");
        assert_eq!(feed(&["codex:value"]), "codex:value");
        assert_eq!(feed(&["code"]), "code", "held text is released at the end");
        let mut s = LabelStripper::new("codex");
        assert_eq!(s.push("Sure"), "Sure", "decided at the first character that cannot be a label");
        assert_eq!(s.push(" thing"), " thing");
    }

    #[test]
    fn own_label_is_stripped_repeatedly_but_nothing_else() {
        assert_eq!(strip_label("codex", "codex: codex: I agree."), "I agree.");
        assert_eq!(strip_label("codex", "  codex:\nI agree."), "I agree.");
        assert_eq!(strip_label("codex", "claude: I agree."), "claude: I agree.", "no cross-speaker strip");
        assert_eq!(strip_label("codex", "codexes are great"), "codexes are great", "no false strip");
        assert_eq!(strip_label("codex", "codex:value is a key"), "codex:value is a key");
        assert_eq!(strip_label("codex", "I said codex: yes"), "I said codex: yes");
    }
}
