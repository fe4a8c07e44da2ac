//! `daemon.doctor`: what `kd doctor` asks the daemon — the database's
//! integrity, a workspace's configuration, and each member's CLI as the
//! daemon would run it for the asking client (found on the `PATH` it sent,
//! else the daemon's own, answering `--version`), saying which `PATH` found
//! it. One [`Check`] per line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kd_proto::types::{Check, CheckStatus};

use crate::config::{self, AgentDef, Backend, Env};
use crate::db::Db;
use crate::identity::children::Origin;

/// How long a CLI may take to print its version.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

fn check(subject: &str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check { subject: subject.to_string(), status, detail: detail.into() }
}

pub async fn run(db: &Db, workspace: &Path, path: Option<&str>) -> Vec<Check> {
    let mut checks = vec![database(db).await];
    if db.engine() != "sqlite" {
        checks.push(nodes(db).await);
    }
    let (config_checks, members) = council(workspace, path);
    for c in config_checks {
        // kd's MCP server is started as the agent CLIs start it, and must
        // answer `initialize` before the quickest of them gives up.
        let probed = match (&c.subject[..], c.status, c.detail.split_once(" mcp serves ")) {
            ("mcp", CheckStatus::Ok, Some((kd, _))) => probe_mcp(Path::new(kd)).await.err(),
            _ => None,
        };
        checks.push(match probed {
            Some(why) => check("mcp", CheckStatus::Fail, format!("{why}: members run without kd's tools")),
            None => c,
        });
    }
    // Every member's CLI at once: a slow one does not hold up the others.
    let mut set = tokio::task::JoinSet::new();
    for (i, m) in members.into_iter().enumerate() {
        set.spawn(async move { (i, member(m).await) });
    }
    let mut found: Vec<(usize, Check)> = set.join_all().await;
    found.sort_by_key(|(i, _)| *i);
    checks.extend(found.into_iter().map(|(_, c)| c));
    checks
}

/// Which `PATH` found the agents: the asking client's, or kdd's own.
fn whose(path: Option<&str>) -> &'static str {
    if path.is_some() { "your PATH (kd's)" } else { "kdd's own PATH" }
}

/// The configuration's checks, and each member with where its CLI is, as
/// found on `path` (the client's `PATH`; none: kdd's own).
fn council(workspace: &Path, path: Option<&str>) -> (Vec<Check>, Vec<Member>) {
    let var = |k: &str| match (k, path) {
        ("PATH", Some(p)) => Some(std::ffi::OsString::from(p)),
        _ => std::env::var_os(k),
    };
    let env = Env { var: &var };
    let config = match config::load_for(workspace, path) {
        Ok(c) => c,
        Err(e) => return (vec![check("config", CheckStatus::Fail, e.to_string())], vec![]),
    };
    let file = config.file.as_ref().map(|f| f.display().to_string()).unwrap_or_else(|| "no file, defaults".into());
    let mut checks = vec![if config.council.members.is_empty() {
        check(
            "config",
            CheckStatus::Fail,
            format!("{file}; no council members: configure council.members or install an agent CLI"),
        )
    } else {
        check("config", CheckStatus::Ok, format!("{file}; members: {}", config.council.members.join(", ")))
    }];
    checks.extend(config.notices.iter().chain(&config.warnings).map(|n| check("config", CheckStatus::Warn, n.clone())));
    checks.extend(mcp(&config, config::find_kd(&Env::process()).as_deref()));
    checks.push(check(
        "path",
        CheckStatus::Ok,
        format!("agents are found on {}: {}", whose(path), env.path().unwrap_or_default()),
    ));
    let kdds = Env::process();
    let members = config
        .council
        .members
        .iter()
        .filter_map(|m| config.agent(m))
        .map(|a| Member {
            found: config::find_program(&a.command, &env),
            // Where kdd's own PATH would have found it, when the client's did not.
            elsewhere: path.and_then(|_| config::find_program(&a.command, &kdds)),
            on: (!a.command.contains('/')).then(|| whose(path)),
            agent: a.clone(),
        })
        .collect();
    (checks, members)
}

/// A member's CLI, where it was found, and on which `PATH`.
struct Member {
    agent: AgentDef,
    found: Option<PathBuf>,
    /// Found on kdd's own `PATH`, not on the client's.
    elsewhere: Option<PathBuf>,
    /// Which `PATH` it is looked for on (none: a path was given).
    on: Option<&'static str>,
}

/// kd's MCP server: which `kd` serves it to which members, or that none
/// was found and they run without kd's tools. Nothing when no member is to
/// have it.
fn mcp(config: &config::Config, kd: Option<&Path>) -> Option<Check> {
    let members = config.mcp_members();
    if members.is_empty() {
        return None;
    }
    Some(match (kd, config.mcp_missing(kd)) {
        (_, Some(missing)) => check("mcp", CheckStatus::Warn, missing),
        (Some(kd), None) => {
            check("mcp", CheckStatus::Ok, format!("{} mcp serves kd's tools to {}", kd.display(), members.join(", ")))
        }
        (None, None) => return None,
    })
}

/// How long `kd mcp` may take to answer `initialize`: codex waits about
/// one second for its MCP servers.
const MCP_TIMEOUT: Duration = Duration::from_secs(1);

