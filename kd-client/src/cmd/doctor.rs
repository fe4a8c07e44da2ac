//! `kd doctor`: is everything kd needs in order? One line per check — this
//! kd, the daemon (reachable, its version), its database (integrity), the
//! workspace's configuration, and each member's CLI as the daemon runs it
//! (found, `--version`) — and exit status 1 when anything is broken.

use std::process::ExitCode;

use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_client::{Client, ClientError, workspace};
use kd_proto::types::{Check, CheckStatus};
use kd_proto::{PROTOCOL_VERSION, VERSION};

use super::Ctx;
use crate::fmt;

fn line(c: &Check) -> std::io::Result<()> {
    let status = match c.status {
        CheckStatus::Ok => "ok",
        CheckStatus::Warn => "warn",
        CheckStatus::Fail => "FAIL",
    };
    outln!("{status:<5} {}: {}", safe(&c.subject), safe(&fmt::one_line(&c.detail)))
}

fn ok(subject: &str, detail: String) -> Check {
    Check { subject: subject.into(), status: CheckStatus::Ok, detail }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let mut checks = vec![ok("kd", format!("{VERSION} (protocol {PROTOCOL_VERSION})"))];
    let client = match Client::connect_or_start(&ctx.socket).await {
        Ok(c) => c,
        Err(e) => {
            checks.push(Check { subject: "daemon".into(), status: CheckStatus::Fail, detail: e.to_string() });
            return finish(&checks);
        }
    };
    let status = client.daemon_status().await.map_err(ClientError::from)?;
    let daemon = Check {
        subject: "daemon".into(),
        status: if status.version == VERSION { CheckStatus::Ok } else { CheckStatus::Warn },
        detail: format!(
            "kdd {} (protocol {}), pid {}, up {}, socket {}{}",
            status.version,
            status.protocol,
            status.pid,
            fmt::duration_ms(status.uptime_ms),
            status.socket,
            if status.version == VERSION { "" } else { "; another version than this kd: kd daemon restart" }
        ),
    };
    checks.push(daemon);
    let ws = workspace::current()?.root.display().to_string();
    checks.extend(client.daemon_doctor(ws, kd_client::shell_path()).await.map_err(ClientError::from)?);
    finish(&checks)
}

fn finish(checks: &[Check]) -> anyhow::Result<ExitCode> {
    for c in checks {
        line(c)?;
    }
    let broken = checks.iter().any(|c| c.status == CheckStatus::Fail);
    Ok(if broken { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
