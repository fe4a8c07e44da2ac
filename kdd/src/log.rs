//! Logging that never panics and never blocks the daemon.
//!
//! `tracing` events are formatted on the thread that logs them and handed,
//! one line per event, to a bounded queue; a `kdd-log` thread writes them
//! to stderr or the log file. If the queue is full — the reader of stderr
//! stopped reading, the disk is slow — the line is dropped, and so is a
//! line whose write fails (a closed terminal, a broken pipe, a full disk).
//! Dropped lines are counted ([`dropped_lines`], shown by `daemon.status`).
//! Nothing here prints on its own: tracing-subscriber's internal error
//! reports (which `eprintln!`, and panic on a closed stderr) are off.
//!
//! When stderr is the journal (`JOURNAL_STREAM` names its device and inode,
//! as systemd sets it), lines are in the journal's format: a `<N>` syslog
//! priority prefix and no timestamp or colours (the journal adds its own).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting for the logging thread at most.
const QUEUE: usize = 4096;

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines lost since the daemon started.
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn dropped() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

enum Msg {
    Line(Vec<u8>),
    /// Answered once every line before it is written.
    Flush(SyncSender<()>),
}

/// The writer tracing makes for each event: collects the line, queues it
/// when dropped.
pub struct Line {
    buf: Vec<u8>,
    queue: SyncSender<Msg>,
}

impl Write for Line {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self.queue.try_send(Msg::Line(std::mem::take(&mut self.buf))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => dropped(),
        }
    }
}

#[derive(Clone)]
struct Lossy {
    queue: SyncSender<Msg>,
}

impl<'a> MakeWriter<'a> for Lossy {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { buf: Vec::new(), queue: self.queue.clone() }
    }
}

/// The logging thread's end: flushed at exit, for at most a moment.
pub struct Logging {
    queue: SyncSender<Msg>,
}

impl Logging {
    /// Waits up to `within` for the queued lines to be written. A stuck
    /// stderr does not hold the daemon's exit.
    pub fn finish(self, within: Duration) {
        let (ack, done) = sync_channel(1);
        if self.queue.try_send(Msg::Flush(ack)).is_ok() {
            let _ = done.recv_timeout(within);
        }
    }
}

/// Whether `JOURNAL_STREAM` (`DEV:INODE`) names the file stderr is.
// `st_dev` and `st_ino` are not u64 on every platform.
#[allow(clippy::unnecessary_cast)]
fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else { return false };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else { return false };
    match rustix::fs::fstat(std::io::stderr()) {
        Ok(st) => st.st_dev as u64 == dev && st.st_ino as u64 == ino,
        Err(_) => false,
    }
}

/// Events as the journal reads them from a stream: `<N>target: message`,
/// N the syslog priority of the level.
struct Journal;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Journal
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        write!(writer, "<{}>{}: ", priority(*meta.level()), meta.target())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The syslog priority of a level (sd-daemon(3)).
fn priority(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

/// Installs the global subscriber: `RUST_LOG` (default `info`), to `file`
/// (appended, no colours) or stderr (colours on a terminal; the journal's
/// format when it is the journal).
pub fn init(file: Option<&Path>) -> anyhow::Result<Logging> {
    use anyhow::Context;
    use std::io::IsTerminal;
    let (sink, ansi): (Box<dyn Write + Send>, bool) = match file {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            (Box::new(f), false)
        }
        None => (Box::new(std::io::stderr()), std::io::stderr().is_terminal()),
    };
    let (queue, lines) = sync_channel(QUEUE);
    std::thread::Builder::new()
        .name("kdd-log".into())
        .spawn(move || write_lines(lines, sink))
        .context("cannot start the logging thread")?;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let journal = file.is_none() && stderr_is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi && !journal)
        .log_internal_errors(false)
        .with_writer(Lossy { queue: queue.clone() });
    let installed = match journal {
        true => builder.event_format(Journal).try_init(),
        false => builder.try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))?;
    Ok(Logging { queue })
}

fn write_lines(lines: Receiver<Msg>, mut sink: Box<dyn Write + Send>) {
    for msg in lines {
        match msg {
            Msg::Line(line) => {
                if sink.write_all(&line).is_err() {
                    dropped();
                }
            }
            Msg::Flush(ack) => {
                let _ = sink.flush();
                let _ = ack.try_send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_is_stderr_only_when_its_device_and_inode_match() {
        let st = rustix::fs::fstat(std::io::stderr()).unwrap();
        let mine = format!("{}:{}", st.st_dev, st.st_ino);
        assert!(stderr_is_journal(Some(&mine)));
        for other in [format!("{}:{}", st.st_dev, st.st_ino as u64 + 1), "x:1".into(), "12".into()] {
            assert!(!stderr_is_journal(Some(&other)), "{other}");
        }
        assert!(!stderr_is_journal(None));
        assert_eq!(
            [3, 4, 6, 7],
            [tracing::Level::ERROR, tracing::Level::WARN, tracing::Level::INFO, tracing::Level::DEBUG].map(priority)
        );
    }

    struct Failing;

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
    }

    #[test]
    fn failed_writes_and_a_full_queue_lose_lines_and_count_them() {
        let before = dropped_lines();
        let (queue, lines) = sync_channel(2);
        let lossy = Lossy { queue };
        for _ in 0..5 {
            let mut w = lossy.make_writer();
            w.write_all(b"a line\n").unwrap();
        }
        assert!(dropped_lines() >= before + 3, "the queue holds two; three are dropped");
        drop(lossy);
        write_lines(lines, Box::new(Failing));
        assert!(dropped_lines() >= before + 5, "both queued lines fail to write");
    }
}
