//! Slash commands of the chat.

/// The commands, for completion and help.
pub const NAMES: &[&str] = &[
    "/mute",
    "/unmute",
    "/retry",
    "/help",
    "/quit",
    "/exit",
    "/new",
    "/threads",
    "/title",
    "/fork",
    "/search",
    "/archive",
    "/unarchive",
    "/delete",
];

/// What each command does, for `/help`.
pub const HELP: &[(&str, &str)] = &[
    ("/mute NAME", "stop asking a member (until /unmute)"),
    ("/unmute NAME", "ask a muted member again"),
    ("/retry", "ask again the members whose last answer failed"),
    ("/new", "start a new thread"),
    ("/threads", "open another thread"),
    ("/title TEXT", "name this thread"),
    ("/fork [TITLE]", "branch this thread (with the context bundle) and open the branch"),
    ("/search WORDS", "find words in every thread; Enter opens the hit"),
    ("/archive", "archive this thread: runs stop, sessions end, a summary is kept"),
    ("/unarchive", "open this archived thread to messages again"),
    ("/delete", "delete this thread and all it holds (asks first)"),
    ("/help", "this help"),
    ("/quit, /exit", "leave once your runs finish (Esc to force)"),
];

/// Keys, for `/help`.
pub const KEYS: &[(&str, &str)] = &[
    ("Enter", "send"),
    ("Shift+Enter, Alt+Enter, Ctrl+J", "new line"),
    ("Esc", "interrupt your runs and the pending auto-turns"),
    ("Tab", "complete @member or /command"),
    ("PgUp PgDn Home End, wheel", "scroll"),
    ("Ctrl+C", "quit now (runs go on in the daemon)"),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Mute(String),
    Unmute(String),
    Retry,
    Help,
    Quit,
    New,
    Threads,
    Title(String),
    Fork(Option<String>),
    Search(String),
    Archive,
    Unarchive,
    Delete,
}

/// Parses a line that starts with `/`; the error is a one-line notice.
pub fn parse(line: &str) -> Result<Command, String> {
    let mut words = line.split_whitespace();
    let name = words.next().unwrap_or("");
    // Commands taking the rest of the line, as typed.
    let rest = line.trim_start().get(name.len()..).unwrap_or("").trim();
    match (name, rest.is_empty()) {
        ("/title", true) => return Err("/title needs the title, e.g. /title Orders sharding".into()),
        ("/title", false) => return Ok(Command::Title(rest.to_string())),
        ("/fork", empty) => return Ok(Command::Fork((!empty).then(|| rest.to_string()))),
        ("/search", true) => return Err("/search needs words to find, e.g. /search shard".into()),
        ("/search", false) => return Ok(Command::Search(rest.to_string())),
        _ => {}
    }
    let arg = words.next().map(|a| a.trim_start_matches('@').to_lowercase());
    let extra = words.next().is_some();
    let need =
        |arg: &Option<String>| arg.clone().ok_or_else(|| format!("{name} needs a member name, e.g. {name} codex"));
    let cmd = match name {
        "/mute" => Command::Mute(need(&arg)?),
        "/unmute" => Command::Unmute(need(&arg)?),
        "/retry" => Command::Retry,
        "/help" => Command::Help,
        "/quit" | "/exit" => Command::Quit,
        "/new" => Command::New,
        "/threads" => Command::Threads,
        "/archive" => Command::Archive,
        "/unarchive" => Command::Unarchive,
        "/delete" => Command::Delete,
        other => return Err(format!("unknown command {other}; /help lists them")),
    };
    let takes_arg = matches!(cmd, Command::Mute(_) | Command::Unmute(_));
    if extra || (!takes_arg && arg.is_some()) {
        return Err(format!("{name} takes {}", if takes_arg { "one member name" } else { "no argument" }));
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_mistakes_get_a_notice() {
        assert_eq!(parse("/mute codex"), Ok(Command::Mute("codex".into())));
        assert_eq!(parse("/unmute @Codex"), Ok(Command::Unmute("codex".into())));
        assert_eq!(parse("/exit"), Ok(Command::Quit));
        assert_eq!(parse("/threads"), Ok(Command::Threads));
        assert_eq!(parse("/mute"), Err("/mute needs a member name, e.g. /mute codex".into()));
        assert_eq!(parse("/frobnicate"), Err("unknown command /frobnicate; /help lists them".into()));
        assert_eq!(parse("/retry now"), Err("/retry takes no argument".into()));
        assert_eq!(parse("/mute a b"), Err("/mute takes one member name".into()));
        assert_eq!(parse("/title  Orders Sharding "), Ok(Command::Title("Orders Sharding".into())));
        assert_eq!(parse("/fork"), Ok(Command::Fork(None)));
        assert_eq!(parse("/fork Try it"), Ok(Command::Fork(Some("Try it".into()))));
        assert_eq!(parse("/search \"orders table\""), Ok(Command::Search("\"orders table\"".into())));
        assert!(parse("/search").is_err() && parse("/title ").is_err());
        assert_eq!(parse("/delete"), Ok(Command::Delete));
        assert_eq!(parse("/unarchive x"), Err("/unarchive takes no argument".into()));
    }
}
