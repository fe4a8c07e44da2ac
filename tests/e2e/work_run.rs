//! A member's run in its worktree, the agent side (issue 23 items 1, 2, 6,
//! F-W1, F-W2, F-W6), end to end: a real kdd, `kd work`, real git, fake
//! agents that write files as an agent's tools would (`FAKE_RUN`, and
//! `FAKE_EDIT` for the ACP agent, which asks kd first). Each backend is run
//! in its own write mode confined to the worktree; a fresh worktree gets
//! `work.copy` and `work.setup`; kd commits what the member changed at the
//! end of every run, even one kdd died in.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use kd_proto::work::{WorkState, Worktree};
use kd_tests::{Hold, Kdd, Workspace, bin, collect_until, fake, git, records};
use serde_json::{Value, json};

/// A shell command that, in a worktree only (where `.git` is a file),
/// writes `text` to `file` and its `TMPDIR` to `tmpdir.txt`.
fn writes(file: &str, text: &str) -> String {
    format!("if test -f .git; then printf '%s\\n' '{text}' > {file}; printf '%s' \"$TMPDIR\" > tmpdir.txt; fi")
}

/// A git repository (branch main, one commit) whose council is `agents`
/// (name → agent), with `extra` configuration merged in.
fn repo(agents: Vec<(&str, Value)>, extra: Value) -> Workspace {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[".env"]);
    let names: Vec<&str> = agents.iter().map(|(n, _)| *n).collect();
    let mut config = json!({"council": {"members": names}, "agents": agents.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<serde_json::Map<_, _>>()});
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    ws.write_config(&config);
    ws
}

fn member(backend: &str, name: &str, env: &[(&str, &str)]) -> Value {
    fake(backend, name, env)
}

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// `kd work TASK --json`: the worktrees once every run ended, and what kd said.
async fn work(kdd: &Kdd, ws: &Workspace, task: &str) -> (Vec<Worktree>, String) {
    let out = kd(kdd, ws, &["work", task, "--json"]).await;
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("kd work --json: {e}: {}{}", out.stdout, out.stderr));
    (trees, out.stderr)
}

fn tree_of<'a>(trees: &'a [Worktree], member: &str) -> &'a Worktree {
    trees.iter().find(|w| w.member == member).unwrap_or_else(|| panic!("no worktree of {member}: {trees:?}"))
}

/// The commit and note kd recorded on a member's runs of the thread, newest last.
fn run_work(kdd: &Kdd, thread: &str, member: &str) -> Vec<(Option<String>, Option<String>)> {
    let rows = kdd.db.query(
        "SELECT work_commit, work_note FROM runs WHERE thread_id = $1 AND member = $2 ORDER BY started_at",
        &[thread.into(), member.into()],
    );
    rows.iter().map(|r| (r[0].opt_text(), r[1].opt_text())).collect()
}

fn record_path(name: &str) -> String {
    format!("/tmp/kd-work-run-{name}-{}.jsonl", std::process::id())
}

fn has_pair(argv: &Value, a: &str, b: &str) -> bool {
    let v: Vec<&str> = argv.as_array().unwrap().iter().filter_map(Value::as_str).collect();
    v.windows(2).any(|w| w == [a, b])
}

