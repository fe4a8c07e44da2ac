//! What the bench binaries share: the printed rows, and the table of SPEC
//! §9 rows with their verdicts that `cargo bench -p kd-tests --bench spec`
//! prints at the end. Figures are measured, never asserted: a bench prints
//! and goes on.

pub mod approval;
pub mod chat;
pub mod cluster;
pub mod codex;
pub mod cost;
pub mod daemon;
pub mod kd_mcp;
pub mod mcp_start;
pub mod memory;
pub mod notify;
pub mod runs;
pub mod scale;
pub mod web;
pub mod work_check;
pub mod work_start;

use std::sync::Mutex;
use std::time::Duration;

/// One printed figure; `pass` is set for a row with a SPEC target.
#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub measured: String,
    pub target: String,
    pub pass: Option<bool>,
}

static ROWS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

fn record(row: Row) {
    println!(
        "{:<56} {:>18} {:>18}{}",
        row.what,
        row.measured,
        row.target,
        match row.pass {
            Some(true) => "  pass",
            Some(false) => "  FAIL",
            None => "",
        }
    );
    if let Ok(mut rows) = ROWS.lock() {
        rows.push(row);
    }
}

/// A figure without a verdict (context for the rows around it).
/// Each of `clients` appends `each` messages to `thread`, all at once;
/// returns when every one has been answered.
pub async fn append_from(clients: Vec<kd_client::Client>, thread: &str, each: usize) {
    let mut tasks = Vec::new();
    for c in clients {
        let thread = thread.to_string();
        tasks.push(tokio::spawn(async move {
            for i in 0..each {
                crate::append(&c, &thread, "claude", format!("message {i}"), &[]).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
}

/// `kd ask --rounds 0 Quick?` in `ws` against the daemon on `socket`,
/// start to exit (it must succeed).
pub fn kd_ask(socket: &std::path::Path, ws: &std::path::Path) -> std::time::Duration {
    kd_ask_by(&crate::bin("kd"), socket, ws, &[])
}

/// [`kd_ask`] run by `kd` (the built one, or a program running it), with
/// `more` arguments of `kd ask` (e.g. `--thread ID`).
pub fn kd_ask_by(
    kd: &std::path::Path,
    socket: &std::path::Path,
    ws: &std::path::Path,
    more: &[&str],
) -> std::time::Duration {
    let start = std::time::Instant::now();
    let out = std::process::Command::new(kd)
        .arg("--socket")
        .arg(socket)
        .args(["ask", "--rounds", "0"])
        .args(more)
        .arg("Quick?")
        .current_dir(ws)
        .env("KD_NO_AUTOSTART", "1")
        .output()
        .expect("kd ask");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    start.elapsed()
}

pub fn row(what: &str, measured: String, target: &str) {
    record(Row { what: what.into(), measured, target: target.into(), pass: None });
}

/// A figure measured against its SPEC target.
pub fn check(what: &str, measured: String, target: &str, pass: bool) {
    record(Row { what: what.into(), measured, target: target.into(), pass: Some(pass) });
}

/// The rows with a verdict, in the order they were measured.
pub fn checked() -> Vec<Row> {
    ROWS.lock().map(|r| r.iter().filter(|r| r.pass.is_some()).cloned().collect()).unwrap_or_default()
}

/// Prints the header of a bench's figures.
pub fn header(what: &str) {
    println!("{what} ({} cores)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    println!("{:<56} {:>18} {:>18}", "measure", "value", "target");
}

/// Runs a bench's body on a multi-threaded runtime, as kdd's clients run.
pub fn block_on<T>(body: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime").block_on(body)
}

/// Whether a group runs: all of them, or those named on the command line
/// (`cargo bench -p kd-tests --bench daemon -- append`).
pub fn selected(name: &str) -> bool {
    let names: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    names.is_empty() || names.iter().any(|n| name.contains(n.as_str()))
}

/// The `p` quantile of sorted samples.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// User + system CPU time a process has used so far (from /proc).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11..13).map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum()).unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// Resident memory of a process now, in MiB (VmRSS).
pub fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:") as f64 / 1024.0
}

/// Peak resident memory of a process so far, in MiB (VmHWM).
pub fn peak_rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmHWM:") as f64 / 1024.0
}

/// Resident memory of a process in MiB: (mapped from files, its code
/// first; anonymous: heaps and stacks). `RssFile` depends on the page
/// cache: the kernel maps the cached pages around each page touched.
pub fn rss_split_mib(pid: u32) -> (f64, f64) {
    (status_kib(pid, "RssFile:") as f64 / 1024.0, status_kib(pid, "RssAnon:") as f64 / 1024.0)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
