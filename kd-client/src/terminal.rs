//! What may reach a terminal. Every text kd did not write itself — agents'
//! answers and errors, imported messages, paths, configuration values —
//! passes through [`safe`] before it is printed.

use std::borrow::Cow;

/// `s` made safe to print on a terminal: control characters, which could
/// set the window title, clear the screen or rewrite what is shown, are
/// replaced by visible stand-ins — a C0 character by its control picture
/// (ESC → `␛`, BEL → `␇`, CR → `␍`), DEL by `␡`, a C1 character by `�`.
/// Newlines and tabs are kept, and a CR that ends a line (`\r\n`) is
/// dropped; the controls that reorder text are shown as `�`. Borrowed when
/// there is nothing to replace.
pub fn safe(s: &str) -> Cow<'_, str> {
    shown(s, false)
}

/// [`safe`] for a name shown within a line (a file, a branch): a newline or
/// a tab in it is shown too (`␊`, `␉`), so that a name cannot begin a line
/// of its own that reads as kd's.
pub fn safe_line(s: &str) -> Cow<'_, str> {
    shown(s, true)
}

/// The bidirectional controls that reorder what a terminal shows (the
/// embeddings, overrides and isolates: a name `rlo\u{202e}txt.exe` reads
/// `rloexe.txt`), shown as `\u{fffd}`.
fn reorders(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn shown(s: &str, one_line: bool) -> Cow<'_, str> {
    let kept = |c: char| !one_line && (c == '\n' || c == '\t');
    if !s.chars().any(|c| (c.is_control() && !kept(c)) || reorders(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if kept(c) => out.push(c),
            '\r' if !one_line && chars.peek() == Some(&'\n') => {}
            '\u{0}'..='\u{1f}' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}')),
            '\u{7f}' => out.push('\u{2421}'),
            c if c.is_control() || reorders(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert!(matches!(safe("plain\ttext\nand more"), Cow::Borrowed(_)));
        assert_eq!(safe("a\u{1b}]0;t\u{7}b\u{1b}[2J"), "a␛]0;t␇b␛[2J");
        assert_eq!(safe("line\r\nnext\rover"), "line\nnext␍over");
        assert_eq!(safe("\u{0}\u{7f}\u{9b}x"), "␀␡\u{fffd}x");
        assert_eq!(safe("rlo\u{202e}txt.exe \u{2067}x\u{2069}"), "rlo\u{fffd}txt.exe \u{fffd}x\u{fffd}");
        assert!(matches!(safe("שלום, مرحبا"), Cow::Borrowed(_)), "right-to-left text itself is shown");
    }

    /// A name shown within a line (a member's file) cannot start a line of
    /// its own, or reorder what follows it.
    #[test]
    fn a_name_within_a_line_shows_its_newlines_and_tabs() {
        assert_eq!(safe_line("fake\n  evil  accepted\t0 files"), "fake␊  evil  accepted␉0 files");
        assert_eq!(safe_line("a\r\nb"), "a␍␊b");
        assert_eq!(safe_line("rlo\u{202e}txt.exe"), "rlo\u{fffd}txt.exe");
        assert!(matches!(safe_line("src/main.rs"), Cow::Borrowed(_)));
    }
}