/// The committed member's work: its file, its author, the commit on the run.
fn assert_committed(kdd: &Kdd, w: &Worktree, file: &str, text: &str) {
    let path = PathBuf::from(&w.path);
    assert_eq!(w.state, WorkState::Done, "{w:?}");
    assert_ne!(w.head, w.base, "kd committed the work: {w:?}");
    assert_eq!(std::fs::read_to_string(path.join(file)).unwrap(), text, "{}", w.member);
    assert_eq!(git(&path, &["log", "-1", "--format=%an <%ae>"]), format!("{} <kd@localhost>", w.member));
    assert_eq!(git(&path, &["status", "--porcelain"]), "", "everything committed");
    let runs = run_work(kdd, &w.thread, &w.member);
    assert_eq!(runs.last().and_then(|r| r.0.clone()).as_deref(), Some(w.head.as_str()), "the commit is on the run");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_backend_works_writable_in_its_worktree_in_its_own_confined_mode() {
    let rec: Vec<(&str, String)> =
        ["claude", "codex", "appserver", "gemini", "acp"].iter().map(|m| (*m, record_path(m))).collect();
    let env = |m: &str| -> Vec<(String, String)> {
        let r = rec.iter().find(|(n, _)| *n == m).unwrap().1.clone();
        vec![("FAKE_RUN".into(), writes(&format!("{m}.txt"), &format!("by {m}"))), ("FAKE_RECORD".into(), r)]
    };
    let with = |backend: &str, m: &str| {
        let e = env(m);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        member(backend, m, &e)
    };
    let mut codex = with("codex", "codex");
    codex["transport"] = json!("exec");
    let acp_rec = rec.iter().find(|(n, _)| *n == "acp").unwrap().1.clone();
    let acp = json!({"backend": "acp", "command": bin("fake-agent"), "args": ["acp"],
                     "env": {"FAKE_NAME": "acp", "FAKE_EDIT": "acp.txt", "FAKE_RECORD": acp_rec}});
    let ws = repo(
        vec![
            ("claude", with("claude", "claude")),
            ("codex", codex),
            ("appserver", with("codex", "appserver")),
            ("gemini", with("gemini", "gemini")),
            ("acp", acp),
        ],
        json!({"work": {"allowed_tools": ["Bash(cargo test:*)"]}}),
    );
    let kdd = Kdd::start();
    let base = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let (trees, said) = work(&kdd, &ws, "Write your file").await;
    assert_eq!(trees.len(), 5, "{trees:?} {said}");
    assert_eq!(git(ws.dir.path(), &["status", "--porcelain"]), "", "the King's tree is untouched");
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base);
    let record = |m: &str| -> Vec<Value> {
        records(&rec.iter().find(|(n, _)| *n == m).unwrap().1).into_iter().filter(|r| r.get("cwd").is_some()).collect()
    };
    for m in ["claude", "codex", "appserver", "gemini"] {
        let w = tree_of(&trees, m);
        assert_committed(&kdd, w, &format!("{m}.txt"), &format!("by {m}\n"));
        let r = record(m);
        assert_eq!(r.len(), 1, "{m}: {r:?}");
        assert_eq!(r[0]["cwd"].as_str(), Some(w.path.as_str()), "{m} runs in its worktree");
    }
    // The TMPDIR of each CLI is the worktree's own, 0700, outside it.
    for m in ["claude", "codex", "gemini"] {
        let w = tree_of(&trees, m);
        let tmp = std::fs::read_to_string(Path::new(&w.path).join("tmpdir.txt")).unwrap();
        assert_eq!(tmp, format!("{}.tmp", w.path), "{m}");
        let mode = std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{m}'s TMPDIR");
    }
    let claude = &record("claude")[0];
    assert!(has_pair(&claude["argv"], "--permission-mode", "acceptEdits"), "{}", claude["argv"]);
    // The work preamble says where it works and that kd commits.
    let prompt = kd_tests::prompt_of(claude);
    let w = tree_of(&trees, "claude");
    assert!(prompt.contains(&format!("worktree at {}, on branch {}", w.path, w.branch)), "{prompt}");
    assert!(
        prompt.contains("do not run git add or git commit") && !prompt.contains("read-only consultation"),
        "{prompt}"
    );
    assert!(has_pair(&claude["argv"], "--allowedTools", "Bash(cargo test:*)"), "{}", claude["argv"]);
    let codex = &record("codex")[0];
    for set in [
        "sandbox_mode=\"workspace-write\"",
        "sandbox_workspace_write.exclude_slash_tmp=true",
        "sandbox_workspace_write.exclude_tmpdir_env_var=true",
    ] {
        assert!(has_pair(&codex["argv"], "-c", set), "{set}: {}", codex["argv"]);
    }
    let app = &record("appserver")[0];
    let app_tree = tree_of(&trees, "appserver");
    assert_eq!((app["sandbox"].as_str(), app["approval"].as_str()), (Some("workspace-write"), Some("never")));
    assert_eq!(
        app["config"]["sandbox_workspace_write"],
        json!({"exclude_slash_tmp": true, "exclude_tmpdir_env_var": true,
               "writable_roots": [format!("{}.tmp", app_tree.path)]})
    );
    assert_eq!(app["config"]["shell_environment_policy"]["set"]["TMPDIR"], json!(format!("{}.tmp", app_tree.path)));
    assert!(has_pair(&record("gemini")[0]["argv"], "--approval-mode", "auto_edit"));
    // The ACP agent asked to write inside its worktree: allowed, whatever its
    // (default, read-only) policy, and committed.
    let acp = tree_of(&trees, "acp");
    assert_committed(&kdd, acp, "acp.txt", "edited by fake\n");
    let asked: Vec<Value> = records(&acp_rec).into_iter().filter(|r| r.get("edit").is_some()).collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0]["permission"].as_str().unwrap().starts_with("allow"), "{asked:?}");
    for (_, r) in &rec {
        let _ = std::fs::remove_file(r);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_advising_run_of_a_member_at_work_stays_read_only() {
    // After the work, the same member asked on another thread (a trunk
    // question) is not given the write mode.
    let rec = record_path("advise");
    let ws = repo(
        vec![("claude", member("claude", "claude", &[("FAKE_RUN", &writes("x.txt", "x")), ("FAKE_RECORD", &rec)]))],
        json!({}),
    );
    let kdd = Kdd::start();
    let (trees, _) = work(&kdd, &ws, "Write x").await;
    assert_eq!(trees[0].state, WorkState::Done);
    let out = kd(&kdd, &ws, &["ask", "--new", "what now?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let r = records(&rec);
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(has_pair(&r[0]["argv"], "--permission-mode", "acceptEdits"));
    assert!(!r[1]["argv"].to_string().contains("acceptEdits"), "{}", r[1]["argv"]);
    assert_eq!(r[1]["cwd"].as_str(), Some(ws.dir.path().to_str().unwrap()));
    let _ = std::fs::remove_file(&rec);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_agent_asking_to_write_outside_its_worktree_is_refused_and_nothing_is_written_there() {
    let rec = record_path("acp-out");
    let acp = json!({"backend": "acp", "command": bin("fake-agent"), "args": ["acp"], "permissions": "allow",
                     "env": {"FAKE_NAME": "acp", "FAKE_EDIT": "../x", "FAKE_RECORD": rec}});
    let ws = repo(vec![("acp", acp)], json!({}));
    let kdd = Kdd::start();
    let (trees, _) = work(&kdd, &ws, "Write ../x").await;
    let w = tree_of(&trees, "acp");
    let outside = Path::new(&w.path).parent().unwrap().join("x");
    assert!(!outside.exists(), "{} was written", outside.display());
    let asked: Vec<Value> = records(&rec).into_iter().filter(|r| r.get("edit").is_some()).collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["permission"], "reject", "refused even with permissions: allow: {asked:?}");
    assert_eq!(w.head, w.base, "nothing to commit");
    assert_eq!(w.state, WorkState::Done);
    let _ = std::fs::remove_file(&rec);
}

#[tokio::test(flavor = "multi_thread")]
async fn claudes_refused_writes_are_reported_on_the_run() {
    let denials = json!([["Write", "/elsewhere/a.rs"], ["Edit", "/elsewhere/b.rs"]]).to_string();
    let ws = repo(
        vec![(
            "claude",
            member("claude", "claude", &[("FAKE_RUN", &writes("c.txt", "c")), ("FAKE_DENIALS", &denials)]),
        )],
        json!({}),
    );
    let kdd = Kdd::start();
    let (trees, _) = work(&kdd, &ws, "Write c").await;
    let w = tree_of(&trees, "claude");
    assert_committed(&kdd, w, "c.txt", "c\n");
    let line = "claude: refused 2 writes outside its worktree: Write /elsewhere/a.rs, Edit /elsewhere/b.rs";
    let note = run_work(&kdd, &w.thread, "claude").pop().and_then(|r| r.1).unwrap_or_default();
    assert!(note.contains(line), "{note}");
    let c = kdd.client().await;
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let answer = messages.iter().rfind(|m| m.from == "claude").expect("claude's answer");
    assert!(answer.body.contains(line), "said in the run's message: {}", answer.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn cursor_cannot_be_confined_and_is_refused_plainly() {
    let ws = repo(vec![("cursor", member("cursor", "cursor", &[("FAKE_RUN", &writes("c.txt", "c"))]))], json!({}));
    let kdd = Kdd::start();
    let (trees, said) = work(&kdd, &ws, "Write c").await;
    assert!(said.contains("cursor-agent cannot work in a worktree"), "{said}");
    let w = tree_of(&trees, "cursor");
    assert!(!Path::new(&w.path).join("c.txt").exists(), "it never ran");
    assert_eq!(w.head, w.base);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_worktree_gets_its_copies_and_setup_and_a_failing_setup_fails_the_member_with_its_tail() {
    let ws = repo(
        vec![
            ("claude", member("claude", "claude", &[("FAKE_RUN", &writes("c.txt", "c"))])),
            ("gemini", member("gemini", "gemini", &[("FAKE_RUN", &writes("g.txt", "g"))])),
        ],
        json!({"work": {"setup": ["sh", "-c", "cat .env > setup.out; echo set up in $(pwd); test ! -e fail"]}}),
    );
    let dir = ws.dir.path();
    std::fs::write(dir.join(".env"), "SECRET=1\n").unwrap();
    std::fs::create_dir_all(dir.join("conf")).unwrap();
    std::fs::write(dir.join("conf/local.toml"), "x = 1\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("conf/passwd")).unwrap();
    std::fs::write(dir.join(".worktreeinclude"), "# local\n.env\nconf\nmissing\n").unwrap();
    let kdd = Kdd::start();
    let (trees, said) = work(&kdd, &ws, "Write it").await;
    assert!(!said.contains("work.setup") && !said.contains("kd: claude:"), "{said}");
    for m in ["claude", "gemini"] {
        let w = tree_of(&trees, m);
        let path = Path::new(&w.path);
        assert_eq!(std::fs::read_to_string(path.join(".env")).unwrap(), "SECRET=1\n");
        assert_eq!(std::fs::read_to_string(path.join("conf/local.toml")).unwrap(), "x = 1\n");
        assert!(std::fs::symlink_metadata(path.join("conf/passwd")).is_err(), "no symlink copied");
        assert_eq!(std::fs::read_to_string(path.join("setup.out")).unwrap(), "SECRET=1\n", "setup ran after the copy");
        let note = run_work(&kdd, &w.thread, m).pop().and_then(|r| r.1).unwrap_or_default();
        assert!(note.contains("copied into the worktree: .env, conf"), "{note}");
        assert!(note.contains(&format!("set up in {}", w.path)), "the setup's output is kept: {note}");
    }

    // A failing setup fails the member, with its output's tail.
    let ws = repo(
        vec![("claude", member("claude", "claude", &[("FAKE_RUN", &writes("c.txt", "c"))]))],
        json!({"work": {"setup": ["sh", "-c", "echo installing; echo npm ERR! no such package >&2; exit 3"]}}),
    );
    let (trees, said) = work(&kdd, &ws, "Write it").await;
    assert!(said.contains("work.setup") && said.contains("npm ERR! no such package"), "{said}");
    assert!(said.contains("exit status 3"), "{said}");
    let w = tree_of(&trees, "claude");
    assert!(!Path::new(&w.path).join("c.txt").exists(), "the agent never ran");
    assert_eq!(w.state, WorkState::Done);
}

#[tokio::test]
async fn kill_9_mid_work_resumes_the_member_in_its_worktree_on_what_it_had_committed() {
    let hold = Hold::new();
    let ws = repo(
        vec![(
            "claude",
            member("claude", "claude", &[("FAKE_RUN", "echo step >> log.txt"), ("FAKE_HOLD", hold.var())]),
        )],
        json!({}),
    );
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Do it all".into(), None, None, None, None).await.expect("work.start");
    let path = PathBuf::from(&started.worktrees[0].path);
    let mut sub = c.thread_subscribe(started.thread.clone(), None, None).await.unwrap();
    collect_until(&mut sub, |events| events.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().expect("kdd starts again");
    // The member is asked again, in its worktree, and finishes the task.
    assert_eq!(kd_tests::settled(&kdd.db, &started.thread).await, vec![("done".to_string(), None)]);
    let c = kdd.client().await;
    let w = tree_of(&c.work_list(None, Some(started.thread.clone())).await.unwrap(), "claude").clone();
    assert_eq!(w.state, WorkState::Done, "{w:?}");
    let log = git(&path, &["log", "--format=%s", &format!("{}..HEAD", w.base)]);
    assert_eq!(log, "Do it all\nDo it all (interrupted)", "what it left was committed, then its finished work");
    let messages = c.thread_messages(started.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    assert_eq!(git(&path, &["show", "HEAD:log.txt"]), "step\nstep", "the second run went on from the first's tree");
    let answers: Vec<_> = messages.iter().filter(|m| m.kind == kd_proto::types::MessageKind::Agent).collect();
    assert_eq!(answers.len(), 1, "{messages:#?}");
    let cut = messages.iter().find(|m| m.kind == kd_proto::types::MessageKind::Interrupted).expect("the cut answer");
    assert_eq!(answers[0].replaces, Some(cut.seq));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_work_then_restart_commits_what_the_member_left_and_keeps_the_worktree() {
    let hold = Hold::new();
    let ws = repo(
        vec![(
            "claude",
            member("claude", "claude", &[("FAKE_RUN", &writes("half.txt", "half done")), ("FAKE_HOLD", hold.var())]),
        )],
        json!({}),
    );
    // What a restart records (resuming is tested in durable.rs).
    ws.without_resume();
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Do it all".into(), None, None, None, None).await.expect("work.start");
    let w = &started.worktrees[0];
    assert_eq!(w.state, WorkState::Working, "a fresh member starts working");
    let mut sub = c.thread_subscribe(started.thread.clone(), None, None).await.unwrap();
    // Its first piece streamed: it wrote its file and now holds.
    collect_until(&mut sub, |events| events.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let path = PathBuf::from(&w.path);
    assert!(path.join("half.txt").exists());
    drop(sub);
    drop(c);
    kdd.kill9();
    kdd.launch().expect("kdd starts again");
    // Committed beside serving, once kdd listens.
    let w =
        &kd_tests::worktree_until(&kdd, &started.thread, "the work recovered", |w| w.state != WorkState::Working).await;
    assert_eq!(w.state, WorkState::Done, "{w:?}");
    assert!(path.is_dir(), "the worktree is kept");
    assert_ne!(w.head, w.base);
    assert_eq!(git(&path, &["log", "-1", "--format=%an <%ae>|%s"]), "claude <kd@localhost>|Do it all (interrupted)");
    assert_eq!(git(&path, &["show", "HEAD:half.txt"]), "half done");
    assert_eq!(git(&path, &["status", "--porcelain"]), "");
    let (commit, note) = run_work(&kdd, &started.thread, "claude").pop().unwrap();
    assert_eq!(commit.as_deref(), Some(w.head.as_str()));
    assert!(note.unwrap_or_default().contains("kdd stopped mid-run"), "noted on the interrupted run");
    hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_sent_back_works_again_in_its_worktree_and_adds_a_commit_without_a_new_setup() {
    let ws = repo(
        vec![("claude", member("claude", "claude", &[("FAKE_RUN", "if test -f .git; then echo more >> log.txt; fi")]))],
        json!({"work": {"setup": ["sh", "-c", "echo once >> setup.count"]}}),
    );
    let kdd = Kdd::start();
    let (trees, _) = work(&kdd, &ws, "Log it").await;
    let first = tree_of(&trees, "claude").clone();
    assert_committed(&kdd, &first, "log.txt", "more\n");
    let out = kd(&kdd, &ws, &["ask", "--thread", &first.thread, "--to", "claude", "once more"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let c = kdd.client().await;
    let trees = c.work_list(None, Some(first.thread.clone())).await.unwrap();
    let again = tree_of(&trees, "claude");
    assert_ne!(again.head, first.head, "a second commit");
    assert_committed(&kdd, again, "log.txt", "more\nmore\n");
    let path = Path::new(&again.path);
    assert_eq!(git(path, &["rev-list", "--count", &format!("{}..HEAD", again.base)]), "2");
    assert_eq!(std::fs::read_to_string(path.join("setup.count")).unwrap(), "once\n", "set up once");
    let runs = run_work(&kdd, &first.thread, "claude");
    assert_eq!(
        runs.iter().filter_map(|r| r.0.as_deref()).collect::<Vec<_>>(),
        [first.head.as_str(), again.head.as_str()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_config_knows_the_work_keys_refuses_a_tool_that_writes_anywhere_and_warns_of_a_program_that_can() {
    let claude = member("claude", "claude", &[]);
    let ws = repo(
        vec![("claude", claude.clone())],
        json!({"council": {"members": ["claude"], "work_preamble": "Work in {dir}."},
               "work": {"allowed_tools": ["Bash(cargo test:*)"], "setup": ["npm", "ci"]}}),
    );
    let kdd = Kdd::start();
    let file = ws.dir.path().join(".kd/config.json").display().to_string();
    let out = kd(&kdd, &ws, &["config", "show", "--json"]).await;
    let view: kd_proto::types::ConfigView = serde_json::from_str(&out.stdout).unwrap();
    let entry = |k: &str| view.entries.iter().find(|e| e.key == k).unwrap_or_else(|| panic!("{k}")).clone();
    assert_eq!(
        (entry("work.allowed_tools").value, entry("work.allowed_tools").source),
        (json!(["Bash(cargo test:*)"]), file.clone())
    );
    assert_eq!(entry("work.setup").value, json!(["npm", "ci"]));
    assert_eq!(entry("work.copy").source, "default (.worktreeinclude's entries)");
    assert_eq!(entry("council.work_preamble").value, json!("Work in {dir}."));
    for (tools, refused) in [(json!(["Read", "Write"]), "\"Write\""), (json!(["--add-dir"]), "\"--add-dir\"")] {
        ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}, "work": {"allowed_tools": tools}}));
        let out = kd(&kdd, &ws, &["config", "check"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
        assert!(out.stderr.contains("work.allowed_tools") && out.stderr.contains(refused), "{}", out.stderr);
    }
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}, "work": {"allowed_tools": ["Bash(python:*)"]}}));
    let out = kd(&kdd, &ws, &["config", "check"]).await;
    assert!(out.status.success(), "a warning, not an error: {}", out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("Bash(python:*)") && all.contains("can write outside"), "{all}");
}

/// An ACP agent working in its worktree is a process of its own started
/// there; kd's tools still act as the member on its thread of the King's
/// workspace.
#[tokio::test(flavor = "multi_thread")]
async fn an_acp_agent_at_work_acts_through_kds_tools_as_its_member() {
    let call = r#"send {"to": ["king"], "body": "done in my worktree"}"#;
    let acp = json!({"backend": "acp", "command": bin("fake-agent"), "args": ["acp"],
                     "env": {"FAKE_NAME": "acp", "FAKE_MCP_CALL": call}});
    let ws = repo(vec![("acp", acp)], json!({}));
    let kdd = Kdd::start_beside(kd_tests::Beside::StandIn, &[]);
    let (trees, said) = work(&kdd, &ws, "Say it").await;
    let w = tree_of(&trees, "acp");
    let c = kdd.client().await;
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let answer = messages.iter().rfind(|m| m.from == "acp").expect("acp's answer");
    let json = answer.body.strip_prefix("Tool said: ").unwrap_or_else(|| panic!("{said}: {}", answer.body));
    let told: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(
        (told["whoami"]["member"].as_str(), told["whoami"]["thread"].as_str()),
        (Some("acp"), Some(w.thread.as_str())),
        "{told}"
    );
}
