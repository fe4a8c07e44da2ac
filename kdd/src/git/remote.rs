//! A member's branch shipped (issue 34 item 5): the remote's URL read and
//! parsed — `https://host/owner/repo(.git)`, `ssh://[user@]host[:port]/…`,
//! scp-style `[user@]host:owner/repo.git` — into the host's web page of a
//! repository, whose page to open a pull request (GitHub) or a merge
//! request (GitLab) on is the compare URL kd gives without `gh`; and a
//! command that talks to a remote (`git push`, `gh pr create`) run by argv
//! with the user's own configuration, bounded in time and in what it
//! prints, its whole process group stopped when it overruns or its caller
//! goes away — and never under the repository's lock ([`super::git`]), so
//! a hanging push stalls nothing else.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::AsyncReadExt;

use super::{GitResult, OUTPUT, git};
use crate::identity::children::{self, Origin};

/// Most bytes kept of what a command prints on each stream.
const KEPT: u64 = 64 << 10;

/// A repository on a forge, from its remote's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The web host (`github.com`).
    pub host: String,
    /// `owner/repo` (GitLab: `group/subgroup/repo`), no `.git`.
    pub path: String,
}

/// The forges kd knows the compare page of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    GitHub,
    GitLab,
}

impl Repo {
    /// The forge by its host's name (`github.com`, `github.example.com`,
    /// `gitlab.com`, `gitlab.example.org`), if kd knows it.
    pub fn forge(&self) -> Option<Forge> {
        let first = self.host.split('.').next().unwrap_or_default();
        if self.host == "github.com" || first == "github" || self.host.ends_with(".ghe.com") {
            Some(Forge::GitHub)
        } else if self.host == "gitlab.com" || first == "gitlab" {
            Some(Forge::GitLab)
        } else {
            None
        }
    }

    /// The page to open a pull request (merge request) of `branch` into
    /// `base` on, for a forge kd knows.
    pub fn compare_url(&self, base: &str, branch: &str) -> Option<String> {
        let web = format!("https://{}/{}", self.host, self.path);
        match self.forge()? {
            Forge::GitHub => Some(format!("{web}/compare/{}...{}?expand=1", escape(base), escape(branch))),
            Forge::GitLab => Some(format!(
                "{web}/-/merge_requests/new?merge_request%5Bsource_branch%5D={}&merge_request%5Btarget_branch%5D={}",
                escape(branch),
                escape(base)
            )),
        }
    }
}

/// `s` with what a URL would read otherwise escaped (a branch name holds
/// no space or control character; `/` stays).
fn escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The forge repository a remote URL names: http(s), ssh, git and
/// scp-style URLs; none for a local path or `file://`.
pub fn parse_url(url: &str) -> Option<Repo> {
    let url = url.trim();
    let (host, path) = if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "https" | "http" | "ssh" | "git" | "git+ssh" | "ssh+git") {
            return None;
        }
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        // A port (an IPv6 address in brackets aside).
        let host = match host.rsplit_once(':') {
            Some((h, port)) if !h.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => host,
        };
        (host, path)
    } else {
        // scp-style: a colon before any slash.
        let (before, path) = url.split_once(':')?;
        if before.contains('/') || before.is_empty() {
            return None;
        }
        let host = before.rsplit_once('@').map_or(before, |(_, h)| h);
        (host, path)
    };
    let mut host = host.trim_matches(['[', ']']).to_ascii_lowercase();
    // GitHub's ssh over port 443.
    if host == "ssh.github.com" {
        host = "github.com".into();
    }
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path).trim_end_matches('/');
    let ok = !host.is_empty()
        && host.chars().all(|c| c.is_ascii_alphanumeric() || "-.:".contains(c))
        && path.contains('/')
        && !path.starts_with('~')
        && path.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
        && !path.chars().any(|c| c.is_whitespace() || c.is_control() || "?#%\\".contains(c));
    ok.then(|| Repo { host, path: path.to_string() })
}

