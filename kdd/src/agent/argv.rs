//! The command line of each backend (F-A1). Never a shell: a program and
//! its arguments. The prompt goes on stdin, which every CLI reads in its
//! print mode (claude `-p`, cursor `agent -p`, gemini headless, commands);
//! codex takes it as its last argument, or `-` and stdin when it is too long
//! for one. A prompt on stdin has no size limit (a thread of several MiB
//! works) and does not show in `ps`.

use super::mcp;
use crate::config::{AgentDef, Backend};

/// The longest prompt passed to codex as one argument (Linux refuses an
/// argument over 128 KiB); a longer one goes on stdin.
pub const MAX_ARG_PROMPT: usize = 120 * 1024;

/// What to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: String,
    pub args: Vec<String>,
    /// Written to the agent's stdin, then closed; `None`: stdin is /dev/null.
    pub stdin: Option<String>,
    pub env: Vec<(String, String)>,
}

/// The invocation of `agent` for `prompt`, resuming `resume` (the backend's
/// own session id) when given, offered kd's MCP server `server` where the
/// command line says so (claude, codex exec; the others take it elsewhere,
/// see [`mcp`]). The member's own arguments come last, so they add to or
/// override kd's.
pub fn build(agent: &AgentDef, prompt: &str, resume: Option<&str>, server: Option<&mcp::Server>) -> Invocation {
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
    Invocation {
        program: agent.command.clone(),
        args,
        stdin,
        env: agent.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    }
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
