//! A private tmux server for driving `kd chat` in a real terminal:
//! `send-keys` to type, `capture-pane` to read the screen.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::DEADLINE;

/// A private tmux server with one window running a plain shell.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// A 100×40 terminal whose shell starts in `cwd`; the server's socket is in `dir`.
    pub fn start(dir: &Path, cwd: &Path) -> Tmux {
        Tmux::start_sized(dir, cwd, 100, 40)
    }

    pub fn start_sized(dir: &Path, cwd: &Path, columns: u16, rows: u16) -> Tmux {
        let tmux = Tmux { socket: dir.join("tmux.sock") };
        let status = tmux
            .cmd()
            .args(["new-session", "-d", "-s", "kd", "-x", &columns.to_string(), "-y", &rows.to_string(), "-c"])
            .arg(cwd)
            .args(["env", "PS1=$ ", "TERM=xterm-256color", "sh"])
            .status()
            .unwrap_or_else(|e| panic!("tmux is needed for this test (.ci/run installs it): {e}"));
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket).env_remove("TMUX");
        c
    }

    pub fn send_keys(&self, keys: &[&str]) {
        let status = self.cmd().args(["send-keys", "-t", "kd"]).args(keys).status().expect("tmux send-keys");
        assert!(status.success(), "send-keys {keys:?}");
    }

    /// Types `text` literally, then Enter.
    pub fn type_line(&self, text: &str) {
        self.send_keys(&["-l", text]);
        self.send_keys(&["Enter"]);
    }

    pub fn capture(&self) -> String {
        let out = self.cmd().args(["capture-pane", "-p", "-t", "kd"]).output().expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn display(&self, format: &str) -> String {
        let out = self.cmd().args(["display-message", "-p", "-t", "kd", format]).output().expect("tmux display");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the screen satisfies `ok`; fails with the screen otherwise.
    pub async fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let screen = self.capture();
            if ok(&screen) {
                return screen;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen:\n{screen}");
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }
}

impl Tmux {
    /// The pid of the program the shell is running (e.g. `kd chat`).
    pub fn foreground_pid(&self) -> Option<u32> {
        let shell = self.display("#{pane_pid}");
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}
