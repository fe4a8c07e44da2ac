use std::os::unix::fs::PermissionsExt;

use super::super::*;
use kd_proto::types::{DeliveryMode, Overflow, RouteType};

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws/.kd")).unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("home/.config/kd")).unwrap();
        Fixture { dir }
    }
    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }
    fn write(&self, json: &str) -> PathBuf {
        let f = self.ws().join(".kd/config.json");
        std::fs::write(&f, json).unwrap();
        f
    }
    fn install(&self, bin: &str) {
        let p = self.dir.path().join("bin").join(bin);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    fn load(&self) -> Result<Config, ConfigError> {
        let bin = self.dir.path().join("bin");
        let home = self.dir.path().join("home");
        let var = move |k: &str| match k {
            "PATH" => Some(bin.clone().into_os_string()),
            "HOME" => Some(home.clone().into_os_string()),
            _ => None,
        };
        load_with(&self.ws(), &Env { var: &var })
    }
    fn error(&self, json: &str) -> String {
        let f = self.write(json);
        let e = self.load().unwrap_err();
        assert_eq!(e.file.as_deref(), Some(f.as_path()));
        e.to_string()
    }
}

/// Kingdom's own configuration file, as kingdom-cli 1.1.0 reads it.
const KINGDOM_CONFIG: &str = include_str!("../../../../tests/fixtures/kingdom/.kd/config.json");

#[test]
fn without_a_file_members_are_the_clis_found_on_path() {
    let f = Fixture::new();
    f.install("codex");
    f.install("cursor-agent");
    let c = f.load().unwrap();
    assert_eq!(c.file, None);
    assert_eq!(c.council.members, vec!["codex", "cursor"]);
    assert!(c.council.members_detected);
    assert_eq!(c.agent("cursor").unwrap().command, "cursor-agent");
    assert_eq!(c.council.timeout_s, 600);
    assert_eq!(c.council.ask, Rounds { mode: Mode::Broadcast, auto_rounds: 3 });
    assert_eq!(c.council.chat, c.council.ask);
    assert_eq!((c.council.preamble.as_str(), c.council.chat_preamble.as_str()), (COUNCIL_PREAMBLE, CHAT_PREAMBLE));
    assert!(c.notices.is_empty());
    let none = Fixture::new().load().unwrap();
    assert!(none.council.members.is_empty());
}

#[test]
fn a_full_file_is_read() {
    let f = Fixture::new();
    f.write(
        r#"{"council": {"members": ["claude", "bot"], "timeout": 30, "auto_rounds": 2, "mode": "sequential", "preamble": "Be brief.", "chat_preamble": "Chat."},
            "agents": {"claude": {"model": "opus", "args": ["--x"], "timeout": 5, "color": "teal", "prompts": {"council": "You review."}},
                       "bot": {"backend": "command", "command": "/bin/echo", "format": "claude", "env": {"A": "1"}, "color": 99}}}"#,
    );
    let c = f.load().unwrap();
    assert_eq!(c.council.members, vec!["claude", "bot"]);
    assert_eq!((c.council.timeout_s, c.council.ask), (30, Rounds { mode: Mode::Sequential, auto_rounds: 2 }));
    assert_eq!(
        (c.preamble(Style::Council, false), c.preamble(Style::Chat, false)),
        (hinted("Be brief."), hinted("Chat."))
    );
    let claude = c.agent("claude").unwrap();
    assert_eq!((claude.model.as_deref(), claude.timeout_s, claude.command.as_str()), (Some("opus"), Some(5), "claude"));
    assert_eq!(claude.prompt(Style::Council), Some("You review."));
    assert_eq!(claude.color.as_deref(), Some("teal"));
    let bot = c.agent("bot").unwrap();
    assert_eq!((bot.backend, bot.format, bot.command.as_str()), (Backend::Command, Format::Claude, "/bin/echo"));
    assert_eq!(bot.color.as_deref(), Some("99"));
    assert_eq!(c.timeout_s("claude"), 5);
    assert_eq!(c.timeout_s("bot"), 30);
}

