//! `kd export THREAD DIR` and `kd import DIR`: Kingdom thread directories.
//!
//! A thread is a directory of `NNNN-sender.md` message files
//! ([`frontmatter`]) and, when kd writes it, a `thread.json` (`id`,
//! `members`, `created_at`, `title`). Kingdom does not commit its
//! `thread.json`: without one the id is the directory's name, the members
//! are the senders, and the thread starts at its first message. Export
//! writes the thread as it is shown (`kd_proto::order`), numbered from 1;
//! export → import → export gives the same bytes.
//!
//! `kd import --kingdom [DIR]` imports every thread of a Kingdom `.kd/`
//! tree — `branches/*/threads/*` and `archive/*/threads/*` — each once: a
//! second run imports nothing new.
//!
//! Reading is bounded: only regular files are read (a FIFO, a device or a
//! symlink is skipped with a warning), each at most [`MAX_FILE`] bytes and
//! a thread at most [`MAX_THREAD`].

use kd_client::frontmatter;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use kd_client::prelude::*;
use kd_client::reading::InOrder;
use kd_client::{ClientError, workspace};
use kd_proto::ErrorCode;
use kd_proto::names::{KING, check_thread_id};
use kd_proto::types::{ImportedMessage, Thread};
use serde::{Deserialize, Serialize};

use super::Ctx;
use frontmatter::{format_time, parse_message, parse_time, write_message};

/// Largest message file read.
pub const MAX_FILE: u64 = 8 * 1024 * 1024;
/// Largest thread read (the whole import is one request under the daemon's
/// 16 MiB bound).
pub const MAX_THREAD: u64 = 15 * 1024 * 1024;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Thread id
    thread: String,
    /// Directory to write (created; must be empty if it exists)
    dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A thread directory written by `kd export` or Kingdom; with
    /// --kingdom, a Kingdom project or its .kd directory [default: this workspace]
    dir: Option<PathBuf>,
    /// Import every thread of a Kingdom .kd/ tree, all branches and the archive (again: only new ones)
    #[arg(long)]
    kingdom: bool,
    /// The workspace the thread belongs to [default: this one; with --kingdom, the project]
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
    if a.dir.exists() && std::fs::read_dir(&a.dir)?.next().is_some() {
        bail!("{} is not empty", a.dir.display());
    }
    // Page by page, in the order the thread is shown (kd_proto::order):
    // answers where they were asked, a retry in the place of the failure
    // it replaced.
    let mut reader = InOrder::open(&client, &thread.id).await?;
    std::fs::create_dir_all(&a.dir).with_context(|| format!("cannot create {}", a.dir.display()))?;
    let write = |name: &str, text: &str| {
        let path = a.dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write("thread.json", &thread_file(&thread)?)?;
    let mut n = 0;
    while let Some(m) = reader.next().await? {
        n += 1;
        write(&format!("{n:04}-{}.md", m.from), &write_message(&m)?)?;
    }
    plainln!("exported {} of {} to {}", crate::fmt::count(n as u64, "message"), thread.id, a.dir.display())?;
    Ok(ExitCode::SUCCESS)
}

pub async fn import(ctx: &Ctx, a: ImportArgs) -> anyhow::Result<ExitCode> {
    if a.kingdom {
        return import_kingdom(ctx, a).await;
    }
    let dir = a.dir.ok_or_else(|| anyhow!("name the thread directory to import (or use --kingdom)"))?;
    let thread = read_dir(&dir)?;
    let root = match a.workspace {
        Some(w) => w.canonicalize().with_context(|| format!("no workspace {}", w.display()))?,
        None => workspace::current()?.root,
    };
    let ws = workspace::detect(&root);
    let client = ctx.client().await?;
    let n = thread.messages.len();
    let wanted = thread.id.clone();
    let imported = send(&client, &ws.root, ws.branch, thread, None).await?.map_err(ClientError::from)?;
    if wanted.as_ref().is_some_and(|w| *w != imported.id) {
        errln!("kd: thread id {} is taken; imported as {}", wanted.unwrap_or_default(), imported.id);
    }
    plainln!("imported {} as thread {}", crate::fmt::count(n as u64, "message"), imported.id)?;
    Ok(ExitCode::SUCCESS)
}

