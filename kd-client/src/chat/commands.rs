//! Slash commands of the chat.

/// The commands, for completion and help.
pub const NAMES: &[&str] = &[
    "/mute",
    "/unmute",
    "/retry",
    "/vote",
    "/synthesize",
    "/cancel",
    "/cost",
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
    "/work",
    "/diff",
    "/accept",
    "/reject",
    "/comment",
    "/check",
    "/rebase",
    "/pr",
    "/review",
    "/approvals",
    "/approve",
    "/deny",
];

/// What each command does, for `/help`.
pub const HELP: &[(&str, &str)] = &[
    ("/mute NAME", "stop asking a member (until /unmute)"),
    ("/unmute NAME", "ask a muted member again"),
    ("/retry", "ask again the members whose last answer failed"),
    (
        "/vote [--synthesize CHAIR] QUESTION",
        "every member answers, then ranks the others' answers (anonymised); the tally names the winner or says it \
         is a tie; with --synthesize the chair then writes one final answer",
    ),
    ("/synthesize CHAIR QUESTION", "every member answers, then the chair writes one final answer from them all"),
    ("/cancel [MEMBER]", "stop the thread's runs (or one member's), whoever started them: asks first for others'"),
    ("/cost", "what this thread cost, in all and by member"),
    ("/new", "start a new thread"),
    ("/threads", "open another thread"),
    ("/title TEXT", "name this thread"),
    (
        "/fork [--carry WHAT] [TITLE]",
        "branch this thread and open the branch; it carries the conversation (or: --carry summary, --carry none) \
         with the context bundle",
    ),
    ("/search WORDS", "find words in every thread; Enter opens the hit"),
    ("/archive", "archive this thread: runs stop, sessions end, a summary is kept"),
    ("/unarchive", "open this archived thread to messages again"),
    ("/delete", "delete this thread and all it holds (asks first)"),
    ("/work [--vote] [--to A,B] TASK", "members do TASK in worktrees; opens its thread"),
    ("/diff [MEMBER]", "a member's diff here (alone: who has work)"),
    ("/check [MEMBER]", "run the check (work.check) again on a member's work (alone: on everyone's); says how it went"),
    ("/review MEMBER", "the council reviews a member's diff: approve or request changes"),
    (
        "/comment MEMBER PATH:LINE[-LINE] TEXT",
        "comment on lines of a member's diff (pending until /review --send MEMBER)",
    ),
    ("/review --send MEMBER [MESSAGE]", "send the pending comments to the member as one review; it revises"),
    ("/rebase MEMBER", "merge your HEAD into a member's work; it resolves any conflict"),
    ("/accept [--squash] MEMBER", "merge a member's work into your branch"),
    ("/pr MEMBER", "push a member's branch and open a pull request (gh), or show the page to open one"),
    ("/accept --pr MEMBER", "accept a member's work by a pull request instead of a merge here"),
    ("/reject MEMBER", "turn a member's work down"),
    ("/approvals", "what members' CLIs ask permission for, every thread's (● this thread's)"),
    (
        "/approve ID [once|run|thread]",
        "allow it once, or for the rest of the member's run, or for the member on this thread",
    ),
    ("/deny ID [MESSAGE]", "refuse it; the member is told the message"),
    ("/help", "this help"),
    ("/quit, /exit", "leave once your runs finish (Esc to force)"),
];

/// Keys, for `/help`.
pub const KEYS: &[(&str, &str)] = &[
    ("Enter", "send"),
    ("Shift+Enter, Alt+Enter, Ctrl+J", "new line"),
    ("Esc", "interrupt your runs and the pending auto-turns (/cancel stops the others')"),
    ("Tab", "complete @member or /command"),
    ("Ctrl+U", "delete back to the start of the line"),
    ("Ctrl+Z", "undo an edit (Ctrl+R redoes it)"),
    (
        "y a n N, Esc",
        "an approval asked (the input empty): allow once, allow for the run, deny, deny with a message; Esc leaves \
         it for later",
    ),
    ("PgUp PgDn Home End, wheel", "scroll"),
    ("Ctrl+C", "quit now (runs go on in the daemon)"),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Mute(String),
    Unmute(String),
    Retry,
    /// A multicast completion (`kd ask --vote` / `--synthesize CHAIR`).
    Complete {
        question: String,
        vote: bool,
        chair: Option<String>,
    },
    /// Stop the thread's runs, or one member's, whoever started them.
    Cancel(Option<String>),
    Cost,
    Help,
    Quit,
    New,
    Threads,
    Title(String),
    /// Branch this thread: its title, and what it carries (default: the
    /// workspace's `lifecycle.fork_carry`).
    Fork {
        title: Option<String>,
        carry: Option<kd_proto::types::Carry>,
    },
    Search(String),
    Archive,
    Unarchive,
    Delete,
    /// Give a task to members, each in a worktree of its own.
    Work {
        task: String,
        to: Option<Vec<String>>,
        vote: bool,
    },
    Diff(Option<String>),
    Accept {
        member: String,
        squash: bool,
    },
    Reject(String),
    /// A line comment on a member's diff.
    Comment {
        member: String,
        path: String,
        lines: (u32, u32),
        text: String,
    },
    /// Run the check again on a member's work (none: everyone's).
    Check(Option<String>),
    /// Bring a member's work up to date with the King's HEAD.
    Rebase(String),
    /// Push a member's branch and open a pull request (`accept`: the work
    /// is accepted by it).
    Pr {
        member: String,
        accept: bool,
    },
    /// The council reviews a member's diff.
    Review(String),
    /// The pending line comments go to the member as one review.
    SendReview {
        member: String,
        message: Option<String>,
    },
    Approvals,
    Approve {
        id: String,
        scope: Option<kd_proto::approval::Scope>,
    },
    Deny {
        id: String,
        message: Option<String>,
    },
}

