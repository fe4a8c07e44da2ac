//! The thread lifecycle (SPEC §8, F-L2; seed 003): when a thread ages. A
//! thread without activity for its workspace's `lifecycle.idle_after`
//! goes `idle` (its sessions suspended); a branch quiet for
//! `lifecycle.archive_after` is `archived` with an extractive summary. The
//! trunk, the workspace's canonical line, only idles: it is archived only
//! when asked. The reaper ages every thread periodically, and a read of a
//! thread ([`check`]) ages it on the spot, so no one sees a stale status.
//! The writes, and their re-check against a message that came meanwhile,
//! are [`crate::db::lifecycle`]'s. Whichever path archives a thread — the
//! reaper, a read, `thread.archive` — tells [`Archived`], and what follows
//! an archive (the summarizer, the summary offered to the parent:
//! [`crate::summary`]) takes it from there: one path for every archive.
//! Forks are here too (F-L1): a branch starts with its context bundle, which
//! carries the parent's conversation, a summary of it, or neither
//! ([`Carried`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kd_proto::names::{ALL, KD};
use kd_proto::types::{Lineage, MessageKind, Purpose, Thread, ThreadStatus};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Lifecycle};
use crate::db::lifecycle::{Material, Summary};
use crate::db::messages::{NewMessage, Page};
use crate::db::threads::NewThread;
use crate::db::{Db, DbResult, now_ms};
use crate::prompt;

/// How often the reaper looks at every thread, by default.
pub const REAP_INTERVAL: Duration = Duration::from_secs(60);
/// King questions an extractive summary quotes at most.
const SUMMARY_QUESTIONS: u32 = 10;
/// Characters of one question or answer in a summary.
const SUMMARY_PART_CHARS: usize = 400;

/// What `thread` should become now, if anything.
pub fn due(thread: &Thread, l: &Lifecycle, now: i64) -> Option<ThreadStatus> {
    let quiet = Duration::from_millis(now.saturating_sub(thread.last_activity_at_ms).max(0) as u64);
    match thread.status {
        ThreadStatus::Archived => None,
        _ if thread.lineage == Lineage::Branch && quiet >= l.archive_after => Some(ThreadStatus::Archived),
        ThreadStatus::Active if quiet >= l.idle_after => Some(ThreadStatus::Idle),
        _ => None,
    }
}

/// The workspace's lifecycle settings; the defaults when its configuration
/// cannot be read (the reaper must not stop on one bad file).
pub fn settings(workspace: &str) -> Lifecycle {
    match config::load(Path::new(workspace)) {
        Ok(c) => c.lifecycle,
        Err(e) => {
            tracing::debug!(workspace, "lifecycle: default settings, the configuration is unusable: {e}");
            Lifecycle::default()
        }
    }
}

/// Where the threads archived are told, so that what follows an archive
/// runs whichever path archived it (see [`crate::summary::follow`]).
#[derive(Clone)]
pub struct Archived(tokio::sync::mpsc::UnboundedSender<String>);

impl Archived {
    /// The teller, and the receiving end for the follower.
    pub fn channel() -> (Archived, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Archived(tx), rx)
    }

    fn tell(&self, thread: &str) {
        // Gone only when the daemon is stopping: nothing follows then.
        let _ = self.0.send(thread.to_string());
    }
}

/// Settings per workspace, read once per pass or request.
#[derive(Default)]
pub struct Settings(HashMap<String, Lifecycle>);

impl Settings {
    /// Settings already read for `workspace` (a send has its configuration).
    pub fn with(workspace: &str, lifecycle: Lifecycle) -> Settings {
        Settings(HashMap::from([(workspace.to_string(), lifecycle)]))
    }

    fn of(&mut self, workspace: &str) -> Lifecycle {
        self.0.entry(workspace.to_string()).or_insert_with(|| settings(workspace)).clone()
    }
}

/// Ages `thread` if it is due, and returns it as it now stands; an archive
/// is told to `archived`.
pub async fn check(db: &Db, archived: &Archived, thread: Thread, settings: &mut Settings) -> Thread {
    // Nothing ages in under a second: skip the configuration read.
    if thread.status == ThreadStatus::Archived || now_ms() - thread.last_activity_at_ms < 1000 {
        return thread;
    }
    let Some(to) = due(&thread, &settings.of(&thread.workspace), now_ms()) else { return thread };
    let summary = match to {
        ThreadStatus::Archived => match summarize(db, &thread.id).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(thread = thread.id, "cannot summarize the thread: {e}");
                None
            }
        },
        _ => None,
    };
    match db.age_thread(thread.id.clone(), thread.last_activity_at_ms, to, summary).await {
        Ok(true) => {
            if to == ThreadStatus::Archived {
                archived.tell(&thread.id);
            }
            db.thread(thread.id.clone()).await.unwrap_or(thread)
        }
        Ok(false) => thread,
        Err(e) => {
            tracing::warn!(thread = thread.id, "cannot age the thread: {e}");
            thread
        }
    }
}

