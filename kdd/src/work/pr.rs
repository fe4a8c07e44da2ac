//! A member's work as a pull request (issue 34 item 5, `work.pr`): its
//! branch `kd/<thread>/<member>` pushed to the remote (`work.remote`,
//! default `origin`) under the same name, then a pull request into the
//! King's current branch opened with `gh pr create` when gh is on the
//! client's PATH — titled with the task; its body the task, the council's
//! vote or review of the work if any — or, without gh, the host's page to
//! open one (GitHub, GitLab). git and gh run by argv with the user's own
//! configuration, bounded in time and stopped when the caller goes away
//! ([`git::remote`]), outside the repository's lock. Without the remote,
//! nothing is pushed. What was pushed, and the pull request's URL, are
//! recorded on the work (`shipped`). Asked again while its pull request
//! is open, the push updates the pull request's commits and `gh pr edit`
//! its title and body. With `accept` (`kd accept --pr`),
//! the work is accepted by the pull request (the task's others
//! superseded) and nothing is merged in the King's tree.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::KD;
use kd_proto::types::{Purpose, ThreadEvent};
use kd_proto::work::{CheckStatus, PullRequest, Shipped, WorkState, Worktree};

use super::{git_error, worktree};
use crate::coord::Coord;
use crate::db::messages::Page;
use crate::db::now_ms;
use crate::git::{self, remote};

/// How long a push may take.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `gh pr create` may take.
pub const GH_TIMEOUT: Duration = Duration::from_secs(60);
/// Most bytes of the council's word on the work put in the body.
const COUNCIL_BYTES: usize = 4 << 10;
/// Most bytes of a failed check's output put in the body.
const CHECK_BYTES: usize = 2 << 10;
/// Longest title, in characters.
const TITLE_CHARS: usize = 200;

