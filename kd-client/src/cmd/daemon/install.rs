//! `kd daemon install|uninstall`: kdd as a user service, started by systemd
//! or launchd on the first connection to kd's socket (socket activation).
//! The files come from [`units`]; this module resolves what goes in them,
//! writes them (0600, atomically) and asks the service manager to load or
//! unload them.

use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use kd_client::autostart;
use kd_proto::paths;

use super::units::{self, LAUNCHD_LABEL, SERVICE_UNIT, SOCKET_UNIT, Service};
use crate::cmd::Ctx;

#[derive(Debug, Args)]
pub struct ServiceArgs {
    /// systemd user units, kdd.socket + kdd.service (the default on Linux)
    #[arg(long, conflicts_with = "launchd")]
    systemd: bool,
    /// A launchd LaunchAgent (the default on macOS)
    #[arg(long)]
    launchd: bool,
    /// Print the files and commands; change nothing
    #[arg(long)]
    dry_run: bool,
    /// Write or remove the files only; run neither systemctl nor launchctl
    #[arg(long)]
    files_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Manager {
    Systemd,
    Launchd,
}

impl ServiceArgs {
    fn manager(&self) -> Manager {
        match (self.systemd, self.launchd) {
            (true, _) => Manager::Systemd,
            (_, true) => Manager::Launchd,
            _ if cfg!(target_os = "macos") => Manager::Launchd,
            _ => Manager::Systemd,
        }
    }
}

/// Variables carried from the installing shell into the service when set.
const CARRIED: &[&str] = &["PATH", paths::ENV_DB, "XDG_DATA_HOME", "XDG_CONFIG_HOME"];

fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .context("HOME is not set; cannot find where the service files go")
}

/// Where the files go, with their contents.
fn files(manager: Manager, service: &Service) -> anyhow::Result<Vec<(PathBuf, String)>> {
    Ok(match manager {
        Manager::Systemd => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map_or_else(|| home().map(|h| h.join(".config")), Ok)?;
            let dir = config.join("systemd").join("user");
            vec![
                (dir.join(SOCKET_UNIT), units::systemd_socket(service)),
                (dir.join(SERVICE_UNIT), units::systemd_service(service)),
            ]
        }
        Manager::Launchd => {
            let path = home()?.join("Library/LaunchAgents").join(format!("{LAUNCHD_LABEL}.plist"));
            vec![(path, units::launchd_plist(service))]
        }
    })
}

/// The `kdd` the service runs, as an absolute path.
fn kdd_path() -> anyhow::Result<PathBuf> {
    let kdd = autostart::kdd_binary();
    let found = if kdd.components().count() > 1 {
        Some(kdd.clone())
    } else {
        std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|d| d.join(&kdd)).find(|p| p.is_file())
    };
    let found =
        found.with_context(|| format!("cannot find {} (cargo install --path kdd, or set KD_KDD)", kdd.display()))?;
    std::fs::canonicalize(&found).with_context(|| format!("cannot find {}", found.display()))
}

fn service(ctx: &Ctx) -> anyhow::Result<Service> {
    let env = CARRIED
        .iter()
        .filter_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()).map(|v| (k.to_string(), v)))
        .collect();
    let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute());
    let service = Service {
        kdd: kdd_path()?,
        socket: ctx.socket.clone(),
        runtime_dir,
        env,
        log: autostart::log_file(&ctx.socket),
    };
    service.check().map_err(anyhow::Error::msg)?;
    Ok(service)
}

/// The commands that load (`install`) or unload the service.
fn commands(manager: Manager, install: bool, files: &[(PathBuf, String)]) -> Vec<Vec<String>> {
    let cmd = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let uid = rustix::process::getuid().as_raw();
    match (manager, install) {
        (Manager::Systemd, true) => {
            vec![
                cmd(&["systemctl", "--user", "daemon-reload"]),
                cmd(&["systemctl", "--user", "enable", "--now", SOCKET_UNIT]),
            ]
        }
        (Manager::Systemd, false) => vec![
            cmd(&["systemctl", "--user", "disable", "--now", SOCKET_UNIT, SERVICE_UNIT]),
            cmd(&["systemctl", "--user", "daemon-reload"]),
        ],
        (Manager::Launchd, true) => {
            let plist = files.first().map(|(p, _)| p.display().to_string()).unwrap_or_default();
            vec![cmd(&["launchctl", "bootstrap", &format!("gui/{uid}"), &plist])]
        }
        (Manager::Launchd, false) => vec![cmd(&["launchctl", "bootout", &format!("gui/{uid}/{LAUNCHD_LABEL}")])],
    }
}

/// Runs one command; its failure is an error naming it and what it said.
fn run_command(words: &[String]) -> anyhow::Result<()> {
    let (program, args) = words.split_first().context("empty command")?;
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!("`{}` failed: {}", words.join(" "), said.trim().replace('\n', " "));
    }
    Ok(())
}

/// Writes `text` to `path`, mode 0600, through a temporary file renamed
/// over it: a symlink planted at `path` is replaced, never followed.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path.parent().context("a file needs a directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = kd_proto::paths::create_private(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

