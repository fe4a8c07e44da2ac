//! The work view (`/work/<thread>`) in a real browser against a real kdd,
//! fake members that edit their worktree (`FAKE_RUN`) and real git with a
//! bare remote and a fake gh: the diff highlighted by kdd's token classes,
//! unified and side by side (remembered), a line comment made from the
//! keyboard and sent as a review the member acts on, live; PR, reject
//! (asked first), check again and accept, each answer shown; a phone's
//! width. Screenshots: `web-work-*`.

use fantoccini::Locator;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use kd_client::prelude::*;
use kd_proto::comment::CommentState;
use kd_proto::work::{WorkState, Worktree};
use kd_tests::browser::Browser;
use kd_tests::web::serve;
use kd_tests::{Kdd, Workspace, fake, git, records};
use serde_json::json;

use crate::ship::{fake_gh, github_remote, path_without_gh, remote_branch};

const LIB: &str = "// The answer.\npub fn answer() -> u32 {\n    41\n}\n";

/// claude's first run answers 42 and names the crate; the review's run
/// renames it. codex answers 40 (its check fails).
const CLAUDE: &str = "if test -f .git; then if grep -q 41 src/lib.rs; then sed -i 's/41/42/' src/lib.rs; \
     echo 'pub const NAME: &str = \"kd\";' >> src/lib.rs; else sed -i 's/\"kd\"/\"kd web\"/' src/lib.rs; fi; fi";
const CODEX: &str = "if test -f .git; then sed -i 's/41/40/' src/lib.rs; fi";

fn js_str(s: &str) -> String {
    serde_json::to_string(s).expect("a JSON string")
}

