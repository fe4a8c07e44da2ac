//! A listening socket handed over by the service manager (socket
//! activation, F-D6): systemd's `LISTEN_FDS`/`LISTEN_PID`/`LISTEN_FDNAMES`
//! on Linux, `launch_activate_socket("kdd")` on macOS.
//!
//! What is passed is checked before it is used: the variables must be meant
//! for this process (`LISTEN_PID`), well formed, and name exactly one
//! socket kdd can take (the one named `kdd`, or the only one); that socket
//! must be a listening Unix stream socket bound to a path. Anything else is
//! a clear error rather than a daemon that listens nowhere. The sockets kd
//! does not take are made close-on-exec, so no agent inherits them.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use anyhow::{Context, bail};

/// The name kd's units give the socket (`FileDescriptorName=`, the launchd
/// `Sockets` key).
pub const SOCKET_NAME: &str = "kdd";

/// A socket the service manager listens on for kdd.
#[derive(Debug)]
pub struct Inherited {
    pub listener: UnixListener,
    /// The path it is bound to.
    pub path: PathBuf,
}

/// The socket passed by the service manager, if one was.
pub fn inherited() -> anyhow::Result<Option<Inherited>> {
    #[cfg(target_os = "macos")]
    if let Some(listener) = launchd::activate(SOCKET_NAME)? {
        return checked(listener).map(Some);
    }
    let vars = Vars::from_env();
    let Some(index) = vars.choose(std::process::id())? else {
        return Ok(None);
    };
    let mut fds = listenfd::ListenFd::from_env();
    let listener = fds
        .take_unix_listener(index)
        .with_context(|| format!("the socket passed by the service manager (fd {}) cannot be used", 3 + index))?
        .with_context(|| format!("the service manager passed no fd {}", 3 + index))?;
    // The others are not kd's: systemd passes them without close-on-exec,
    // and no agent (nor anything else kdd runs) may inherit them.
    for other in (0..fds.len()).filter(|i| *i != index) {
        if let Ok(Some(fd)) = fds.take_raw_fd(other)
            && let Err(e) = close_on_exec(fd)
        {
            tracing::warn!("cannot mark fd {fd} from the service manager close-on-exec: {e}");
        }
    }
    checked(listener).map(Some)
}

/// Marks `fd` close-on-exec. Only a number is known of a descriptor kd does
/// not take: nothing owns it to borrow from.
#[allow(unsafe_code)]
fn close_on_exec(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(rustix::io::Errno::BADF.raw_os_error()));
    }
    // SAFETY: a descriptor the service manager passed to this process
    // (LISTEN_PID names it), which kdd never closes, borrowed for one
    // fcntl; a number that is not open fails with EBADF.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    Ok(())
}

/// Listening, and bound to a path kd can find.
fn checked(listener: UnixListener) -> anyhow::Result<Inherited> {
    #[cfg(not(target_vendor = "apple"))]
    if !rustix::net::sockopt::socket_acceptconn(&listener).context("cannot inspect the passed socket")? {
        bail!("the socket passed by the service manager is not listening");
    }
    let addr = listener.local_addr().context("cannot read the passed socket's address")?;
    let Some(path) = addr.as_pathname() else {
        bail!("the socket passed by the service manager has no path (use ListenStream=/path/to/kdd.sock)");
    };
    let path = path.to_path_buf();
    listener.set_nonblocking(true).context("cannot make the passed socket non-blocking")?;
    Ok(Inherited { listener, path })
}

/// systemd's variables, as read from the environment.
#[derive(Debug, Default, Clone)]
struct Vars {
    fds: Option<String>,
    pid: Option<String>,
    names: Option<String>,
}

impl Vars {
    fn from_env() -> Vars {
        let var = |k: &str| std::env::var(k).ok();
        Vars { fds: var("LISTEN_FDS"), pid: var("LISTEN_PID"), names: var("LISTEN_FDNAMES") }
    }

    /// The index (from fd 3) of the socket to take, `None` when nothing was
    /// passed to this process.
    fn choose(&self, own_pid: u32) -> anyhow::Result<Option<usize>> {
        let Some(fds) = self.fds.as_deref() else { return Ok(None) };
        match self.pid.as_deref().map(str::parse::<u32>) {
            Some(Ok(pid)) if pid == own_pid => {}
            // Meant for another process (an ancestor that exec'd us without
            // clearing them): not ours to take.
            Some(Ok(pid)) => {
                tracing::warn!("LISTEN_FDS is set for pid {pid}, not this process ({own_pid}); ignored");
                return Ok(None);
            }
            Some(Err(_)) => bail!("LISTEN_PID is not a process id: {:?}", self.pid.as_deref().unwrap_or_default()),
            None => bail!("LISTEN_FDS is set without LISTEN_PID; refusing to guess whose sockets they are"),
        }
        let count: usize = fds.parse().map_err(|_| anyhow::anyhow!("LISTEN_FDS is not a number: {fds:?}"))?;
        if count == 0 {
            return Ok(None);
        }
        let names: Vec<&str> = match self.names.as_deref() {
            Some(n) => n.split(':').collect(),
            None => Vec::new(),
        };
        if !names.is_empty() && names.len() != count {
            bail!("LISTEN_FDNAMES names {} socket(s) but LISTEN_FDS passes {count}", names.len());
        }
        if let Some(i) = names.iter().position(|n| *n == SOCKET_NAME) {
            return Ok(Some(i));
        }
        if count == 1 {
            return Ok(Some(0));
        }
        bail!("the service manager passed {count} sockets and none is named {SOCKET_NAME:?} (FileDescriptorName=)")
    }
}

