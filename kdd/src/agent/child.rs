//! A process kdd started for an agent or a check ([`super::process`]), as
//! its caller holds it: its pipes, its pid while it is not reaped, its
//! exit. Started by kdd's own clone ([`super::launch`]), it is waited for
//! through its pidfd; where that cannot be (not Linux, a kernel before
//! 5.3), it is tokio's child. Dropped before it was waited for, it is
//! killed, as tokio's `kill_on_drop`, and left to the reaper.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Output};

use tokio::io::AsyncReadExt;
use tokio::io::unix::AsyncFd;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

/// A process kdd started, with the ends of its pipes kdd holds.
#[derive(Debug)]
pub struct Child {
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    process: Process,
}

#[derive(Debug)]
enum Process {
    /// Cloned by kdd: its pid, a pidfd (readable once it has exited) and,
    /// once reaped, how it ended.
    Cloned { pid: u32, pidfd: AsyncFd<OwnedFd>, status: Option<ExitStatus> },
    /// Spawned by tokio.
    Tokio(tokio::process::Child),
}

impl Child {
    /// A child kdd cloned (`pid`, `pidfd`), with the ends of its pipes.
    /// Needs the runtime (the pidfd and the pipes are registered with it).
    pub fn cloned(
        pid: u32,
        pidfd: OwnedFd,
        stdin: Option<OwnedFd>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> io::Result<Child> {
        // SAFETY: `pidfd` is an open descriptor the `AsyncFd` owns until
        // it is dropped.
        #[allow(unsafe_code)]
        let pidfd = match unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) } {
            Ok(pidfd) => pidfd,
            Err(e) => {
                let (pidfd, e) = e.into_parts();
                abandon(pid, &pidfd);
                return Err(e);
            }
        };
        // Registered first: if a pipe cannot be, the child is still killed
        // and reaped when this is dropped.
        let mut child =
            Child { stdin: None, stdout: None, stderr: None, process: Process::Cloned { pid, pidfd, status: None } };
        child.stdin = stdin.map(|fd| ChildStdin::from_std(fd.into())).transpose()?;
        child.stdout = Some(ChildStdout::from_std(stdout.into())?);
        child.stderr = Some(ChildStderr::from_std(stderr.into())?);
        Ok(child)
    }

    /// A child tokio spawned (with `kill_on_drop`).
    pub fn tokio(mut child: tokio::process::Child) -> Child {
        Child {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            process: Process::Tokio(child),
        }
    }

    /// Its pid, until it is reaped.
    pub fn id(&self) -> Option<u32> {
        match &self.process {
            Process::Cloned { pid, status: None, .. } => Some(*pid),
            Process::Cloned { .. } => None,
            Process::Tokio(child) => child.id(),
        }
    }

    /// Waits for it to exit and reaps it. Cancel-safe: dropped before it
    /// returns, nothing is lost.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.process {
            Process::Tokio(child) => child.wait().await,
            Process::Cloned { pid, pidfd, status } => loop {
                if let Some(status) = status {
                    return Ok(*status);
                }
                let mut ready = pidfd.readable().await?;
                match reaped(*pid)? {
                    Some(ended) => *status = Some(ended),
                    None => ready.clear_ready(),
                }
            },
        }
    }

    /// Sends it SIGKILL (nothing when it is already reaped).
    pub fn start_kill(&mut self) -> io::Result<()> {
        match &mut self.process {
            Process::Tokio(child) => child.start_kill(),
            Process::Cloned { status: Some(_), .. } => Ok(()),
            Process::Cloned { pidfd, .. } => kill(pidfd.get_ref()),
        }
    }

    /// Kills it and waits for it.
    pub async fn kill(&mut self) -> io::Result<()> {
        self.start_kill()?;
        self.wait().await.map(|_| ())
    }

    /// Reads all it writes on its standard output and error until it exits.
    pub async fn wait_with_output(mut self) -> io::Result<Output> {
        drop(self.stdin.take());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let read_out = read_all(self.stdout.take(), &mut out);
        let read_err = read_all(self.stderr.take(), &mut err);
        let (a, b, status) = tokio::join!(read_out, read_err, self.wait());
        a?;
        b?;
        Ok(Output { status: status?, stdout: out, stderr: err })
    }
}

/// Reads `from` to its end into `into`.
async fn read_all(from: Option<impl tokio::io::AsyncRead + Unpin>, into: &mut Vec<u8>) -> io::Result<()> {
    match from {
        Some(mut from) => from.read_to_end(into).await.map(|_| ()),
        None => Ok(()),
    }
}

/// SIGKILL through the pidfd: never another process, even once `pid` is
/// reaped and reused.
fn kill(pidfd: &OwnedFd) -> io::Result<()> {
    match rustix::process::pidfd_send_signal(pidfd.as_fd(), rustix::process::Signal::KILL) {
        // Gone already (a zombie still takes signals; only a reaped one does not).
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// How `pid` (a child of kdd's) ended, if it has: reaped then.
fn reaped(pid: u32) -> io::Result<Option<ExitStatus>> {
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw);
    let Some(pid) = pid else { return Err(io::Error::other("not a pid")) };
    Ok(rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG)?
        .map(|(_, status)| ExitStatus::from_raw(status.as_raw())))
}

impl Drop for Child {
    /// Kills a child that was not waited for. It is no longer kdd's to wait
    /// for: the reaper ([`crate::identity::reaper`]) takes its zombie on
    /// the SIGCHLD its end brings (forgotten before the kill, so that the
    /// SIGCHLD comes after), or it is reaped here if it is already gone.
    fn drop(&mut self) {
        if let Process::Cloned { pid, pidfd, status: None } = &self.process {
            abandon(*pid, pidfd.get_ref());
        }
    }
}

/// Kills `pid` (through its `pidfd`) and leaves it to the reaper, or reaps
/// it if it is gone already.
fn abandon(pid: u32, pidfd: &OwnedFd) {
    crate::identity::children::forget(pid);
    let _ = kill(pidfd);
    let _ = reaped(pid);
}
