//! `@member` and `@all` in a King's message (F-C2): anywhere in the text,
//! case-insensitive; not inside code (`…` spans or fenced blocks), not in
//! the middle of a word (an e-mail address is not a mention).
//!
//! An agent's answer *hands off* (F-X1) only where a line starts with
//! mentions, outside fenced code — `@codex please check the parser` — so
//! that naming a member in passing ("as @codex said") routes nothing.

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

/// The members an answer by `own` hands off to: those named at the start
/// of a line outside fenced code (`@all` there names every other member),
/// in order of first mention, matched case-insensitively to `members`.
pub fn addressed(body: &str, members: &[String], own: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |m: &String| {
        if m != own && !out.contains(m) {
            out.push(m.clone());
        }
    };
    let mut in_fence = false;
    for line in body.lines() {
        let line = line.trim_start();
        if line.starts_with("```") || line.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for word in line.split_whitespace() {
            let Some(name) = word.strip_prefix('@') else { break };
            let name = name.trim_end_matches([',', ':', '.', ';', '!', '?']).to_lowercase();
            if name == kd_proto::names::ALL {
                members.iter().for_each(&mut add);
            } else if let Some(m) = members.iter().find(|m| m.to_lowercase() == name) {
                add(m);
            } else {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_answer_hands_off_where_a_line_starts_with_members() {
        let m = names(&["claude", "codex", "cursor"]);
        assert_eq!(addressed("Done.\n@codex please check the parser", &m, "claude"), names(&["codex"]));
        assert_eq!(addressed("@Codex, @cursor: your turn.", &m, "claude"), names(&["codex", "cursor"]));
        assert_eq!(addressed("@all over to you", &m, "claude"), names(&["codex", "cursor"]));
        assert_eq!(addressed("  @claude @codex me and you", &m, "claude"), names(&["codex"]), "not itself");
    }

    #[test]
    fn passing_mentions_code_and_strangers_hand_off_nothing() {
        let m = names(&["claude", "codex"]);
        assert!(addressed("As @codex said, it works.", &m, "claude").is_empty());
        assert!(addressed("```\n@codex run\n```", &m, "claude").is_empty());
        assert!(addressed("@gpt what now", &m, "claude").is_empty());
        assert!(addressed("@king done", &m, "claude").is_empty());
    }

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