/// `/work`'s options, then its task as typed.
fn work(rest: &str) -> Result<Command, String> {
    let mut rest = rest.trim_start();
    let (mut to, mut vote) = (None, false);
    loop {
        if let Some(after) = rest.strip_prefix("--vote").filter(|a| a.is_empty() || a.starts_with(char::is_whitespace))
        {
            vote = true;
            rest = after.trim_start();
        } else if let Some(after) =
            rest.strip_prefix("--to").filter(|a| a.is_empty() || a.starts_with([' ', '\t', '\n', '=']))
        {
            let after = after.trim_start_matches('=').trim_start();
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            let names: Vec<String> = after[..end]
                .split(',')
                .map(|n| n.trim_start_matches('@').to_lowercase())
                .filter(|n| !n.is_empty())
                .collect();
            if names.is_empty() {
                return Err("/work --to needs member names, e.g. /work --to claude,codex TASK".into());
            }
            to = Some(names);
            rest = after[end..].trim_start();
        } else {
            break;
        }
    }
    let task = rest.trim_end();
    if task.is_empty() {
        return Err("/work needs a task, e.g. /work Add a --verbose flag".into());
    }
    Ok(Command::Work { task: task.to_string(), to, vote })
}

/// `/fork [--carry conversation|summary|none] [TITLE]`.
fn fork(rest: &str) -> Result<Command, String> {
    let bad =
        || "/fork --carry takes conversation, summary or none, e.g. /fork --carry summary Try tenants".to_string();
    let (carry, title) = match rest.strip_prefix("--carry").filter(|a| a.is_empty() || a.starts_with([' ', '\t', '=']))
    {
        Some(after) => {
            let after = after.trim_start_matches('=').trim_start();
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            let carry = kd_proto::types::Carry::parse(&after[..end]).ok_or_else(bad)?;
            (Some(carry), after[end..].trim())
        }
        None => (None, rest),
    };
    Ok(Command::Fork { title: (!title.is_empty()).then(|| title.to_string()), carry })
}

/// `/vote [--synthesize CHAIR] QUESTION` and `/synthesize CHAIR QUESTION`.
fn complete(name: &str, rest: &str) -> Result<Command, String> {
    let chair_then = |rest: &str| -> Result<(String, String), String> {
        let rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let chair = rest[..end].trim_start_matches('@').to_lowercase();
        if chair.is_empty() || chair.starts_with('-') {
            return Err(format!("{name} needs the chair's name, e.g. /synthesize claude Which design?"));
        }
        Ok((chair, rest[end..].trim().to_string()))
    };
    let (vote, chair, question) = match name {
        "/synthesize" => {
            let (chair, question) = chair_then(rest)?;
            (false, Some(chair), question)
        }
        _ => match rest.strip_prefix("--synthesize").filter(|a| a.is_empty() || a.starts_with(char::is_whitespace)) {
            Some(after) => {
                let (chair, question) = chair_then(after)?;
                (true, Some(chair), question)
            }
            None => (true, None, rest.to_string()),
        },
    };
    if question.is_empty() {
        return Err(format!(
            "{name} needs a question, e.g. {name} {}Which design?",
            if chair.is_some() && !vote { "claude " } else { "" }
        ));
    }
    Ok(Command::Complete { question, vote, chair })
}