/// macOS: the socket launchd holds for the `Sockets` entry of the plist.
#[cfg(target_os = "macos")]
#[allow(unsafe_code)]
mod launchd {
    use std::ffi::CString;
    use std::os::fd::FromRawFd;
    use std::os::raw::{c_char, c_int};
    use std::os::unix::net::UnixListener;

    unsafe extern "C" {
        fn launch_activate_socket(name: *const c_char, fds: *mut *mut c_int, cnt: *mut usize) -> c_int;
        fn free(p: *mut std::ffi::c_void);
    }

    /// ESRCH: not managed by launchd; ENOENT: no such socket in the plist.
    const ESRCH: c_int = 3;
    const ENOENT: c_int = 2;

    pub fn activate(name: &str) -> anyhow::Result<Option<UnixListener>> {
        let cname = CString::new(name)?;
        let mut fds: *mut c_int = std::ptr::null_mut();
        let mut cnt: usize = 0;
        // SAFETY: launchd allocates `fds` (freed below) and sets `cnt`.
        let rc = unsafe { launch_activate_socket(cname.as_ptr(), &mut fds, &mut cnt) };
        if rc == ESRCH || rc == ENOENT {
            return Ok(None);
        }
        if rc != 0 {
            anyhow::bail!("launch_activate_socket({name}) failed: {}", std::io::Error::from_raw_os_error(rc));
        }
        // SAFETY: `fds` points at `cnt` descriptors that are now ours.
        let taken: Vec<c_int> = (0..cnt).map(|i| unsafe { *fds.add(i) }).collect();
        unsafe { free(fds.cast()) };
        let mut taken = taken.into_iter();
        let first = taken.next();
        for fd in taken {
            // SAFETY: ours and unused: closed by the drop.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        }
        // SAFETY: a socket launchd made for us, owned from here on.
        Ok(first.map(|fd| unsafe { UnixListener::from_raw_fd(fd) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(fds: Option<&str>, pid: Option<&str>, names: Option<&str>) -> Vars {
        Vars { fds: fds.map(String::from), pid: pid.map(String::from), names: names.map(String::from) }
    }

    fn err(v: &Vars) -> String {
        v.choose(42).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn nothing_passed_is_none() -> anyhow::Result<()> {
        assert_eq!(vars(None, None, None).choose(42)?, None);
        assert_eq!(vars(Some("0"), Some("42"), None).choose(42)?, None);
        Ok(())
    }

    #[test]
    fn sockets_for_another_process_are_not_taken() -> anyhow::Result<()> {
        assert_eq!(vars(Some("1"), Some("41"), None).choose(42)?, None);
        Ok(())
    }

    #[test]
    fn one_socket_is_taken_named_or_not() -> anyhow::Result<()> {
        assert_eq!(vars(Some("1"), Some("42"), None).choose(42)?, Some(0));
        assert_eq!(vars(Some("1"), Some("42"), Some("whatever")).choose(42)?, Some(0));
        Ok(())
    }

    #[test]
    fn among_several_the_one_named_kdd_is_taken() -> anyhow::Result<()> {
        assert_eq!(vars(Some("3"), Some("42"), Some("a:kdd:b")).choose(42)?, Some(1));
        Ok(())
    }

    #[test]
    fn malformed_variables_are_refused() {
        assert!(err(&vars(Some("1"), None, None)).contains("without LISTEN_PID"));
        assert!(err(&vars(Some("1"), Some("me"), None)).contains("not a process id"));
        assert!(err(&vars(Some("two"), Some("42"), None)).contains("not a number"));
        assert!(err(&vars(Some("2"), Some("42"), Some("kdd"))).contains("names 1 socket(s)"));
        assert!(err(&vars(Some("2"), Some("42"), Some("a:b"))).contains("none is named"));
        assert!(err(&vars(Some("2"), Some("42"), None)).contains("none is named"));
    }

    #[test]
    fn a_passed_descriptor_kd_does_not_take_is_made_close_on_exec() -> anyhow::Result<()> {
        use std::os::fd::AsRawFd;
        let tmp = tempfile::tempdir()?;
        let other = UnixListener::bind(tmp.path().join("other.sock"))?;
        // As systemd passes it: inherited across exec.
        rustix::io::fcntl_setfd(&other, rustix::io::FdFlags::empty())?;
        close_on_exec(other.as_raw_fd())?;
        assert_eq!(rustix::io::fcntl_getfd(&other)?, rustix::io::FdFlags::CLOEXEC);
        assert!(close_on_exec(-1).is_err());
        Ok(())
    }

    #[test]
    fn a_listening_path_socket_passes_the_checks() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("s.sock");
        let listener = UnixListener::bind(&path)?;
        let got = checked(listener)?;
        assert_eq!(got.path, path);
        Ok(())
    }
}