/// Presses keys, each down then up, `held` (Control) held around them.
async fn press(b: &Browser, held: Option<Key>, keys: &[Key]) {
    let mut a = KeyActions::new("keyboard".into());
    if let Some(h) = held {
        a = a.then(KeyAction::Down { value: h.into() });
    }
    for k in keys {
        a = a.then(KeyAction::Down { value: (*k).into() }).then(KeyAction::Up { value: (*k).into() });
    }
    if let Some(h) = held {
        a = a.then(KeyAction::Up { value: h.into() });
    }
    b.client.perform_actions(a).await.expect("keys");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_work_view_highlights_the_diff_sends_a_line_comment_as_a_review_and_accepts() {
    let rec = tempfile::tempdir().unwrap();
    let record = rec.path().join("claude.jsonl").display().to_string();
    let ws = Workspace::new(&[]);
    ws.git_init(&[("src/lib.rs", LIB)], &[]);
    ws.write_config(&json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": fake("claude", "claude", &[("FAKE_RUN", CLAUDE), ("FAKE_RECORD", &record)]),
            "codex": fake("codex", "codex", &[("FAKE_RUN", CODEX)]),
        },
        "work": {"check": ["sh", "-c", "grep -q 42 src/lib.rs || { echo 'the answer is not 42' >&2; exit 1; }"]},
    }));
    let bare = github_remote(&ws);
    let gh = fake_gh();
    let path = path_without_gh(Some(gh.path()));
    let kdd = Kdd::start_env(&[], &[("PATH", path.as_str())]);
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["work", "Give the right answer", "--to", "claude,codex", "--json"]);
    let out = kd_tests::run(kd).await;
    assert_eq!(out.status.code(), Some(1), "codex's check fails: {}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json");
    let tree = |m: &str| trees.iter().find(|w| w.member == m).cloned().expect("the member's work");
    let (claude, codex) = (tree("claude"), tree("codex"));
    let t = claude.thread.clone();

    let Some(b) = Browser::start("web::work::view").await else { return };
    let web = serve(&kdd).await;
    b.client.goto(&web.url).await.expect("open the pairing URL");
    b.until("the threads view", "return document.querySelector('#threads') !== null").await;
    let origin = format!("http://{}", web.addr);
    b.client.goto(&format!("{origin}/work/{t}")).await.unwrap();
    let card = |m: &str| format!("document.querySelector('section.member[data-member={}]')", js_str(m));
    let (cl, co) = (card("claude"), card("codex"));

    // The diff, highlighted by kdd: the page made spans of its tokens.
    let classes = b
        .until(
            "claude's highlighted diff",
            &format!(
                "const c = {cl}; const s = c && [...c.querySelectorAll('table.diff td.code span')].map(s => s.className); \
                 const all = s && ['hl-comment', 'hl-keyword', 'hl-number', 'hl-string', 'hl-function'].every(n => s.includes(n)); \
                 return all && [...new Set(s)].sort()"
            ),
        )
        .await;
    let classes: Vec<&str> = classes.as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    for needed in ["hl-comment", "hl-keyword", "hl-number", "hl-string", "hl-function"] {
        assert!(classes.contains(&needed), "{needed} in {classes:?}");
    }
    let added = b
        .eval(&format!(
            "return [...{cl}.querySelectorAll('tr.line.added td.code')].map(td => td.textContent).join('|')"
        ))
        .await;
    assert_eq!(added.as_str(), Some("+    42|+pub const NAME: &str = \"kd\";"), "the added lines, as text");
    assert_eq!(b.eval("return document.querySelectorAll('main script, main img').length").await, json!(0));
    // Each member's state, check, branch and commit.
    let head = b.until("claude's check", &format!("return {cl}.querySelector('.check-status')?.textContent")).await;
    assert_eq!(head.as_str(), Some("check pass"));
    let codex_check =
        b.until("codex's check", &format!("return {co}.querySelector('.check-status')?.textContent")).await;
    assert_eq!(codex_check.as_str(), Some("check fail (exit 1)"));
    let meta = b.eval(&format!("return {cl}.querySelector('.member-head').textContent")).await;
    let meta = meta.as_str().unwrap();
    assert!(meta.contains("done") && meta.contains(&claude.branch) && meta.contains(&claude.head[..12]), "{meta}");
    let commits = b.until("claude's commits", &format!("return {cl}.querySelector('.commits li')?.textContent")).await;
    assert!(commits.as_str().unwrap().starts_with(&claude.head[..12]), "{commits}");
    b.screenshot("unified").await;

    // Side by side, remembered over a reload.
    b.client.find(Locator::Css("button.mode[data-mode=split]")).await.unwrap().click().await.unwrap();
    b.until(
        "the side-by-side diff",
        &format!("return {cl}.querySelector('table.diff.split tr.line.changed') !== null"),
    )
    .await;
    b.screenshot("side-by-side").await;
    b.client.refresh().await.unwrap();
    b.until("the side-by-side diff after a reload", &format!("return {cl}?.querySelector('table.diff.split') != null"))
        .await;
    b.client.find(Locator::Css("button.mode[data-mode=unified]")).await.unwrap().click().await.unwrap();
    b.until("the unified diff", &format!("return {cl}.querySelector('table.diff.unified') !== null")).await;

    // A line comment from the keyboard: the line focused, Enter, text,
    // Ctrl+Enter.
    let line = format!("{cl}.querySelector('tr.commentable[data-path=\"src/lib.rs\"][data-line=\"3\"]')");
    b.eval(&format!("{line}.focus()")).await;
    press(&b, None, &[Key::Enter]).await;
    b.until("the comment box", "return document.activeElement?.tagName === 'TEXTAREA'").await;
    b.client.active_element().await.unwrap().send_keys("Say why it is 42.").await.unwrap();
    b.screenshot("comment-box").await;
    // What is being typed outlives the diff drawn again (here by the
    // layout, side by side and back).
    let draft = |mode: &str| {
        format!(
            "const box = {cl}.querySelector('table.diff.{mode} tr.comment-box[data-line=\"3\"]'); \
             return box && box.previousSibling.dataset.line === '3' && box.querySelector('textarea').value"
        )
    };
    b.client.find(Locator::Css("button.mode[data-mode=split]")).await.unwrap().click().await.unwrap();
    assert_eq!(b.until("the draft, side by side", &draft("split")).await, json!("Say why it is 42."));
    b.client.find(Locator::Css("button.mode[data-mode=unified]")).await.unwrap().click().await.unwrap();
    assert_eq!(b.until("the draft, unified again", &draft("unified")).await, json!("Say why it is 42."));
    b.eval(&format!("{cl}.querySelector('tr.comment-box textarea').focus()")).await;
    press(&b, Some(Key::Control), &[Key::Enter]).await;
    let shown = b
        .until(
            "the comment at its line",
            &format!("const c = {cl}.querySelector('li.comment[data-state=pending] .body'); return c && c.textContent"),
        )
        .await;
    assert_eq!(shown.as_str(), Some("Say why it is 42."));
    let c = kdd.client().await;
    let comments = c.work_comments(t.clone(), Some("claude".into())).await.unwrap();
    assert_eq!(comments.len(), 1, "{comments:?}");
    let first = &comments[0];
    assert_eq!((first.path.as_str(), first.line, first.state), ("src/lib.rs", 3, CommentState::Pending));
    assert_eq!((first.body.as_str(), first.commit.as_str()), ("Say why it is 42.", claude.head.as_str()));

    // Two comments being typed when the review goes: the revision keeps
    // the line of one (its box stays) and changes the other's (its text
    // is kept above the diff, to be copied).
    let type_at = |line: u32, text: &str| {
        format!(
            "const tr = {cl}.querySelector('tr.commentable[data-path=\"src/lib.rs\"][data-line=\"{line}\"]'); \
             tr.click(); const t = tr.nextSibling.querySelector('textarea'); t.value = {}; return t.value",
            js_str(text)
        )
    };
    assert_eq!(b.eval(&type_at(3, "And test 0.")).await, json!("And test 0."));
    assert_eq!(b.eval(&type_at(5, "Name it better.")).await, json!("Name it better."));
    // Sent as a review: claude revises, and the page follows it live.
    b.eval(&format!("{cl}.querySelector('button.send-review').click()")).await;
    let revised = b
        .until(
            "claude's revision, live",
            &format!(
                "const a = [...{cl}.querySelectorAll('.answers li')].map(l => l.textContent); \
                 return a.some(t => t.startsWith('claude revised its work')) && a"
            ),
        )
        .await;
    assert!(revised.to_string().contains("sent 1 comment to claude"), "{revised}");
    let wt = std::path::Path::new(&claude.path);
    let new_head = git(wt, &["rev-parse", "HEAD"]);
    assert_ne!(new_head, claude.head, "claude committed its revision");
    assert!(std::fs::read_to_string(wt.join("src/lib.rs")).unwrap().contains("\"kd web\""));
    let prompts: Vec<String> = records(&record).iter().filter_map(|r| r["stdin"].as_str().map(String::from)).collect();
    assert_eq!(prompts.len(), 2, "the task, then the review: {prompts:?}");
    assert!(prompts[1].contains("Say why it is 42.") && prompts[1].contains("src/lib.rs:3"), "{}", prompts[1]);
    b.until(
        "the revised diff",
        &format!(
            "return [...{cl}.querySelectorAll('tr.line.added td.code')].some(td => td.textContent.includes('kd web')) \
             && {cl}.querySelector('.member-head').textContent.includes({})",
            js_str(&new_head[..12])
        ),
    )
    .await;
    let kept = b
        .until(
            "the drafts after the revision",
            &format!(
                "const box = {cl}.querySelector('tr.comment-box[data-line=\"3\"] textarea'); \
                 const kept = {cl}.querySelector('.kept .draft-kept[data-line=\"5\"]'); \
                 return box && kept && [box.value, kept.querySelector('textarea').value, kept.textContent]"
            ),
        )
        .await;
    assert_eq!(kept[0], json!("And test 0."), "the draft at an unchanged line keeps its box");
    assert_eq!(kept[1], json!("Name it better."), "the draft whose line changed is kept");
    assert!(kept[2].as_str().unwrap().contains("src/lib.rs:5 was not sent"), "{kept}");
    b.screenshot("draft-kept").await;
    b.eval(&format!("{cl}.querySelector('.draft-kept button.dismiss').click()")).await;
    b.eval(&format!("{cl}.querySelector('tr.comment-box button.comment-cancel').click()")).await;
    assert_eq!(
        b.eval(&format!("return {cl}.querySelectorAll('.draft-kept, tr.comment-box').length")).await,
        json!(0),
        "dismissed and cancelled"
    );
    assert_eq!(c.work_comments(t.clone(), Some("claude".into())).await.unwrap().len(), 1, "drafts are not comments");

    // The comment, sent, is listed below the diff (it was made on the
    // earlier commit); resolved by the King, it is marked so.
    let sent = format!("{cl}.querySelector('.elsewhere li.comment[data-state=sent]')");
    b.until("the sent comment", &format!("return {sent} !== null")).await;
    b.eval(&format!("{sent}.querySelector('button.resolve').click()")).await;
    b.until(
        "the comment marked resolved",
        &format!(
            "return {cl}.querySelector('.elsewhere li.comment[data-state=resolved]')?.textContent.includes('resolved by the King')"
        ),
    )
    .await;
    let now = c.work_comments(t.clone(), Some("claude".into())).await.unwrap();
    assert_eq!(now[0].state, CommentState::Resolved, "{now:?}");

    // On a phone: unified, the page no wider than the screen (the diff
    // scrolls in its box).
    b.client.set_window_size(390, 844).await.unwrap();
    b.until("the phone's layout", "return document.querySelector('button.mode[data-mode=split]').disabled").await;
    let wide = b.eval("return document.documentElement.scrollWidth").await;
    assert!(wide.as_u64().unwrap() <= 400, "the page scrolls sideways on a phone: {wide}");
    // Scrolled, nothing of the page draws over the sticky header (the
    // diff's layout buttons did).
    let covered = b
        .eval(
            "window.scrollTo(0, 300); const h = document.querySelector('header').getBoundingClientRect(); \
             return [40, 120, 200, 280, 360].map(x => document.elementFromPoint(x, h.top + h.height / 2)) \
             .filter(e => e && !e.closest('header')).map(e => e.outerHTML.slice(0, 80))",
        )
        .await;
    assert_eq!(covered, json!([]), "drawn over the header");
    b.screenshot("phone").await;
    b.client.set_window_size(1100, 900).await.unwrap();

    // codex: a pull request (the fake gh), check again, then rejected
    // after the page asked.
    b.eval(&format!("{co}.querySelector('button.pr').click()")).await;
    let pr = b
        .until(
            "the pull request's answer",
            &format!("const a = {co}.querySelector('.answers li:last-child'); return a && !a.textContent.endsWith('…') && a.textContent"),
        )
        .await;
    assert!(pr.as_str().unwrap().contains("https://github.com/king/kd/pull/7"), "{pr}");
    assert_eq!(remote_branch(bare.path(), &codex.branch).as_deref(), Some(codex.head.as_str()), "pushed");
    b.eval(&format!("{co}.querySelector('button.check-again').click()")).await;
    b.until(
        "check again's answer",
        &format!("return {co}.querySelector('.answers li:last-child')?.textContent === 'checking again'"),
    )
    .await;
    b.eval(&format!("{co}.querySelector('button.reject').click()")).await;
    b.until("the page asks first", &format!("return {co}.querySelector('.confirm') !== null")).await;
    assert_eq!(
        c.work_list(None, Some(t.clone())).await.unwrap().iter().find(|w| w.member == "codex").unwrap().state,
        WorkState::Done,
        "nothing rejected before the King says yes"
    );
    b.eval(&format!("{co}.querySelector('.confirm button.confirm-yes').click()")).await;
    b.until("codex rejected", &format!("return {co}.querySelector('[data-state=rejected]') !== null")).await;

    // claude accepted: the King's branch has its commit.
    b.eval(&format!("{cl}.querySelector('button.accept').click()")).await;
    let accepted = b
        .until(
            "the accept's answer",
            &format!("const a = {cl}.querySelector('.answers li:last-child'); return a && a.textContent.startsWith('accepted') && a.textContent"),
        )
        .await;
    assert!(accepted.as_str().unwrap().starts_with("accepted into main as "), "{accepted}");
    b.until("claude accepted, live", &format!("return {cl}.querySelector('[data-state=accepted]') !== null")).await;
    let king = ws.dir.path();
    let ancestor = std::process::Command::new("git")
        .arg("-C")
        .arg(king)
        .args(["merge-base", "--is-ancestor", &new_head, "main"])
        .status()
        .unwrap();
    assert!(ancestor.success(), "main holds claude's revised commit");
    assert!(std::fs::read_to_string(king.join("src/lib.rs")).unwrap().contains("\"kd web\""));
    b.screenshot("accepted").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn what_kdd_refuses_is_shown_and_kept() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("src/lib.rs", LIB)], &[]);
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": fake("claude", "claude", &[("FAKE_RUN", CLAUDE)])},
    }));
    let kdd = Kdd::start();
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["work", "Give the right answer", "--to", "claude", "--json"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json");
    let t = trees[0].thread.clone();
    // The King's tree has a change the merge would overwrite.
    std::fs::write(ws.dir.path().join("src/lib.rs"), "// the King's own edit\n").unwrap();
    let Some(b) = Browser::start("web::work::refused").await else { return };
    let web = serve(&kdd).await;
    b.client.goto(&web.url).await.expect("open the pairing URL");
    b.until("the threads view", "return document.querySelector('#threads') !== null").await;
    b.client.goto(&format!("http://{}/work/{t}", web.addr)).await.unwrap();
    let cl = "document.querySelector('section.member[data-member=claude]')";
    b.until("claude's buttons", &format!("return {cl}?.querySelector('button.accept') != null")).await;
    // Nothing pending: Send review is off.
    assert_eq!(b.eval(&format!("return {cl}.querySelector('button.send-review').disabled")).await, json!(true));
    b.eval(&format!("{cl}.querySelector('button.accept').click()")).await;
    let said = b
        .until(
            "kdd's refusal",
            &format!("const a = {cl}.querySelector('.answers li.error'); return a && a.textContent"),
        )
        .await;
    assert!(said.as_str().unwrap().starts_with("kdd said: "), "{said}");
    assert!(said.as_str().unwrap().contains("src/lib.rs"), "names the file in the way: {said}");
    // The next answer does not replace it.
    b.eval(&format!("{cl}.querySelector('button.check-again').click()")).await;
    b.until(
        "a second answer",
        &format!(
            "const a = {cl}.querySelectorAll('.answers li'); return a.length === 2 && !a[1].textContent.endsWith('…')"
        ),
    )
    .await;
    let first = b.eval(&format!("return {cl}.querySelector('.answers li').textContent")).await;
    assert_eq!(first, said, "the refusal is kept");
    b.screenshot("refused").await;
    b.close().await;
}