/// A thread directory as read.
struct ReadThread {
    id: Option<String>,
    title: Option<String>,
    members: Vec<String>,
    created_at_ms: Option<i64>,
    messages: Vec<ImportedMessage>,
    /// Files that were not read, and why.
    skipped: Vec<String>,
}

async fn send(
    client: &kd_client::Client,
    root: &Path,
    branch: Option<String>,
    t: ReadThread,
    origin: Option<String>,
) -> anyhow::Result<Result<Thread, jsonrpsee::core::client::Error>> {
    for s in &t.skipped {
        errln!("kd: skipped {s}");
    }
    Ok(client
        .thread_import(
            root.display().to_string(),
            branch,
            t.id,
            t.title,
            Some(t.members),
            t.created_at_ms,
            t.messages,
            origin,
        )
        .await)
}

/// `kd import --kingdom`: every thread of a Kingdom tree, each once.
async fn import_kingdom(ctx: &Ctx, a: ImportArgs) -> anyhow::Result<ExitCode> {
    let start = match a.dir {
        Some(d) => d,
        None => workspace::current()?.root,
    };
    let kd_dir = if start.file_name().is_some_and(|n| n == ".kd") { start.clone() } else { start.join(".kd") };
    let kd_dir = kd_dir.canonicalize().with_context(|| format!("no Kingdom tree (.kd) at {}", start.display()))?;
    let project = kd_dir.parent().map(Path::to_path_buf).unwrap_or_else(|| kd_dir.clone());
    let root = match a.workspace {
        Some(w) => w.canonicalize().with_context(|| format!("no workspace {}", w.display()))?,
        None => project,
    };
    let client = ctx.client().await?;
    let (mut threads, mut messages, mut already) = (0, 0, 0);
    for found in kingdom_threads(&kd_dir)? {
        let t = read_dir(&found.dir).with_context(|| format!("{}", found.dir.display()))?;
        let n = t.messages.len();
        let origin = format!("kingdom:{}", found.dir.display());
        match send(&client, &root, Some(found.branch.clone()), t, Some(origin)).await? {
            Ok(thread) => {
                if found.archived {
                    client.thread_archive(thread.id.clone()).await.map_err(ClientError::from)?;
                }
                threads += 1;
                messages += n;
            }
            Err(e) => match ClientError::from(e) {
                e if e.code() == Some(ErrorCode::AlreadyExists) => already += 1,
                e => return Err(e.into()),
            },
        }
    }
    plainln!(
        "imported {} ({}) from {}; {already} already imported",
        crate::fmt::count(threads as u64, "thread"),
        crate::fmt::count(messages as u64, "message"),
        kd_dir.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A thread directory of a Kingdom tree.
struct Found {
    dir: PathBuf,
    branch: String,
    archived: bool,
}

/// `branches/*/threads/*` and `archive/*/threads/*` (Kingdom's backlog
/// aside), in name order. Symlinks are not followed.
fn kingdom_threads(kd_dir: &Path) -> anyhow::Result<Vec<Found>> {
    let mut out = Vec::new();
    for (sub, archived) in [("branches", false), ("archive", true)] {
        for branch in subdirs(&kd_dir.join(sub))? {
            let name = branch.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if archived && name == "backlog" {
                continue;
            }
            for dir in subdirs(&branch.join("threads"))? {
                out.push(Found { dir, branch: name.clone(), archived });
            }
        }
    }
    Ok(out)
}

/// The real directories in `dir` (none if it does not exist), sorted.
fn subdirs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The files of a thread, by name.
/// `thread.json` of an export: the thread's id, members, time and title.
fn thread_file(thread: &Thread) -> anyhow::Result<String> {
    let meta = ThreadFile {
        id: thread.id.clone(),
        members: thread.members.clone(),
        created_at: format_time(thread.created_at_ms)?,
        title: thread.title.clone(),
    };
    Ok(serde_json::to_string_pretty(&meta)? + "\n")
}

/// Reads a regular file of at most `limit` bytes (no symlink, FIFO or device).
fn read_bounded(path: &Path, limit: u64) -> anyhow::Result<Result<String, String>> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.file_type().is_file() {
        return Ok(Err(format!("{}: not a regular file", path.display())));
    }
    if meta.len() > limit {
        return Ok(Err(format!("{}: {} bytes, over the {limit} byte limit", path.display(), meta.len())));
    }
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Ok(Err(format!("{}: grew over the {limit} byte limit", path.display())));
    }
    String::from_utf8(bytes).map(Ok).map_err(|_| anyhow!("{} is not UTF-8 text", path.display()))
}

