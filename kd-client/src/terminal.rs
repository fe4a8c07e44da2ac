//! What may reach a terminal. Every text kd did not write itself — agents'
//! answers and errors, imported messages, paths, configuration values —
//! passes through [`safe`] before it is printed.

use std::borrow::Cow;

/// `s` made safe to print on a terminal: control characters, which could
/// set the window title, clear the screen or rewrite what is shown, are
/// replaced by visible stand-ins — a C0 character by its control picture
/// (ESC → `␛`, BEL → `␇`, CR → `␍`), DEL by `␡`, a C1 character by `�`.
/// Newlines and tabs are kept, and a CR that ends a line (`\r\n`) is
/// dropped. Borrowed when there is nothing to replace.
pub fn safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\u{0}'..='\u{1f}' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}')),
            '\u{7f}' => out.push('\u{2421}'),
            c if c.is_control() => out.push('\u{fffd}'),
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
    }
}