/// Work whose last run kd could not commit (git stopped at its time bound
/// on a FIFO the member left) says so in the work view, and its accept is
/// refused there: the changes are in the worktree only.
#[tokio::test(flavor = "multi_thread")]
async fn work_whose_last_run_is_not_committed_says_so_and_is_not_accepted() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("src/lib.rs", LIB)], &[]);
    let fifo = "if test -f .git; then sed -i 's/41/42/' src/lib.rs; mkdir new; mkfifo new/.gitignore; fi";
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": fake("claude", "claude", &[("FAKE_RUN", fifo)])},
    }));
    let kdd = Kdd::start_with(&["--git-timeout-ms", "1000"]);
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["work", "Give the right answer", "--json"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json");
    assert!(trees[0].uncommitted.is_some(), "{:?}", trees[0]);
    let t = trees[0].thread.clone();
    let Some(b) = Browser::start("web::work::uncommitted").await else { return };
    let web = serve(&kdd).await;
    b.client.goto(&web.url).await.expect("open the pairing URL");
    b.until("the threads view", "return document.querySelector('#threads') !== null").await;
    b.client.goto(&format!("http://{}/work/{t}", web.addr)).await.unwrap();
    let cl = "document.querySelector('section.member[data-member=claude]')";
    let said =
        b.until("the note", &format!("const u = {cl}?.querySelector('.uncommitted'); return u && u.textContent")).await;
    let said = said.as_str().unwrap();
    assert!(said.starts_with("last run not committed (git add") && said.contains("timed out"), "{said}");
    b.eval(&format!("{cl}.querySelector('button.accept').click()")).await;
    let refused = b
        .until(
            "kdd's refusal",
            &format!("const a = {cl}.querySelector('.answers li.error'); return a && a.textContent"),
        )
        .await;
    assert!(refused.as_str().unwrap().contains("not committed"), "{refused}");
    b.screenshot("uncommitted").await;
    b.close().await;
}

