//! Kingdom users come along unchanged (F-B5): its `.kd/config.json` as it
//! is, and its thread directories as it writes them (tests/fixtures/kingdom).

use std::path::{Path, PathBuf};

use kd_client::prelude::*;
use kd_proto::types::{MessageKind, ThreadStatus};
use kd_tests::{Kdd, Output, run};

/// A copy of the Kingdom fixture project in a temporary directory.
fn kingdom_project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("kd-kingdom-").tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kingdom");
    copy_tree(&src, dir.path());
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

async fn kd(kdd: &Kdd, cwd: &Path, args: &[&str]) -> Output {
    let mut k = kdd.kd();
    k.current_dir(cwd).args(args);
    run(k).await
}

fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().into(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kingdom_tree_is_imported_once_with_everything_kingdom_wrote() {
    let project = kingdom_project();
    let kdd = Kdd::start();
    let out = kd(&kdd, project.path(), &["import", "--kingdom"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.starts_with("imported 3 threads (8 messages)"), "{}", out.stdout);
    assert!(out.stdout.trim_end().ends_with("0 already imported"), "{}", out.stdout);
    let again = kd(&kdd, project.path(), &["import", "--kingdom", ".kd"]).await;
    assert!(again.stdout.starts_with("imported 0 threads (0 messages)"), "{}", again.stdout);
    assert!(again.stdout.trim_end().ends_with("3 already imported"), "{}", again.stdout);

    let c = kdd.client().await;
    let threads = c.thread_list(None, None, None).await.unwrap();
    assert_eq!(threads.len(), 3);
    let root = project.path().canonicalize().unwrap().display().to_string();
    let get = |id: &str| threads.iter().find(|t| t.id == id).unwrap().clone();
    let main = get("council-a8b3");
    assert_eq!((main.workspace.as_str(), main.branch.as_deref()), (root.as_str(), Some("main")));
    assert_eq!(main.members, ["claude", "codex"], "no thread.json: the senders");
    assert!(main.origin.as_deref().is_some_and(|o| o.starts_with("kingdom:") && o.ends_with("council-a8b3")));
    let review = get("council-f00d");
    assert_eq!(
        (review.members.clone(), review.branch.as_deref()),
        (vec!["claude".to_string(), "cursor".to_string()], Some("feature-oauth-refresh"))
    );
    assert_eq!(get("council-0ld1").status, ThreadStatus::Archived, "from Kingdom's archive");
    // Titled as a native thread is: by the first line of the King's first message.
    assert_eq!(main.title.as_deref(), Some("Should threads be keyed by branch or by id?"));
    assert_eq!(review.title.as_deref(), Some("Review the refresh flow."));
    assert_eq!(get("council-0ld1").title.as_deref(), Some("Is this spike worth keeping?"));

    let m = c.thread_messages(main.id.clone(), None, None, None, None).await.unwrap();
    assert_eq!(m[0].refs, ["src/kingdom/thread.py", "docs/design.md"], "a multi-line list");
    assert_eq!(m[3].refs, ["src/kingdom/thread.py"], "an inline list");
    assert_eq!(
        m[1].body,
        "By id. A branch can hold several conversations.\n\n---\n\nThe rule above is part of the answer."
    );
    let run = m[1].run.as_ref().unwrap();
    assert_eq!((run.backend.as_deref(), run.model.as_deref()), (Some("claude"), Some("opus")));
    assert_eq!((m[2].kind, m[3].to.clone()), (MessageKind::Error, vec!["codex".to_string()]), "status: timeout");
    let f = c.thread_messages(review.id.clone(), None, None, None, None).await.unwrap();
    assert_eq!((f[0].to.clone(), f[1].kind), (vec!["all".to_string()], MessageKind::Interrupted), "to: council");

    // Exported back with its refs, and stable from there on.
    let first = project.path().join("out-1");
    let out = kd(&kdd, project.path(), &["export", &main.id, first.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let king = String::from_utf8(std::fs::read(first.join("0001-king.md")).unwrap()).unwrap();
    assert!(king.contains("\nrefs:\n  - src/kingdom/thread.py\n  - docs/design.md\n---\n"), "{king}");
    let out = kd(&kdd, project.path(), &["import", first.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let copy = out.stdout.trim().rsplit(' ').next().unwrap().to_string();
    let second = project.path().join("out-2");
    let out = kd(&kdd, project.path(), &["export", &copy, second.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let strip_json =
        |t: Vec<(PathBuf, Vec<u8>)>| t.into_iter().filter(|(n, _)| n != Path::new("thread.json")).collect::<Vec<_>>();
    assert_eq!(strip_json(tree(&first)), strip_json(tree(&second)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_title_kd_would_refuse_is_not_imported_and_the_first_line_titles_the_thread() {
    let project = kingdom_project();
    let kdd = Kdd::start();
    let dir = project.path().join(".kd/branches/feature-oauth-refresh/threads/council-f00d");
    let meta = r#"{"id": "council-f00d", "members": ["claude"], "created_at": "2026-02-10T09:00:00Z",
                   "title": "bad\u001b]0;pwned\u0007title"}"#;
    std::fs::write(dir.join("thread.json"), meta).unwrap();
    let out = kd(&kdd, project.path(), &["import", dir.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stderr.contains("title contains control characters"), "{}", out.stderr);
    assert!(!out.stderr.contains('\u{1b}'), "{}", out.stderr);
    let c = kdd.client().await;
    let t = c.thread_get("council-f00d".into()).await.unwrap();
    assert_eq!(t.title.as_deref(), Some("Review the refresh flow."));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_kingdom_thread_directory_without_thread_json_imports() {
    let project = kingdom_project();
    let kdd = Kdd::start();
    let dir = project.path().join(".kd/branches/main/threads/council-a8b3");
    let out = kd(&kdd, project.path(), &["import", dir.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "imported 5 messages as thread council-a8b3");
}

#[tokio::test(flavor = "multi_thread")]
async fn kingdoms_config_is_accepted_with_one_notice_per_ignored_key() {
    let project = kingdom_project();
    let kdd = Kdd::start();
    let out = kd(&kdd, project.path(), &["config", "check"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.lines().next().unwrap_or_default().ends_with("ok; members: claude, codex, cursor"),
        "{}",
        out.stdout
    );
    let notes: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("note: ")).collect();
    // Its ignored keys, and codex exec's flag the app-server is not given.
    assert_eq!(notes.len(), 9, "{}", out.stdout);
    assert!(notes.iter().any(|n| n.starts_with("note: peasant: ")), "{notes:?}");
    assert!(notes.iter().any(|n| n.starts_with("note: agents.codex.extra_flags: --skip-git-repo-check")), "{notes:?}");
    assert!(!out.stdout.contains("warning:"), "{}", out.stdout);
    let show = kd(&kdd, project.path(), &["config", "show"]).await;
    assert!(show.stdout.contains("council.mode") && show.stdout.contains("(council.ask.mode)"), "{}", show.stdout);
    assert_eq!(show.stdout.matches("note ").count() + show.stdout.matches("note: ").count(), 9, "{}", show.stdout);
}

/// What `kd init` of Kingdom 0.1 and 0.2 wrote (later releases refuse its
/// `peasant.timeout`), with the codex flag Kingdom's users add for `codex
/// exec` outside a git repository.
const KINGDOM_0_2_CONFIG: &str = r#"{
  "agents": {
    "claude": {"backend": "claude_code"},
    "codex": {"backend": "codex", "extra_flags": ["--skip-git-repo-check"]},
    "cursor": {"backend": "cursor"}
  },
  "council": {"members": ["claude", "codex", "cursor"], "timeout": 600},
  "peasant": {"agent": "claude", "timeout": 900, "max_iterations": 50}
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_config_an_earlier_kingdom_wrote_is_checked_and_answered_unchanged() {
    // The three CLIs are fakes on PATH, under their own names.
    let bin_dir = tempfile::tempdir().unwrap();
    for name in ["claude", "codex", "agent"] {
        std::os::unix::fs::symlink(kd_tests::bin("fake-agent"), bin_dir.path().join(name)).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", bin_dir.path().display());
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".kd")).unwrap();
    std::fs::write(project.path().join(".kd/config.json"), KINGDOM_0_2_CONFIG).unwrap();
    let kdd = Kdd::start_env(&[], &[("PATH", &path)]);
    let kd = |args: &'static [&'static str]| {
        let mut k = kdd.kd();
        k.current_dir(project.path()).env("PATH", &path).args(args);
        run(k)
    };
    let out = kd(&["config", "check"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let notes: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(
        notes,
        [
            "note: peasant: Kingdom's worker settings; kd runs no workers (ignored)",
            "note: agents.codex.extra_flags: --skip-git-repo-check is a flag of codex exec, which kd's codex \
             app-server has no use for and refuses (ignored)"
        ],
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("warning"), "{}", out.stdout);
    let out = kd(&["ask", "--rounds", "0", "Hello?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    for member in ["claude", "codex", "cursor"] {
        assert!(out.stdout.contains(&format!("── {member}")), "{member}: {}", out.stdout);
    }
    assert!(
        !out.stdout.contains("unexpected argument") && !out.stderr.contains("error"),
        "{}{}",
        out.stdout,
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn import_reads_only_regular_files_of_bounded_size() {
    let project = kingdom_project();
    let kdd = Kdd::start();
    let dir = project.path().join(".kd/archive/old-spike/threads/council-0ld1");
    let fifo = dir.join("0002-fifo.md");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::os::unix::fs::symlink("/dev/zero", dir.join("0003-zero.md")).unwrap();
    std::fs::write(dir.join("0004-huge.md"), vec![b'x'; 9 * 1024 * 1024]).unwrap();
    let out = kd(&kdd, project.path(), &["import", dir.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "imported 1 message as thread council-0ld1");
    let skipped: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("kd: skipped ")).collect();
    assert_eq!(skipped.len(), 3, "{}", out.stderr);
    assert!(skipped.iter().any(|l| l.contains("0002-fifo.md: not a regular file")), "{}", out.stderr);
    assert!(skipped.iter().any(|l| l.contains("0004-huge.md") && l.contains("limit")), "{}", out.stderr);
}

/// A Kingdom user's `kd council …` verbs run kd's own commands, each with
/// one line on stderr naming the kd command (issue 21 item 13).
#[tokio::test(flavor = "multi_thread")]
async fn kingdoms_council_verbs_run_kds_commands_with_a_notice() {
    let ws = kd_tests::Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let ask = kd(&kdd, ws.dir.path(), &["council", "ask", "--new-thread", "--rounds", "0", "How do we shard?"]).await;
    assert!(ask.status.success(), "{}", ask.stderr);
    assert_eq!(
        ask.stderr.lines().next(),
        Some("kd: `kd council ask` is Kingdom's; running `kd ask` (use that from now on)")
    );
    assert_eq!(ask.stderr.lines().count(), 1, "{}", ask.stderr);
    assert!(ask.stdout.contains("Answer from claude."), "{}", ask.stdout);
    let c = kdd.client().await;
    let t = c.thread_current(ws.path(), None).await.unwrap().expect("the asked thread");

    let show = kd(&kdd, ws.dir.path(), &["council", "show", &t.id, "--all"]).await;
    let native = kd(&kdd, ws.dir.path(), &["show", &t.id]).await;
    assert!(show.status.success(), "{}", show.stderr);
    assert_eq!(show.stdout, native.stdout);
    assert!(show.stderr.contains("running `kd show`"), "{}", show.stderr);

    let list = kd(&kdd, ws.dir.path(), &["council", "list"]).await;
    assert!(list.status.success() && list.stdout.contains(&t.id), "{} {}", list.stdout, list.stderr);
    assert!(list.stderr.contains("running `kd threads --here`"), "{}", list.stderr);
    let retry = kd(&kdd, ws.dir.path(), &["council", "retry"]).await;
    assert!(retry.status.success() && retry.stdout.contains("no failed members"), "{} {}", retry.stdout, retry.stderr);
    let watch = kd(&kdd, ws.dir.path(), &["council", "watch", "--help"]).await;
    assert!(watch.status.success() && watch.stdout.contains("Usage: kd watch"), "{} {}", watch.stdout, watch.stderr);

    // A verb kd has nothing for says so, and what to use.
    let status = kd(&kdd, ws.dir.path(), &["council", "status"]).await;
    assert_eq!(status.status.code(), Some(2), "{}", status.stderr);
    assert!(status.stderr.contains("`kd council status`") && status.stderr.contains("kd runs"), "{}", status.stderr);
    // Not listed among kd's own commands.
    let help = kd(&kdd, ws.dir.path(), &["--help"]).await;
    assert!(!help.stdout.lines().any(|l| l.trim_start().starts_with("council ")), "{}", help.stdout);
}

/// A thread directory of `files` messages, each `size` bytes of body.
fn thread_dir(parent: &Path, name: &str, files: usize, size: usize) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 1..=files {
        let head = format!("---\nfrom: king\nto: all\ntimestamp: 2026-01-02T10:00:0{i}Z\n---\n\n");
        let body = "x".repeat(size - head.len());
        std::fs::write(dir.join(format!("{i:04}-king.md")), format!("{head}{body}")).unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_over_15_mib_is_refused_whole_and_one_under_it_comes_in() {
    const MIB: usize = 1024 * 1024;
    let tmp = tempfile::tempdir().unwrap();
    let kdd = Kdd::start();
    // Two files of 7.75 MiB: each under the 8 MiB a file may hold, 15.5 MiB together.
    let over = thread_dir(tmp.path(), "over", 2, 7 * MIB + 3 * MIB / 4);
    let out = kd(&kdd, tmp.path(), &["import", over.to_str().unwrap()]).await;
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains(&format!("holds more than {} bytes", 15 * MIB)), "{}", out.stderr);
    let c = kdd.client().await;
    assert!(c.thread_list(None, None, None).await.unwrap().is_empty(), "nothing of it was imported");
    // 14.5 MiB in two files is a thread like any other.
    let under = thread_dir(tmp.path(), "under", 2, 7 * MIB + MIB / 4);
    let out = kd(&kdd, tmp.path(), &["import", under.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "imported 2 messages as thread under");
}
