//! The council from the `kd` command line: rounds in `kd ask`, Markdown in
//! `kd show`, export/import, configuration, retry, completions.

use std::collections::BTreeMap;
use std::path::Path;

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use kd_tests::{Kdd, Output, Workspace, bin, read_until, run, within};

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> Output {
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(args);
    run(k).await
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_shows_every_round_in_order_with_round_labels() {
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--rounds", "1", "Discuss."]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let headers: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("── ")).collect();
    assert_eq!(headers.len(), 4, "{}", out.stdout);
    assert!(headers[0].contains("· round 1") && headers[1].contains("· round 1"));
    assert!(
        headers[2].starts_with("── claude · round 2") && headers[3].starts_with("── codex · round 2"),
        "{headers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn show_renders_markdown_on_a_terminal_and_verbatim_when_piped() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "# Plan\n\n- **one**\n- two\n\n```\ncode\n```")])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--rounds", "0", "Plan?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let piped = kd(&kdd, &ws, &["show"]).await;
    assert!(piped.stdout.contains("# Plan\n\n- **one**\n- two\n\n```\ncode\n```"), "{}", piped.stdout);
    assert!(!piped.stdout.contains('\x1b'));
    let styled = kd(&kdd, &ws, &["--color", "always", "show"]).await;
    assert!(styled.stdout.contains("\x1b[1;4;35mPlan\x1b[0m"), "heading: {:?}", styled.stdout);
    assert!(
        styled.stdout.contains("• \x1b[0m\x1b[1mone\x1b[0m") || styled.stdout.contains("\x1b[1mone\x1b[0m"),
        "{:?}",
        styled.stdout
    );
    assert!(styled.stdout.contains("\x1b[36mcode\x1b[0m"), "code block: {:?}", styled.stdout);
    assert!(!styled.stdout.contains("**one**"));
}

fn read_tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn export_import_export_is_byte_identical() {
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Yes.\n---\nA rule above.")]),
        ("codex", "codex", &[("FAKE_ERROR", "boom")]),
    ]);
    let a = Kdd::start();
    let out = kd(&a, &ws, &["ask", "--rounds", "0", "Q with\n---\ndashes?"]).await;
    assert_eq!(out.status.code(), Some(4), "codex fails: {}", out.stderr);
    let c = a.client().await;
    let t = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    kd_tests::append(&c, &t.id, "king", "@codex only", &["codex"]).await;
    let first = ws.dir.path().join("export-1");
    let out = kd(&a, &ws, &["export", &t.id, first.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let files = read_tree(&first);
    assert_eq!(files.len(), 5, "thread.json and four messages: {:?}", files.keys());
    let king = String::from_utf8(files["0001-king.md"].clone()).unwrap();
    assert!(king.starts_with("---\nfrom: king\nto: all\ntimestamp: "), "{king}");
    assert!(king.ends_with("Z\n---\n\nQ with\n---\ndashes?\n"), "{king}");
    let error = files
        .iter()
        .find(|(n, _)| n.ends_with("-codex.md") && String::from_utf8_lossy(n.as_bytes()).starts_with("000"))
        .unwrap();
    assert!(String::from_utf8_lossy(error.1).contains("kind: error\n"));

    // Into another daemon, then out again.
    let b = Kdd::start();
    let out = kd(&b, &ws, &["import", first.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("imported 4 messages as thread {}", t.id));
    let second = ws.dir.path().join("export-2");
    let out = kd(&b, &ws, &["export", &t.id, second.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(read_tree(&second), files, "export → import → export changed bytes");

    // Into the same daemon: the id is taken, so a new one is given.
    let out = kd(&a, &ws, &["import", first.to_str().unwrap()]).await;
    assert!(out.status.success());
    assert!(out.stderr.contains(&format!("thread id {} is taken", t.id)), "{}", out.stderr);
    let bad = ws.dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("thread.json"), &files["thread.json"]).unwrap();
    std::fs::write(bad.join("0001-king.md"), "no front matter").unwrap();
    let out = kd(&a, &ws, &["import", bad.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("0001-king.md") && out.stderr.contains("front matter"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn config_show_and_check_name_sources_files_keys_and_values() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    config["council"]["auto_rounds"] = 2.into();
    ws.write_config(&config);
    let kdd = Kdd::start();
    let file = ws.dir.path().join(".kd/config.json").display().to_string();
    let out = kd(&kdd, &ws, &["config", "check"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, format!("{file}: ok; members: claude\n"));
    let out = kd(&kdd, &ws, &["config", "show", "--json"]).await;
    let view: kd_proto::types::ConfigView = serde_json::from_str(&out.stdout).unwrap();
    let entry = |k: &str| view.entries.iter().find(|e| e.key == k).unwrap().clone();
    assert_eq!(
        (entry("council.auto_rounds").value, entry("council.auto_rounds").source),
        (serde_json::json!(2), file.clone())
    );
    assert_eq!(
        (entry("council.timeout").value, entry("council.timeout").source.as_str()),
        (serde_json::json!(600), "default")
    );
    let out = kd(&kdd, &ws, &["config", "show"]).await;
    assert!(out.stdout.lines().any(|l| l.starts_with("council.auto_rounds") && l.ends_with(&file)), "{}", out.stdout);

    config["council"]["mode"] = "parallel".into();
    ws.write_config(&config);
    for args in [&["config", "check"][..], &["ask", "Q?"][..]] {
        let out = kd(&kdd, &ws, args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains(&file) && out.stderr.contains("council.mode") && out.stderr.contains("\"parallel\""),
            "{}",
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_name_git_cannot_take_in_a_branch_is_refused_with_the_config() {
    let kdd = Kdd::start();
    for name in ["a..b", "x.lock"] {
        let ws = Workspace::new(&[(name, "claude", &[])]);
        ws.git_init(&[("a.txt", "a\n")], &[]);
        let file = ws.dir.path().join(".kd/config.json").display().to_string();
        for args in [&["config", "check"][..], &["work", "Do it."][..]] {
            let out = kd(&kdd, &ws, args).await;
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {}", out.stdout);
            let key = format!("agents.{name}: ");
            assert!(
                out.stderr.contains(&file) && out.stderr.contains(&key) && out.stderr.contains("git branch"),
                "{name} {args:?}: {}",
                out.stderr
            );
            assert!(!out.stderr.contains("fatal:"), "no raw git error: {}", out.stderr);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_configuration_the_clis_on_path_answer_and_kd_says_so() {
    let bin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(bin("fake-agent"), bin_dir.path().join("codex")).unwrap();
    // The PATH of the shell kd runs in (kd sends it): the daemon's is not
    // the one the agents are found on.
    let path = format!("{}:/usr/bin:/bin", bin_dir.path().display());
    let kdd = Kdd::start_env(&[], &[("PATH", "/usr/bin:/bin")]);
    let ws = Workspace::new(&[]);
    std::fs::remove_file(ws.dir.path().join(".kd/config.json")).unwrap();
    let ask = |path: &str, args: &'static [&'static str]| {
        let mut k = kdd.kd();
        k.current_dir(ws.dir.path()).env("PATH", path).args(args);
        run(k)
    };
    let out = ask(&path, &["ask", "--rounds", "0", "Hello?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stderr.contains("found on PATH answer: codex"), "{}", out.stderr);
    assert!(out.stdout.contains("── codex"), "{}", out.stdout);

    let out = ask("/nonexistent", &["ask", "Hello?"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("no council members") && out.stderr.contains(".kd/config.json"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_from_the_command_line_and_completions() {
    let ws = Workspace::new(&[("codex", "codex", &[("FAKE_ERROR", "boom")])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--rounds", "0", "Q?"]).await;
    assert_eq!(out.status.code(), Some(4));
    let fixed = Workspace::new(&[("codex", "codex", &[])]);
    std::fs::copy(fixed.dir.path().join(".kd/config.json"), ws.dir.path().join(".kd/config.json")).unwrap();
    let out = kd(&kdd, &ws, &["retry"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.starts_with("retrying codex (r-"), "{}", out.stdout);
    assert!(out.stdout.contains("replacing #2"), "{}", out.stdout);

    let out = run({
        let mut k = tokio::process::Command::new(bin("kd"));
        k.args(["completions", "bash"]);
        k
    })
    .await;
    assert!(out.status.success());
    assert!(out.stdout.contains("_kd()") && out.stdout.contains("ask"), "{}", &out.stdout[..200.min(out.stdout.len())]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_context_mode_is_chosen_with_new_and_shown_by_threads_and_show() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--new", "--context", "resume", "--rounds", "0", "Q?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let c = kdd.client().await;
    let t = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    assert_eq!(t.context, kd_proto::types::ContextMode::Resume);
    let threads = kd(&kdd, &ws, &["threads"]).await;
    let header = threads.stdout.lines().next().unwrap_or_default().to_string();
    assert!(header.contains("CONTEXT"), "{}", threads.stdout);
    let row = threads.stdout.lines().find(|l| l.starts_with(&t.id)).unwrap_or_default();
    assert!(row.contains("resume"), "{}", threads.stdout);
    let show = kd(&kdd, &ws, &["show"]).await;
    assert!(show.stdout.lines().next().unwrap_or_default().contains("context: resume"), "{}", show.stdout);
    // The default is history; a mode for an existing thread is refused by clap.
    let out = kd(&kdd, &ws, &["ask", "--new", "--rounds", "0", "Again?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let t2 = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    assert_eq!(t2.context, kd_proto::types::ContextMode::History);
    let refused = kd(&kdd, &ws, &["ask", "--context", "resume", "Q"]).await;
    assert_eq!(refused.status.code(), Some(2), "--context needs --new: {}", refused.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_names_each_failing_member_once_with_its_reason() {
    let ws = Workspace::new(&[
        ("claude", "claude", &[]),
        ("codex", "codex", &[("FAKE_ERROR", "quota exceeded")]),
        ("gemini", "gemini", &[]),
    ]);
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    cfg["council"]["auto_rounds"] = 2.into();
    ws.write_config(&cfg);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "Go."]).await;
    assert_eq!(out.status.code(), Some(4), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines, ["kd: codex: quota exceeded"], "{}", out.stderr);
    assert_eq!(out.stdout.matches("── claude").count(), 3, "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_question_leaves_no_thread_behind() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start_env(&[], &[("PATH", "/nonexistent")]);
    let c = kdd.client().await;
    // Unknown @name, in a new thread and in the workspace's first thread.
    for args in [&["ask", "--new", "@nobody hi"][..], &["ask", "@nobody hi"]] {
        let out = kd(&kdd, &ws, args).await;
        assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
        assert!(out.stderr.contains("unknown member @nobody"), "{}", out.stderr);
    }
    // A bad configuration.
    let bad = Workspace::new(&[]);
    bad.write_config(&serde_json::json!({"council": {"auto_rounds": 0}}));
    let out = kd(&kdd, &bad, &["ask", "--new", "hi"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("council.auto_rounds"), "{}", out.stderr);
    // No members at all (no configuration, no agent CLI on the daemon's PATH).
    let empty = Workspace::new(&[]);
    std::fs::remove_file(empty.dir.path().join(".kd/config.json")).unwrap();
    let out = kd(&kdd, &empty, &["ask", "hi"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("no council members"), "{}", out.stderr);
    let threads = c.thread_list(None, None, None).await.unwrap();
    assert!(threads.is_empty(), "{threads:#?}");
    for w in [&ws, &bad, &empty] {
        assert_eq!(c.thread_current(w.path(), None).await.unwrap(), None);
    }
    // An accepted question makes its new thread current.
    let out = kd(&kdd, &ws, &["ask", "--rounds", "0", "hi"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(c.thread_list(None, None, None).await.unwrap().len(), 1);
    assert!(c.thread_current(ws.path(), None).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_round_keeps_the_order_its_members_were_asked_in_everywhere() {
    // claude is asked first but finishes last: held until codex's answer is in.
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_HOLD", &hold.env()), ("FAKE_TEXT", "Claude first-round answer.")]),
        ("codex", "codex", &[("FAKE_TEXT", "Codex first-round answer.")]),
    ]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--async", "--rounds", "0", "Order?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let c = kdd.client().await;
    let t = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    // From the first message: codex may have answered before this
    // subscription (its answer then comes from the registry, not live).
    let mut sub = c.thread_subscribe(t.id.clone(), Some(0), None).await.unwrap();
    kd_tests::collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.from == "codex"))
    })
    .await;
    hold.release();
    kd_tests::collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "claude"))
    })
    .await;
    let messages = c.thread_messages(t.id.clone(), None, None, None, None).await.unwrap();
    let by_seq: Vec<&str> = messages.iter().map(|m| m.from.as_str()).collect();
    assert_eq!(by_seq, ["king", "codex", "claude"], "codex finished first");
    let shown: Vec<&str> = kd_proto::types::display_order(&messages).iter().map(|m| m.from.as_str()).collect();
    assert_eq!(shown, ["king", "claude", "codex"]);
    // kd show
    let show = kd(&kdd, &ws, &["show"]).await;
    let claude_at = show.stdout.find("Claude first-round").unwrap();
    let codex_at = show.stdout.find("Codex first-round").unwrap();
    assert!(claude_at < codex_at, "{}", show.stdout);
    // kd export
    let dir = ws.dir.path().join("export");
    let out = kd(&kdd, &ws, &["export", &t.id, dir.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        dir.join("0002-claude.md").is_file() && dir.join("0003-codex.md").is_file(),
        "{:?}",
        read_tree(&dir).keys()
    );
    // The history agents are given.
    let record = ws.file("record.jsonl");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    cfg["agents"]["claude"]["env"]["FAKE_RECORD"] = record.clone().into();
    ws.write_config(&cfg);
    let out = kd(&kdd, &ws, &["ask", "--to", "claude", "Again?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let prompt = kd_tests::prompt_of(&kd_tests::records(&record)[0]);
    assert!(prompt.find("Claude first-round").unwrap() < prompt.find("Codex first-round").unwrap(), "{prompt}");
}

/// The 256-colour or 24-bit foreground escapes in `text`, in order.
fn foregrounds(text: &str) -> Vec<String> {
    text.match_indices("\x1b[38;").map(|(i, _)| text[i..].split('m').next().unwrap_or_default().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn members_have_distinct_colours_that_can_be_overridden_and_none_without_colour() {
    let members = ["claude", "codex", "cursor", "gemini", "a", "b", "c", "d"];
    let spec: Vec<kd_tests::Member<'_>> =
        members.iter().map(|m| (*m, if m.len() == 1 { "claude" } else { *m }, &[][..])).collect();
    let ws = Workspace::new(&spec);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["--color", "always", "ask", "--rounds", "0", "Colours?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let headers: Vec<&str> = out.stdout.lines().filter(|l| l.contains("── ")).collect();
    assert_eq!(headers.len(), 8, "{}", out.stdout);
    let mut colours: Vec<String> = headers.iter().flat_map(|h| foregrounds(h)).collect();
    assert_eq!(colours.len(), 8, "{headers:?}");
    colours.sort();
    colours.dedup();
    assert_eq!(colours.len(), 8, "eight members, eight colours: {colours:?}");
    // kd show paints the same member the same way.
    let show = kd(&kdd, &ws, &["--color", "always", "show"]).await;
    let claude_head = show.stdout.lines().find(|l| l.contains(" claude\x1b")).unwrap_or_default();
    let ask_claude = headers.iter().find(|h| h.contains("claude")).unwrap();
    assert_eq!(foregrounds(claude_head), foregrounds(ask_claude));
    // agents.NAME.color overrides.
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    cfg["agents"]["codex"]["color"] = "#ff8000".into();
    ws.write_config(&cfg);
    let out = kd(&kdd, &ws, &["--color", "always", "ask", "--to", "codex", "Again?"]).await;
    assert!(out.stdout.contains("\x1b[38;2;255;128;0m"), "{:?}", out.stdout);
    // Not on a terminal, or NO_COLOR: no escapes at all.
    let plain = kd(&kdd, &ws, &["ask", "--to", "claude", "Plain?"]).await;
    assert!(!plain.stdout.contains('\x1b'), "{:?}", plain.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_mute_leaves_a_member_out() {
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--mute", "codex", "--rounds", "1", "Q?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    // claude alone: one answer, no discussion round with itself.
    assert_eq!(out.stdout.matches("── claude").count(), 1, "{}", out.stdout);
    assert!(!out.stdout.contains("── codex"), "{}", out.stdout);
    let refused = kd(&kdd, &ws, &["ask", "--mute", "nobody", "Q?"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(refused.stderr.contains("unknown member nobody"), "{}", refused.stderr);
}

/// `kd watch` in the workspace, its output piped.
fn watch(kdd: &Kdd, ws: &Workspace) -> tokio::process::Child {
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path())
        .args(["watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    k.spawn().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_follows_exchanges_started_by_other_clients_until_ctrl_c() {
    use tokio::io::AsyncBufReadExt;
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Watched answer.")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = c.thread_create(ws.path(), None, None, None, None, None, None, Some(true), None).await.unwrap();
    let mut watch = watch(&kdd, &ws);
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    // The first line says what is watched: the subscription is open.
    let first = within("kd watch to start", lines.next_line()).await.unwrap().unwrap_or_default();
    assert!(first.contains(&t.id), "{first}");
    for question in ["First?", "Second?"] {
        c.council_send(t.id.clone(), question.into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
        let mut seen = Vec::new();
        while !seen.iter().any(|l: &String| l.contains("Watched answer.")) {
            let line = within("the answer in kd watch", lines.next_line()).await.unwrap();
            seen.push(line.unwrap_or_default());
        }
        assert!(seen.iter().any(|l| l.contains(question)), "the King's question too: {seen:?}");
        assert!(seen.iter().any(|l| l.starts_with("── claude")), "{seen:?}");
    }
    let pid = rustix::process::Pid::from_raw(watch.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = within("kd watch to stop", watch.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}

/// kd watch writes what streams in before it waits for more: a member's
/// first piece shows while its run goes on.
#[tokio::test(flavor = "multi_thread")]
async fn watch_shows_a_members_first_piece_while_the_member_works() {
    let hold = kd_tests::Hold::new();
    let env = [("FAKE_DELTAS", "2"), ("FAKE_TEXT", "Early words. Later words."), ("FAKE_HOLD", hold.var())];
    let ws = Workspace::new(&[("claude", "claude", &env)]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = c.thread_create(ws.path(), None, None, None, None, None, None, Some(true), None).await.unwrap();
    let mut watch = watch(&kdd, &ws);
    let (mut out, mut seen) = (watch.stdout.take().unwrap(), Vec::new());
    // The first line says what is watched: the subscription is open.
    read_until(&mut out, &mut seen, &t.id).await;
    c.council_send(t.id.clone(), "Words?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let early = read_until(&mut out, &mut seen, "Early words.").await;
    assert!(!early.contains("Later words."), "the member is held mid-answer: {early}");
    hold.release();
    read_until(&mut out, &mut seen, "Later words.").await;
    let pid = rustix::process::Pid::from_raw(watch.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = within("kd watch to stop", watch.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_checks_daemon_database_config_and_each_member() {
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["doctor"]).await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    for subject in ["kd", "daemon", "database", "config", "claude", "codex"] {
        let found = lines.iter().any(|l| l.starts_with("ok ") && l.contains(&format!(" {subject}: ")));
        assert!(found, "{subject}: {}", out.stdout);
    }
    assert!(out.stdout.contains("integrity ok"), "{}", out.stdout);
    assert!(out.stdout.contains("fake-agent"), "the binary found: {}", out.stdout);
    // A member whose binary is missing is broken.
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    cfg["agents"]["codex"]["command"] = "/nonexistent/codex".into();
    ws.write_config(&cfg);
    let out = kd(&kdd, &ws, &["doctor"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
    let codex = out.stdout.lines().find(|l| l.contains(" codex: ")).unwrap_or_default();
    assert!(codex.starts_with("FAIL") && codex.contains("not found"), "{}", out.stdout);
    // A bad configuration is broken too, and said in one line.
    ws.write_config(&serde_json::json!({"council": {"mode": "chaos"}}));
    let out = kd(&kdd, &ws, &["doctor"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.lines().any(|l| l.starts_with("FAIL") && l.contains("council.mode")), "{}", out.stdout);
}