#[test]
fn chat_uses_the_chat_prompt_else_the_council_prompt() {
    let f = Fixture::new();
    f.write(
        r#"{"council": {"members": ["claude", "codex"]},
            "agents": {"claude": {"prompts": {"council": "Council voice.", "chat": "Chat voice."}},
                       "codex": {"prompts": {"council": "Only council."}}}}"#,
    );
    let c = f.load().unwrap();
    let (claude, codex) = (c.agent("claude").unwrap(), c.agent("codex").unwrap());
    assert_eq!(
        (claude.prompt(Style::Council), claude.prompt(Style::Chat)),
        (Some("Council voice."), Some("Chat voice."))
    );
    assert_eq!(codex.prompt(Style::Chat), Some("Only council."), "prompts.council is the fallback in chat");
}

#[test]
fn the_workspace_file_wins_over_the_user_file() {
    let f = Fixture::new();
    let user = f.dir.path().join("home/.config/kd/config.json");
    std::fs::write(&user, r#"{"council": {"members": ["codex"]}}"#).unwrap();
    assert_eq!(f.load().unwrap().file, Some(user));
    let own = f.write(r#"{"council": {"members": ["claude"]}}"#);
    let c = f.load().unwrap();
    assert_eq!((c.file, c.council.members), (Some(own), vec!["claude".to_string()]));
}

#[test]
fn an_empty_file_is_all_defaults() {
    let f = Fixture::new();
    f.write("  \n");
    assert!(f.load().unwrap().council.members_detected);
}

/// A file that is not JSON says where, without a key: serde's path stops
/// wherever the parser was (`council.?`), which names no key of kd's.
#[test]
fn a_file_that_is_not_json_says_where_and_names_no_key() {
    let f = Fixture::new();
    for (text, at) in [
        (r#"{"council": {"members": ["claude"],}}"#, "trailing comma at line 1 column 36"),
        (r#"{"council": {"members": ["claude"]"#, "EOF while parsing an object at line 1 column 34"),
        ("{\"council\"\n : x}", "expected value at line 2 column 4"),
    ] {
        let e = f.error(text);
        assert!(e.ends_with(&format!("config.json: not JSON: {at}")), "{e}");
    }
}

#[test]
fn every_bad_value_names_file_key_and_value() {
    let f = Fixture::new();
    let cases: &[(&str, &[&str])] = &[
        (r#"{"council": {"auto_rounds": 0}}"#, &["council.auto_rounds", "positive", "0"]),
        (r#"{"council": {"auto_rounds": -2}}"#, &["council.auto_rounds", "-2"]),
        (r#"{"council": {"auto_rounds": 4294967295}}"#, &["council.auto_rounds", "at most 100"]),
        (r#"{"council": {"mode": "parallel"}}"#, &["council.mode", "\"parallel\""]),
        (r#"{"council": {"preamble": "  "}}"#, &["council.preamble", "non-empty"]),
        (r#"{"council": {"chat_preamble": ""}}"#, &["council.chat_preamble", "non-empty"]),
        (r#"{"council": {"colour": 1}}"#, &["council", "unknown field `colour`"]),
        (r#"{"councel": {}}"#, &["unknown field `councel`"]),
        (r#"{"council": {"members": ["ghost"]}}"#, &["council.members", "\"ghost\"", "agents.ghost"]),
        (r#"{"council": {"members": []}}"#, &["council.members", "empty"]),
        (r#"{"council": {"members": ["claude", "claude"]}}"#, &["council.members", "twice"]),
        (r#"{"council": {"timeout": "long"}}"#, &["council.timeout", "invalid type"]),
        (r#"{"council": {"max_answer_bytes": 0}}"#, &["council.max_answer_bytes", "between 1 and 268435456", "0"]),
        (r#"{"council": {"max_answer_bytes": 268435457}}"#, &["council.max_answer_bytes", "268435457"]),
        (r#"{"council": {"resume_within": "soon"}}"#, &["council.resume_within", "\"soon\""]),
        (r#"{"council": {"resume_within": true}}"#, &["council.resume_within", "duration"]),
        (r#"{"council": {"resume_attempts": 0}}"#, &["council.resume_attempts", "between 1 and 1000", "0"]),
        (r#"{"council": {"resume_attempts": 1001}}"#, &["council.resume_attempts", "1001"]),
        (r#"{"council": {"chat": {"mode": "chaos"}}}"#, &["council.chat.mode", "\"chaos\""]),
        (r#"{"council": {"chat": {"auto_rounds": -1}}}"#, &["council.chat.auto_rounds", "-1"]),
        (r#"{"council": {"ask": {"auto_messages": -5}}}"#, &["council.ask.auto_messages", "-5"]),
        (r#"{"council": {"ask": {"mode": "natural"}}}"#, &["council.ask.mode", "\"natural\""]),
        (r#"{"council": {"thinking_visibility": "loud"}}"#, &["council.thinking_visibility", "\"loud\""]),
        (r#"{"council": {"chat_mode": "natural"}}"#, &["unknown field `chat_mode`"]),
        (r#"{"agents": {"x": {"backend": "gpt"}}}"#, &["agents.x.backend", "\"gpt\""]),
        (r#"{"agents": {"x": {"command": "x"}}}"#, &["agents.x.backend", "missing"]),
        (r#"{"agents": {"x": {"backend": "command"}}}"#, &["agents.x.command", "missing"]),
        (r#"{"agents": {"claude": {"format": "text"}}}"#, &["agents.claude.format"]),
        (r#"{"agents": {"claude": {"timeout": 0}}}"#, &["agents.claude.timeout"]),
        (r#"{"agents": {"claude": {"timeout": 604801}}}"#, &["agents.claude.timeout", "604800", "604801"]),
        (
            r#"{"agents": {"claude": {"timeout": 18446744073709551615}}}"#,
            &["agents.claude.timeout", "between 1 and 604800"],
        ),
        (r#"{"council": {"timeout": 9223372036854775807}}"#, &["council.timeout", "between 1 and 604800"]),
        (r#"{"council": {"timeout": 0}}"#, &["council.timeout", "between 1 and 604800", "0"]),
        (r#"{"agents": {"claude": {"color": "chartreuse"}}}"#, &["agents.claude.color", "not a colour"]),
        (r#"{"agents": {"claude": {"color": 300}}}"#, &["agents.claude.color", "300"]),
        (r#"{"agents": {"claude": {"effort": "extreme"}}}"#, &["agents.claude.effort", "\"extreme\""]),
        (
            r#"{"agents": {"codex": {"transport": "grpc"}}}"#,
            &["agents.codex.transport", "\"grpc\"", "app-server or exec"],
        ),
        (r#"{"agents": {"x": {"backend": "acp"}}}"#, &["agents.x.command", "missing", "acp backend"]),
        (
            r#"{"agents": {"x": {"backend": "acp", "command": "a", "permissions": "some"}}}"#,
            &["agents.x.permissions", "read-only, allow, deny", "\"some\""],
        ),
        (r#"{"agents": {"claude": {"permissions": "allow"}}}"#, &["agents.claude.permissions", "only an acp member"]),
        (r#"{"agents": {"claude": {"transport": "exec"}}}"#, &["agents.claude.transport", "only codex"]),
        (r#"{"agents": {"codex": {"sandbox": "none"}}}"#, &["agents.codex.sandbox", "read-only", "\"none\""]),
        (r#"{"agents": {"codex": {"approval": "always"}}}"#, &["agents.codex.approval", "never", "\"always\""]),
        (
            r#"{"agents": {"codex": {"transport": "exec", "sandbox": "read-only"}}}"#,
            &["agents.codex.sandbox", "app-server"],
        ),
        (r#"{"agents": {"claude": {"prompts": {"planning": "x"}}}}"#, &["unknown field `planning`"]),
        (r#"{"agents": {"Bad Name": {"backend": "claude"}}}"#, &["agents.Bad Name", "member name"]),
        (r#"{"agents": {"claude": {"wat": true}}}"#, &["agents.claude", "unknown field `wat`"]),
        // Member names are branch names' last part (kd/THREAD/MEMBER): git's rules.
        (r#"{"agents": {"a..b": {"backend": "claude"}}}"#, &["agents.a..b", "git branch", "\"..\""]),
        (r#"{"agents": {"x.lock": {"backend": "claude"}}}"#, &["agents.x.lock", "git branch", "\".lock\""]),
        (r#"{"agents": {"x.": {"backend": "claude"}}}"#, &["agents.x.", "git branch", "\".\""]),
        (r#"{"council": {"members": ["claude", "a..b"]}}"#, &["council.members", "\"a..b\"", "git branch"]),
        // kd writes as `kd` (tallies, merges, notices): no member may.
        (
            r#"{"council": {"members": ["kd"]}, "agents": {"kd": {"backend": "claude"}}}"#,
            &["council.members", "\"kd\" is reserved"],
        ),
        (r#"{"peasant": {"max_iterations": 0}}"#, &["peasant.max_iterations", "positive"]),
        (r#"{"lord": {"agents": "x"}}"#, &["unknown field `agents`"]),
        ("{not json", &["key must be a string"]),
    ];
    for (json, expect) in cases {
        let e = f.error(json);
        assert!(e.contains(".kd/config.json: "), "{e}");
        for part in *expect {
            assert!(e.contains(part), "{json}: {e:?} lacks {part:?}");
        }
    }
}

#[test]
fn a_real_kingdom_config_is_accepted_and_mapped() {
    let f = Fixture::new();
    f.write(KINGDOM_CONFIG);
    let c = f.load().unwrap();
    assert_eq!(c.council.members, vec!["claude", "codex", "cursor"]);
    assert_eq!(c.council.timeout_s, 900);
    // ask: sequential, 4 follow-up answers from 3 members = 2 rounds.
    assert_eq!(c.council.ask, Rounds { mode: Mode::Sequential, auto_rounds: 2 });
    assert_eq!(c.council.chat, Rounds { mode: Mode::Sequential, auto_rounds: 2 }, "round_robin");
    let claude = c.agent("claude").unwrap();
    assert_eq!(claude.backend, Backend::Claude, "claude_code");
    assert_eq!(claude.args, vec!["--effort", "high"]);
    assert_eq!(claude.prompt(Style::Council), Some("Focus on correctness and failure modes."));
    let codex = c.agent("codex").unwrap();
    // Kingdom runs `codex exec`, whose git check codex app-server has not:
    // the flag is left out, and the member streams through the app-server.
    assert_eq!(codex.args, vec!["-c", "model_reasoning_effort=medium"]);
    assert_eq!(codex.transport, Transport::AppServer);
    assert_eq!(codex.prompt(Style::Council), Some("Think about edge cases.\n\nKeep answers short."));
    assert_eq!(codex.prompt(Style::Chat), codex.prompt(Style::Council));
    assert_eq!(c.agent("cursor").unwrap().prompt(Style::Council), Some("Think about edge cases."));
    assert_eq!(c.agent("gemini").unwrap().prompt(Style::Council), Some("Think about edge cases."), "every agent");
    assert_eq!(c.preamble(Style::Council, false), hinted(COUNCIL_PREAMBLE));
    let keys: Vec<&str> = c.notices.iter().filter_map(|n| n.split(':').next()).collect();
    assert_eq!(
        keys,
        [
            "prompts.design",
            "prompts.review",
            "prompts.peasant",
            "peasant",
            "lord",
            "agents.claude.prompts.review",
            "agents.codex.extra_flags",
            "council.review_members",
            "council.thinking_visibility"
        ]
    );
    assert!(c.notices.iter().all(|n| n.ends_with("(ignored)")), "{:?}", c.notices);
    assert_eq!(
        c.notices[6],
        "agents.codex.extra_flags: --skip-git-repo-check is a flag of codex exec, which kd's codex app-server has \
         no use for and refuses (ignored)"
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let view = c.view("/ws", &Env { var: &|_| None }, Some(Path::new("/bin/kd")));
    assert_eq!(view.warnings, c.warnings);
    let mode = view.entries.iter().find(|e| e.key == "council.mode").unwrap();
    assert!(mode.source.ends_with("(council.ask.mode)"), "{mode:?}");
    assert_eq!(view.notices, c.notices);
}

#[test]
fn kingdom_writable_and_manual_chat() {
    let f = Fixture::new();
    f.write(r#"{"council": {"members": ["claude"], "writable": true, "chat": {"mode": "manual"}}}"#);
    let c = f.load().unwrap();
    assert_eq!(
        (c.preamble(Style::Council, false), c.preamble(Style::Chat, false)),
        (hinted(WRITABLE_COUNCIL_PREAMBLE), hinted(WRITABLE_CHAT_PREAMBLE))
    );
    assert_eq!(c.council.chat, Rounds { mode: Mode::Broadcast, auto_rounds: 0 }, "manual: no auto-turns");
    assert_eq!(c.council.ask.auto_rounds, DEFAULT_AUTO_ROUNDS);
    assert!(c.notices.iter().any(|n| n.starts_with("council.writable:")));
    f.write(r#"{"council": {"members": ["claude"], "ask": {"auto_messages": 0}}, "agents": {"cursor": {"effort": "high"}}}"#);
    let c = f.load().unwrap();
    assert_eq!(c.council.ask.auto_rounds, 0, "auto_messages 0: no follow-ups");
    assert_eq!(c.notices, vec!["agents.cursor.effort: the cursor backend has no effort setting (ignored)"]);
}

/// A preamble followed by the coordination hint, as members get it by default.
fn hinted(p: &str) -> String {
    format!("{p}\n\n{}", crate::config::COORDINATION_HINT)
}

#[test]
fn coordination_settings_and_delivery_preferences() {
    let f = Fixture::new();
    f.write(
        r#"{"council": {"members": ["claude"], "max_hops": 2, "coordination_hint": false},
            "agents": {"claude": {"delivery": {"mode": "queued", "immediate_types": ["reply"], "queue_limit": 3, "overflow": "reject_new"}}}}"#,
    );
    let c = f.load().unwrap();
    assert_eq!(c.coordination, crate::config::Coordination { max_hops: 2, hint: false });
    assert_eq!(c.preamble(Style::Council, false), COUNCIL_PREAMBLE, "no hint when it is off");
    let d = c.delivery("claude");
    assert_eq!((d.mode, d.queue_limit, d.overflow), (DeliveryMode::Queued, 3, Overflow::RejectNew));
    assert_eq!(d.immediate_types, vec![RouteType::Reply]);
    for (bad, key) in [
        (r#"{"council": {"max_hops": -1}}"#, "council.max_hops"),
        (r#"{"agents": {"claude": {"delivery": {"mode": "later"}}}}"#, "agents.claude.delivery.mode"),
        (
            r#"{"agents": {"claude": {"delivery": {"queued_types": ["gossip"]}}}}"#,
            "agents.claude.delivery.queued_types",
        ),
        (r#"{"agents": {"claude": {"delivery": {"queue_limit": 0}}}}"#, "agents.claude.delivery.queue_limit"),
        (r#"{"agents": {"claude": {"delivery": {"overflow": "spill"}}}}"#, "agents.claude.delivery.overflow"),
    ] {
        f.write(bad);
        assert_eq!(f.load().unwrap_err().key, key, "{bad}");
    }
}

#[test]
fn codex_arguments_app_server_refuses_are_left_out_or_run_through_exec() {
    let f = Fixture::new();
    // Flags of codex exec that mean nothing to the app-server are left out:
    // the member keeps streaming.
    f.write(r#"{"agents": {"codex": {"args": ["--json", "-c", "x=1", "--skip-git-repo-check", "--color", "never"]}}}"#);
    let c = f.load().unwrap();
    let codex = c.agent("codex").unwrap();
    assert_eq!((codex.transport, codex.args.as_slice()), (Transport::AppServer, &["-c".to_string(), "x=1".into()][..]));
    let noted: Vec<&str> = c.notices.iter().map(|w| w.split(" is a flag").next().unwrap_or_default()).collect();
    assert_eq!(
        noted,
        ["agents.codex.args: --json", "agents.codex.args: --skip-git-repo-check", "agents.codex.args: --color never"]
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // One that means something runs the member as Kingdom did, through
    // codex exec, every argument kept.
    f.write(r#"{"agents": {"codex": {"extra_flags": ["--skip-git-repo-check", "--model", "o3", "--full-auto"]}}}"#);
    let c = f.load().unwrap();
    let codex = c.agent("codex").unwrap();
    assert_eq!((codex.transport, codex.args.len()), (Transport::Exec, 4));
    assert_eq!(
        c.notices,
        ["agents.codex.extra_flags: codex app-server does not take --model, --full-auto (flags of codex exec or its \
          TUI): this member runs codex exec, as Kingdom does, its answers whole instead of streamed; to stream, \
          set agents.codex.model instead of --model and remove the others"]
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // Asked for, the app-server is kept: what it cannot take is warned of.
    f.write(
        r#"{"agents": {"codex": {"transport": "app-server", "args": ["--skip-git-repo-check", "--model", "o3"]}}}"#,
    );
    let c = f.load().unwrap();
    assert_eq!(c.agent("codex").unwrap().args, ["--model", "o3"]);
    let said: Vec<&str> = c.warnings.iter().map(|w| w.split(" (").next().unwrap_or_default()).collect();
    assert_eq!(said, ["agents.codex.args: codex app-server does not take --model"]);
    assert!(c.warnings[0].ends_with("set agents.codex.model"), "{:?}", c.warnings);
    // So is a sandbox or approval policy, which only the app-server takes.
    f.write(r#"{"agents": {"codex": {"sandbox": "workspace-write", "args": ["--full-auto"]}}}"#);
    let c = f.load().unwrap();
    assert_eq!(c.agent("codex").unwrap().transport, Transport::AppServer);
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    f.write(r#"{"agents": {"codex": {"transport": "exec", "args": ["--json", "--skip-git-repo-check"]}}}"#);
    let c = f.load().unwrap();
    assert!(c.warnings.is_empty() && c.notices.is_empty(), "codex exec takes them");
    assert_eq!(c.agent("codex").unwrap().args, ["--json", "--skip-git-repo-check"]);
}

/// The keys of every kingdom-cli release's schema (0.1.4 to 1.1.0) are
/// taken: what `kd init` of Kingdom 0.1 and 0.2 wrote, 0.1's flat
/// `council.auto_messages`, 0.5's `reasoning_effort`.
#[test]
fn every_kingdom_releases_keys_are_accepted() {
    let f = Fixture::new();
    // Kingdom 0.2.1's `kd init`.
    f.write(
        r#"{"agents": {"claude": {"backend": "claude_code"}, "codex": {"backend": "codex"}, "cursor": {"backend": "cursor"}},
            "council": {"members": ["claude", "codex", "cursor"], "timeout": 600},
            "peasant": {"agent": "claude", "timeout": 900, "max_iterations": 50}}"#,
    );
    let c = f.load().unwrap();
    assert_eq!(c.council.members, ["claude", "codex", "cursor"]);
    assert_eq!(c.notices, ["peasant: Kingdom's worker settings; kd runs no workers (ignored)"]);
    // Kingdom 0.1's council: mode and auto_messages beside the members.
    f.write(
        r#"{"council": {"members": ["claude", "codex"], "timeout": 600, "auto_messages": 4, "mode": "sequential",
                        "preamble": "Advise.", "thinking_visibility": "auto", "writable": false}}"#,
    );
    let c = f.load().unwrap();
    assert_eq!(c.council.ask, Rounds { mode: Mode::Sequential, auto_rounds: 2 }, "4 answers of 2 members");
    assert_eq!(c.mapped_from.get("council.auto_rounds").map(String::as_str), Some("council.auto_messages"));
    // Kingdom 0.5 to 1.0's reasoning_effort (codex's effort).
    f.write(r#"{"agents": {"codex": {"backend": "codex", "reasoning_effort": "high"}}}"#);
    assert_eq!(f.load().unwrap().agent("codex").unwrap().args, ["-c", "model_reasoning_effort=high"]);
    for (json, expect) in [
        (r#"{"peasant": {"timeout": 0}}"#, &["peasant.timeout", "positive", "0"][..]),
        (r#"{"peasant": {"timeout": "long"}}"#, &["peasant.timeout", "invalid type"][..]),
        (r#"{"council": {"auto_messages": -2}}"#, &["council.auto_messages", "-2"][..]),
        (
            r#"{"council": {"auto_messages": 2, "ask": {"auto_messages": 3}}}"#,
            &["council.auto_messages", "council.ask.auto_messages", "one"][..],
        ),
        (
            r#"{"agents": {"codex": {"effort": "low", "reasoning_effort": "high"}}}"#,
            &["agents.codex.reasoning_effort", "effort"][..],
        ),
        (r#"{"agents": {"codex": {"reasoning_effort": "huge"}}}"#, &["agents.codex.reasoning_effort", "\"huge\""][..]),
    ] {
        let e = f.error(json);
        for part in expect {
            assert!(e.contains(part), "{json}: {e:?} lacks {part:?}");
        }
    }
}

#[test]
fn both_backend_messages_list_every_backend() {
    let f = Fixture::new();
    for json in [r#"{"agents": {"x": {"backend": "gpt"}}}"#, r#"{"agents": {"x": {"command": "x"}}}"#] {
        let e = f.error(json);
        assert!(e.contains("claude, codex, cursor, gemini, acp or command"), "{e}");
    }
}

#[test]
fn kds_mcp_server_is_on_by_default_and_a_member_may_opt_out() {
    let f = Fixture::new();
    f.write(r#"{"council": {"members": ["claude", "codex"]}, "agents": {"codex": {"mcp": false}}}"#);
    let c = f.load().unwrap();
    assert!(c.council.mcp);
    assert_eq!((c.agent("claude").unwrap().mcp, c.agent("codex").unwrap().mcp), (true, false));
    assert!(c.agent("gemini").unwrap().mcp, "a member with no entry of its own follows council.mcp");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);

    // Off for the council, on for one member.
    f.write(r#"{"council": {"members": ["claude", "codex"], "mcp": false}, "agents": {"codex": {"mcp": true}}}"#);
    let c = f.load().unwrap();
    assert!(!c.council.mcp);
    assert_eq!((c.agent("claude").unwrap().mcp, c.agent("codex").unwrap().mcp), (false, true));
    assert!(!c.agent("gemini").unwrap().mcp);
    let view = c.view("/ws", &Env { var: &|_| None }, Some(Path::new("/bin/kd")));
    assert_eq!(view.warnings, Vec::<String>::new());
    let entry = |k: &str| view.entries.iter().find(|e| e.key == k).cloned().unwrap();
    assert_eq!(entry("council.mcp").value, serde_json::json!(false));
    assert!(entry("council.mcp").source.ends_with("config.json"), "{:?}", entry("council.mcp"));
    assert_eq!(entry("agents.codex.mcp").value, serde_json::json!(true));
    assert_eq!(
        (entry("agents.claude.mcp").value, entry("agents.claude.mcp").source),
        (serde_json::json!(false), "default (council.mcp)".to_string())
    );

    // No kd to serve it: the members who were to have it are named.
    let without = c.view("/ws", &Env { var: &|_| None }, None);
    assert_eq!(
        without.warnings,
        ["council.mcp: no kd found beside kdd, in KD_KD or on PATH to serve kd's MCP server (kd mcp): codex run \
          without kd's tools"]
    );

    // A backend kd cannot give a per-run server to: said, not refused.
    f.write(r#"{"council": {"members": ["cursor"]}, "agents": {"cursor": {"mcp": true}}}"#);
    let c = f.load().unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(c.warnings[0].starts_with("agents.cursor.mcp: kd cannot give a cursor member"), "{:?}", c.warnings);

    for (bad, key) in [
        (r#"{"council": {"mcp": "yes"}}"#, "council.mcp"),
        (r#"{"agents": {"claude": {"mcp": 1}}}"#, "agents.claude.mcp"),
    ] {
        f.write(bad);
        assert_eq!(f.load().unwrap_err().key, key, "{bad}");
    }
}

#[test]
fn the_hint_names_kds_tools_to_a_member_that_has_them() {
    let f = Fixture::new();
    f.write(r#"{"council": {"members": ["claude"], "preamble": "Be brief."}}"#);
    let c = f.load().unwrap();
    let tools = c.preamble(Style::Council, true);
    assert_eq!(tools, format!("Be brief.\n\n{}", crate::config::MCP_HINT));
    for tool in ["`send`", "`inbox`", "`ack`", "`claim`", "`thread`", "`search`"] {
        assert!(tools.contains(tool), "{tool} missing: {tools}");
    }
    assert!(tools.contains("@NAME") && !tools.contains("kd send"), "{tools}");
    assert_eq!(c.preamble(Style::Council, false), hinted("Be brief."), "without the tools: the shell commands");
    f.write(r#"{"council": {"members": ["claude"], "preamble": "Be brief.", "coordination_hint": false}}"#);
    assert_eq!(f.load().unwrap().preamble(Style::Council, true), "Be brief.");
}

#[test]
fn exchanges_resume_for_a_day_twice_by_default_and_0_turns_it_off() {
    let f = Fixture::new();
    f.write("{}");
    let c = f.load().unwrap().council;
    assert_eq!((c.resume_within, c.resume_attempts), (std::time::Duration::from_secs(86_400), 2));
    f.write(r#"{"council": {"resume_within": "30m", "resume_attempts": 5}}"#);
    let c = f.load().unwrap().council;
    assert_eq!((c.resume_within, c.resume_attempts), (std::time::Duration::from_secs(1800), 5));
    for off in [r#""0""#, "0"] {
        f.write(&format!(r#"{{"council": {{"resume_within": {off}}}}}"#));
        assert!(f.load().unwrap().council.resume_within.is_zero(), "{off}");
    }
}

#[test]
fn what_a_fork_carries_is_the_conversation_unless_the_workspace_says_otherwise() {
    use kd_proto::types::Carry;
    let f = Fixture::new();
    f.write("{}");
    assert_eq!(f.load().unwrap().lifecycle.fork_carry, Carry::Conversation);
    for (value, carry) in [("summary", Carry::Summary), ("none", Carry::None), ("conversation", Carry::Conversation)] {
        f.write(&format!(r#"{{"lifecycle": {{"fork_carry": "{value}"}}}}"#));
        assert_eq!(f.load().unwrap().lifecycle.fork_carry, carry);
    }
    let e = f.error(r#"{"lifecycle": {"fork_carry": "all"}}"#);
    assert!(e.contains("lifecycle.fork_carry") && e.contains("\"all\"") && e.contains("conversation, summary or none"));
}