/// The URLs of `remote`: as git pushes to it (`insteadOf` rewrites
/// applied) and as configured; none when the repository has no such
/// remote.
pub async fn urls_of(repo: &Path, remote: &str) -> GitResult<Option<(String, String)>> {
    if remote.starts_with('-') {
        return Ok(None);
    }
    let out = git(repo, repo, &["remote", "get-url", "--push", remote], &[], OUTPUT).await?;
    let Some(push) = out.ok.then(|| out.text().trim().to_string()).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let key = format!("remote.{remote}.url");
    let out = git(repo, repo, &["config", "--get", &key], &[], OUTPUT).await?;
    let written = if out.ok { out.text().trim().to_string() } else { push.clone() };
    Ok(Some((push, written)))
}

/// The forge repository of a remote: by the URL git pushes to, else by
/// the one configured (a shorthand `insteadOf` expands, or a mirror).
pub fn forge_of((push, written): &(String, String)) -> Option<Repo> {
    parse_url(push).filter(|r| r.forge().is_some()).or_else(|| parse_url(written).filter(|r| r.forge().is_some()))
}

/// `name` found on `path` (a client's `PATH`; its absolute directories
/// only): an executable file.
pub fn find_program(name: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path.map(str::to_string).or_else(|| std::env::var("PATH").ok())?;
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// What a command printed, and whether it succeeded.
#[derive(Debug)]
pub struct Ran {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Why it failed, in its last words.
    pub fn reason(&self) -> String {
        let said = self.stderr.trim();
        let said = if said.is_empty() { self.stdout.trim() } else { said };
        let lines: Vec<&str> = said.lines().rev().take(6).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

/// Stops a process group when dropped: the command overran, or whoever
/// waited on it went away.
struct Group(Option<Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
    }
}

/// Runs `program ARGS` in `dir` (with `PATH` = `path` when given), by argv
/// with the user's own configuration, never asking on a terminal, its
/// output kept to [`KEPT`] bytes a stream; stopped with its whole process
/// group after `timeout`, or when the returned future is dropped.
pub async fn run(
    program: &Path,
    args: &[&str],
    dir: &Path,
    path: Option<&str>,
    timeout: Duration,
) -> Result<Ran, String> {
    let name = program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        // Never a prompt: kdd has no terminal.
        .env("GH_PROMPT_DISABLED", "1")
        .env("GCM_INTERACTIVE", "never")
        .process_group(0);
    super::unattended(&mut cmd);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let mut child = children::spawn(&mut cmd, Origin::Tool).map_err(|e| format!("cannot run {name}: {e}"))?;
    let mut group = Group(child.id().and_then(|id| Pid::from_raw(id as i32)));
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let read_out = async {
        let mut buf = Vec::new();
        if let Some(s) = out.as_mut() {
            let _ = s.take(KEPT).read_to_end(&mut buf).await;
            let mut sink = [0u8; 8192];
            while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
        }
        buf
    };
    let read_err = async {
        let mut buf = Vec::new();
        if let Some(s) = err.as_mut() {
            let _ = s.take(KEPT).read_to_end(&mut buf).await;
            let mut sink = [0u8; 8192];
            while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
        }
        buf
    };
    let all = async {
        let (stdout, stderr) = tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (stdout, stderr, status)
    };
    let (stdout, stderr, status) = match tokio::time::timeout(timeout, all).await {
        Ok(done) => done,
        Err(_) => {
            drop(group);
            return Err(format!("{name} did not finish within {} s: kd stopped it", timeout.as_secs()));
        }
    };
    let status = status.map_err(|e| format!("{name}: {e}"))?;
    // It ended: nothing of its group is left to stop (a straggler that
    // kept its output open was waited for above).
    group.0 = None;
    Ok(Ran {
        ok: status.success(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(host: &str, path: &str) -> Option<Repo> {
        Some(Repo { host: host.into(), path: path.into() })
    }

    #[test]
    fn remote_urls_are_parsed_as_git_writes_them() {
        let gh = repo("github.com", "king/kd");
        assert_eq!(parse_url("https://github.com/king/kd.git"), gh);
        assert_eq!(parse_url("https://github.com/king/kd"), gh);
        assert_eq!(parse_url("https://github.com/king/kd/"), gh);
        assert_eq!(parse_url("https://user:token@GitHub.com/king/kd.git\n"), gh);
        assert_eq!(parse_url("git@github.com:king/kd.git"), gh);
        assert_eq!(parse_url("github.com:king/kd"), gh);
        assert_eq!(parse_url("ssh://git@github.com/king/kd.git"), gh);
        assert_eq!(parse_url("ssh://git@ssh.github.com:443/king/kd.git"), gh);
        assert_eq!(parse_url("git://github.com/king/kd.git"), gh);
        assert_eq!(parse_url("git@gitlab.com:group/sub/repo.git"), repo("gitlab.com", "group/sub/repo"));
        assert_eq!(parse_url("https://gitlab.example.org:8443/g/r.git"), repo("gitlab.example.org", "g/r"));
        // No forge: a local path, file://, a bare name, one component.
        for local in ["/srv/git/kd.git", "../kd.git", "file:///srv/kd.git", "kd", "C:/x", "https://github.com/kd"] {
            assert_eq!(parse_url(local), None, "{local}");
        }
        assert_eq!(parse_url("ftp://github.com/king/kd"), None);
        assert_eq!(parse_url("https://github.com/king/../kd"), None);
    }

    #[test]
    fn compare_urls_are_the_forges_pages_to_open_a_pull_request() {
        let gh = parse_url("git@github.com:king/kd.git").unwrap();
        assert_eq!(gh.forge(), Some(Forge::GitHub));
        assert_eq!(
            gh.compare_url("main", "kd/t1/claude").as_deref(),
            Some("https://github.com/king/kd/compare/main...kd/t1/claude?expand=1")
        );
        assert_eq!(
            gh.compare_url("fix#1", "kd/t/c").as_deref(),
            Some("https://github.com/king/kd/compare/fix%231...kd/t/c?expand=1")
        );
        let gl = parse_url("https://gitlab.com/g/sub/r.git").unwrap();
        assert_eq!(
            gl.compare_url("main", "kd/t1/codex").as_deref(),
            Some(
                "https://gitlab.com/g/sub/r/-/merge_requests/new?merge_request%5Bsource_branch%5D=kd/t1/codex\
                 &merge_request%5Btarget_branch%5D=main"
            )
        );
        let other = parse_url("git@git.example.com:a/b.git").unwrap();
        assert_eq!((other.forge(), other.compare_url("main", "x")), (None, None));
    }

    #[tokio::test]
    async fn a_command_that_hangs_is_stopped_with_its_group_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let script = format!("sleep 30 & echo $! > {}; sleep 30", pids.display());
        let started = std::time::Instant::now();
        let ran = run(Path::new("/bin/sh"), &["-c", &script], dir.path(), None, Duration::from_millis(500)).await;
        let e = ran.expect_err("it overran");
        assert!(e.contains("did not finish within 0 s: kd stopped it"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        // Its child in the background went with it.
        let pid: i32 = std::fs::read_to_string(&pids).unwrap().trim().parse().unwrap();
        let gone = async {
            while std::path::Path::new(&format!("/proc/{pid}")).exists()
                && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone).await.expect("the background sleep was stopped");
    }

    #[tokio::test]
    async fn a_command_is_run_by_argv_and_its_output_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ran =
            run(Path::new("/bin/echo"), &["a b", "$HOME"], dir.path(), None, Duration::from_secs(10)).await.unwrap();
        assert!(ran.ok);
        assert_eq!(ran.stdout, "a b $HOME\n");
    }
}