/// `work.pr`: see the module.
pub async fn pr(
    co: &Arc<Coord>,
    thread: &str,
    member: &str,
    accept: bool,
    path: Option<String>,
) -> Result<PullRequest, ErrorObjectOwned> {
    let db = &co.council.agents.db;
    let (_, config) = co.thread(thread, path.as_deref()).await?;
    let w = worktree(db, thread, member).await?;
    refuse_unless_ready(&w)?;
    let repo = PathBuf::from(&w.repo);
    let base = git::branch(&repo).await.map_err(git_error)?.ok_or_else(|| {
        ErrorCode::Conflict
            .error(format!("{} has no branch checked out (a detached HEAD): check one out first", w.repo))
    })?;
    let name = &config.work.remote;
    let urls = git::remote::urls_of(&repo, name).await.map_err(git_error)?.ok_or_else(|| {
        ErrorCode::Conflict.error(format!(
            "{} has no remote named {name} (work.remote): add it (git remote add {name} URL) or name another in \
             .kd/config.json; nothing was pushed",
            w.repo
        ))
    })?;

    // The branch, pushed as it is under its own name (never forced: after
    // kd rebase its history only grew).
    let git_program = remote::find_program("git", path.as_deref()).unwrap_or_else(|| PathBuf::from("git"));
    // The commit kd recorded (what kd diff showed), not whatever the
    // branch holds by now.
    let refspec = format!("{}:refs/heads/{}", w.head, w.branch);
    let pushed = remote::run(&git_program, &["push", "--", name, &refspec], &repo, path.as_deref(), PUSH_TIMEOUT)
        .await
        .map_err(|e| ErrorCode::Conflict.error(format!("git push {name} {}: {e}", w.branch)))?;
    if !pushed.ok {
        return Err(ErrorCode::Conflict.error(format!("git push {name} {} failed: {}", w.branch, pushed.reason())));
    }
    let carried = carried(&git_program, &repo, (name, &base), &w.base, path.as_deref()).await;
    let forge = remote::forge_of(&urls);
    let compare = forge.as_ref().and_then(|r| r.compare_url(&base, &w.branch));
    let mut shipped =
        Shipped { remote: name.clone(), commit: w.head.clone(), at_ms: now_ms(), url: compare.clone(), pr: false };
    let gitlab = forge.as_ref().and_then(|r| r.forge()) == Some(remote::Forge::GitLab);
    let gh = if gitlab { None } else { remote::find_program("gh", path.as_deref()) };
    let mut note = None;
    let mut error = None;
    match gh {
        Some(gh) => {
            let body = body(co, &w, config.work.check.as_deref()).await;
            let title = title(&w.task);
            let mut args =
                vec!["pr", "create", "--head", &w.branch, "--base", &base, "--title", &title, "--body", &body];
            let named = forge.as_ref().filter(|r| r.forge() == Some(remote::Forge::GitHub));
            let repo_arg = named.map(|r| format!("{}/{}", r.host, r.path));
            if let Some(r) = &repo_arg {
                args.extend(["--repo", r.as_str()]);
            }
            match remote::run(&gh, &args, &repo, path.as_deref(), GH_TIMEOUT).await {
                Ok(ran) if ran.ok => {
                    let opened = last_url(&ran.stdout);
                    shipped.url = opened.map(str::to_string).or(shipped.url);
                    shipped.pr = opened.is_some();
                }
                Ok(ran) => match open_already(&ran.stderr) {
                    // The push updated the pull request's commits (`kd pr`
                    // again); its title and body are the work's as it is now.
                    Some(url) => {
                        (shipped.url, shipped.pr) = (Some(url.to_string()), true);
                        let edit = ["pr", "edit", url, "--title", &title, "--body", &body];
                        let said = match remote::run(&gh, &edit, &repo, path.as_deref(), GH_TIMEOUT).await {
                            Ok(ran) if ran.ok => "the push updated it and its description".to_string(),
                            Ok(ran) => {
                                format!("the push updated it, not its description (gh pr edit: {})", ran.reason())
                            }
                            Err(e) => format!("the push updated it, not its description (gh pr edit: {e})"),
                        };
                        note = Some(format!("the pull request was open already: {said}"));
                    }
                    None => error = Some(format!("gh pr create failed: {}", ran.reason())),
                },
                Err(e) => error = Some(format!("gh pr create: {e}")),
            }
        }
        None if gitlab => note = Some("a GitLab remote: open the merge request on its page".to_string()),
        None => note = Some("gh is not on your PATH, so no pull request was opened".to_string()),
    }
    if let Some(n) = carried.filter(|n| *n > 0) {
        let commits = if n == 1 { "1 commit".to_string() } else { format!("{n} commits") };
        let said = format!("the pull request also carries {commits} of {base} not on {name} (git push {name} {base})");
        note = Some(note.map_or(said.clone(), |n| format!("{n}; {said}")));
    }
    db.set_worktree_shipped(thread.to_string(), member.to_string(), shipped.clone()).await?;
    let mut superseded = Vec::new();
    if accept && error.is_none() {
        superseded = settle_by_pr(co, &w).await?;
    }
    if let Ok(Some(now)) = db.worktree(thread.to_string(), member.to_string()).await {
        co.council.agents.hub.publish(thread, ThreadEvent::Work { worktree: Box::new(now) });
    }
    if let Some(e) = error {
        let page = shipped.url.as_deref().map(|u| format!(" (open one yourself: {u})")).unwrap_or_default();
        let also = note.map(|n| format!("; {n}")).unwrap_or_default();
        return Err(ErrorCode::Internal.error(format!("{} was pushed to {name}, but {e}{page}{also}", w.branch)));
    }
    Ok(PullRequest {
        member: member.into(),
        branch: w.branch.clone(),
        base,
        shipped,
        note,
        accepted: accept,
        superseded,
    })
}

/// How many commits of the King's branch `base` the work's base commit
/// holds that the remote's branch does not (as the remote-tracking branch
/// last saw it): the pull request carries them too. None when git cannot
/// tell (the remote's branch never fetched).
async fn carried(
    git: &std::path::Path,
    repo: &std::path::Path,
    (remote, base): (&str, &str),
    work_base: &str,
    path: Option<&str>,
) -> Option<u64> {
    let range = format!("refs/remotes/{remote}/{base}..{work_base}");
    let ran = remote::run(git, &["rev-list", "--count", &range, "--"], repo, path, GH_TIMEOUT).await.ok()?;
    ran.ok.then(|| ran.stdout.trim().parse().ok()).flatten()
}

/// The last line of `text` that is a URL.
fn last_url(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|l| l.starts_with("https://") || l.starts_with("http://"))
}

/// The open pull request gh names when it refuses to open a second one
/// for the branch: `a pull request for branch "B" into branch "main"
/// already exists:` and its URL on the next line (gh's `pr create`).
fn open_already(stderr: &str) -> Option<&str> {
    let (_, after) = stderr.split_once(" already exists:")?;
    after.lines().map(str::trim).find(|l| !l.is_empty()).filter(|l| l.starts_with("http"))
}

