//! What a thread's title may be — one rule wherever a title is set:
//! `thread.create`, `thread.set_title`, `thread.fork`, `council.send`'s new
//! thread, `thread.import`, kd's own title from the King's first message,
//! and the clients before they send one. A title is shown in terminal
//! headers, lists and the chat's status line, so it is one line of 1 to
//! [`MAX_TITLE_CHARS`] characters with no control characters (an escape
//! would be obeyed) and no bidirectional overrides (which reorder what is
//! shown around them).

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Why a title was refused; said after the title's name (`title is empty`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TitleError {
    #[error("is empty")]
    Empty,
    #[error("is {0} characters long; at most {MAX_TITLE_CHARS}")]
    TooLong(usize),
    #[error("must be one line")]
    Lines,
    #[error("contains control characters ({0})")]
    Control(String),
}

/// Checks a title; returns it trimmed.
pub fn check_title(title: &str) -> Result<String, TitleError> {
    let title = title.trim();
    if title.is_empty() {
        return Err(TitleError::Empty);
    }
    if title.contains(['\n', '\r']) {
        return Err(TitleError::Lines);
    }
    if let Some(c) = title.chars().find(|&c| unfit(c)) {
        return Err(TitleError::Control(format!("U+{:04X}", c as u32)));
    }
    let n = title.chars().count();
    if n > MAX_TITLE_CHARS {
        return Err(TitleError::TooLong(n));
    }
    Ok(title.to_string())
}

/// A title from the King's first message: its first non-blank line, each
/// run of characters a title may not hold made one space, trimmed, cut to
/// [`MAX_TITLE_CHARS`] with `…` — a title [`check_title`] accepts, or none.
pub fn title_from(body: &str) -> Option<String> {
    let line = body.lines().find(|l| l.chars().any(|c| !c.is_whitespace() && !unfit(c)))?;
    let mut clean = String::with_capacity(line.len());
    for c in line.chars() {
        if unfit(c) || c.is_whitespace() {
            if !clean.ends_with(' ') {
                clean.push(' ');
            }
        } else {
            clean.push(c);
        }
    }
    let clean = clean.trim();
    let title = if clean.chars().count() > MAX_TITLE_CHARS {
        let cut: String = clean.chars().take(MAX_TITLE_CHARS - 1).collect();
        format!("{}…", cut.trim_end())
    } else {
        clean.to_string()
    };
    check_title(&title).ok()
}

/// A character a title may not hold: a control character, or one that
/// changes the direction of the text around it.
fn unfit(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_one_clean_line_of_at_most_200_characters() {
        assert_eq!(check_title("  Orders sharding "), Ok("Orders sharding".into()));
        assert_eq!(check_title(&"é".repeat(200)), Ok("é".repeat(200)), "characters, not bytes");
        assert_eq!(check_title(&"x".repeat(201)), Err(TitleError::TooLong(201)));
        assert_eq!(check_title(" \t "), Err(TitleError::Empty));
        assert_eq!(check_title("two\nlines"), Err(TitleError::Lines));
        assert_eq!(check_title("bad\u{1b}[31mtitle"), Err(TitleError::Control("U+001B".into())));
        assert_eq!(check_title("tab\there"), Err(TitleError::Control("U+0009".into())));
        assert_eq!(check_title("abc\u{202E}fed"), Err(TitleError::Control("U+202E".into())));
        assert_eq!(check_title("c1\u{9b}2J"), Err(TitleError::Control("U+009B".into())));
    }

    #[test]
    fn kds_own_title_from_a_message_passes_the_same_check() {
        assert_eq!(title_from("\n\n  How do we shard orders?  \nmore"), Some("How do we shard orders?".into()));
        assert_eq!(
            title_from("bad\u{1b}]0;pwned\u{7}title\tand\u{202E}more"),
            Some("bad ]0;pwned title and more".into())
        );
        assert_eq!(title_from("\u{1b}\u{7}\n\t\nreal line"), Some("real line".into()), "a line of controls is blank");
        assert_eq!(title_from(" \n\t"), None);
        let long = title_from(&"word ".repeat(100)).unwrap();
        assert!(long.ends_with('…') && long.chars().count() <= MAX_TITLE_CHARS, "{long}");
        assert!(check_title(&long).is_ok());
    }
}
