//! `kd daemon start|stop|status|restart|install|uninstall`. They talk to the daemon over
//! plain HTTP ([`kd_client::http`]), which always gets in: the daemon keeps
//! a few connections free for it when every WebSocket slot is taken.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use kd_client::{ClientError, autostart, http};
use kd_proto::paths;
use kd_proto::types::{DaemonStatus, Hello, ShutdownAck};

use super::{Ctx, print_json};
use crate::fmt;

mod install;
mod units;

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Start kdd in the background (nothing happens if it runs already)
    Start,
    /// Stop kdd gracefully and wait until it has exited
    Stop(StopArgs),
    /// Show whether kdd runs, and its status
    Status(StatusArgs),
    /// Stop kdd if it runs, then start it
    Restart,
    /// Run kdd as a user service: systemd (kdd.socket + kdd.service) or
    /// launchd starts it on the first connection to kd's socket
    Install(install::ServiceArgs),
    /// Remove what `kd daemon install` set up
    Uninstall(install::ServiceArgs),
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// End the exchanges in flight for good instead of resuming them at the next start
    #[arg(long)]
    no_resume: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// How long `stop` waits for the daemon to exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(ctx: &Ctx, cmd: DaemonCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DaemonCommand::Start => start(ctx).await,
        DaemonCommand::Stop(a) => stop(ctx, !a.no_resume).await,
        DaemonCommand::Status(a) => status(ctx, a).await,
        DaemonCommand::Restart => {
            // A node of a shared registry is started as one (its --db, its
            // --node), by its service or by hand: unless KD_DB names a
            // shared registry, kd would start another daemon in its place,
            // so it leaves it running.
            if !autostart::starts_a_node()
                && let Ok(s) = http::call::<DaemonStatus>(&ctx.socket, "daemon.status", serde_json::json!({})).await
                && s.engine == "postgres"
            {
                anyhow::bail!(
                    "kdd on {} is node {} of a shared registry: kd starts no node by itself, so it does not \
                     restart it; restart it by its service, or stop it and start it as it was started \
                     (kdd --db … --node {})",
                    ctx.socket.display(),
                    s.node,
                    s.node
                );
            }
            // What was in flight resumes in the daemon started again.
            stop(ctx, true).await?;
            start(ctx).await
        }
        DaemonCommand::Install(a) => install::install(ctx, a).await,
        DaemonCommand::Uninstall(a) => install::uninstall(ctx, a).await,
    }
}

/// `daemon.hello` over HTTP.
async fn hello(ctx: &Ctx) -> Result<Hello, ClientError> {
    http::call(&ctx.socket, "daemon.hello", serde_json::json!({})).await
}