/// [`check`] for each thread of a list.
pub async fn check_all(db: &Db, archived: &Archived, threads: Vec<Thread>) -> Vec<Thread> {
    let mut settings = Settings::default();
    let mut out = Vec::with_capacity(threads.len());
    for t in threads {
        out.push(check(db, archived, t, &mut settings).await);
    }
    out
}

/// Archives a thread when asked, with its summary; told to `archived`.
pub async fn archive(db: &Db, archived: &Archived, id: String) -> DbResult<Thread> {
    let summary = summarize(db, &id).await?;
    let t = db.set_thread_status(id, ThreadStatus::Archived, "archive", Some(summary)).await?;
    archived.tell(&t.id);
    Ok(t)
}

/// The extractive summary: the King's first questions and each member's
/// last answer, each cut to a few hundred characters.
pub async fn summarize(db: &Db, id: &str) -> DbResult<Summary> {
    let m = db.summary_material(id.to_string(), SUMMARY_QUESTIONS).await?;
    Ok(Summary { text: extract(&m), by: KD.to_string() })
}

fn extract(m: &Material) -> String {
    let mut out = String::new();
    if !m.questions.is_empty() {
        out.push_str("The King asked:\n");
        for q in &m.questions {
            out.push_str(&format!("- {}\n", cut(q)));
        }
    }
    if !m.last_answers.is_empty() {
        out.push_str(if out.is_empty() { "Last answers:\n" } else { "\nLast answers:\n" });
        for (member, answer) in &m.last_answers {
            out.push_str(&format!("- {member}: {}\n", cut(answer)));
        }
    }
    if out.is_empty() {
        out.push_str("Nothing was said.\n");
    }
    out.trim_end().to_string()
}

/// One line: blank runs folded to a space, at most [`SUMMARY_PART_CHARS`].
fn cut(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SUMMARY_PART_CHARS {
        return flat;
    }
    let mut s: String = flat.chars().take(SUMMARY_PART_CHARS).collect();
    s.push('…');
    s
}

/// Most bytes of one bundle file given to a branch.
const BUNDLE_FILE_BYTES: u64 = 64 * 1024;
/// Most bytes of a whole bundle.
const BUNDLE_BYTES: usize = 256 * 1024;
/// Most bytes of the parent's conversation a fork carries (its newest
/// messages, whole): about what an agent's context holds.
const CARRY_BYTES: usize = 1024 * 1024;

/// What a fork carries of its parent into the branch's bundle, beside the
/// identity and policy files (`thread.fork`'s `carry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// Nothing more: the seed's minimal bundle (with the parent's summary
    /// if it has one).
    Nothing,
    /// The parent's conversation so far, as the history format writes it:
    /// the branch's members are given it as the conversation their own
    /// continues.
    Conversation,
    /// A summary of the parent made at fork time, in place of its stored one.
    Summary(String),
}

/// Forks a branch of `parent` (F-L1): same workspace, members and context
/// mode, its own sessions, made current, and as its first message the
/// context bundle — the `lifecycle.bundle` files present in the workspace,
/// read now, the parent's summary, and what is `carried`.
pub async fn fork(db: &Db, parent: String, title: Option<String>, carried: Carried) -> DbResult<Thread> {
    let p = db.thread(parent).await?;
    // A summary made now stands in place of the stored one.
    let (extra, stored_summary) = match carried {
        Carried::Nothing => (None, true),
        Carried::Conversation => (conversation(db, &p).await?, true),
        Carried::Summary(s) => {
            (Some(format!("=== summary of thread {}, made at the fork ===\n{}", p.id, s.trim())), false)
        }
    };
    let t = NewThread {
        id: None,
        workspace: p.workspace.clone(),
        branch: p.branch.clone(),
        title,
        members: p.members.clone(),
        lineage: Some(Lineage::Branch),
        parent: Some(p.id.clone()),
        set_current: true,
        context: p.context,
        origin: None,
    };
    match bundle(&p, &settings(&p.workspace).bundle, stored_summary, extra.as_deref()) {
        Some(body) => Ok(db.create_thread_with_message(t, bundle_message(body)).await?.0),
        None => db.create_thread(t).await,
    }
}

