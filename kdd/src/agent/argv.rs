//! The command line of each backend (F-A1). Never a shell: a program and
//! its arguments. The prompt goes on stdin, which every CLI reads in its
//! print mode (claude `-p`, cursor `agent -p`, gemini headless, commands);
//! codex takes it as its last argument, or `-` and stdin when it is too long
//! for one. A prompt on stdin has no size limit (a thread of several MiB
//! works) and does not show in `ps`.

use std::path::Path;

use super::mcp;
use super::process::Invocation;
use crate::config::{AgentDef, Backend};

/// The longest prompt passed to codex as one argument (Linux refuses an
/// argument over 128 KiB); a longer one goes on stdin.
pub const MAX_ARG_PROMPT: usize = 120 * 1024;

/// The invocation of `agent` for `prompt`, resuming `resume` (the backend's
/// own session id) when given, offered kd's MCP server `server` where the
/// command line says so (claude, codex exec; the others take it elsewhere,
/// see [`mcp`]). The member's own arguments come last, so they add to or
/// override kd's.
pub fn build(agent: &AgentDef, prompt: &str, resume: Option<&str>, server: Option<&mcp::Server>) -> Invocation {
    build_for(agent, prompt, resume, server, None)
}

/// A run in a member's worktree (F-W1): the backend's own write mode,
/// confined to the worktree, which is the run's working directory.
#[derive(Debug, Clone, Copy)]
pub struct Writable<'a> {
    /// The worktree's own temporary directory (its `TMPDIR`), outside it.
    pub tmp: Option<&'a Path>,
    /// claude's tools allowed beside `acceptEdits` (`work.allowed_tools`).
    pub allowed_tools: &'a [String],
}

/// Why a backend cannot run in a worktree, if it cannot: kd has no way to
/// confine cursor-agent's writes to a directory (its print mode either
/// writes nowhere or, with `--force`, anywhere).
pub fn unconfined(backend: Backend) -> Option<&'static str> {
    (backend == Backend::Cursor).then_some(
        "cursor-agent cannot work in a worktree: it has no write mode kd can confine to a directory (with --force \
         it writes anywhere), so kd does not run it writable; give the task to another member",
    )
}

/// codex's `workspace-write` sandbox without `/tmp` and `$TMPDIR` (the
/// King's tree may be under them), writable in the worktree and its own
/// temporary directory `tmp`: `config` keys and values.
pub fn codex_sandbox(tmp: Option<&Path>) -> Vec<(&'static str, serde_json::Value)> {
    let roots: Vec<String> = tmp.map(|t| t.display().to_string()).into_iter().collect();
    vec![
        ("sandbox_mode", serde_json::json!("workspace-write")),
        ("sandbox_workspace_write.exclude_slash_tmp", serde_json::json!(true)),
        ("sandbox_workspace_write.exclude_tmpdir_env_var", serde_json::json!(true)),
        ("sandbox_workspace_write.writable_roots", serde_json::json!(roots)),
    ]
}

