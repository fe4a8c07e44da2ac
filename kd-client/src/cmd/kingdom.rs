//! Kingdom's `kd council VERB …`, for its users' fingers: a hidden command
//! that runs kd's own (`ask`, `show`, `watch`, `retry`, `threads`, `chat`)
//! after one line on stderr saying which. Kingdom's options that kd's
//! command means anyway are translated (`--new-thread` → `--new`) or dropped
//! (`--all`, `--no-watch`); any other option goes through for kd to judge.

use std::ffi::OsString;

use clap::Args;

/// `kd council VERB [ARGS…]`.
#[derive(Debug, Args)]
pub struct CouncilArgs {
    /// Kingdom's verb: ask, show, watch, retry, list, chat
    verb: Option<String>,
    /// The verb's arguments, as Kingdom takes them
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<OsString>,
}

/// The kd command a Kingdom council verb runs (its arguments after the
/// command's name), and the notice; or why there is none.
pub fn translate(a: CouncilArgs) -> Result<(Vec<OsString>, String), String> {
    let verb = a.verb.unwrap_or_default();
    let (command, extra, dropped): (&[&str], &[&str], &[&str]) = match verb.as_str() {
        "ask" => (&["ask"], &[], &["--no-watch"]),
        "show" => (&["show"], &[], &["--all"]),
        "watch" => (&["watch"], &[], &[]),
        "retry" => (&["retry"], &[], &[]),
        "list" | "ls" => (&["threads"], &["--here"], &[]),
        "chat" => (&["chat"], &[], &[]),
        "" => return Err(unknown("", "ask, show, watch, retry, list or chat")),
        "status" => return Err(unknown(&verb, "kd runs (runs in flight) or kd show")),
        "reset" => return Err(unknown(&verb, "kd sessions (each thread has its own sessions)")),
        "review" => return Err(unknown(&verb, "kd ask --new \"Review …\"")),
        _ => return Err(unknown(&verb, "kd --help")),
    };
    let mut args: Vec<OsString> = command.iter().chain(extra).map(OsString::from).collect();
    for arg in a.rest {
        match arg.to_str() {
            Some("--new-thread") => args.push("--new".into()),
            Some(a) if dropped.contains(&a) => {}
            _ => args.push(arg),
        }
    }
    let kd = [command, extra].concat().join(" ");
    Ok((args, format!("`kd council {verb}` is Kingdom's; running `kd {kd}` (use that from now on)")))
}

fn unknown(verb: &str, instead: &str) -> String {
    match verb {
        "" => format!("`kd council` is Kingdom's; name a verb: {instead}"),
        v => format!("`kd council {v}` is Kingdom's and kd has no such command; see {instead}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(verb: &str, rest: &[&str]) -> CouncilArgs {
        CouncilArgs { verb: Some(verb.into()), rest: rest.iter().map(OsString::from).collect() }
    }

    #[test]
    fn kingdoms_verbs_and_options_become_kds() {
        let (a, notice) = translate(args("ask", &["--new-thread", "--no-watch", "--async", "Q?"])).unwrap();
        assert_eq!(a, ["ask", "--new", "--async", "Q?"]);
        assert_eq!(notice, "`kd council ask` is Kingdom's; running `kd ask` (use that from now on)");
        assert_eq!(translate(args("show", &["t1", "--all"])).unwrap().0, ["show", "t1"]);
        assert_eq!(translate(args("ls", &[])).unwrap().0, ["threads", "--here"]);
        // What kd does not take goes through, for kd to refuse.
        assert_eq!(translate(args("show", &["--last", "2"])).unwrap().0, ["show", "--last", "2"]);
        assert!(translate(args("status", &[])).unwrap_err().contains("kd runs"));
        assert!(translate(CouncilArgs { verb: None, rest: vec![] }).unwrap_err().contains("name a verb"));
    }
}
