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

/// Installs the global subscriber: `RUST_LOG` (default `info`), to `file`
/// (appended, no colours) or stderr (colours on a terminal).
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .log_internal_errors(false)
        .with_writer(Lossy { queue: queue.clone() })
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))?;
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