async fn start(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    match hello(ctx).await {
        Ok(h) => {
            plainln!("kdd already running (pid {}) on {}", h.pid, ctx.socket.display())?;
            return Ok(ExitCode::SUCCESS);
        }
        // Only when nothing listens: a refused or forbidden connection
        // may well have a daemon behind it.
        Err(ClientError::Unreachable { nothing_listens: true, .. }) => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(node) = autostart::stopped_node(&ctx.socket) {
        anyhow::bail!(
            "{} was served by {node}, a shared registry: kd starts no node by itself; start that node again \
             (kdd --db … --node …, or its service)",
            ctx.socket.display()
        );
    }
    autostart::start(&ctx.socket).await?;
    let h = hello(ctx).await?;
    plainln!("kdd started (pid {}) on {}", h.pid, ctx.socket.display())?;
    Ok(ExitCode::SUCCESS)
}

/// Stops the daemon; `resume`: it resumes the exchanges it cuts at its
/// next start (else they end for good).
async fn stop(ctx: &Ctx, resume: bool) -> anyhow::Result<ExitCode> {
    let status = http::call::<DaemonStatus>(&ctx.socket, "daemon.status", serde_json::json!({})).await;
    let (pid, activated) = match status {
        Ok(s) => (s.pid, s.socket_activated),
        Err(ClientError::Unreachable { nothing_listens: true, .. }) => {
            plainln!("kdd is not running on {}", ctx.socket.display())?;
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    // Watched from before it is asked to stop: by the time it is waited on,
    // its pid cannot be another process's.
    let process = Process::watch(pid);
    let params = if resume { serde_json::json!({}) } else { serde_json::json!({"resume": false}) };
    let _: ShutdownAck = http::call(&ctx.socket, "daemon.shutdown", params).await?;
    wait_exited(ctx).await?;
    if !process.exited(STOP_TIMEOUT).await {
        anyhow::bail!("kdd (pid {pid}) did not exit within {} s", STOP_TIMEOUT.as_secs());
    }
    plainln!("kdd stopped (pid {pid})")?;
    if activated {
        plainln!(
            "its service manager still listens on {} and starts kdd on the next connection",
            ctx.socket.display()
        )?;
        plainln!("to keep it stopped: systemctl --user stop kdd.socket (or kd daemon uninstall)")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The daemon's process, for waiting until it has exited: it releases its
/// lock before it is done (it still writes its last log lines), and
/// README promises that `kd daemon stop` returns once kdd is gone.
struct Process {
    pid: u32,
    /// A pidfd (Linux), readable once the process has exited.
    fd: Option<std::os::fd::OwnedFd>,
}

impl Process {
    fn watch(pid: u32) -> Process {
        #[cfg(target_os = "linux")]
        {
            let fd = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
                .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::NONBLOCK).ok());
            Process { pid, fd }
        }
        #[cfg(not(target_os = "linux"))]
        Process { pid, fd: None }
    }

    /// Whether a process with this pid exists (a pid this kd cannot see —
    /// another pid namespace — is taken as gone).
    fn alive(&self) -> bool {
        i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
    }

    /// Whether the process exited within `within` (waiting for it).
    async fn exited(mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        if let Some(fd) = self.fd.take() {
            // Readable once the process is gone (a zombie included).
            let wait = tokio::task::spawn_blocking(move || {
                use rustix::event::{PollFd, PollFlags, Timespec, poll};
                let timeout = Timespec::try_from(within).unwrap_or(Timespec { tv_sec: 30, tv_nsec: 0 });
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                loop {
                    match poll(&mut fds, Some(&timeout)) {
                        Err(rustix::io::Errno::INTR) => continue,
                        other => return other,
                    }
                }
            });
            if let Ok(Ok(ready)) = wait.await {
                return ready > 0;
            }
        }
        // Without a pidfd: looked at every few milliseconds.
        loop {
            if !self.alive() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Waits until the daemon has released its lock file, which the kernel does
/// when the process exits, if the daemon has not already.
async fn wait_exited(ctx: &Ctx) -> anyhow::Result<()> {
    let lock_path = paths::lock_path(&ctx.socket);
    let file = match std::fs::File::open(&lock_path) {
        Ok(f) => f,
        Err(_) => return Ok(()),
    };
    let waited = tokio::time::timeout(STOP_TIMEOUT, tokio::task::spawn_blocking(move || file.lock_shared())).await;
    match waited {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(anyhow::anyhow!("cannot wait for kdd to exit: {e}")),
        Ok(Err(e)) => Err(anyhow::anyhow!("cannot wait for kdd to exit: {e}")),
        Err(_) => Err(anyhow::anyhow!("kdd did not exit within {} s", STOP_TIMEOUT.as_secs())),
    }
}

async fn status(ctx: &Ctx, a: StatusArgs) -> anyhow::Result<ExitCode> {
    let s: DaemonStatus = match http::call(&ctx.socket, "daemon.status", serde_json::json!({})).await {
        Ok(s) => s,
        Err(ClientError::Unreachable { nothing_listens: true, .. }) if !a.json => {
            plainln!("kdd is not running on {}", ctx.socket.display())?;
            return Ok(ExitCode::from(3));
        }
        Err(e) => return Err(e.into()),
    };
    if a.json {
        print_json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    plainln!("kdd {} running (pid {}, up {})", s.version, s.pid, fmt::duration_ms(s.uptime_ms))?;
    plainln!("  socket    {}", s.socket)?;
    let engine = if s.engine.is_empty() { "sqlite" } else { s.engine.as_str() };
    plainln!("  database  {} ({engine}, schema {})", s.db, s.schema_version)?;
    if !s.node.is_empty() {
        plainln!("  node      {}", kd_client::terminal::safe(&s.node))?;
    }
    let others: Vec<String> = s
        .nodes
        .iter()
        .filter(|n| !n.this)
        .map(|n| {
            let (id, host) = (kd_client::terminal::safe(&n.id), kd_client::terminal::safe(&n.host));
            format!("{id} ({host}, pid {}, {} ms ago)", n.pid, n.heartbeat_ms_ago)
        })
        .collect();
    if !others.is_empty() {
        plainln!("  others    {}", others.join(", "))?;
    }
    plainln!("  protocol  {}", s.protocol)?;
    if s.socket_activated {
        plainln!("  started   by the service manager (socket activation)")?;
    }
    plainln!("  threads   {}", s.threads)?;
    plainln!("  runs      {} in flight", s.runs_in_flight)?;
    plainln!("  clients   {} connected, {} subscriptions", s.clients, s.subscriptions)?;
    Ok(ExitCode::SUCCESS)
}