/// Starts `KD mcp` as an agent CLI does and asks it `initialize`; fine when
/// it answers as kd's server in time.
async fn probe_mcp(kd: &Path) -> Result<(), String> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut cmd = tokio::process::Command::new(kd);
    cmd.arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = crate::identity::children::spawn(&mut cmd, Origin::Tool)
        .map_err(|e| format!("cannot start {} mcp: {e}", kd.display()))?;
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"kd-doctor","version":"1"}}}"#;
    let ask = async {
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        // A server that already ended refuses the write (EPIPE): its
        // output, read next, says what it did.
        let _ = stdin.write_all(format!("{initialize}\n").as_bytes()).await;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        tokio::io::BufReader::new(stdout.take(64 << 10)).read_line(&mut line).await.map_err(|e| e.to_string())?;
        drop(stdin);
        Ok::<String, String>(line)
    };
    let answer = match tokio::time::timeout(MCP_TIMEOUT, ask).await {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => return Err(format!("{} mcp failed: {e}", kd.display())),
        Err(_) => {
            return Err(format!("{} mcp did not answer initialize within {} s", kd.display(), MCP_TIMEOUT.as_secs()));
        }
    };
    let _ = child.start_kill();
    let reply: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
    if reply["result"]["serverInfo"]["name"] == "kd" {
        Ok(())
    } else if answer.trim().is_empty() {
        Err(format!("{} mcp ended without answering initialize", kd.display()))
    } else {
        let first: String = answer.trim().chars().take(120).collect();
        Err(format!("{} mcp did not answer initialize as kd's server: {first}", kd.display()))
    }
}

async fn database(db: &Db) -> Check {
    let what = format!("{} (schema {})", db.location(), db.schema_version());
    match db.integrity_check().await {
        Ok(rows) if rows == ["ok"] => check("database", CheckStatus::Ok, format!("{what}, integrity ok")),
        Ok(rows) => check("database", CheckStatus::Fail, format!("{what}: {}", rows.join("; "))),
        Err(e) => check("database", CheckStatus::Fail, format!("{what}: {e}")),
    }
}

/// The largest clock skew between a node and the registry kd accepts
/// quietly: lock expiries and thread ages use each node's clock.
const MAX_SKEW_MS: i64 = 1_000;

/// The live nodes of a shared registry, and how far their clocks are from
/// the registry's.
async fn nodes(db: &Db) -> Check {
    let nodes = match db.nodes().await {
        Ok(n) => n,
        Err(e) => return check("nodes", CheckStatus::Fail, format!("cannot list the nodes: {e}")),
    };
    let skewed: Vec<String> = nodes
        .iter()
        .filter(|n| n.clock_skew_ms.abs() > MAX_SKEW_MS)
        .map(|n| {
            format!("{} is {} ms {}", n.id, n.clock_skew_ms.abs(), if n.clock_skew_ms > 0 { "ahead" } else { "behind" })
        })
        .collect();
    let names: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    let live = format!("{} live ({}), this one {}", nodes.len(), names.join(", "), db.node().id);
    if skewed.is_empty() {
        check("nodes", CheckStatus::Ok, format!("{live}; clocks within {MAX_SKEW_MS} ms of the registry's"))
    } else {
        check(
            "nodes",
            CheckStatus::Warn,
            format!("{live}; clock skew: {} — lock expiries and thread ages use each node's clock", skewed.join(", ")),
        )
    }
}

/// A member's CLI: found (on which `PATH`), and what `--version` says.
async fn member(m: Member) -> Check {
    let Member { agent: a, found, elsewhere, on } = m;
    let Some(path) = found else {
        let mut why = crate::config::not_found(&a, &a.command);
        if let Some(there) = elsewhere {
            why.push_str(&format!(
                " (kdd's own PATH has it: {}, but agents are found on yours, which kd sends)",
                there.display()
            ));
        }
        return check(&a.name, CheckStatus::Fail, why);
    };
    let on = on.map(|on| format!("; found on {on}")).unwrap_or_default();
    if a.backend == Backend::Command {
        return check(&a.name, CheckStatus::Ok, format!("{} ({}){on}", path.display(), a.backend.as_str()));
    }
    let mut cmd = tokio::process::Command::new(&path);
    // As its runs run: with the PATH it was found on (a script's
    // interpreter is looked for there), then its own variables.
    cmd.arg("--version")
        .envs(a.run_env())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let run = async { crate::identity::children::spawn(&mut cmd, Origin::Tool)?.wait_with_output().await };
    match tokio::time::timeout(VERSION_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let version = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no version printed");
            let version: String = version.chars().take(120).collect();
            check(&a.name, CheckStatus::Ok, format!("{} ({version}){on}", path.display()))
        }
        Ok(Ok(out)) => check(
            &a.name,
            CheckStatus::Fail,
            format!(
                "{} --version exited with {}",
                path.display(),
                out.status.code().map_or("a signal".into(), |c| c.to_string())
            ),
        ),
        Ok(Err(e)) => check(&a.name, CheckStatus::Fail, format!("cannot run {}: {e}", path.display())),
        Err(_) => check(
            &a.name,
            CheckStatus::Fail,
            format!("{} --version did not answer within {} s", path.display(), VERSION_TIMEOUT.as_secs()),
        ),
    }
}