/// Reads a thread directory: its metadata (from `thread.json` when there
/// is one) and its messages in file order.
fn read_dir(dir: &Path) -> anyhow::Result<ReadThread> {
    let mut skipped = Vec::new();
    let mut entries: Vec<(u64, String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if let Some(n) = name.strip_suffix(".md").and_then(|s| s.split_once('-')).and_then(|(n, _)| n.parse().ok()) {
            entries.push((n, name, path));
        }
    }
    entries.sort();
    let mut total = 0u64;
    let mut messages = Vec::with_capacity(entries.len());
    for (_, _, path) in entries {
        let text = match read_bounded(&path, MAX_FILE)? {
            Ok(text) => text,
            Err(why) => {
                skipped.push(why);
                continue;
            }
        };
        total += text.len() as u64;
        if total > MAX_THREAD {
            bail!(
                "{} holds more than {MAX_THREAD} bytes of messages; kd imports threads up to that size",
                dir.display()
            );
        }
        messages.push(parse_message(&text).with_context(|| format!("{}", path.display()))?);
    }
    let meta_path = dir.join("thread.json");
    let meta = match read_bounded(&meta_path, MAX_FILE) {
        Ok(Ok(text)) => Some(
            serde_json::from_str::<ThreadFile>(&text)
                .with_context(|| format!("{} is not a thread file", meta_path.display()))?,
        ),
        Ok(Err(why)) => {
            skipped.push(why);
            None
        }
        // Kingdom does not commit thread.json.
        Err(_) => None,
    };
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let id = meta.as_ref().map(|m| m.id.clone()).or(dir_name).filter(|id| check_thread_id(id).is_ok());
    let mut members: Vec<String> = match &meta {
        Some(m) => m.members.iter().filter_map(|m| frontmatter::member_name(m).ok()).collect(),
        None => messages.iter().map(|m| m.from.clone()).collect(),
    };
    // Kingdom lists the King among the members; kd does not.
    members.retain(|m| m != KING);
    let mut unique = Vec::new();
    for m in members {
        if !unique.contains(&m) {
            unique.push(m);
        }
    }
    let created_at_ms = match &meta {
        Some(m) => Some(parse_time(&m.created_at).with_context(|| format!("{}: created_at", meta_path.display()))?),
        None => messages.first().map(|m| m.created_at_ms),
    };
    // A title kd would refuse is left out: the daemon then titles the
    // thread from its first King message.
    let title = meta.and_then(|m| m.title).and_then(|t| match kd_proto::title::check_title(&t) {
        Ok(t) => Some(t),
        Err(e) => {
            skipped.push(format!("{}: title {e}; titled from the first message instead", meta_path.display()));
            None
        }
    });
    Ok(ReadThread { id, title, members: unique, created_at_ms, messages, skipped })
}