/// The Rebase button says how each rebase ended: a clean merge names its
/// commit, a second press says the branch is up to date (the page once
/// read a conflict list only a conflicting rebase has, and stayed at
/// "work.rebase…"). The pull request opened before is then behind the
/// work, and PR again updates it.
#[tokio::test(flavor = "multi_thread")]
async fn the_rebase_button_says_merged_then_up_to_date_and_pr_again_updates_the_pull_request() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("src/lib.rs", LIB)], &[]);
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": fake("claude", "claude", &[("FAKE_RUN", CLAUDE)])},
    }));
    let _bare = github_remote(&ws);
    let gh = fake_gh();
    let path = path_without_gh(Some(gh.path()));
    let kdd = Kdd::start_env(&[], &[("PATH", path.as_str())]);
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["work", "Give the right answer", "--to", "claude", "--json"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json");
    let (t, branch) = (trees[0].thread.clone(), trees[0].branch.clone());
    // The King moves on, touching another file: the merge is clean.
    std::fs::write(ws.dir.path().join("README"), "kd\n").unwrap();
    git(ws.dir.path(), &["add", "README"]);
    git(ws.dir.path(), &["commit", "--quiet", "-m", "A readme"]);
    let Some(b) = Browser::start("web::work::rebase").await else { return };
    let web = serve(&kdd).await;
    b.client.goto(&web.url).await.expect("open the pairing URL");
    b.until("the threads view", "return document.querySelector('#threads') !== null").await;
    b.client.goto(&format!("http://{}/work/{t}", web.addr)).await.unwrap();
    let cl = "document.querySelector('section.member[data-member=claude]')";
    b.until("claude's buttons", &format!("return {cl}?.querySelector('button.rebase') != null")).await;
    let answer = |n: usize| {
        format!(
            "const a = {cl}.querySelectorAll('.answers li'); \
             return a.length === {n} && !a[{n} - 1].textContent.endsWith('…') && a[{n} - 1].textContent"
        )
    };
    b.eval(&format!("{cl}.querySelector('button.pr').click()")).await;
    let pr = b.until("the pull request's answer", &answer(1)).await;
    assert!(pr.as_str().unwrap().ends_with("pull request https://github.com/king/kd/pull/7"), "{pr}");
    b.until("claude's buttons back", &format!("return {cl}?.querySelector('button.rebase') != null")).await;
    b.eval(&format!("{cl}.querySelector('button.rebase').click()")).await;
    let merged = b.until("the rebase's answer", &answer(2)).await;
    let merged = merged.as_str().unwrap();
    assert!(merged.starts_with("merged main (") && merged.contains(&format!(" into {branch}: ")), "{merged}");
    b.until("the rebase's buttons back", &format!("return {cl}?.querySelector('button.rebase') != null")).await;
    b.eval(&format!("{cl}.querySelector('button.rebase').click()")).await;
    let again = b.until("the second rebase's answer", &answer(3)).await;
    assert_eq!(again.as_str(), Some("claude's branch already holds main"));
    // The pull request is behind the merge; PR again pushes it there.
    let head = kdd.client().await.work_list(None, Some(t.clone())).await.unwrap().remove(0).head;
    let behind = b.until("behind", &format!("return {cl}.querySelector('.shipped .behind')?.textContent")).await;
    assert_eq!(behind.as_str(), Some(format!(" behind the work ({}): PR pushes it", &head[..12]).as_str()));
    b.eval(&format!("{cl}.querySelector('button.pr').click()")).await;
    let updated = b.until("the second pull request's answer", &answer(4)).await;
    let updated = updated.as_str().unwrap();
    assert!(updated.contains("pull/7; the pull request was open already: the push updated it"), "{updated}");
    b.until(
        "no longer behind",
        &format!("return {cl}.querySelector('.shipped') && !{cl}.querySelector('.shipped .behind')"),
    )
    .await;
    b.close().await;
}
