//! `kd config show` and `kd config check`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use kd_client::prelude::*;
use kd_client::{ClientError, workspace};

use super::{Ctx, print_json};
use crate::fmt::Table;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration and where each value came from
    Show(ShowArgs),
    /// Validate the configuration of this workspace
    Check,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn run(ctx: &Ctx, cmd: ConfigCommand) -> anyhow::Result<ExitCode> {
    let ws = workspace::current()?.root.display().to_string();
    let client = ctx.client().await?;
    let view = client.config_get(ws.clone(), kd_client::shell_path()).await.map_err(ClientError::from)?;
    match cmd {
        ConfigCommand::Check => {
            let members = view
                .entries
                .iter()
                .find(|e| e.key == "council.members")
                .and_then(|e| e.value.as_array())
                .map(|m| m.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            match &view.file {
                Some(f) => plainln!("{f}: ok; members: {members}")?,
                None => plainln!("no configuration file for {ws}: defaults apply; members: {members}")?,
            }
            if let Some(n) = &view.notice {
                plainln!("note: {n}")?;
            }
            for n in &view.notices {
                plainln!("note: {n}")?;
            }
            for w in &view.warnings {
                plainln!("warning: {w}")?;
            }
        }
        ConfigCommand::Show(a) => {
            if a.json {
                print_json(&view)?;
                return Ok(ExitCode::SUCCESS);
            }
            plainln!("workspace {}", view.workspace)?;
            plainln!("file      {}", view.file.as_deref().unwrap_or("(none: defaults)"))?;
            if let Some(n) = &view.notice {
                plainln!("note      {n}")?;
            }
            for n in &view.notices {
                plainln!("note      {n}")?;
            }
            for w in &view.warnings {
                plainln!("warning   {w}")?;
            }
            outln!()?;
            let mut t = Table::new(&["KEY", "VALUE", "SOURCE"]);
            for e in &view.entries {
                let value = match &e.value {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "-".into(),
                    v => v.to_string(),
                };
                let value =
                    if value.chars().count() > 60 { value.chars().take(59).collect::<String>() + "…" } else { value };
                t.row(vec![e.key.clone(), value, e.source.clone()]);
            }
            out!("{}", t.render())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
