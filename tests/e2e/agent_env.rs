//! What an agent finds in its environment of kd's own: its run's marker
//! and the daemon's socket, never a marker or a capability kdd itself
//! inherited (a kdd started from an agent's shell carries that agent's);
//! and the `PATH` of the shell that asked, which its CLI is found on and
//! runs with (not the daemon's), in every round and after a restart.

use kd_tests::{Kdd, Workspace, collect_until, ended, send_one_round as send};

#[tokio::test(flavor = "multi_thread")]
async fn kd_markers_come_from_kd_not_from_kdds_own_environment() {
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_RUN", "echo run=${KD_RUN-none} peer=${KD_PEER-none}"), ("FAKE_TEXT", "{run}")],
    )]);
    let kdd = Kdd::start_env(&[], &[("KD_RUN", "r-stale"), ("KD_PEER", "1.1@/stale/kdd.sock")]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Env?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let answer = kd_tests::last_message(&c, &t).await;
    let run = answer.run.as_ref().and_then(|r| r.run_id.clone()).unwrap_or_default();
    assert_eq!(answer.body, format!("run={run} peer=none"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_capability_kdd_inherited_never_reaches_an_agent() {
    let ws = Workspace::new(&[(
        "codex",
        "codex",
        &[("FAKE_RUN", "echo token=${KD_RUN_TOKEN-none}"), ("FAKE_TEXT", "{run}")],
    )]);
    let kdd = Kdd::start_env(&[], &[("KD_RUN_TOKEN", "kdcap_stale")]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Env?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(kd_tests::last_message(&c, &t).await.body, "token=none", "an app-server run is given none of kdd's");
}

/// Agent CLIs as npm or nvm installs them, in a directory of their own:
/// `claude` and `codex` are scripts that find their interpreter
/// (`fake-node`, the fake agent, standing in for node) on `PATH`, so they
/// run only with that directory on the `PATH` they are given.
struct AgentsDir {
    dir: tempfile::TempDir,
}

impl AgentsDir {
    fn new() -> AgentsDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new().prefix("kd-agents-").tempdir().unwrap();
        std::os::unix::fs::symlink(kd_tests::bin("fake-agent"), dir.path().join("fake-node")).unwrap();
        for name in ["claude", "codex"] {
            let script = dir.path().join(name);
            std::fs::write(&script, "#!/bin/sh\nexec fake-node \"$@\"\n").unwrap();
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        AgentsDir { dir }
    }

    /// A shell's `PATH` with the agents on it.
    fn path(&self) -> String {
        format!("{}:{WITHOUT}", self.dir.path().display())
    }
}

/// A `PATH` with no agent CLI on it.
const WITHOUT: &str = "/usr/bin:/bin";

/// `kd ARGS` in `ws` from a shell whose `PATH` is `path`.
async fn kd_with_path(kdd: &Kdd, ws: &Workspace, path: &str, args: &[&str]) -> kd_tests::Output {
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).env("PATH", path).args(args);
    kd_tests::run(k).await
}

/// A workspace with no configuration: the members are the CLIs found.
fn unconfigured() -> Workspace {
    let ws = Workspace::new(&[]);
    std::fs::remove_file(ws.dir.path().join(".kd/config.json")).unwrap();
    ws
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_are_found_and_run_on_the_asking_shells_path_not_the_daemons() {
    let agents = AgentsDir::new();
    let kdd = Kdd::start_env(&[], &[("PATH", WITHOUT)]);
    let ws = unconfigured();
    let out = kd_with_path(&kdd, &ws, &agents.path(), &["ask", "--rounds", "0", "Hello?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stderr.contains("found on PATH answer: claude, codex"), "{}", out.stderr);
    for member in ["claude", "codex"] {
        assert!(out.stdout.contains(&format!("── {member}")), "{member}: {}", out.stdout);
        assert!(out.stdout.contains(&format!("Answer from {member}")) || out.stdout.contains("Answer from fake"));
    }
    assert!(!out.stdout.contains("not found"), "{}", out.stdout);

    // kd doctor says which PATH found each.
    let out = kd_with_path(&kdd, &ws, &agents.path(), &["doctor"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let claude = format!("ok    claude: {}/claude", agents.dir.path().display());
    let line = out.stdout.lines().find(|l| l.starts_with(&claude)).unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(line.ends_with("on your PATH (kd's)"), "{line}");
    assert!(out.stdout.contains(&format!("ok    path: agents are found on your PATH (kd's): {}", agents.path())));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_without_agents_does_not_get_the_daemons() {
    let agents = AgentsDir::new();
    let kdd = Kdd::start_env(&[], &[("PATH", &agents.path())]);
    let ws = unconfigured();
    let out = kd_with_path(&kdd, &ws, WITHOUT, &["ask", "--rounds", "0", "Hello?"]).await;
    assert_eq!(out.status.code(), Some(1), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("no council members"), "{}", out.stderr);
    // Configured by name, a member is looked for on that PATH too.
    ws.write_config(&serde_json::json!({"council": {"members": ["claude"]}}));
    let out = kd_with_path(&kdd, &ws, WITHOUT, &["ask", "--rounds", "0", "Hello?"]).await;
    assert!(out.stdout.contains("claude not found in PATH"), "{}{}", out.stdout, out.stderr);
    let out = kd_with_path(&kdd, &ws, WITHOUT, &["doctor"]).await;
    assert!(
        out.stdout.lines().any(|l| l.starts_with("FAIL  claude: claude not found in PATH")
            && l.contains(&format!("kdd's own PATH has it: {}/claude", agents.dir.path().display()))),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_resumed_after_a_restart_finds_its_agents_on_the_path_it_was_asked_with() {
    use kd_client::prelude::*;
    use kd_proto::types::{MessageKind, ThreadEvent};
    let agents = AgentsDir::new();
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[]);
    // Named by bare command: found on a PATH, which kdd's is not.
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": {"command": "claude", "env": {"FAKE_NAME": "claude", "FAKE_HOLD": hold.var()}},
            "codex": {"command": "codex", "transport": "exec", "env": {"FAKE_NAME": "codex"}}
        }
    }));
    let mut kdd = Kdd::start_env(&[], &[("PATH", WITHOUT)]);
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Plan?".into(), None, None, None, None, None, Some(1), None, Some(agents.path()))
        .await
        .unwrap();
    // claude streams its first round, and is held there; kdd dies.
    let mut cut = None;
    collect_until(&mut sub, |events| {
        if let Some(ThreadEvent::RunWaiting { run }) = events.last()
            && run.member == "claude"
        {
            cut = Some(run.id.clone());
        }
        matches!((events.last(), &cut), (Some(ThreadEvent::Delta { run, .. }), Some(r)) if run == r)
    })
    .await;
    kd_tests::saved(&kdd.db, &cut.unwrap()).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    // Resumed: claude's cut answer asked again and round 2 asked, each
    // found on the PATH the question came with.
    assert_eq!(kd_tests::settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let c = kdd.client().await;
    let all = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let said: Vec<(String, MessageKind, Option<u32>)> =
        all.iter().filter(|m| m.from != "king").map(|m| (m.from.clone(), m.kind, m.round)).collect();
    assert!(!all.iter().any(|m| m.kind == MessageKind::Error), "{all:#?}");
    for (member, round) in [("claude", 1), ("codex", 1), ("claude", 2), ("codex", 2)] {
        let answered = said.iter().filter(|(m, k, r)| m == member && *k == MessageKind::Agent && *r == Some(round));
        assert_eq!(answered.count(), 1, "{member} in round {round}: {said:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_request_that_starts_runs_finds_them_on_the_asking_shells_path() {
    use kd_client::prelude::*;
    use kd_proto::types::MessageKind;
    let agents = AgentsDir::new();
    let ws = Workspace::new(&[]);
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": {"command": "claude", "env": {"FAKE_NAME": "claude"}},
            "codex": {"command": "codex", "transport": "exec", "env": {"FAKE_NAME": "codex"}}
        },
        "lifecycle": {"summarizer": "claude"}
    }));
    ws.git_init(&[("a.txt", "a\n")], &[".kd"]);
    let kdd = Kdd::start_env(&[], &[("PATH", WITHOUT)]);
    let with = agents.path();
    // Asked from a shell without them, both fail, naming what is missing.
    let out = kd_with_path(&kdd, &ws, WITHOUT, &["ask", "--rounds", "0", "First?"]).await;
    assert!(out.stdout.contains("claude not found in PATH"), "{}{}", out.stdout, out.stderr);
    let c = kdd.client().await;
    let t = c.thread_list(Some(ws.path()), None, None).await.unwrap().remove(0).id;
    kd_tests::settled(&kdd.db, &t).await;
    // kd retry from one with them: answered.
    let out = kd_with_path(&kdd, &ws, &with, &["retry", &t]).await;
    assert!(out.status.success() && out.stdout.contains("retrying claude"), "{}{}", out.stdout, out.stderr);
    // Each retry is an exchange of its own, done once its answer is written.
    kd_tests::settled(&kdd.db, &t).await;
    let all = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let answers = all.iter().filter(|m| m.kind == MessageKind::Agent && m.replaces.is_some()).count();
    assert_eq!(answers, 2, "{all:#?}");
    // A vote (a completion), a summary by a member, members' work.
    let out = kd_with_path(&kdd, &ws, &with, &["ask", "--thread", &t, "--vote", "Which?"]).await;
    assert!(out.status.success() && out.stdout.contains("── vote ──"), "{}{}", out.stdout, out.stderr);
    let out = kd_with_path(&kdd, &ws, &with, &["summarize", &t]).await;
    assert_eq!((out.status.success(), out.stdout.trim()), (true, "Answer from claude."), "{}", out.stderr);
    let out = kd_with_path(&kdd, &ws, &with, &["work", "Do it."]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    for said in [&out.stdout, &out.stderr] {
        assert!(!said.contains("not found"), "{said}");
    }
}
