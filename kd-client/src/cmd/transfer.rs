//! `kd export THREAD DIR` and `kd import DIR`: Kingdom thread directories.
//!
//! A thread is a directory with `thread.json` (`id`, `members`,
//! `created_at`, and `title` when there is one) and one `NNNN-sender.md` per
//! message:
//!
//! ```text
//! ---
//! from: claude
//! to: king
//! timestamp: 2026-02-16T19:02:08Z
//! ---
//!
//! The body, verbatim (it may hold `---` lines).
//! ```
//!
//! `to` lists addressees separated by `, `; a `kind:` line is written for
//! error, system and interrupted messages only. Times have second
//! precision, so export → import → export gives the same bytes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use kd_client::{ClientError, KdApiClient, workspace};
use kd_proto::types::{ImportedMessage, Message, MessageKind, Thread, display_order};
use serde::{Deserialize, Serialize};

use super::Ctx;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Thread id
    thread: String,
    /// Directory to write (created; must be empty if it exists)
    dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A directory written by `kd export` (or by Kingdom)
    dir: PathBuf,
    /// The workspace the thread belongs to [default: this one]
    #[arg(long)]
    workspace: Option<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct ThreadFile {
    id: String,
    members: Vec<String>,
    created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
}

pub async fn export(ctx: &Ctx, a: ExportArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = client.thread_get(a.thread.clone()).await.map_err(ClientError::from)?;
    let messages = client.thread_messages(a.thread, None, None).await.map_err(ClientError::from)?;
    if a.dir.exists() && std::fs::read_dir(&a.dir)?.next().is_some() {
        bail!("{} is not empty", a.dir.display());
    }
    std::fs::create_dir_all(&a.dir).with_context(|| format!("cannot create {}", a.dir.display()))?;
    for (name, text) in files(&thread, &messages)? {
        let path = a.dir.join(&name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    outln!("exported {} messages of {} to {}", messages.len(), thread.id, a.dir.display())?;
    Ok(ExitCode::SUCCESS)
}

pub async fn import(ctx: &Ctx, a: ImportArgs) -> anyhow::Result<ExitCode> {
    let (meta, messages) = read_dir(&a.dir)?;
    let root = match a.workspace {
        Some(w) => w.canonicalize().with_context(|| format!("no workspace {}", w.display()))?,
        None => workspace::current()?.root,
    };
    let ws = workspace::detect(&root);
    let client = ctx.client().await?;
    let created =
        parse_time(&meta.created_at).with_context(|| format!("{}: created_at", a.dir.join("thread.json").display()))?;
    let n = messages.len();
    let thread = client
        .thread_import(
            ws.root.display().to_string(),
            ws.branch,
            Some(meta.id.clone()),
            meta.title,
            Some(meta.members),
            Some(created),
            messages,
        )
        .await
        .map_err(ClientError::from)?;
    if thread.id != meta.id {
        errln!("kd: thread id {} is taken; imported as {}", meta.id, thread.id);
    }
    outln!("imported {n} messages as thread {}", thread.id)?;
    Ok(ExitCode::SUCCESS)
}

/// The files of a thread directory, by name.
fn files(thread: &Thread, messages: &[Message]) -> anyhow::Result<Vec<(String, String)>> {
    let meta = ThreadFile {
        id: thread.id.clone(),
        members: thread.members.clone(),
        created_at: format_time(thread.created_at_ms)?,
        title: thread.title.clone(),
    };
    let mut out = vec![("thread.json".to_string(), serde_json::to_string_pretty(&meta)? + "\n")];
    // The thread as it is shown (kd_proto::order): answers where they were
    // asked, a retry in the place of the failure it replaced.
    for (i, m) in display_order(messages).into_iter().enumerate() {
        let mut head =
            format!("---\nfrom: {}\nto: {}\ntimestamp: {}\n", m.from, m.to.join(", "), format_time(m.created_at_ms)?);
        match m.kind {
            MessageKind::King | MessageKind::Agent => {}
            kind => head.push_str(&format!("kind: {}\n", kind.as_str())),
        }
        head.push_str("---\n\n");
        out.push((format!("{:04}-{}.md", i + 1, m.from), head + &m.body));
    }
    Ok(out)
}

/// Reads a thread directory: its metadata and messages in file order.
fn read_dir(dir: &Path) -> anyhow::Result<(ThreadFile, Vec<ImportedMessage>)> {
    let meta_path = dir.join("thread.json");
    let meta: ThreadFile = serde_json::from_str(
        &std::fs::read_to_string(&meta_path).with_context(|| format!("cannot read {}", meta_path.display()))?,
    )
    .with_context(|| format!("{} is not a thread file", meta_path.display()))?;
    let mut entries: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if let Some(n) = name.strip_suffix(".md").and_then(|s| s.split_once('-')).and_then(|(n, _)| n.parse().ok()) {
            entries.push((n, path));
        }
    }
    entries.sort();
    let mut messages = Vec::with_capacity(entries.len());
    for (_, path) in entries {
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        messages.push(parse_message(&text).with_context(|| format!("{}", path.display()))?);
    }
    Ok((meta, messages))
}

/// One message file: front matter, a blank line, the body verbatim.
fn parse_message(text: &str) -> anyhow::Result<ImportedMessage> {
    let rest = text.strip_prefix("---\n").ok_or_else(|| anyhow!("does not start with a --- front matter line"))?;
    let (head, body) = rest.split_once("\n---\n").ok_or_else(|| anyhow!("front matter has no closing --- line"))?;
    let body = body.strip_prefix('\n').unwrap_or(body);
    let (mut from, mut to, mut at, mut kind) = (None, None, None, None);
    for line in head.lines() {
        let (k, v) = line.split_once(':').ok_or_else(|| anyhow!("front matter line {line:?} is not `key: value`"))?;
        let v = v.trim();
        match k.trim() {
            "from" => from = Some(v.to_string()),
            "to" => to = Some(v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect::<Vec<_>>()),
            "timestamp" => at = Some(parse_time(v)?),
            "kind" => {
                kind = Some(
                    serde_json::from_value::<MessageKind>(serde_json::Value::String(v.to_string()))
                        .map_err(|_| anyhow!("unknown kind {v:?}"))?,
                )
            }
            _ => {}
        }
    }
    Ok(ImportedMessage {
        from: from.ok_or_else(|| anyhow!("no `from:` in the front matter"))?,
        to: to.unwrap_or_default(),
        kind,
        body: body.to_string(),
        created_at_ms: at.ok_or_else(|| anyhow!("no `timestamp:` in the front matter"))?,
    })
}

fn format_time(ms: i64) -> anyhow::Result<String> {
    let ts = jiff::Timestamp::from_millisecond(ms)?;
    Ok(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

fn parse_time(s: &str) -> anyhow::Result<i64> {
    let ts: jiff::Timestamp = s.parse().with_context(|| format!("{s:?} is not a time like 2026-02-16T19:02:08Z"))?;
    Ok(ts.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_file_round_trips_with_dashes_in_the_body() {
        let text = "---\nfrom: codex\nto: claude, gemini\ntimestamp: 2026-02-16T19:02:08Z\nkind: error\n---\n\nline\n---\nafter a rule\n";
        let m = parse_message(text).unwrap();
        assert_eq!(
            (m.from.as_str(), m.to.clone(), m.kind),
            ("codex", vec!["claude".to_string(), "gemini".to_string()], Some(MessageKind::Error))
        );
        assert_eq!(m.body, "line\n---\nafter a rule\n");
        assert_eq!(format_time(m.created_at_ms).unwrap(), "2026-02-16T19:02:08Z");
    }

    #[test]
    fn kingdom_files_parse() {
        let text = "---\nfrom: cursor\nto: king\ntimestamp: 2026-02-16T19:02:08Z\n---\n\n### Analysis\n\nBody.";
        let m = parse_message(text).unwrap();
        assert_eq!((m.from.as_str(), m.kind, m.body.as_str()), ("cursor", None, "### Analysis\n\nBody."));
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert!(parse_message("no front matter").unwrap_err().to_string().contains("---"));
        assert!(parse_message("---\nfrom: x\n").unwrap_err().to_string().contains("closing"));
        assert!(
            parse_message("---\nto: all\ntimestamp: 2026-02-16T19:02:08Z\n---\n\nb")
                .unwrap_err()
                .to_string()
                .contains("from")
        );
        assert!(
            parse_message("---\nfrom: a\ntimestamp: yesterday\n---\n\nb")
                .unwrap_err()
                .to_string()
                .contains("not a time")
        );
    }
}
