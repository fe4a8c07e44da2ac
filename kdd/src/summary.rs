//! Summaries written by a member (SPEC §8, F-L2): `lifecycle.summarizer`
//! names the member who, given the thread's newest messages and
//! [`SUMMARY_PROMPT`], writes a thread's summary — at archive, replacing the
//! extractive one kept meanwhile, and on `kd summarize`. Without a
//! summarizer, or when its run fails, the extractive summary stands. A
//! branch's summary is then offered to its parent (`lifecycle.summary_to_
//! trunk`, on by default) as a message from kd the members are given. A
//! fork told to carry a summary gets one made the same way ([`at_fork`]).
//! Above the council (a summary is a run like any other); the ageing itself
//! is [`crate::lifecycle`]'s.

use std::path::Path;
use std::sync::Arc;

use kd_proto::names::{ALL, KD};
use kd_proto::types::{Lineage, MessageKind, Purpose, Style, Thread};

use crate::agent::registry::Place;
use crate::config::{self, Config};
use crate::council::{Council, Launch};
use crate::db::DbResult;
use crate::db::lifecycle::Summary;
use crate::db::messages::{NewMessage, Page};
use crate::lifecycle;
use crate::prompt;

/// What the summarizer is asked, before the thread's newest messages.
pub const SUMMARY_PROMPT: &str = "[Summary]\nSummarize this council thread for the King in at most ten lines of \
plain text: what was asked, what was decided or recommended, and what is still open. Write only the summary.";

/// Bytes of the newest messages the summarizer is given at most.
const SUMMARY_HISTORY_BYTES: usize = 256 * 1024;

/// The summarizer's summary of `thread`, if one is configured and answers.
async fn by_member(c: &Council, thread: &Thread, config: &Config) -> Option<Summary> {
    let member = config.lifecycle.summarizer.as_deref()?;
    if config.agent(member).is_none() {
        tracing::warn!(
            thread = thread.id,
            "lifecycle.summarizer {member:?} has no agent; the extractive summary stands"
        );
        return None;
    }
    let page = Page { from_end: true, budget: SUMMARY_HISTORY_BYTES, ..Page::all_after(0) };
    let messages = c.agents.db.messages(thread.id.clone(), page).await.ok()?;
    let history = prompt::format_thread_history(&messages, member, Some("Write the summary now."));
    let launch = Launch {
        thread: thread.clone(),
        config: config.clone(),
        style: Style::Council,
        timeout: None,
        client: None,
        prompt: Some(format!("{SUMMARY_PROMPT}\n\n{history}")),
        work: Default::default(),
    };
    let place = Place { purpose: Some(Purpose::Summary), ..Place::default() };
    let run = launch.start(c, member, place)?.into_run();
    run.done().await;
    let answer = run.message().filter(|m| m.kind == MessageKind::Agent && !m.body.trim().is_empty())?;
    Some(Summary { text: answer.body.trim().to_string(), by: member.to_string() })
}

/// The configuration of `thread`'s workspace, its agents found on `path`
/// (the asking client's `PATH`; none: kdd's own).
fn load(thread: &Thread, path: Option<&str>) -> Option<Config> {
    config::load_for(Path::new(&thread.workspace), path)
        .inspect_err(|e| tracing::warn!(thread = thread.id, "summary: the configuration is unusable: {e}"))
        .ok()
}

/// `kd summarize`: the summarizer's summary, else the extractive one, kept.
pub async fn now(c: &Council, id: String, path: Option<String>) -> DbResult<Thread> {
    let db = &c.agents.db;
    let thread = db.thread(id.clone()).await?;
    let by_member = match load(&thread, path.as_deref()) {
        Some(config) => by_member(c, &thread, &config).await,
        None => None,
    };
    let summary = match by_member {
        Some(s) => s,
        None => lifecycle::summarize(db, &id).await?,
    };
    db.set_thread_summary(id, summary).await
}

/// A summary of `parent` for a fork to carry (`--carry summary`): the
/// summarizer's, made now, where its run can start (on the node that owns
/// the thread), else the extractive one. Not kept as the parent's summary.
pub async fn at_fork(c: &Council, parent: &Thread, path: Option<&str>) -> DbResult<String> {
    let db = &c.agents.db;
    let by_member = match load(parent, path) {
        Some(config) if crate::council::runs_here(db, &parent.id).await.is_ok() => by_member(c, parent, &config).await,
        _ => None,
    };
    Ok(match by_member {
        Some(s) => s.text,
        None => lifecycle::summarize(db, &parent.id).await?.text,
    })
}

/// Follows every archive, whichever path made it ([`lifecycle::Archived`]):
/// each thread archived gets [`after_archive`], until the daemon stops.
pub async fn follow(c: Arc<Council>, mut archived: tokio::sync::mpsc::UnboundedReceiver<String>) {
    while let Some(id) = archived.recv().await {
        tokio::spawn(after_archive(c.clone(), id));
    }
}

/// After a thread was archived (its extractive summary kept): the
/// summarizer's summary in its place, then, for a branch, the summary
/// offered to its parent.
async fn after_archive(c: Arc<Council>, id: String) {
    let db = &c.agents.db;
    let Ok(thread) = db.thread(id.clone()).await else { return };
    // An imported thread (Kingdom's archive) keeps its extractive summary
    // and is not announced: importing is not archiving.
    if thread.origin.is_some() {
        return;
    }
    let Some(config) = load(&thread, None) else { return };
    let mut thread = thread;
    if let Some(s) = by_member(&c, &thread, &config).await {
        match db.set_thread_summary(id.clone(), s).await {
            Ok(t) => thread = t,
            Err(e) => tracing::warn!(thread = id, "cannot keep the summarizer's summary: {e}"),
        }
    }
    let (Some(parent), Some(summary)) = (&thread.parent, &thread.summary) else { return };
    if thread.lineage != Lineage::Branch || !config.lifecycle.summary_to_trunk {
        return;
    }
    let title = thread.title.as_deref().map(|t| format!(" ({t})")).unwrap_or_default();
    let body = format!("[Summary of branch {id}{title}, archived]\n\n{summary}");
    let m = NewMessage {
        purpose: Some(Purpose::Summary),
        ..NewMessage::new(parent, KD, vec![ALL.to_string()], MessageKind::System, body)
    };
    if let Err(e) = db.append_message(m).await {
        tracing::warn!(thread = id, parent, "cannot offer the summary to the parent: {e}");
    }
}
