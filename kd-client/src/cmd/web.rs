//! `kd web`: kdd serves the web client (started if it is not) and a new
//! one-time pairing URL is printed on the last line — opened in the
//! user's browser with `--open` (xdg-open / open, by argv), shown as a QR
//! code with `--qr` (for a phone); `kd web --stop`, `kd web sessions`,
//! `kd web revoke ID|--all`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::terminal::safe;

use super::{Ctx, print_json};
use crate::fmt::{self, Table};

#[derive(Debug, Args)]
pub struct WebArgs {
    #[command(subcommand)]
    cmd: Option<WebCommand>,
    /// The address to serve on (default 127.0.0.1:7433; a non-loopback one is served over TLS)
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Open the pairing URL in this machine's browser
    #[arg(long)]
    open: bool,
    /// Print the pairing URL as a QR code too (for a phone)
    #[arg(long)]
    qr: bool,
    /// Serve a non-loopback address without TLS (anyone on the path sees the session)
    #[arg(long)]
    insecure_http: bool,
    /// A PEM certificate chain to serve with (with --tls-key)
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// Its PEM private key
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Another name the page is reached by (a DNS name, a reverse proxy's); repeatable; also web.names
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// Stop serving the web client
    #[arg(long, conflicts_with_all = ["listen", "open", "qr", "insecure_http", "tls_cert"])]
    stop: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum WebCommand {
    /// The browsers paired with kd web
    Sessions {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// End a paired browser's session (or every one with --all)
    Revoke {
        /// The session (ws-…), as kd web sessions lists it
        #[arg(required_unless_present = "all")]
        id: Option<String>,
        /// Every session
        #[arg(long, conflicts_with = "id")]
        all: bool,
    },
}

fn absolute(p: Option<std::path::PathBuf>) -> anyhow::Result<Option<String>> {
    p.map(|p| Ok(std::path::absolute(&p)?.display().to_string())).transpose()
}

pub async fn run(ctx: &Ctx, a: WebArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    match a.cmd {
        Some(WebCommand::Sessions { json }) => {
            let sessions = client.web_sessions().await.map_err(ClientError::from)?;
            if json {
                print_json(&sessions)?;
            } else if sessions.is_empty() {
                outln!("No browser is paired with kd web.")?;
            } else {
                let now = fmt::now_ms();
                let mut t = Table::new(&["ID", "PAIRED", "LAST SEEN", "FROM", "BROWSER"]);
                for s in &sessions {
                    t.row(vec![
                        s.id.clone(),
                        fmt::ago_ms(s.created_ms, now),
                        fmt::ago_ms(s.last_seen_ms, now),
                        safe(&s.peer).into_owned(),
                        safe(s.user_agent.as_deref().unwrap_or("-")).into_owned(),
                    ]);
                }
                out!("{}", t.render())?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(WebCommand::Revoke { id, all }) => {
            let r = client.web_revoke(id, all.then_some(true)).await.map_err(ClientError::from)?;
            outln!("{} ended.", fmt::count(r.revoked, "session"))?;
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    if a.stop {
        let stopped = client.web_stop().await.map_err(ClientError::from)?;
        outln!("{}", if stopped.stopped { "kd web stopped." } else { "kd web was not serving." })?;
        return Ok(ExitCode::SUCCESS);
    }
    let serving = client
        .web_serve(
            a.listen,
            a.insecure_http.then_some(true),
            absolute(a.tls_cert)?,
            absolute(a.tls_key)?,
            (!a.names.is_empty()).then_some(a.names),
        )
        .await
        .map_err(ClientError::from)?;
    if a.json {
        print_json(&serving)?;
        return Ok(ExitCode::SUCCESS);
    }
    let how = if serving.tls { "https" } else { "http" };
    outln!(
        "kd web {} on {} ({how}); kd web --stop ends it.",
        if serving.started { "serving" } else { "serves" },
        serving.listen
    )?;
    if !serving.names.is_empty() {
        outln!("Also reached as: {}", serving.names.join(", "))?;
    }
    if let Some(fp) = &serving.fingerprint {
        let whose = if serving.self_signed { "kd's self-signed certificate" } else { "the certificate" };
        outln!("TLS: {whose}, SHA-256 fingerprint {fp}")?;
    }
    if a.qr {
        match qrcode::QrCode::new(serving.url.as_bytes()) {
            Ok(code) => outln!(
                "{}",
                code.render::<qrcode::render::unicode::Dense1x2>()
                    .dark_color(qrcode::render::unicode::Dense1x2::Light)
                    .light_color(qrcode::render::unicode::Dense1x2::Dark)
                    .build()
            )?,
            Err(e) => outln!("(no QR code: {e})")?,
        }
    }
    if a.open
        && let Some(page) = open(&ctx.socket, &serving.url)
    {
        outln!(
            "Opened {} in this machine's browser: it forwards to the link (a browser installed as a snap or a \
             Flatpak cannot read it: open the link yourself).",
            safe(&page.display().to_string())
        )?;
    }
    outln!("Open once within 10 minutes to pair this browser (a one-time link):")?;
    outln!("{}", serving.url)?;
    Ok(ExitCode::SUCCESS)
}

/// Opens `url` in the user's browser, by argv: the page opened, or none
/// (a failure is said, not fatal). The browser is given a page beside kd's socket (its directory
/// only the user may enter) that forwards to `url`, never `url` itself: a
/// program's arguments are there for every user to read
/// (`/proc/PID/cmdline`), and the first to open the one-time link pairs.
fn open(socket: &std::path::Path, url: &str) -> Option<std::path::PathBuf> {
    let page = match forwarding_page(kd_proto::paths::socket_dir(socket), url) {
        Ok(page) => page,
        Err(e) => {
            eprintln!("kd: cannot write the page that opens kd web: {e}");
            return None;
        }
    };
    let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    let started = std::process::Command::new(opener)
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match started {
        Ok(_) => Some(page),
        Err(e) => {
            eprintln!("kd: cannot run {opener}: {e}");
            None
        }
    }
}

/// Writes `web-open.html` in `dir` (0600, made anew, never through a
/// link): a page without script that forwards the browser to `url`.
fn forwarding_page(dir: &std::path::Path, url: &str) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    let html: String = url
        .chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect();
    let page = dir.join("web-open.html");
    let new = dir.join(format!("web-open.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&new);
    let mut f = kd_proto::paths::create_private(&new)?;
    writeln!(
        f,
        "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"0;url={html}\"><title>kd web</title>\
         <p><a href=\"{html}\">Pair this browser with kd web</a></p>"
    )?;
    drop(f);
    std::fs::rename(&new, &page)?;
    Ok(page)
}