/// `/approve ID [once|run|thread]` and `/deny ID [MESSAGE]`.
fn decide(name: &str, rest: &str) -> Result<Command, String> {
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (id, after) = (&rest[..end], rest[end..].trim());
    if id.is_empty() {
        return Err(format!("{name} needs the approval's id (/approvals lists them), e.g. {name} ap-3k9x2b7q"));
    }
    let id = id.to_string();
    if name == "/deny" {
        return Ok(Command::Deny { id, message: (!after.is_empty()).then(|| after.to_string()) });
    }
    let scope = match after {
        "" => None,
        s => match kd_proto::approval::Scope::parse(s) {
            Some(scope) => Some(scope),
            None => return Err(format!("/approve takes once, run or thread after the id, not {s:?}")),
        },
    };
    Ok(Command::Approve { id, scope })
}

/// `/comment MEMBER PATH:LINE[-LINE] TEXT`.
fn comment(rest: &str) -> Result<Command, String> {
    let usage = "/comment needs a member, the lines and the text, e.g. /comment codex src/a.rs:12 check for None";
    let mut words = rest.splitn(3, char::is_whitespace);
    let (Some(member), Some(at), Some(text)) = (words.next(), words.next(), words.next()) else {
        return Err(usage.into());
    };
    let text = text.trim();
    let Some((path, lines)) = crate::cmd::comment::location(at) else {
        return Err(format!("/comment: {at} is not PATH:LINE or PATH:FIRST-LAST"));
    };
    if member.is_empty() || text.is_empty() {
        return Err(usage.into());
    }
    Ok(Command::Comment { member: member.trim_start_matches('@').to_lowercase(), path, lines, text: text.into() })
}

/// `/accept [--squash|--pr] MEMBER`, the options before or after the member.
fn accept(rest: &str) -> Result<Command, String> {
    let (mut squash, mut pr, mut member) = (false, false, None);
    for word in rest.split_whitespace() {
        match word {
            "--squash" => squash = true,
            "--pr" => pr = true,
            w if w.starts_with("--") => return Err(format!("/accept takes --squash or --pr, not {w}")),
            w if member.is_none() => member = Some(w.trim_start_matches('@').to_lowercase()),
            _ => return Err("/accept takes one member name".into()),
        }
    }
    let Some(member) = member else { return Err("/accept needs a member name, e.g. /accept codex".into()) };
    match (squash, pr) {
        (true, true) => Err("/accept takes --squash or --pr, not both".into()),
        (_, true) => Ok(Command::Pr { member, accept: true }),
        (squash, false) => Ok(Command::Accept { member, squash }),
    }
}