/// Refuses work there is nothing to ship of, or that is not the King's to.
fn refuse_unless_ready(w: &Worktree) -> Result<(), ErrorObjectOwned> {
    let (m, t) = (&w.member, &w.thread);
    let why = match w.state {
        WorkState::Working => {
            format!("{m} is still working on thread {t}: wait for its run to end (or kd cancel {t} stops it)")
        }
        WorkState::Tampered => {
            format!("{m}'s work on thread {t} is tampered: its worktree's .git is not what kd made; nothing was pushed")
        }
        WorkState::Rejected | WorkState::Superseded | WorkState::Accepted => {
            format!("{m}'s work on thread {t} is {}: nothing was pushed", w.state.as_str())
        }
        WorkState::Done if w.uncommitted.is_some() => {
            return super::settle::refuse_uncommitted(w, "pushing", "Nothing was pushed");
        }
        WorkState::Done if w.head == w.base => format!("{m} changed nothing on thread {t}: nothing to push"),
        WorkState::Done => return Ok(()),
    };
    Err(ErrorCode::Conflict.error(why))
}

/// The pull request's title: the task's first line.
fn title(task: &str) -> String {
    let first = task.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("kd work");
    first.chars().take(TITLE_CHARS).collect()
}

/// The pull request's body: the task, the check's result (`check`: its
/// argv), the council's vote or review of the work if any, and where it
/// was made.
async fn body(co: &Arc<Coord>, w: &Worktree, check: Option<&[String]>) -> String {
    let mut out = format!("{}\n", w.task.trim_end());
    if let Some(checked) = check_section(w, check) {
        out.push_str("\n## Check\n\n");
        out.push_str(&checked);
        out.push('\n');
    }
    let council = council_word(co, w).await;
    if !council.is_empty() {
        out.push_str("\n## The council\n\n");
        out.push_str(&council);
        out.push('\n');
    }
    out.push_str(&format!(
        "\n---\n{}'s work, made with kd (thread {}, branch {}, commit {}).\n",
        w.member,
        w.thread,
        w.branch,
        kd_proto::work::short_commit(&w.head)
    ));
    out
}

/// The check's word on the work: its command, how it came out and on
/// which commit (said when that is not the one pushed), and for one that
/// did not pass the end of its output, fenced so that nothing in it ends
/// the fence. None when no check ran.
fn check_section(w: &Worktree, argv: Option<&[String]>) -> Option<String> {
    let c = w.check.as_ref()?;
    let command = argv.map(|a| code_span(&shell_line(a))).unwrap_or_else(|| "work.check".into());
    let commit = kd_proto::work::short_commit(&c.commit);
    let mut out = match c.status {
        CheckStatus::Running => format!("{command}: still running on commit {commit}."),
        _ => format!(
            "{command}: {} in {:.1} s on commit {commit}.",
            c.summary().trim_start_matches("check "),
            c.duration_ms as f64 / 1000.0
        ),
    };
    if c.commit != w.head {
        out.push_str(" (That is not the pushed commit: `kd check` runs it again.)");
    }
    let failed = matches!(c.status, CheckStatus::Fail | CheckStatus::Timeout | CheckStatus::Error);
    if failed && !c.output.trim().is_empty() {
        let tail = super::check::run::tail(&c.output, CHECK_BYTES);
        let longest = tail.split(|ch| ch != '`').map(str::len).max().unwrap_or(0);
        let fence = "`".repeat(longest.max(2) + 1);
        out.push_str(&format!("\n\nThe end of its output:\n\n{fence}\n{}\n{fence}", tail.trim_end()));
    }
    Some(out)
}

/// `argv` as a shell reads it back, each word quoted where it must be: a
/// word holding single quotes and nothing a shell expands in double ones
/// is put in double quotes, as a person writes it; any other by shlex.
fn shell_line(argv: &[String]) -> String {
    let word = |a: &String| {
        if a.contains('\'') && !a.is_empty() && !a.contains(['"', '$', '`', '\\', '\0']) {
            format!("\"{a}\"")
        } else {
            shlex::try_quote(a).map_or_else(|_| a.replace('\0', "\\0"), |q| q.into_owned())
        }
    };
    argv.iter().map(word).collect::<Vec<_>>().join(" ")
}

