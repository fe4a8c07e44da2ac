//! What `codex app-server` takes on its command line. kd starts it as
//! `codex app-server -c … --disable plugins ARGS`, so a member's `args` (and
//! Kingdom's `extra_flags`) go to the app-server subcommand, which takes
//! only the global `-c`/`--config`, `--enable` and `--disable`, and its own
//! `--listen` and `--analytics-default-enabled` (codex 0.169.0). Flags of
//! `codex exec` and of the interactive TUI (`--skip-git-repo-check`,
//! `--json`, `--model`, `--sandbox`, …) make it exit at start with
//! `error: unexpected argument …`.

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

/// The arguments of `args` that `codex app-server` refuses.
pub fn appserver_refuses(args: &[String]) -> Vec<&str> {
    let mut refused = Vec::new();
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, _)) if n.starts_with("--") => (n, true),
            _ => (a.as_str(), false),
        };
        if WITH_VALUE.contains(&name) {
            if !inline {
                rest.next();
            }
        } else if FLAGS.contains(&name) || (name.starts_with("-c") && !name.starts_with("--") && name.len() > 2) {
            // `-cKEY=VALUE`: clap's attached short value.
        } else {
            refused.push(a.as_str());
            if REFUSED_WITH_VALUE.contains(&name) && !inline {
                rest.next();
            }
        }
    }
    refused
}

/// What to do instead of passing `arg` to `codex app-server`, for member `name`.
pub fn instead(arg: &str, name: &str) -> String {
    let flag = arg.split('=').next().unwrap_or(arg);
    match flag {
        "-m" | "--model" => format!("set agents.{name}.model"),
        "-s" | "--sandbox" => format!("set agents.{name}.sandbox"),
        "-a" | "--ask-for-approval" => format!("set agents.{name}.approval"),
        _ => format!("remove it, or set agents.{name}.transport to \"exec\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(args: &[&str]) -> Vec<String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        appserver_refuses(&args).into_iter().map(str::to_string).collect()
    }

    #[test]
    fn exec_and_tui_flags_are_refused_config_overrides_are_taken() {
        assert_eq!(refused(&["--skip-git-repo-check"]), ["--skip-git-repo-check"]);
        assert_eq!(refused(&["--json", "-c", "model=x"]), ["--json"]);
        assert_eq!(refused(&["--model", "gpt-5", "--json"]), ["--model", "--json"]);
        assert_eq!(refused(&["--sandbox=read-only"]), ["--sandbox=read-only"]);
        assert!(refused(&["-c", "model_reasoning_effort=medium", "--config=x=1", "-cfoo=1"]).is_empty());
        assert!(refused(&["--enable", "a", "--disable=b", "--listen", "stdio://"]).is_empty());
        assert!(refused(&["--analytics-default-enabled"]).is_empty());
        assert_eq!(instead("--model", "codex"), "set agents.codex.model");
        assert_eq!(instead("--json", "codex"), "remove it, or set agents.codex.transport to \"exec\"");
    }
}