fn shell_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.contains(|c: char| c.is_whitespace() || "'\"$\\".contains(c)) {
                format!("'{}'", w.replace('\'', "'\\''"))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The cargo build directory (`target/release`, `target/debug`, …) `kdd`
/// is in, if it is in one: a `cargo clean` or a build of another commit
/// would take the service's binary away or change it under it.
fn in_cargo_target(kdd: &Path) -> Option<&Path> {
    kdd.parent().filter(|dir| dir.join(".fingerprint").is_dir() && dir.join("deps").is_dir())
}

pub async fn install(ctx: &Ctx, a: ServiceArgs) -> anyhow::Result<ExitCode> {
    let manager = a.manager();
    let service = service(ctx)?;
    if let Some(dir) = in_cargo_target(&service.kdd) {
        errln!(
            "kd: warning: the service would run {}, in cargo's build directory {}: `cargo clean` or the next build \
             changes it under the service. Install kdd where it stays (`cargo install --path kdd`, and kd with \
             `cargo install --path kd-client`), then run `kd daemon install` again with that kd",
            service.kdd.display(),
            dir.display()
        );
    }
    let files = files(manager, &service)?;
    let commands = commands(manager, true, &files);
    if a.dry_run {
        for (path, text) in &files {
            plainln!("# {}", path.display())?;
            plainln!("{text}")?;
        }
        for c in &commands {
            plainln!("would run: {}", shell_line(c))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    // A daemon kd started itself holds the socket's path; the service
    // manager takes it over, so that daemon stops first.
    if !a.files_only {
        stop_unmanaged(ctx).await?;
    }
    for (path, text) in &files {
        write_private(path, text)?;
        plainln!("wrote {}", path.display())?;
    }
    if manager == Manager::Launchd
        && let Some(dir) = service.log.parent()
    {
        let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
    }
    if a.files_only {
        plainln!("to load it:")?;
        for c in &commands {
            plainln!("  {}", shell_line(c))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if manager == Manager::Launchd {
        // Loaded already (an earlier install): unloaded first, so the new
        // plist is the one launchd uses. Failing means it was not loaded.
        for c in self::commands(manager, false, &files) {
            let _ = run_command(&c);
        }
    }
    for c in &commands {
        run_command(c).context("the files are written; load them by hand or run `kd daemon uninstall`")?;
    }
    let by = if manager == Manager::Systemd { "systemd" } else { "launchd" };
    plainln!("{by} listens on {}; kdd starts on the first connection", ctx.socket.display())?;
    if manager == Manager::Systemd {
        plainln!("logs: journalctl --user -u kdd")?;
    } else {
        plainln!("logs: {}", service.log.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn uninstall(ctx: &Ctx, a: ServiceArgs) -> anyhow::Result<ExitCode> {
    let manager = a.manager();
    let service = service(ctx).unwrap_or_else(|_| Service {
        kdd: PathBuf::from("kdd"),
        socket: ctx.socket.clone(),
        runtime_dir: None,
        env: Vec::new(),
        log: autostart::log_file(&ctx.socket),
    });
    let files = files(manager, &service)?;
    let commands = commands(manager, false, &files);
    let (unload, reload) = match manager {
        Manager::Systemd => (&commands[..1], &commands[1..]),
        Manager::Launchd => (&commands[..], &[][..]),
    };
    if a.dry_run {
        for c in unload {
            plainln!("would run: {}", shell_line(c))?;
        }
        for (path, _) in &files {
            plainln!("would remove {}", path.display())?;
        }
        for c in reload {
            plainln!("would run: {}", shell_line(c))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed = false;
    if !a.files_only {
        for c in unload {
            if let Err(e) = run_command(c) {
                errln!("kd: {e:#}");
                failed = true;
            }
        }
    }
    for (path, _) in &files {
        match std::fs::remove_file(path) {
            Ok(()) => plainln!("removed {}", path.display())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => plainln!("{} was not installed", path.display())?,
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", path.display())),
        }
    }
    if !a.files_only {
        for c in reload {
            if let Err(e) = run_command(c) {
                errln!("kd: {e:#}");
                failed = true;
            }
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Stops a daemon on the socket that no service manager started.
async fn stop_unmanaged(ctx: &Ctx) -> anyhow::Result<()> {
    match kd_client::http::call::<kd_proto::types::DaemonStatus>(&ctx.socket, "daemon.status", serde_json::json!({}))
        .await
    {
        Ok(s) if !s.socket_activated => {
            plainln!("stopping kdd (pid {}) so that the service manager can take over its socket", s.pid)?;
            super::stop(ctx, true).await?;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_quote_what_a_shell_would_split() {
        let words = vec!["launchctl".to_string(), "bootstrap".into(), "/Users/a b/x.plist".into()];
        assert_eq!(shell_line(&words), "launchctl bootstrap '/Users/a b/x.plist'");
    }

    #[test]
    fn files_are_written_private_and_replace_a_symlink() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "keep")?;
        let path = tmp.path().join("units").join("kdd.service");
        std::fs::create_dir_all(path.parent().unwrap_or(tmp.path()))?;
        std::os::unix::fs::symlink(&target, &path)?;
        write_private(&path, "[Unit]\n")?;
        assert_eq!(std::fs::read_to_string(&target)?, "keep", "the symlink was followed");
        assert_eq!(std::fs::read_to_string(&path)?, "[Unit]\n");
        let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::symlink_metadata(&path)?);
        assert_eq!(mode & 0o777, 0o600);
        Ok(())
    }
}