/// `text` as markdown's inline code: fenced by one backtick more than the
/// longest run in it (CommonMark), padded when it starts or ends with one.
fn code_span(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if longest > 0 { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// What kd counted of the council on the work: the latest review of the
/// member's work and the vote's tally, if any.
async fn council_word(co: &Arc<Coord>, w: &Worktree) -> String {
    let page = Page { after: 0, before: None, limit: Some(500), from_end: true, bodies: true, budget: 4 << 20 };
    let Ok(messages) = co.council.agents.db.messages(w.thread.clone(), page).await else { return String::new() };
    let review_of = format!("Review of {}'s work:", w.member);
    let review = messages.iter().rev().find(|m| m.from == KD && m.body.starts_with(&review_of));
    let tally = messages.iter().rev().find(|m| m.from == KD && m.purpose == Some(Purpose::Tally));
    let mut out = String::new();
    for m in [review, tally].into_iter().flatten() {
        // The review's way on is for a terminal, not the pull request.
        let mut text = m.body.replace(&super::review::advice(&w.member), "").trim().to_string();
        if text.len() > COUNCIL_BYTES {
            let mut at = COUNCIL_BYTES;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.truncate(at);
            text.push_str(" …");
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&text);
    }
    out
}

/// `kd accept --pr`: the work is accepted by its pull request, and the
/// task's other finished work superseded (a member still working keeps
/// working). Their names.
async fn settle_by_pr(co: &Arc<Coord>, w: &Worktree) -> Result<Vec<String>, ErrorObjectOwned> {
    let db = &co.council.agents.db;
    db.set_worktree_state(w.thread.clone(), w.member.clone(), WorkState::Accepted).await?;
    let mut superseded = Vec::new();
    for o in db.worktrees_of(w.thread.clone()).await? {
        if o.member == w.member || o.state.is_settled() {
            continue;
        }
        superseded.push(o.member.clone());
        if o.state == WorkState::Done {
            db.set_worktree_state(o.thread.clone(), o.member.clone(), WorkState::Superseded).await?;
            let o = Worktree { state: WorkState::Superseded, ..o };
            co.council.agents.hub.publish(&w.thread, ThreadEvent::Work { worktree: Box::new(o) });
        }
    }
    Ok(superseded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_says_how_the_check_came_out_and_on_which_commit() {
        let mut w = crate::db::fixtures::worktree("claude", 1);
        w.head = "a".repeat(40);
        assert_eq!(check_section(&w, None), None, "no check ran");
        let argv = ["cargo".to_string(), "test".to_string()];
        w.check = Some(kd_proto::work::WorkCheck {
            status: CheckStatus::Fail,
            commit: "b".repeat(40),
            exit_code: Some(101),
            duration_ms: 2500,
            output: "test a ... FAILED\n```\nnot the end\n".into(),
            started_at_ms: 1,
        });
        let text = check_section(&w, Some(&argv)).unwrap();
        assert!(text.starts_with("`cargo test`: fail (exit 101) in 2.5 s on commit bbbbbbbbbbbb."), "{text}");
        assert!(text.contains("not the pushed commit"), "{text}");
        assert!(text.contains("\n````\ntest a ... FAILED\n```\nnot the end\n````"), "fenced past its own: {text}");
        let c = w.check.as_mut().unwrap();
        (c.status, c.exit_code, c.commit) = (CheckStatus::Pass, Some(0), "a".repeat(40));
        assert_eq!(check_section(&w, None).unwrap(), "work.check: pass in 2.5 s on commit aaaaaaaaaaaa.");
        // The command as a shell reads it: quoted where it must be.
        let argv = ["sh", "-c", "! grep -q '^<<<<<<<' a.txt"].map(String::from);
        let text = check_section(&w, Some(&argv)).unwrap();
        assert!(text.starts_with("`sh -c \"! grep -q '^<<<<<<<' a.txt\"`: pass"), "{text}");
        let argv = ["sh", "-c", "echo `date`"].map(String::from);
        let text = check_section(&w, Some(&argv)).unwrap();
        assert!(text.starts_with("`` sh -c 'echo `date`' ``: pass"), "a code span past its backticks: {text}");
    }

    #[test]
    fn a_pull_request_open_already_is_found_in_ghs_refusal() {
        let said = "a pull request for branch \"kd/t/claude\" into branch \"main\" already exists:\n\
                    https://github.com/king/kd/pull/7\n";
        assert_eq!(open_already(said), Some("https://github.com/king/kd/pull/7"));
        assert_eq!(open_already("GraphQL: No commits between main and kd/t/claude (createPullRequest)\n"), None);
        assert_eq!(open_already("a pull request for branch \"b\" into branch \"main\" already exists:\n"), None);
        assert_eq!(
            last_url("Creating pull request\nhttps://github.com/king/kd/pull/8\n"),
            Some("https://github.com/king/kd/pull/8")
        );
    }

    #[test]
    fn the_title_is_the_tasks_first_line() {
        assert_eq!(title("\n  Add a --dry-run flag\nto the importer"), "Add a --dry-run flag");
        assert_eq!(title(&"x".repeat(500)).len(), TITLE_CHARS);
        assert_eq!(title(""), "kd work");
    }
}
