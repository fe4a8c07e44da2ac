//! What `codex app-server` takes on its command line. kd starts it as
//! `codex app-server -c … --disable plugins ARGS`, so a member's `args` (and
//! Kingdom's `extra_flags`) go to the app-server subcommand, which takes
//! only the global `-c`/`--config`, `--enable` and `--disable`, and its own
//! `--listen` and `--analytics-default-enabled` (codex 0.169.0). Flags of
//! `codex exec` and of the interactive TUI (`--skip-git-repo-check`,
//! `--json`, `--model`, `--sandbox`, …) make it exit at start with
//! `error: unexpected argument …`.
//!
//! Kingdom runs `codex exec`, and its configurations carry exec's flags
//! (`extra_flags: ["--skip-git-repo-check"]` is the usual one). Those that
//! mean nothing to the app-server (exec's git check and output format) are
//! left out of its command line ([`for_appserver`]); a flag that means
//! something there runs the member through `codex exec` instead, unless
//! the app-server was asked for (see `resolve`).

/// Options that take a value (as the next argument, or after `=`).
const WITH_VALUE: &[&str] = &["-c", "--config", "--enable", "--disable", "--listen"];
/// Options without a value.
const FLAGS: &[&str] = &["--analytics-default-enabled"];
/// Options of `codex exec` and the TUI that take a value: refused, and
/// their value with them.
const REFUSED_WITH_VALUE: &[&str] = &[
    "-m",
    "--model",
    "-s",
    "--sandbox",
    "-a",
    "--ask-for-approval",
    "-p",
    "--profile",
    "-C",
    "--cd",
    "-i",
    "--image",
    "--add-dir",
    "--local-provider",
    "-o",
    "--output-last-message",
    "--output-schema",
    "--color",
];

/// Flags of `codex exec` that have no meaning for the app-server: its git
/// check (the app-server has none) and its output (kd reads JSON-RPC).
const NO_USE: &[&str] = &["--skip-git-repo-check", "--json", "--experimental-json"];
/// The same, taking a value.
const NO_USE_WITH_VALUE: &[&str] = &["--color"];

/// A member's arguments as `codex app-server` would take them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ForAppServer {
    /// The arguments to give it: all but those left out, in order.
    pub args: Vec<String>,
    /// Flags of `codex exec` with no meaning there, with their values
    /// (`--color never`): left out.
    pub left_out: Vec<String>,
    /// Flags it refuses that mean something (`--model`, `--full-auto`):
    /// given, it exits at start. Their values are not listed.
    pub refused: Vec<String>,
}

/// How `codex app-server` takes `args`.
pub fn for_appserver(args: &[String]) -> ForAppServer {
    let mut out = ForAppServer::default();
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, _)) if n.starts_with("--") => (n, true),
            _ => (a.as_str(), false),
        };
        let takes_value = |list: &[&str]| list.contains(&name) && !inline;
        if NO_USE.contains(&name) || NO_USE_WITH_VALUE.contains(&name) {
            let mut shown = a.clone();
            if takes_value(NO_USE_WITH_VALUE)
                && let Some(value) = rest.next()
            {
                shown = format!("{shown} {value}");
            }
            out.left_out.push(shown);
            continue;
        }
        out.args.push(a.clone());
        let value_follows = if WITH_VALUE.contains(&name) {
            !inline
        } else if FLAGS.contains(&name) || (name.starts_with("-c") && !name.starts_with("--") && name.len() > 2) {
            // `-cKEY=VALUE`: clap's attached short value.
            false
        } else {
            out.refused.push(a.clone());
            takes_value(REFUSED_WITH_VALUE)
        };
        if value_follows && let Some(value) = rest.next() {
            out.args.push(value.clone());
        }
    }
    out
}

/// The kd key that says what `flag` says, for member `name`, if any.
pub fn key_for(flag: &str, name: &str) -> Option<String> {
    let flag = flag.split('=').next().unwrap_or(flag);
    let key = match flag {
        "-m" | "--model" => "model",
        "-s" | "--sandbox" => "sandbox",
        "-a" | "--ask-for-approval" => "approval",
        _ => return None,
    };
    Some(format!("agents.{name}.{key}"))
}

/// What to do instead of passing `arg` to `codex app-server`, for member `name`.
pub fn instead(arg: &str, name: &str) -> String {
    match key_for(arg, name) {
        Some(key) => format!("set {key}"),
        None => format!("remove it, or set agents.{name}.transport to \"exec\""),
    }
}

/// How member `name` streams again through the app-server when it runs
/// `codex exec` for `refused`: the keys to set instead, the rest removed.
pub fn to_stream(refused: &[String], name: &str) -> String {
    let mut steps: Vec<String> = Vec::new();
    let mut others = 0;
    for flag in refused {
        match key_for(flag, name) {
            Some(key) => steps.push(format!("set {key} instead of {}", flag.split('=').next().unwrap_or(flag))),
            None => others += 1,
        }
    }
    match (steps.is_empty(), others) {
        (_, 0) => {}
        (true, 1) => steps.push("remove it".into()),
        (true, _) => steps.push("remove them".into()),
        (false, _) => steps.push("remove the others".into()),
    }
    steps.join(" and ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(args: &[&str]) -> Vec<String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for_appserver(&args).refused
    }

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn exec_flags_of_no_use_are_left_out_with_their_values_and_the_rest_kept_in_order() {
        let split =
            for_appserver(&strings(&["--skip-git-repo-check", "-c", "a=1", "--color", "never", "--model", "o3"]));
        assert_eq!(split.args, strings(&["-c", "a=1", "--model", "o3"]));
        assert_eq!(split.left_out, strings(&["--skip-git-repo-check", "--color never"]));
        assert_eq!(split.refused, strings(&["--model"]));
        assert_eq!(for_appserver(&strings(&["--color=always"])).left_out, strings(&["--color=always"]));
        assert_eq!(
            to_stream(&strings(&["--model", "--full-auto"]), "codex"),
            "set agents.codex.model instead of --model and remove the others"
        );
        assert_eq!(to_stream(&strings(&["--full-auto"]), "codex"), "remove it");
        assert_eq!(to_stream(&strings(&["-s=x"]), "c"), "set agents.c.sandbox instead of -s");
    }

    #[test]
    fn exec_and_tui_flags_are_refused_config_overrides_are_taken() {
        assert!(refused(&["--skip-git-repo-check"]).is_empty(), "left out, not refused");
        assert!(refused(&["--json", "-c", "model=x"]).is_empty());
        assert_eq!(refused(&["--model", "gpt-5", "--json", "--full-auto"]), ["--model", "--full-auto"]);
        assert_eq!(refused(&["--sandbox=read-only"]), ["--sandbox=read-only"]);
        assert!(refused(&["-c", "model_reasoning_effort=medium", "--config=x=1", "-cfoo=1"]).is_empty());
        assert!(refused(&["--enable", "a", "--disable=b", "--listen", "stdio://"]).is_empty());
        assert!(refused(&["--analytics-default-enabled"]).is_empty());
        assert_eq!(instead("--model", "codex"), "set agents.codex.model");
        assert_eq!(instead("--json", "codex"), "remove it, or set agents.codex.transport to \"exec\"");
    }
}