/// The parent's conversation as a fork carries it: its newest messages up
/// to [`CARRY_BYTES`], in the history format, under a heading; `None` when
/// nothing was said.
async fn conversation(db: &Db, parent: &Thread) -> DbResult<Option<String>> {
    let page = Page { from_end: true, budget: CARRY_BYTES, ..Page::all_after(0) };
    let messages = db.messages(parent.id.clone(), page).await?;
    let said = prompt::format_conversation(&messages);
    if said.is_empty() {
        return Ok(None);
    }
    let upto = messages.iter().map(|m| m.seq).max().unwrap_or(0);
    let earlier = messages.iter().map(|m| m.seq).min().unwrap_or(1).saturating_sub(1);
    let left_out = match earlier {
        0 => String::new(),
        1 => format!("(1 earlier message is left out: `kd show {}` has it.)\n\n", parent.id),
        n => format!("({n} earlier messages are left out: `kd show {}` has them.)\n\n", parent.id),
    };
    Ok(Some(format!("=== conversation of thread {}, up to #{upto} ===\n{left_out}{said}", parent.id)))
}

/// Creates thread `t`, with its context bundle first when it is a branch.
pub async fn create(db: &Db, t: NewThread) -> DbResult<Thread> {
    match bundle_for(db, &t).await? {
        Some(m) => Ok(db.create_thread_with_message(t, m).await?.0),
        None => db.create_thread(t).await,
    }
}

/// The context bundle of `t` when it will be a branch (F-L1): of its
/// parent, or of the trunk it will branch off.
pub async fn bundle_for(db: &Db, t: &NewThread) -> DbResult<Option<NewMessage>> {
    if t.lineage == Some(Lineage::Trunk) || t.origin.is_some() {
        return Ok(None);
    }
    let parent = match &t.parent {
        Some(p) => Some(p.clone()),
        None => db.trunk(t.workspace.clone(), t.branch.clone()).await?,
    };
    let Some(parent) = parent else { return Ok(None) };
    let p = db.thread(parent).await?;
    Ok(bundle(&p, &settings(&p.workspace).bundle, true, None).map(bundle_message))
}

fn bundle_message(body: String) -> NewMessage {
    NewMessage {
        purpose: Some(Purpose::Bundle),
        ..NewMessage::new("", KD, vec![ALL.to_string()], MessageKind::System, body)
    }
}

/// The bundle's text, or `None` when there is nothing to give: the files,
/// the parent's stored summary (when `summary`), then `extra` (what a fork
/// carries; last, so that the branch's own conversation follows it).
fn bundle(parent: &Thread, files: &[String], summary: bool, extra: Option<&str>) -> Option<String> {
    let root = Path::new(&parent.workspace);
    let mut out = String::new();
    for name in files {
        let Some(text) = read_bundle_file(&root.join(name)) else { continue };
        if out.len() + text.len() > BUNDLE_BYTES {
            tracing::warn!(file = name, "the context bundle is full: {name} is left out");
            continue;
        }
        out.push_str(&format!("=== {name} ===\n{}\n\n", text.trim_end()));
    }
    if let Some(s) = parent.summary.as_ref().filter(|_| summary) {
        out.push_str(&format!("=== summary of thread {} ===\n{s}\n\n", parent.id));
    }
    if let Some(extra) = extra {
        out.push_str(extra);
    }
    (!out.is_empty()).then(|| format!("[Context for this branch of thread {}]\n\n{}", parent.id, out.trim_end()))
}

/// A regular file's text (not a symlink, a FIFO or a device), cut at
/// [`BUNDLE_FILE_BYTES`]; `None` when absent or unreadable.
fn read_bundle_file(path: &Path) -> Option<String> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(BUNDLE_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Ages every thread that is due, every `interval`, until `stop`; each
/// archive is told to `archived`.
pub fn spawn_reaper(db: Arc<Db>, archived: Archived, interval: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            match reap(&db, &archived).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("lifecycle: {n} thread(s) aged"),
                Err(e) => tracing::warn!("lifecycle: the reaper's pass failed: {e}"),
            }
        }
    });
}

