//! Members do the work (issue 23, F-W1..W6), end to end: a real kdd, the
//! real `kd`, real git, fake agents that write files in their working
//! directory as an agent's tools would (`FAKE_RUN`).

use std::path::{Path, PathBuf};

use kd_client::prelude::*;
use kd_proto::types::Purpose;
use kd_proto::work::{WorkState, Worktree};
use kd_tests::{Kdd, Workspace, fake, git};
use serde_json::json;

/// A shell command writing `text` to `file` in a member's worktree only
/// (where `.git` is a file): ballots and reviews run in the King's tree
/// and must write nothing.
fn writes(file: &str, text: &str) -> String {
    format!("if test -f .git; then printf '%s\\n' '{text}' > {file}; fi")
}

/// A fake member: its name, backend and `FAKE_*` environment.
pub(crate) type Member<'a> = (&'a str, &'a str, Vec<(&'a str, String)>);

/// A git repository (branch main, one commit of `a.txt`, the King's own
/// identity) whose council is `members`: (name, backend, FAKE_* env).
fn repo(members: &[Member<'_>]) -> Workspace {
    repo_of("one\ntwo\n", members)
}

/// The same, `a.txt` holding `a`.
pub(crate) fn repo_of(a: &str, members: &[Member<'_>]) -> Workspace {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", a)], &[]);
    let mut agents = serde_json::Map::new();
    for (name, backend, env) in members {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        agents.insert(name.to_string(), fake(backend, name, &env));
    }
    let names: Vec<&str> = members.iter().map(|m| m.0).collect();
    ws.write_config(&json!({"council": {"members": names}, "agents": agents}));
    ws
}

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// Until a run of the daemon has streamed something (it is held there).
async fn until_a_run_streams(c: &kd_client::Client) {
    kd_tests::within("a member at work", async {
        while !c.run_list(None).await.unwrap().iter().any(|r| r.chars > 0) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// This process's umask (which kdd, started by it, inherits).
fn own_umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).expect("Umask in /proc/self/status");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

fn tree_of<'a>(trees: &'a [Worktree], member: &str) -> &'a Worktree {
    trees.iter().find(|w| w.member == member).unwrap_or_else(|| panic!("no worktree of {member}: {trees:?}"))
}

/// Two members given one task by `kd work`: each works in its own
/// worktree, on its own branch, and kd commits what it wrote.
async fn two_at_work(kdd: &Kdd, ws: &Workspace, extra: &[&str]) -> (String, Vec<Worktree>) {
    let mut args = vec!["work", "Write impl.txt", "--json"];
    args.extend_from_slice(extra);
    let out = kd(kdd, ws, &args).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json: the worktrees");
    let thread = trees[0].thread.clone();
    (thread, trees)
}

fn two_members() -> Vec<Member<'static>> {
    vec![
        ("claude", "claude", vec![("FAKE_RUN", writes("impl.txt", "by claude"))]),
        ("codex", "codex", vec![("FAKE_RUN", writes("impl.txt", "by codex"))]),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn two_members_implement_in_parallel_each_in_its_worktree_and_the_kings_tree_is_untouched() {
    let ws = repo(&two_members());
    let kdd = Kdd::start();
    let base = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let (thread, trees) = two_at_work(&kdd, &ws, &[]).await;
    assert!(!ws.dir.path().join("impl.txt").exists(), "the King's tree is untouched");
    assert_eq!(git(ws.dir.path(), &["status", "--porcelain"]), "");
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base);
    for member in ["claude", "codex"] {
        let w = tree_of(&trees, member);
        assert_eq!(w.state, WorkState::Done, "{w:?}");
        assert_eq!(w.branch, format!("kd/{thread}/{member}"));
        assert_eq!(w.base, base);
        assert_ne!(w.head, base, "kd committed its work: {w:?}");
        assert_eq!((w.files, w.added, w.removed), (1, 1, 0));
        let path = PathBuf::from(&w.path);
        assert!(!path.starts_with(ws.dir.path()), "worktrees live under the data directory: {}", w.path);
        assert_eq!(std::fs::read_to_string(path.join("impl.txt")).unwrap(), format!("by {member}\n"));
        let log = git(&path, &["log", "-1", "--format=%an <%ae>|%s"]);
        assert_eq!(log, format!("{member} <kd@localhost>|Write impl.txt"));
        assert_eq!(git(&path, &["status", "--porcelain"]), "", "everything committed");
    }
    // The work thread is a branch of the trunk, titled with the task.
    let c = kdd.client().await;
    let t = c.thread_get(thread.clone()).await.unwrap();
    assert_eq!(t.title.as_deref(), Some("Write impl.txt"));
    assert_eq!(t.lineage, kd_proto::types::Lineage::Branch);

    // kd diff: each member's diff; one member's; the stat.
    let out = kd(&kdd, &ws, &["diff", &thread]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("+by claude") && out.stdout.contains("+by codex"), "{}", out.stdout);
    let out = kd(&kdd, &ws, &["diff", "codex"]).await;
    assert!(out.stdout.contains("+by codex") && !out.stdout.contains("by claude"), "{}", out.stdout);
    let out = kd(&kdd, &ws, &["diff", &thread, "claude", "--stat"]).await;
    assert!(out.stdout.contains("impl.txt  +1 −0") && !out.stdout.contains("+by claude"), "{}", out.stdout);
    // kd work --list.
    let out = kd(&kdd, &ws, &["work", "--list"]).await;
    assert!(out.stdout.contains("STATE") && out.stdout.matches("done").count() == 2, "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_merges_into_the_kings_branch_and_supersedes_the_rest() {
    let ws = repo(&two_members());
    let kdd = Kdd::start();
    let (thread, _) = two_at_work(&kdd, &ws, &[]).await;
    let check = kd(&kdd, &ws, &["accept", "claude", "--check"]).await;
    assert!(check.status.success() && check.stdout.contains("merges cleanly into main"), "{}", check.stdout);
    assert!(!ws.dir.path().join("impl.txt").exists(), "a check changes nothing");
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("claude's work merged into main"), "{}", out.stdout);
    assert!(out.stdout.contains("the work of codex is superseded"), "{}", out.stdout);
    assert_eq!(std::fs::read_to_string(ws.dir.path().join("impl.txt")).unwrap(), "by claude\n");
    // What the merge wrote is the King's as their own git would write it:
    // with the umask kdd was started with, not kdd's own 077.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.dir.path().join("impl.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !own_umask(), "impl.txt's mode {mode:o}");
    assert_eq!(git(ws.dir.path(), &["log", "-1", "--format=%an|%s"]), "King|Accept claude's work: Write impl.txt");
    let c = kdd.client().await;
    let trees = c.work_list(None, Some(thread.clone())).await.unwrap();
    assert_eq!(tree_of(&trees, "claude").state, WorkState::Accepted);
    assert_eq!(tree_of(&trees, "codex").state, WorkState::Superseded);
    // Once accepted, it cannot be again; superseded work is not merged too.
    let again = kd(&kdd, &ws, &["accept", "claude", "--thread", &thread]).await;
    assert!(!again.status.success() && again.stderr.contains("already accepted"), "{}", again.stderr);
    let head = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let other = kd(&kdd, &ws, &["accept", "codex", "--thread", &thread]).await;
    assert!(!other.status.success(), "{}", other.stdout);
    assert!(other.stderr.contains("was superseded when another member's was accepted"), "{}", other.stderr);
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), head, "nothing changed");
    // The git command it names takes codex's branch, even where a member
    // made a tag of the branch's name (a tag wins over a branch by name).
    let codex = tree_of(&trees, "codex");
    git(Path::new(&codex.path), &["tag", &codex.branch, &head]);
    let advised = other.stderr.split("git merge ").nth(1).and_then(|s| s.split(' ').next()).expect("a git merge");
    assert_eq!(git(ws.dir.path(), &["rev-parse", advised]), codex.head, "{}", other.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_with_a_dirty_tree_or_a_conflict_changes_nothing_and_says_why() {
    let ws = repo(&[("claude", "claude", vec![("FAKE_RUN", writes("a.txt", "claude a"))])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Rewrite a.txt", "--json"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let dir = ws.dir.path();
    // A dirty tree.
    std::fs::write(dir.join("a.txt"), "uncommitted\n").unwrap();
    let head = git(dir, &["rev-parse", "HEAD"]);
    let refused = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(!refused.status.success(), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("your tree ") && refused.stderr.contains("uncommitted changes (a.txt)"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "uncommitted\n");
    assert_eq!(git(dir, &["rev-parse", "HEAD"]), head);
    // A conflict: the King changed a.txt too.
    git(dir, &["commit", "--quiet", "-am", "King's a"]);
    let head = git(dir, &["rev-parse", "HEAD"]);
    for args in [&["accept", "claude", "--check"][..], &["accept", "claude"][..]] {
        let refused = kd(&kdd, &ws, args).await;
        assert!(!refused.status.success(), "{}", refused.stdout);
        assert!(refused.stderr.contains("conflicts with main in a.txt"), "{}", refused.stderr);
    }
    assert_eq!(git(dir, &["rev-parse", "HEAD"]), head, "nothing changed");
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "uncommitted\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn reject_then_archive_removes_settled_worktrees_and_keeps_unaccepted_work() {
    let ws = repo(&two_members());
    let kdd = Kdd::start();
    let (thread, trees) = two_at_work(&kdd, &ws, &[]).await;
    let out = kd(&kdd, &ws, &["reject", "codex"]).await;
    assert!(out.status.success() && out.stdout.contains("codex's work on thread"), "{}{}", out.stdout, out.stderr);
    // Delete is refused while claude's work is neither accepted nor rejected
    // (said before it asks for --yes); and by the daemon itself.
    for args in [&["delete", &thread][..], &["delete", &thread, "--yes"][..]] {
        let refused = kd(&kdd, &ws, args).await;
        assert!(!refused.status.success(), "{}", refused.stdout);
        assert!(refused.stderr.contains("work not accepted or rejected, of claude"), "{}", refused.stderr);
        assert!(refused.stderr.contains("--yes --force"), "{}", refused.stderr);
    }
    let c = kdd.client().await;
    let e = c.thread_delete(thread.clone(), None).await.unwrap_err();
    assert!(e.to_string().contains("work not accepted or rejected, of claude"), "{e}");
    // Archive: codex's rejected worktree and branch go; claude's stay.
    let out = kd(&kdd, &ws, &["archive", &thread]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("kept the work of claude"), "{}", out.stdout);
    let (claude, codex) = (tree_of(&trees, "claude"), tree_of(&trees, "codex"));
    assert!(!Path::new(&codex.path).exists(), "the rejected worktree is removed");
    assert!(!Path::new(&format!("{}.tmp", codex.path)).exists(), "and its runs' temporary directory");
    assert_eq!(git(ws.dir.path(), &["branch", "--list", &codex.branch]), "");
    assert!(Path::new(&claude.path).join("impl.txt").exists(), "unaccepted work is kept");
    assert_ne!(git(ws.dir.path(), &["branch", "--list", &claude.branch]), "");
    // --force discards it.
    let out = kd(&kdd, &ws, &["delete", &thread, "--yes", "--force"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!Path::new(&claude.path).exists());
    assert!(!Path::new(&claude.path).parent().unwrap().exists(), "the thread's directory of worktrees goes too");
    assert_eq!(git(ws.dir.path(), &["branch", "--list", "kd/*"]), "");
}

/// Work rejected on a thread archived already goes at once, as archiving
/// took the settled work (kd said its branch "goes when the thread is
/// archived", and it stayed until a second archive).
#[tokio::test(flavor = "multi_thread")]
async fn work_rejected_on_an_archived_thread_goes_at_once() {
    let ws = repo(&two_members());
    let kdd = Kdd::start();
    let (thread, trees) = two_at_work(&kdd, &ws, &[]).await;
    let out = kd(&kdd, &ws, &["archive", &thread]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let codex = tree_of(&trees, "codex");
    assert!(Path::new(&codex.path).exists(), "unsettled work is kept at archive");
    let out = kd(&kdd, &ws, &["reject", "codex", "--thread", &thread]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!("its branch {} is removed (the thread is archived)", codex.branch)),
        "{}",
        out.stdout
    );
    assert!(!Path::new(&codex.path).exists(), "the rejected worktree is removed");
    assert_eq!(git(ws.dir.path(), &["branch", "--list", &codex.branch]), "");
    let claude = tree_of(&trees, "claude");
    assert!(Path::new(&claude.path).join("impl.txt").exists(), "the other's work is kept");
}

/// A commit on a member's branch the registry does not know (kd committed
/// the work and could not record its head) keeps the worktree and branch
/// when the thread is archived: whether work may go is asked of git, not
/// only of what was recorded. Before, a clean worktree recorded as
/// unchanged went, its branch and commit with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_the_registry_does_not_know_keeps_its_branch_when_the_thread_is_archived() {
    let ws = repo(&[("claude", "claude", vec![("FAKE_RUN", "true".to_string())])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Change nothing", "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json: the worktrees");
    let w = tree_of(&trees, "claude");
    assert_eq!(w.head, w.base, "nothing recorded: {w:?}");
    let dir = Path::new(&w.path);
    std::fs::write(dir.join("b.txt"), "made\n").unwrap();
    git(dir, &["add", "b.txt"]);
    git(dir, &["-c", "user.name=kd", "-c", "user.email=kd@localhost", "commit", "-q", "-m", "b"]);
    let out = kd(&kdd, &ws, &["archive", &w.thread]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("kept the work of claude"), "{}", out.stdout);
    assert!(dir.join("b.txt").exists(), "the worktree is kept");
    assert_ne!(git(ws.dir.path(), &["branch", "--list", &w.branch]), "", "and its branch");
}

#[tokio::test(flavor = "multi_thread")]
async fn best_of_n_ranks_the_diffs_anonymised_and_names_the_winner() {
    // Each member's work says nothing of who wrote it: a ballot must not either.
    let work_of = |m: &str| match m {
        "claude" => "alpha work",
        "codex" => "beta work",
        _ => "gamma work",
    };
    let ranking = "FINAL RANKING:\n1. {label:+alpha work}\n2. {label:+beta work}\n3. {label:+gamma work}";
    let rules = serde_json::json!([["[Evaluation]", ranking]]).to_string();
    let record = |m: &str| format!("/tmp/kd-work-vote-{m}-{}.jsonl", std::process::id());
    let members: Vec<_> = ["claude", "codex", "cursor"]
        .iter()
        .map(|m| {
            let env = vec![
                ("FAKE_RUN", writes("impl.txt", work_of(m))),
                ("FAKE_RULES", rules.clone()),
                ("FAKE_RECORD", record(m)),
            ];
            (*m, "claude", env)
        })
        .collect();
    let ws = repo(&members);
    let kdd = Kdd::start();
    let (thread, _) = two_at_work(&kdd, &ws, &["--vote"]).await;
    let c = kdd.client().await;
    let messages = c.thread_messages(thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let tally = messages.iter().find(|m| m.purpose == Some(Purpose::Tally)).expect("a tally");
    assert!(tally.body.starts_with("Vote: claude wins."), "{}", tally.body);
    assert!(tally.body.contains("kd accept claude"), "{}", tally.body);
    let ballots: Vec<_> = messages.iter().filter(|m| m.purpose == Some(Purpose::Ballot)).collect();
    assert_eq!(ballots.len(), 3, "{messages:?}");
    for m in ["claude", "codex", "cursor"] {
        let prompts: Vec<String> = kd_tests::records(&record(m)).iter().map(kd_tests::prompt_of).collect();
        let ballot = prompts.iter().find(|p| p.contains("[Evaluation]")).expect("a ballot prompt");
        let shown = &ballot[ballot.find("[Evaluation]").unwrap()..];
        assert!(shown.contains("diff --git"), "the diffs are ranked: {shown}");
        for name in ["claude", "codex", "cursor"] {
            assert!(!shown.contains(name), "{m}'s ballot names {name}: {shown}");
        }
        let _ = std::fs::remove_file(record(m));
    }
}

/// Work whose last run kd could not commit is left out of the vote, and
/// the tally says so: its branch is not what the member left. Before, it
/// went unsaid (nothing committed: "changed nothing"), and work committed
/// before a fix kd could not commit was ranked as its stale branch.
#[tokio::test(flavor = "multi_thread")]
async fn work_whose_last_run_is_not_committed_is_not_put_to_the_vote() {
    let ranking = "FINAL RANKING:\n1. {label:+alpha work}\n2. {label:+beta work}";
    let rules = serde_json::json!([["[Evaluation]", ranking]]).to_string();
    let record = format!("/tmp/kd-work-vote-uncommitted-{}.jsonl", std::process::id());
    // cursor's change is held by a FIFO where `git add` reads ignore rules.
    let fifo = "if test -f .git; then echo gamma > impl.txt; mkdir new; mkfifo new/.gitignore; fi".to_string();
    let ws = repo(&[
        (
            "claude",
            "claude",
            vec![
                ("FAKE_RUN", writes("impl.txt", "alpha work")),
                ("FAKE_RULES", rules.clone()),
                ("FAKE_RECORD", record.clone()),
            ],
        ),
        ("codex", "claude", vec![("FAKE_RUN", writes("impl.txt", "beta work")), ("FAKE_RULES", rules.clone())]),
        ("cursor", "claude", vec![("FAKE_RUN", fifo), ("FAKE_RULES", rules)]),
    ]);
    let kdd = Kdd::start_with(&["--git-timeout-ms", "1500"]);
    let (thread, _) = two_at_work(&kdd, &ws, &["--vote"]).await;
    let c = kdd.client().await;
    let messages = c.thread_messages(thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let tally = messages.iter().find(|m| m.purpose == Some(Purpose::Tally)).expect("a tally");
    // The two others each rank the other first: a tie, put to the vote.
    assert!(tally.body.starts_with("Vote: tie between "), "{}", tally.body);
    assert!(tally.body.contains("cursor's work is not put to the vote"), "{}", tally.body);
    assert!(tally.body.contains("not committed") && tally.body.contains("timed out"), "{}", tally.body);
    let prompts: Vec<String> = kd_tests::records(&record).iter().map(kd_tests::prompt_of).collect();
    let ballot = prompts.iter().find(|p| p.contains("[Evaluation]")).expect("a ballot prompt");
    assert!(!ballot.contains("gamma"), "cursor's work is not ranked: {ballot}");
    let _ = std::fs::remove_file(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn best_of_two_each_ranking_the_other_first_is_a_tie_left_to_the_king() {
    let rank = |other: &str| {
        let ranking = format!("FINAL RANKING:\n1. {{label:+{other} work}}");
        serde_json::json!([["[Evaluation]", ranking]]).to_string()
    };
    let ws = repo(&[
        ("claude", "claude", vec![("FAKE_RUN", writes("impl.txt", "alpha work")), ("FAKE_RULES", rank("beta"))]),
        ("codex", "codex", vec![("FAKE_RUN", writes("impl.txt", "beta work")), ("FAKE_RULES", rank("alpha"))]),
    ]);
    let kdd = Kdd::start();
    let (thread, _) = two_at_work(&kdd, &ws, &["--vote"]).await;
    let c = kdd.client().await;
    let messages = c.thread_messages(thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let tally = messages.iter().find(|m| m.purpose == Some(Purpose::Tally)).expect("a tally");
    let tie = "on 0 points and 1 first place each: left to the King.";
    assert!(tally.body.starts_with("Vote: tie between ") && tally.body.contains(tie), "{}", tally.body);
    assert!(!tally.body.contains(" wins."), "{}", tally.body);
    for m in ["claude", "codex"] {
        assert!(tally.body.contains(&format!("`kd diff {m}`")), "{}", tally.body);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn review_gives_the_reviewers_the_diff_and_counts_their_verdicts() {
    let record = format!("/tmp/kd-work-review-{}.jsonl", std::process::id());
    let ws = repo(&[
        ("claude", "claude", vec![("FAKE_RUN", writes("impl.txt", "by claude"))]),
        (
            "codex",
            "codex",
            vec![
                ("FAKE_RULES", serde_json::json!([["[Review]", "Fine.\n\n**VERDICT: APPROVE**"]]).to_string()),
                ("FAKE_RECORD", record.clone()),
            ],
        ),
        (
            "cursor",
            "cursor",
            vec![(
                "FAKE_RULES",
                serde_json::json!([["[Review]", "Needs a test.\nVERDICT: REQUEST CHANGES"]]).to_string(),
            )],
        ),
    ]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Write impl.txt", "--to", "claude"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let out = kd(&kdd, &ws, &["review", "claude"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("Review of claude's work: 1 approve (codex), 1 request changes (cursor)."),
        "{}",
        out.stdout
    );
    let prompts: Vec<String> = kd_tests::records(&record).iter().map(kd_tests::prompt_of).collect();
    let review = prompts.iter().find(|p| p.contains("[Review]")).expect("codex reviewed");
    assert!(review.contains("+by claude") && review.contains("Write impl.txt"), "{review}");
    let _ = std::fs::remove_file(&record);
}

/// `kd work`'s lines line up, one a member, its name padded to the
/// longest of the task's members (as docs/work.md shows them).
#[tokio::test(flavor = "multi_thread")]
async fn kd_works_lines_line_up_whatever_the_members_names() {
    let ws = repo(&[
        ("claude", "claude", vec![("FAKE_RUN", writes("c.txt", "c"))]),
        ("codex", "codex", vec![("FAKE_RUN", writes("x.txt", "x"))]),
    ]);
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    cfg["agents"]["codex"]["transport"] = "exec".into();
    ws.write_config(&cfg);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Write a file"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let mut lines: Vec<&str> = out.stdout.lines().filter(|l| l.contains(" done ")).collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines[0].starts_with("claude  done  1 file, +1 −0  kd/"), "{}", out.stdout);
    assert!(lines[1].starts_with("codex   done  1 file, +1 −0  kd/"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_that_is_not_a_git_repository_is_refused_plainly() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Do it"]).await;
    assert!(!out.status.success());
    assert!(out.stderr.contains("is not in a git repository; kd work needs one"), "{}", out.stderr);
    let c = kdd.client().await;
    assert!(c.thread_list(Some(ws.path()), None, None).await.unwrap().is_empty(), "no thread was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_git_revision_is_reviewed_by_its_diff_a_branch_from_where_it_left_head() {
    let record = format!("/tmp/kd-work-review-rev-{}.jsonl", std::process::id());
    let ws = repo(&[(
        "claude",
        "claude",
        vec![
            ("FAKE_RULES", serde_json::json!([["[Review]", "VERDICT: APPROVE"]]).to_string()),
            ("FAKE_RECORD", record.clone()),
        ],
    )]);
    let dir = ws.dir.path();
    git(dir, &["checkout", "--quiet", "-b", "feature"]);
    std::fs::write(dir.join("b.txt"), "feature line\n").unwrap();
    git(dir, &["add", "b.txt"]);
    git(dir, &["commit", "--quiet", "-m", "feature"]);
    git(dir, &["checkout", "--quiet", "main"]);
    std::fs::write(dir.join("a.txt"), "main moved on\n").unwrap();
    git(dir, &["commit", "--quiet", "-am", "main"]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["review", "feature"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Review of feature: 1 approve (claude), 0 request changes."), "{}", out.stdout);
    let prompts: Vec<String> = kd_tests::records(&record).iter().map(kd_tests::prompt_of).collect();
    let review = prompts.iter().find(|p| p.contains("[Review]")).expect("claude reviewed");
    assert!(review.contains("+feature line"), "the branch's own change: {review}");
    assert!(!review.contains("main moved on"), "not what main did since: {review}");
    // A commit in HEAD's history: that commit alone.
    let out = kd(&kdd, &ws, &["review", "HEAD"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let prompts: Vec<String> = kd_tests::records(&record).iter().map(kd_tests::prompt_of).collect();
    let review = prompts.iter().rev().find(|p| p.contains("[Review]")).unwrap();
    assert!(review.contains("+main moved on") && !review.contains("feature line"), "{review}");
    let bad = kd(&kdd, &ws, &["review", "no-such-thing"]).await;
    assert!(!bad.status.success() && bad.stderr.contains("names no commit"), "{}", bad.stderr);
    let _ = std::fs::remove_file(&record);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_sent_back_works_in_its_worktree_again_and_adds_a_commit() {
    let appends = "if test -f .git; then echo step >> log.txt; fi".to_string();
    let ws = repo(&[("claude", "claude", vec![("FAKE_RUN", appends)]), ("codex", "codex", vec![])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Keep a log", "--to", "claude", "--json"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).unwrap();
    let (thread, first) = (trees[0].thread.clone(), trees[0].head.clone());
    let out = kd(&kdd, &ws, &["ask", "--thread", &thread, "--to", "claude", "Log one more step"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let c = kdd.client().await;
    let w = c.work_list(None, Some(thread.clone())).await.unwrap().remove(0);
    assert_ne!(w.head, first, "a second commit: {w:?}");
    assert_eq!((w.state, w.files, w.added), (WorkState::Done, 1, 2), "{w:?}");
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["rev-list", "--count", &format!("{}..HEAD", w.base)]), "2");
    assert_eq!(std::fs::read_to_string(path.join("log.txt")).unwrap(), "step\nstep\n");
    assert!(!ws.dir.path().join("log.txt").exists(), "never in the King's tree");
    // Once its work is settled, the member advises again, in the King's tree, read-only.
    let out = kd(&kdd, &ws, &["accept", "claude", "--thread", &thread]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let before = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let out = kd(&kdd, &ws, &["ask", "--thread", &thread, "--to", "claude", "Anything else?"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), before);
    assert_eq!(c.work_list(None, Some(thread)).await.unwrap()[0].state, WorkState::Accepted);
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_refuses_work_that_would_overwrite_an_untracked_file_naming_it() {
    let ws = repo(&[("claude", "claude", vec![("FAKE_RUN", writes("notes.md", "from claude"))])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Write notes", "--json"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    std::fs::write(ws.dir.path().join("notes.md"), "the King's own notes\n").unwrap();
    let head = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    for args in [&["accept", "claude", "--check"][..], &["accept", "claude"][..]] {
        let refused = kd(&kdd, &ws, args).await;
        assert!(!refused.status.success(), "{args:?}: {}", refused.stdout);
        assert!(refused.stderr.contains("untracked in your tree (notes.md)"), "{}", refused.stderr);
    }
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(std::fs::read_to_string(ws.dir.path().join("notes.md")).unwrap(), "the King's own notes\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_in_kd_work_cancels_the_runs_and_their_work_is_committed() {
    let hold = kd_tests::Hold::new();
    let ws =
        repo(&[("claude", "claude", vec![("FAKE_RUN", writes("wip.txt", "half done")), ("FAKE_HOLD", hold.env())])]);
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path())
        .args(["work", "Long task"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let c = kdd.client().await;
    until_a_run_streams(&c).await;
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = kd_tests::within("kd work to end", child.wait_with_output()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("kd: cancelling the runs"), "{stderr}");
    // Cancelled is not done: kd work says so by its status (as kd ask does),
    // and says the member's work once, as the cancel left it.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said: Vec<&str> = stdout.lines().filter(|l| l.starts_with("claude")).collect();
    assert_eq!(said.len(), 1, "{stdout}");
    assert!(said[0].contains("done (last run: cancelled)"), "{stdout}");
    assert!(c.run_list(None).await.unwrap().is_empty(), "the run was cancelled");
    let w = c.work_list(Some(ws.path()), None).await.unwrap().remove(0);
    assert_eq!(w.state, WorkState::Done, "{w:?}");
    assert_eq!(git(Path::new(&w.path), &["log", "-1", "--format=%s"]), "Long task (cancelled)");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_review_outside_git_refuses_and_makes_no_thread() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["review", "HEAD"]).await;
    assert!(!out.status.success());
    assert!(out.stderr.contains("is not in a git repository"), "{}", out.stderr);
    let c = kdd.client().await;
    assert!(c.thread_list(Some(ws.path()), None, None).await.unwrap().is_empty(), "no thread was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn archiving_a_thread_while_a_member_works_says_so_and_keeps_its_work() {
    let hold = kd_tests::Hold::new();
    let ws =
        repo(&[("claude", "claude", vec![("FAKE_RUN", writes("wip.txt", "half done")), ("FAKE_HOLD", hold.env())])]);
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let out = kd(&kdd, &ws, &["work", "Long task", "--async"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let thread = out.stdout.trim().to_string();
    let c = kdd.client().await;
    until_a_run_streams(&c).await;
    let out = kd(&kdd, &ws, &["archive", &thread]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("cancelled the runs in flight of claude"), "{}", out.stdout);
    assert!(out.stdout.contains("kept the work of claude"), "{}", out.stdout);
    let w = c.work_list(None, Some(thread)).await.unwrap().remove(0);
    assert_eq!(git(Path::new(&w.path), &["log", "-1", "--format=%s"]), "Long task (cancelled)");
    assert_eq!(std::fs::read_to_string(Path::new(&w.path).join("wip.txt")).unwrap(), "half done\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_list_says_when_a_members_last_run_did_not_answer() {
    let members: Vec<Member> = vec![
        ("claude", "claude", vec![("FAKE_RUN", writes("impl.txt", "by claude"))]),
        ("codex", "codex", vec![("FAKE_ERROR", "overloaded".to_string())]),
    ];
    let ws = repo(&members);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Write impl.txt"]).await;
    assert!(!out.status.success() && out.stderr.contains("codex"), "a member failed: {}{}", out.stdout, out.stderr);
    let out = kd(&kdd, &ws, &["work", "--list"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let row = |m: &str| out.stdout.lines().find(|l| l.contains(m)).unwrap_or_default().to_string();
    assert!(row("codex").contains("done (last run: error)"), "{}", out.stdout);
    assert!(row("claude").contains("done") && !row("claude").contains("last run"), "{}", out.stdout);
    let json = kd(&kdd, &ws, &["work", "--list", "--json"]).await;
    let trees: Vec<Worktree> = serde_json::from_str(&json.stdout).unwrap();
    let last = |m: &str| trees.iter().find(|w| w.member == m).and_then(|w| w.last_run);
    assert_eq!(
        (last("claude"), last("codex")),
        (Some(kd_proto::types::RunStatus::Done), Some(kd_proto::types::RunStatus::Error))
    );
}