/// `/review MEMBER` and `/review --send MEMBER [MESSAGE]`.
fn review(rest: &str) -> Result<Command, String> {
    let (send, rest) = match rest.strip_prefix("--send").filter(|a| a.is_empty() || a.starts_with(char::is_whitespace))
    {
        Some(after) => (true, after.trim_start()),
        None => (false, rest),
    };
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (member, after) = (rest[..end].trim_start_matches('@').to_lowercase(), rest[end..].trim());
    if member.is_empty() || member.starts_with('-') {
        return Err(if send {
            "/review --send needs a member name, e.g. /review --send codex Two things.".into()
        } else {
            "/review needs a member name, e.g. /review codex (or /review --send codex)".into()
        });
    }
    match send {
        true => Ok(Command::SendReview { member, message: (!after.is_empty()).then(|| after.to_string()) }),
        false if after.is_empty() => Ok(Command::Review(member)),
        false => Err("/review takes one member name (/review --send MEMBER MESSAGE sends your comments)".into()),
    }
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
        ("/fork", _) => return fork(rest),
        ("/search", true) => return Err("/search needs words to find, e.g. /search shard".into()),
        ("/search", false) => return Ok(Command::Search(rest.to_string())),
        ("/work", _) => return work(rest),
        ("/vote" | "/synthesize", _) => return complete(name, rest),
        ("/approve" | "/deny", _) => return decide(name, rest),
        ("/comment", _) => return comment(rest),
        ("/accept", _) => return accept(rest),
        ("/review", _) => return review(rest),
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
        "/cancel" => Command::Cancel(arg.clone()),
        "/cost" => Command::Cost,
        "/help" => Command::Help,
        "/quit" | "/exit" => Command::Quit,
        "/new" => Command::New,
        "/threads" => Command::Threads,
        "/archive" => Command::Archive,
        "/unarchive" => Command::Unarchive,
        "/delete" => Command::Delete,
        "/diff" => Command::Diff(arg.clone()),
        "/reject" => Command::Reject(need(&arg)?),
        "/check" => Command::Check(arg.clone()),
        "/rebase" => Command::Rebase(need(&arg)?),
        "/pr" => Command::Pr { member: need(&arg)?, accept: false },
        "/approvals" => Command::Approvals,
        other => return Err(format!("unknown command {other}; /help lists them")),
    };
    let takes_arg = matches!(
        cmd,
        Command::Mute(_)
            | Command::Unmute(_)
            | Command::Diff(_)
            | Command::Reject(_)
            | Command::Cancel(_)
            | Command::Check(_)
            | Command::Rebase(_)
            | Command::Pr { .. }
    );
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
        let fork = |title: Option<&str>, carry| Command::Fork { title: title.map(str::to_string), carry };
        assert_eq!(parse("/fork"), Ok(fork(None, None)));
        assert_eq!(parse("/fork Try it"), Ok(fork(Some("Try it"), None)));
        use kd_proto::types::Carry;
        assert_eq!(parse("/fork --carry summary Try it"), Ok(fork(Some("Try it"), Some(Carry::Summary))));
        assert_eq!(parse("/fork --carry=none"), Ok(fork(None, Some(Carry::None))));
        assert_eq!(parse("/fork --carry conversation"), Ok(fork(None, Some(Carry::Conversation))));
        assert!(parse("/fork --carry all").unwrap_err().contains("conversation, summary or none"));
        assert_eq!(parse("/fork --carryon"), Ok(fork(Some("--carryon"), None)));
        assert_eq!(parse("/search \"orders table\""), Ok(Command::Search("\"orders table\"".into())));
        assert!(parse("/search").is_err() && parse("/title ").is_err());
        assert_eq!(parse("/delete"), Ok(Command::Delete));
        assert_eq!(parse("/unarchive x"), Err("/unarchive takes no argument".into()));
    }

    #[test]
    fn work_commands_parse_their_options_and_members() {
        let work = |task: &str, to: Option<&[&str]>, vote| Command::Work {
            task: task.into(),
            to: to.map(|t| t.iter().map(|s| s.to_string()).collect()),
            vote,
        };
        assert_eq!(parse("/work Add a --verbose flag"), Ok(work("Add a --verbose flag", None, false)));
        assert_eq!(parse("/work --vote  Write x\nand y "), Ok(work("Write x\nand y", None, true)));
        assert_eq!(
            parse("/work --to @Claude,codex --vote Fix it"),
            Ok(work("Fix it", Some(&["claude", "codex"]), true))
        );
        assert_eq!(parse("/work --to=codex Fix it"), Ok(work("Fix it", Some(&["codex"]), false)));
        assert_eq!(parse("/work --voter"), Ok(work("--voter", None, false)));
        assert_eq!(parse("/work"), Err("/work needs a task, e.g. /work Add a --verbose flag".into()));
        assert_eq!(parse("/work --vote"), Err("/work needs a task, e.g. /work Add a --verbose flag".into()));
        assert!(parse("/work --to  ").is_err());
        assert_eq!(parse("/diff"), Ok(Command::Diff(None)));
        assert_eq!(parse("/diff @Codex"), Ok(Command::Diff(Some("codex".into()))));
        assert_eq!(parse("/diff a b"), Err("/diff takes one member name".into()));
        assert_eq!(parse("/accept codex"), Ok(Command::Accept { member: "codex".into(), squash: false }));
        assert_eq!(parse("/accept --squash codex"), Ok(Command::Accept { member: "codex".into(), squash: true }));
        assert_eq!(parse("/accept"), Err("/accept needs a member name, e.g. /accept codex".into()));
        assert_eq!(parse("/accept codex --squash"), Ok(Command::Accept { member: "codex".into(), squash: true }));
        assert_eq!(parse("/accept a b"), Err("/accept takes one member name".into()));
        assert_eq!(parse("/accept --ff codex"), Err("/accept takes --squash or --pr, not --ff".into()));
        assert_eq!(parse("/reject claude"), Ok(Command::Reject("claude".into())));
        assert_eq!(
            parse("/comment @Codex src/a.rs:12-14  check for None here"),
            Ok(Command::Comment {
                member: "codex".into(),
                path: "src/a.rs".into(),
                lines: (12, 14),
                text: "check for None here".into()
            })
        );
        assert_eq!(
            parse("/comment codex src/a.rs check"),
            Err("/comment: src/a.rs is not PATH:LINE or PATH:FIRST-LAST".into())
        );
        assert!(parse("/comment codex a.rs:3").unwrap_err().starts_with("/comment needs a member, the lines"));
    }

    #[test]
    fn shipping_commands_parse_as_the_cli_takes_them() {
        assert_eq!(parse("/check"), Ok(Command::Check(None)));
        assert_eq!(parse("/check @Codex"), Ok(Command::Check(Some("codex".into()))));
        assert_eq!(parse("/check a b"), Err("/check takes one member name".into()));
        assert_eq!(parse("/rebase claude"), Ok(Command::Rebase("claude".into())));
        assert_eq!(parse("/rebase"), Err("/rebase needs a member name, e.g. /rebase codex".into()));
        assert_eq!(parse("/pr claude"), Ok(Command::Pr { member: "claude".into(), accept: false }));
        assert_eq!(parse("/pr"), Err("/pr needs a member name, e.g. /pr codex".into()));
        assert_eq!(parse("/accept --pr claude"), Ok(Command::Pr { member: "claude".into(), accept: true }));
        assert_eq!(parse("/accept claude --pr"), Ok(Command::Pr { member: "claude".into(), accept: true }));
        assert_eq!(parse("/accept --pr --squash claude"), Err("/accept takes --squash or --pr, not both".into()));
        assert_eq!(parse("/review @Claude"), Ok(Command::Review("claude".into())));
        assert!(parse("/review claude now").unwrap_err().starts_with("/review takes one member name"));
        assert!(parse("/review").unwrap_err().starts_with("/review needs a member name"));
        assert_eq!(parse("/review --send claude"), Ok(Command::SendReview { member: "claude".into(), message: None }));
        assert_eq!(
            parse("/review --send @claude Close,\ntwo things. "),
            Ok(Command::SendReview { member: "claude".into(), message: Some("Close,\ntwo things.".into()) })
        );
        assert!(parse("/review --send").unwrap_err().starts_with("/review --send needs a member name"));
        assert!(parse("/review --sender x").unwrap_err().starts_with("/review needs a member name"));
    }

    #[test]
    fn vote_synthesize_cancel_and_cost_parse() {
        let complete = |question: &str, vote, chair: Option<&str>| Command::Complete {
            question: question.into(),
            vote,
            chair: chair.map(str::to_string),
        };
        assert_eq!(parse("/vote Which design\nwins? "), Ok(complete("Which design\nwins?", true, None)));
        assert_eq!(parse("/vote --synthesize @Claude Which?"), Ok(complete("Which?", true, Some("claude"))));
        assert_eq!(parse("/synthesize codex  Which?"), Ok(complete("Which?", false, Some("codex"))));
        assert_eq!(parse("/vote --synthesizer x"), Ok(complete("--synthesizer x", true, None)));
        assert_eq!(parse("/vote"), Err("/vote needs a question, e.g. /vote Which design?".into()));
        assert_eq!(
            parse("/synthesize claude"),
            Err("/synthesize needs a question, e.g. /synthesize claude Which design?".into())
        );
        assert!(parse("/synthesize").unwrap_err().contains("the chair's name"));
        assert!(parse("/vote --synthesize").unwrap_err().contains("the chair's name"));
        assert_eq!(parse("/cancel"), Ok(Command::Cancel(None)));
        assert_eq!(parse("/cancel @Codex"), Ok(Command::Cancel(Some("codex".into()))));
        assert_eq!(parse("/cancel a b"), Err("/cancel takes one member name".into()));
        assert_eq!(parse("/cost"), Ok(Command::Cost));
        assert_eq!(parse("/cost x"), Err("/cost takes no argument".into()));
    }

    #[test]
    fn approval_commands_parse_their_id_scope_and_message() {
        use kd_proto::approval::Scope;
        assert_eq!(parse("/approvals"), Ok(Command::Approvals));
        assert_eq!(parse("/approvals x"), Err("/approvals takes no argument".into()));
        assert_eq!(parse("/approve ap-1"), Ok(Command::Approve { id: "ap-1".into(), scope: None }));
        assert_eq!(parse("/approve ap-1 run"), Ok(Command::Approve { id: "ap-1".into(), scope: Some(Scope::Run) }));
        assert_eq!(
            parse("/approve  ap-1  thread "),
            Ok(Command::Approve { id: "ap-1".into(), scope: Some(Scope::Thread) })
        );
        assert!(parse("/approve ap-1 forever").unwrap_err().contains("once, run or thread"));
        assert!(parse("/approve").unwrap_err().contains("needs the approval's id"));
        assert_eq!(parse("/deny ap-1"), Ok(Command::Deny { id: "ap-1".into(), message: None }));
        assert_eq!(
            parse("/deny ap-1 use the test\ndatabase "),
            Ok(Command::Deny { id: "ap-1".into(), message: Some("use the test\ndatabase".into()) })
        );
        assert!(parse("/deny").unwrap_err().contains("needs the approval's id"));
    }
}