/// One pass: how many threads it aged.
pub async fn reap(db: &Db, archived: &Archived) -> DbResult<usize> {
    let mut settings = Settings::default();
    let mut aged = 0;
    for status in [ThreadStatus::Active, ThreadStatus::Idle] {
        for t in db.threads(None, Some(status), None).await? {
            if check(db, archived, t, &mut settings).await.status != status {
                aged += 1;
            }
        }
    }
    Ok(aged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::types::ContextMode;

    fn thread(lineage: Lineage, status: ThreadStatus, quiet_s: i64) -> Thread {
        Thread {
            id: "t".into(),
            workspace: "/w".into(),
            branch: None,
            title: None,
            status,
            lineage,
            parent: None,
            members: vec![],
            context: ContextMode::History,
            created_at_ms: 0,
            last_activity_at_ms: 1_000_000 - quiet_s * 1000,
            last_seq: 0,
            origin: None,
            summary: None,
        }
    }

    #[test]
    fn branches_idle_then_archive_and_the_trunk_only_idles() {
        let l = Lifecycle {
            idle_after: Duration::from_secs(10),
            archive_after: Duration::from_secs(30),
            ..Lifecycle::default()
        };
        let now = 1_000_000;
        use Lineage::*;
        use ThreadStatus::*;
        assert_eq!(due(&thread(Branch, Active, 5), &l, now), None);
        assert_eq!(due(&thread(Branch, Active, 10), &l, now), Some(Idle));
        assert_eq!(due(&thread(Branch, Idle, 20), &l, now), None);
        assert_eq!(due(&thread(Branch, Idle, 30), &l, now), Some(Archived));
        assert_eq!(due(&thread(Branch, Active, 40), &l, now), Some(Archived), "straight to archived");
        assert_eq!(due(&thread(Trunk, Idle, 4000), &l, now), None);
        assert_eq!(due(&thread(Trunk, Active, 4000), &l, now), Some(Idle));
        assert_eq!(due(&thread(Branch, Archived, 4000), &l, now), None);
    }

    #[test]
    fn a_bundle_gives_the_files_then_the_stored_summary_then_what_the_fork_carries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "Run the tests.\n").unwrap();
        let mut p = thread(Lineage::Trunk, ThreadStatus::Active, 0);
        p.workspace = dir.path().display().to_string();
        p.summary = Some("Sharding was discussed.".into());
        let files = vec!["AGENTS.md".to_string(), "CLAUDE.md".to_string()];
        let carried = "=== conversation of thread t, up to #2 ===\nking: Q?\n\nclaude: A.";
        assert_eq!(
            bundle(&p, &files, true, Some(carried)).unwrap(),
            format!(
                "[Context for this branch of thread t]\n\n=== AGENTS.md ===\nRun the tests.\n\n=== summary of thread t \
                 ===\nSharding was discussed.\n\n{carried}"
            )
        );
        // A summary made at the fork stands in place of the stored one.
        let b = bundle(&p, &files, false, Some("=== summary of thread t, made at the fork ===\nNew.")).unwrap();
        assert!(!b.contains("Sharding was discussed.") && b.ends_with("made at the fork ===\nNew."), "{b}");
        p.summary = None;
        assert_eq!(bundle(&p, &[], true, None), None, "nothing to give");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_fork_carries_the_newest_of_a_long_conversation_and_says_what_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let at = kd_proto::paths::DbLocation::File(dir.path().join("kd.sqlite3"));
        let db = Db::open(&at, Arc::new(crate::hub::Hub::new()), crate::db::Node::here("test")).await.unwrap();
        let ws = dir.path().display().to_string();
        let parent = db.create_thread(NewThread::in_workspace(&ws)).await.unwrap();
        // Five answers of 300 KB: the newest three fit in CARRY_BYTES.
        for i in 1..=5 {
            let body = format!("answer {i} {}", "x".repeat(300 * 1024));
            db.append_message(NewMessage::new(&parent.id, "claude", vec![], MessageKind::Agent, body)).await.unwrap();
        }
        let branch = fork(&db, parent.id.clone(), None, Carried::Conversation).await.unwrap();
        let bundle = &db.messages(branch.id.clone(), Page::all_after(0)).await.unwrap()[0];
        assert_eq!(bundle.purpose, Some(Purpose::Bundle));
        let b = &bundle.body;
        assert!(b.contains(&format!("=== conversation of thread {}, up to #5 ===", parent.id)), "{}", &b[..200]);
        assert!(b.contains(&format!("(2 earlier messages are left out: `kd show {}` has them.)", parent.id)));
        assert!(!b.contains("answer 2 ") && b.contains("claude: answer 3 ") && b.contains("claude: answer 5 "));
        assert!(b.len() <= CARRY_BYTES + 4096, "bounded: {}", b.len());
        // Nothing said, nothing carried, no bundle files: no bundle.
        let quiet = db.create_thread(NewThread::in_workspace(&ws)).await.unwrap();
        let branch = fork(&db, quiet.id, None, Carried::Conversation).await.unwrap();
        assert_eq!(branch.last_seq, 0);
        db.close().await;
    }

    #[test]
    fn the_extract_quotes_questions_and_last_answers_on_one_line_each_bounded() {
        let m = Material {
            questions: vec!["How do we\n\nshard?".into()],
            last_answers: vec![("claude".into(), "By tenant.".into()), ("codex".into(), "x".repeat(500))],
        };
        let s = extract(&m);
        assert!(s.starts_with("The King asked:\n- How do we shard?\n\nLast answers:\n- claude: By tenant.\n- codex: "));
        assert!(s.ends_with('…') && s.chars().count() < 520, "{s}");
        assert_eq!(extract(&Material { questions: vec![], last_answers: vec![] }), "Nothing was said.");
    }
}