/// [`build`], for a run in a member's worktree when `work` is given.
pub fn build_for(
    agent: &AgentDef,
    prompt: &str,
    resume: Option<&str>,
    server: Option<&mcp::Server>,
    work: Option<&Writable<'_>>,
) -> Invocation {
    let mut args: Vec<String> = Vec::new();
    let model = |args: &mut Vec<String>| {
        if let Some(m) = &agent.model {
            args.extend(["--model".to_string(), m.clone()]);
        }
    };
    let stdin = match agent.backend {
        Backend::Claude => {
            args.extend(
                ["-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"].map(String::from),
            );
            model(&mut args);
            if let Some(id) = resume {
                args.extend(["--resume".to_string(), id.to_string()]);
            }
            args.extend(server.map(mcp::Server::claude_args).unwrap_or_default());
            if let Some(w) = work {
                // Edits and file-changing commands in its cwd, refused
                // (and reported) elsewhere; what else it may run, as allowed.
                args.extend(["--permission-mode".to_string(), "acceptEdits".to_string()]);
                for tool in w.allowed_tools {
                    args.extend(["--allowedTools".to_string(), tool.clone()]);
                }
            }
            args.extend(agent.args.iter().cloned());
            Some(prompt.to_string())
        }
        Backend::Codex => {
            args.push("exec".into());
            if let Some(id) = resume {
                args.extend(["resume".to_string(), id.to_string()]);
            }
            args.push("--json".into());
            model(&mut args);
            args.extend(server.map(mcp::Server::codex_exec_args).unwrap_or_default());
            if let Some(w) = work {
                // `-c` (which `exec resume` takes too) rather than `--sandbox`.
                for (key, value) in codex_sandbox(w.tmp) {
                    args.extend(["-c".to_string(), format!("{key}={value}")]);
                }
            }
            args.extend(agent.args.iter().cloned());
            // codex reads stdin when it is not a terminal: give it /dev/null,
            // or the prompt itself when it is too long for an argument.
            if prompt.len() > MAX_ARG_PROMPT {
                args.push("-".into());
                Some(prompt.to_string())
            } else {
                args.push(prompt.to_string());
                None
            }
        }
        Backend::Cursor => {
            args.extend(["-p", "--output-format", "stream-json", "--stream-partial-output"].map(String::from));
            model(&mut args);
            if let Some(id) = resume {
                args.extend(["--resume".to_string(), id.to_string()]);
            }
            args.extend(agent.args.iter().cloned());
            // Without a prompt argument, `agent -p` reads it from stdin.
            Some(prompt.to_string())
        }
        Backend::Gemini => {
            // Piped stdin makes gemini headless; it reads the prompt there.
            args.extend(["--output-format".to_string(), "stream-json".to_string()]);
            model(&mut args);
            if let Some(id) = resume {
                args.extend(["--resume".to_string(), id.to_string()]);
            }
            if work.is_some() {
                // Edits approved; gemini's file tools keep to its workspace
                // (the cwd), and headless it runs no shell command unasked.
                args.extend(["--approval-mode".to_string(), "auto_edit".to_string()]);
            }
            args.extend(agent.args.iter().cloned());
            Some(prompt.to_string())
        }
        // (An ACP agent is spoken to by agent::acp; as a plain command it
        // would get the prompt on stdin.)
        Backend::Acp | Backend::Command => {
            args.extend(agent.args.iter().cloned());
            Some(prompt.to_string())
        }
    };
    let mut env = agent.run_env();
    if let Some(tmp) = work.and_then(|w| w.tmp) {
        env.push(("TMPDIR".to_string(), tmp.display().to_string()));
    }
    Invocation { program: agent.command.clone(), args, stdin, env }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Format;
    use std::collections::BTreeMap;

    fn agent(backend: Backend, command: &str) -> AgentDef {
        AgentDef {
            name: backend.as_str().into(),
            backend,
            command: command.into(),
            args: vec!["--extra".into()],
            env: BTreeMap::from([("K".to_string(), "V".to_string())]),
            model: Some("m1".into()),
            timeout_s: None,
            prompt_council: None,
            prompt_chat: None,
            format: backend.format(),
            color: None,
            delivery: Default::default(),
            transport: Default::default(),
            policy: Default::default(),
            permissions: Default::default(),
            mcp: false,
            path: None,
        }
    }

    fn args(i: &Invocation) -> Vec<&str> {
        i.args.iter().map(String::as_str).collect()
    }

    #[test]
    fn claude_reads_the_prompt_on_stdin() {
        let i = build(&agent(Backend::Claude, "claude"), "hi", None, None);
        assert_eq!(i.program, "claude");
        assert_eq!(
            args(&i),
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
                "--model",
                "m1",
                "--extra"
            ]
        );
        assert_eq!(i.stdin.as_deref(), Some("hi"));
        assert_eq!(i.env, vec![("K".to_string(), "V".to_string())]);
        let r = build(&agent(Backend::Claude, "claude"), "hi", Some("S1"), None);
        assert!(args(&r).windows(2).any(|w| w == ["--resume", "S1"]));
    }

    #[test]
    fn codex_takes_the_prompt_as_argument_with_stdin_closed() {
        let i = build(&agent(Backend::Codex, "codex"), "hi", None, None);
        assert_eq!(args(&i), ["exec", "--json", "--model", "m1", "--extra", "hi"]);
        assert_eq!(i.stdin, None);
        let r = build(&agent(Backend::Codex, "codex"), "hi", Some("T9"), None);
        assert_eq!(args(&r), ["exec", "resume", "T9", "--json", "--model", "m1", "--extra", "hi"]);
        let big = "x".repeat(MAX_ARG_PROMPT + 1);
        let b = build(&agent(Backend::Codex, "codex"), &big, None, None);
        assert_eq!(args(&b).last(), Some(&"-"));
        assert_eq!(b.stdin.map(|s| s.len()), Some(big.len()));
    }

    #[test]
    fn cursor_and_gemini_read_the_prompt_on_stdin_whatever_its_size() {
        let c = build(&agent(Backend::Cursor, "agent"), "hi", Some("C1"), None);
        assert_eq!(
            args(&c),
            [
                "-p",
                "--output-format",
                "stream-json",
                "--stream-partial-output",
                "--model",
                "m1",
                "--resume",
                "C1",
                "--extra"
            ]
        );
        assert_eq!(c.stdin.as_deref(), Some("hi"));
        let g = build(&agent(Backend::Gemini, "gemini"), "hi", Some("G1"), None);
        assert_eq!(args(&g), ["--output-format", "stream-json", "--model", "m1", "--resume", "G1", "--extra"]);
        assert_eq!(g.stdin.as_deref(), Some("hi"));
        let big = "x".repeat(4 * MAX_ARG_PROMPT);
        for backend in [Backend::Cursor, Backend::Gemini] {
            let i = build(&agent(backend, "x"), &big, None, None);
            assert_eq!(i.stdin.map(|s| s.len()), Some(big.len()));
            assert!(i.args.iter().all(|a| a.len() < 100));
        }
    }

    #[test]
    fn claude_and_codex_exec_get_kds_mcp_server_before_the_members_own_arguments() {
        let server = mcp::Server::new(
            std::path::Path::new("/bin/kd"),
            std::path::Path::new("/run/kdd.sock"),
            "kdcap_x",
            "t1",
            "m",
            Some("r1"),
        );
        let c = build(&agent(Backend::Claude, "claude"), "hi", None, Some(&server));
        let at = |i: &Invocation, a: &str| i.args.iter().position(|x| x == a).unwrap();
        assert_eq!(c.args[at(&c, "--allowedTools") + 1], "mcp__kd");
        assert!(at(&c, "--mcp-config") < at(&c, "--extra"), "{:?}", c.args);
        let x = build(&agent(Backend::Codex, "codex"), "hi", Some("T9"), Some(&server));
        assert_eq!(&x.args[..3], ["exec", "resume", "T9"]);
        assert!(x.args.contains(&"mcp_servers.kd.default_tools_approval_mode=\"approve\"".to_string()));
        assert!(at(&x, "-c") < at(&x, "--extra") && x.args.last().map(String::as_str) == Some("hi"), "{:?}", x.args);
        for backend in [Backend::Cursor, Backend::Gemini, Backend::Command] {
            let i = build(&agent(backend, "x"), "hi", None, Some(&server));
            assert!(!i.args.iter().any(|a| a.contains("mcp")), "{backend:?} takes it elsewhere or not at all");
        }
    }

    #[test]
    fn a_work_run_gets_its_backends_write_mode_confined_to_its_worktree() {
        let tools = vec!["Bash(cargo test:*)".to_string(), "Read".to_string()];
        let tmp = std::path::Path::new("/d/w/claude.tmp");
        let w = Writable { tmp: Some(tmp), allowed_tools: &tools };
        let c = build_for(&agent(Backend::Claude, "claude"), "hi", None, None, Some(&w));
        let s = args(&c);
        assert!(s.windows(2).any(|p| p == ["--permission-mode", "acceptEdits"]), "{s:?}");
        assert!(s.windows(2).any(|p| p == ["--allowedTools", "Bash(cargo test:*)"]), "{s:?}");
        assert!(s.windows(2).any(|p| p == ["--allowedTools", "Read"]), "{s:?}");
        assert_eq!(s.last(), Some(&"--extra"), "the member's own arguments last");
        assert!(c.env.contains(&("TMPDIR".to_string(), "/d/w/claude.tmp".to_string())));
        let x = build_for(&agent(Backend::Codex, "codex"), "hi", Some("T9"), None, Some(&w));
        let s = args(&x);
        for set in [
            "sandbox_mode=\"workspace-write\"",
            "sandbox_workspace_write.exclude_slash_tmp=true",
            "sandbox_workspace_write.exclude_tmpdir_env_var=true",
            "sandbox_workspace_write.writable_roots=[\"/d/w/claude.tmp\"]",
        ] {
            assert!(s.windows(2).any(|p| p == ["-c", set]), "{set}: {s:?}");
        }
        assert_eq!(s.last(), Some(&"hi"));
        let g = build_for(&agent(Backend::Gemini, "gemini"), "hi", None, None, Some(&w));
        assert!(args(&g).windows(2).any(|p| p == ["--approval-mode", "auto_edit"]));
        // Advising runs keep their read-only command lines.
        for backend in [Backend::Claude, Backend::Codex, Backend::Gemini] {
            let i = build(&agent(backend, "x"), "hi", None, None);
            assert!(!i.args.iter().any(|a| a.contains("acceptEdits") || a.contains("sandbox") || a == "auto_edit"));
        }
        assert!(unconfined(Backend::Cursor).is_some());
        assert!(
            [Backend::Claude, Backend::Codex, Backend::Gemini, Backend::Acp].iter().all(|b| unconfined(*b).is_none())
        );
    }

    #[test]
    fn command_is_its_argv_with_the_prompt_on_stdin() {
        let mut a = agent(Backend::Command, "/usr/local/bin/my-agent");
        a.format = Format::Text;
        let i = build(&a, "hi", Some("ignored"), None);
        assert_eq!(
            (i.program.as_str(), args(&i), i.stdin.as_deref()),
            ("/usr/local/bin/my-agent", vec!["--extra"], Some("hi"))
        );
    }
}
