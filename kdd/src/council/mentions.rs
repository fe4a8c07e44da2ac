//! `@member` and `@all` in a King's message (F-C2): anywhere in the text,
//! case-insensitive; not inside code (`…` spans or fenced blocks), not in
//! the middle of a word (an e-mail address is not a mention).

/// The names mentioned, lowercased, in order of first mention.
pub fn mentions(body: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut in_fence = false;
    for line in body.lines() {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut in_code = false;
        let mut prev: Option<char> = None;
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '`' {
                in_code = !in_code;
            } else if c == '@' && !in_code && !prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '.') {
                let name: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
                    .collect();
                // Sentence punctuation after a mention is not part of it.
                let name = name.trim_end_matches(['.', '-']).to_lowercase();
                if !name.is_empty() {
                    i += name.len();
                    if !out.contains(&name) {
                        out.push(name);
                    }
                }
            }
            prev = Some(c);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_anywhere_case_insensitive_in_order() {
        assert_eq!(mentions("@Claude what do you and @codex think? cc @CLAUDE"), vec!["claude", "codex"]);
        assert_eq!(mentions("thoughts, @all?"), vec!["all"]);
        assert_eq!(mentions("(@gemini) and @cursor."), vec!["gemini", "cursor"]);
        assert_eq!(mentions("no mentions here"), Vec::<String>::new());
    }

    #[test]
    fn code_emails_and_bare_at_signs_are_not_mentions() {
        assert_eq!(mentions("mail me at king@example.com"), Vec::<String>::new());
        assert_eq!(mentions("use the `@property` decorator, @codex"), vec!["codex"]);
        assert_eq!(mentions("```\n@decorator\ndef f(): pass\n```\n@claude"), vec!["claude"]);
        assert_eq!(mentions("a @ b, @ end"), Vec::<String>::new());
    }
}
