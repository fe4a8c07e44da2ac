//! Line comments on a member's work, sent back as one review (issue 34
//! item 3), end to end: a real kdd, the real `kd`, real git, fake agents
//! that edit files in their worktree (`FAKE_RUN`) and record their prompt
//! (`FAKE_RECORD`).

use kd_proto::comment::{Comment, CommentState};
use kd_proto::work::Worktree;
use kd_tests::{Kdd, Workspace, records};

/// `a.txt` of 20 lines, `line 1` to `line 20`.
fn twenty() -> String {
    (1..=20).map(|i| format!("line {i}\n")).collect()
}

/// In a worktree only: the first run shouts lines 3 and 15; a later run
/// (the review) changes line 3 again and nothing else.
const SHOUT_THEN_FIX: &str = "if test -f .git; then \
     if grep -q '^line 3$' a.txt; then sed -i 's/^line 3$/LINE 3/; s/^line 15$/LINE 15/' a.txt; \
     else sed -i 's/^LINE 3$/Line 3/' a.txt; fi; fi";

/// A fake member: its name, backend and `FAKE_*` environment.
use super::work::Member;

/// A repository of `a.txt` whose council is `members`.
fn repo(members: &[Member<'_>]) -> Workspace {
    super::work::repo_of(&twenty(), members)
}

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// `kd work --to claude TASK --json`: claude's worktree once its run ended.
async fn claude_works(kdd: &Kdd, ws: &Workspace) -> Worktree {
    let out = kd(kdd, ws, &["work", "--to", "claude", "Shout lines 3 and 15", "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json");
    let w = trees.into_iter().find(|w| w.member == "claude").expect("claude's work");
    assert_ne!(w.head, w.base, "claude's work is committed: {w:?}");
    w
}

async fn comments(kdd: &Kdd, ws: &Workspace) -> Vec<Comment> {
    let out = kd(kdd, ws, &["comments", "claude", "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).expect("kd comments --json")
}

#[tokio::test(flavor = "multi_thread")]
async fn comments_off_the_diff_are_refused_and_the_rest_go_back_as_one_review_its_commit_resolves() {
    let rec = tempfile::tempdir().unwrap();
    let record = rec.path().join("claude.jsonl").display().to_string();
    let ws = repo(&[("claude", "claude", vec![("FAKE_RUN", SHOUT_THEN_FIX.into()), ("FAKE_RECORD", record.clone())])]);
    let kdd = Kdd::start();
    let w = claude_works(&kdd, &ws).await;

    // Off the diff: a line between the hunks, a file not in it.
    let off = kd(&kdd, &ws, &["comment", "claude", "a.txt:10", "why?"]).await;
    assert!(!off.status.success(), "{}", off.stdout);
    assert!(
        off.stderr.contains("line 10 of a.txt is not in the diff: claude's diff of a.txt shows lines 1-6, 12-18"),
        "{}",
        off.stderr
    );
    let across = kd(&kdd, &ws, &["comment", "claude", "a.txt:5-13", "why?"]).await;
    assert!(across.stderr.contains("lines 5-13 of a.txt is not in the diff"), "{}", across.stderr);
    let other = kd(&kdd, &ws, &["comment", "claude", "b.txt:1", "why?"]).await;
    assert!(!other.status.success());
    assert!(other.stderr.contains("b.txt is not in claude's diff; its files: a.txt"), "{}", other.stderr);
    let bad = kd(&kdd, &ws, &["comment", "claude", "a.txt", "why?"]).await;
    assert!(bad.stderr.contains("is not PATH:LINE"), "{}", bad.stderr);
    assert!(comments(&kdd, &ws).await.is_empty(), "nothing refused was recorded");

    // On the diff: an added line, and a context line with it.
    let one = kd(&kdd, &ws, &["comment", "claude", "a.txt:3", "lower case, please"]).await;
    assert!(one.status.success(), "{}{}", one.stdout, one.stderr);
    assert!(one.stdout.contains("on claude's a.txt:3 (pending"), "{}", one.stdout);
    let two = kd(&kdd, &ws, &["comment", "claude", "a.txt:14-15", "and keep this one"]).await;
    assert!(two.status.success(), "{}{}", two.stdout, two.stderr);
    let listed = comments(&kdd, &ws).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|c| c.state == CommentState::Pending && c.commit == w.head && c.author == "king"));
    assert_eq!((listed[1].line, listed[1].end_line), (14, 15));
    assert!(listed[0].hunk.contains("-line 3\n+LINE 3\n"), "{}", listed[0].hunk);

    // Sent as one King's message; claude revises in its worktree.
    let sent = kd(&kdd, &ws, &["review", "--send", "claude", "--message", "Two things."]).await;
    assert!(sent.status.success(), "{}{}", sent.stdout, sent.stderr);
    assert!(sent.stderr.contains("sent 2 comments to claude"), "{}", sent.stderr);
    assert!(sent.stdout.contains("1 of the 2 comments resolved by its commit"), "{}", sent.stdout);
    let prompts: Vec<String> = records(&record).iter().filter_map(|r| r["stdin"].as_str().map(String::from)).collect();
    assert_eq!(prompts.len(), 2, "the task, then the review: {prompts:?}");
    let review = &prompts[1];
    for needed in [
        "Two things.",
        "1. a.txt:3 (line 3",
        "lower case, please",
        "-line 3\n+LINE 3",
        "2. a.txt:14-15 (lines 14-15",
        "and keep this one",
        "-line 15\n+LINE 15",
    ] {
        assert!(review.contains(needed), "{needed:?} missing from the review's prompt:\n{review}");
    }
    let kings = kdd.db.query(
        "SELECT count(*) FROM messages WHERE thread_id = $1 AND kind = 'king' AND body LIKE '%lower case, please%'",
        &[w.thread.clone().into()],
    );
    assert_eq!(kings[0][0].int(), 1, "one King's message");
    let wt = std::path::Path::new(&w.path);
    assert!(std::fs::read_to_string(wt.join("a.txt")).unwrap().contains("Line 3\n"), "claude revised");

    // Its commit changed line 3, not 14-15.
    let now = comments(&kdd, &ws).await;
    let head = kd_tests::git(wt, &["rev-parse", "HEAD"]);
    assert_ne!(head, w.head);
    assert_eq!(now[0].state, CommentState::Resolved, "{:?}", now[0]);
    assert_eq!(now[0].resolved_by.as_deref(), Some(head.as_str()));
    assert_eq!(now[1].state, CommentState::Sent, "{:?}", now[1]);
    assert!(now.iter().all(|c| c.sent_seq.is_some()));

    // The King resolves the other; nothing is left to send.
    let resolved = kd(&kdd, &ws, &["comment", "--resolve", &now[1].id]).await;
    assert!(resolved.status.success(), "{}{}", resolved.stdout, resolved.stderr);
    let last = comments(&kdd, &ws).await;
    assert_eq!((last[1].state, last[1].resolved_by.clone()), (CommentState::Resolved, None));
    let again = kd(&kdd, &ws, &["review", "--send", "claude"]).await;
    assert!(!again.status.success());
    assert!(again.stderr.contains("no pending comments on claude's work"), "{}", again.stderr);
    let table = kd(&kdd, &ws, &["comments"]).await;
    assert!(table.stdout.contains("resolved (by the King)"), "{}", table.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reviewers_path_line_remarks_become_its_comments_and_an_agent_cannot_comment() {
    // codex reviews; from its shell it tries the King's comment commands.
    let bin = kd_tests::bin("kd").display().to_string();
    let shell = format!(
        "{bin} comment --resolve cx1; echo resolve=$?; {bin} comment claude a.txt:3 hi; echo comment=$?; \
         {bin} comments; echo list=$?; {bin} review --send claude; echo send=$?"
    );
    let answer = "Mostly fine.\na.txt:3: keep it lower case\n- `a.txt:15`: and this\nb.txt:1: not in the diff\n\
                  Ran: {run}\nVERDICT: REQUEST CHANGES";
    let ws = repo(&[
        ("claude", "claude", vec![("FAKE_RUN", SHOUT_THEN_FIX.into())]),
        ("codex", "codex", vec![("FAKE_RUN", shell), ("FAKE_TEXT", answer.into())]),
    ]);
    let kdd = Kdd::start();
    claude_works(&kdd, &ws).await;
    let out = kd(&kdd, &ws, &["review", "claude", "--to", "codex"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("2 line comments from codex recorded"), "{}", out.stdout);
    assert!(out.stdout.contains("Not in the diff, not recorded: b.txt:1 (codex)"), "{}", out.stdout);
    for refused in ["resolve=1", "comment=1", "list=1", "send=1"] {
        assert!(out.stdout.contains(refused), "{refused} missing from: {}", out.stdout);
    }
    assert!(out.stdout.contains("work.resolve_comment is refused"), "{}", out.stdout);
    let listed = comments(&kdd, &ws).await;
    let got: Vec<(&str, &str, u32, &str, CommentState)> =
        listed.iter().map(|c| (c.author.as_str(), c.path.as_str(), c.line, c.body.as_str(), c.state)).collect();
    assert_eq!(
        got,
        [
            ("codex", "a.txt", 3, "keep it lower case", CommentState::Pending),
            ("codex", "a.txt", 15, "and this", CommentState::Pending),
        ]
    );
    // The King sends them on with one command.
    let sent = kd(&kdd, &ws, &["review", "--send", "claude"]).await;
    assert!(sent.status.success(), "{}{}", sent.stdout, sent.stderr);
    assert!(sent.stderr.contains("sent 2 comments to claude"), "{}", sent.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_members_commit_resolves_the_comment_when_it_is_made_not_when_comments_are_read() {
    use kd_client::prelude::*;
    let ws = repo(&[("claude", "claude", vec![("FAKE_RUN", SHOUT_THEN_FIX.into())])]);
    let kdd = Kdd::start();
    let w = claude_works(&kdd, &ws).await;
    let one = kd(&kdd, &ws, &["comment", "claude", "a.txt:3", "lower case, please", "--json"]).await;
    assert!(one.status.success(), "{}{}", one.stdout, one.stderr);
    let id = serde_json::from_str::<Comment>(&one.stdout).expect("kd comment --json").id;
    let c = kdd.client().await;
    c.work_send_review(w.thread.clone(), "claude".into(), None, None).await.unwrap();
    // Nothing lists the comments: the registry says it once the revision is committed.
    let (state, by) = kd_tests::within("the comment resolved by claude's commit", async {
        loop {
            let rows = kdd.db.query("SELECT state, resolved_by FROM work_comments WHERE id = $1", &[id.clone().into()]);
            if rows[0][0].text() == "resolved" {
                return (rows[0][0].text().to_string(), rows[0][1].opt_text());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let head = kd_tests::git(std::path::Path::new(&w.path), &["rev-parse", "HEAD"]);
    assert_eq!((state.as_str(), by), ("resolved", Some(head)));
}
