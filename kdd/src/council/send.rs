//! `council.send`: append the King's message and start a run for each
//! addressed member, reading the workspace's configuration afresh.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::{ALL, KING};
use kd_proto::types::{MessageKind, Sent, SentRun, Style};

use crate::agent::registry::Run;
use crate::agent::supervisor::{self, Spec};
use crate::config::{self, CHAT_PREAMBLE, Config};
use crate::db::messages::NewMessage;
use crate::db::random_id;
use crate::state::{ClientId, Daemon};

/// A send, with its parameters checked.
#[derive(Debug, Clone)]
pub struct Request {
    pub thread: String,
    pub body: String,
    pub to: Option<Vec<String>>,
    pub mute: Vec<String>,
    pub style: Style,
    pub timeout: Option<Duration>,
    pub correlation_id: Option<String>,
    pub client: Option<ClientId>,
}

pub async fn send(d: &Arc<Daemon>, req: Request) -> Result<Sent, ErrorObjectOwned> {
    let thread = d.db.thread(req.thread.clone()).await?;
    let config = config::load(std::path::Path::new(&thread.workspace))
        .map_err(|e| ErrorCode::InvalidArgument.error(format!("configuration: {e}")))?;
    let members = addressees(&config, req.to.as_deref(), &req.mute)?;
    if thread.members != config.council.members {
        d.db.set_thread_members(thread.id.clone(), config.council.members.clone()).await?;
    }
    let to = match &req.to {
        Some(to) => to.clone(),
        None => vec![ALL.to_string()],
    };
    let message =
        d.db.append_message(NewMessage {
            thread: thread.id.clone(),
            from: KING.to_string(),
            to,
            cc: vec![],
            reply_to: None,
            kind: MessageKind::King,
            body: req.body.clone(),
            round: None,
            run: None,
            correlation_id: req.correlation_id.clone(),
            fence: None,
        })
        .await?;
    let preamble = match req.style {
        Style::Council => config.council.preamble.clone(),
        Style::Chat => CHAT_PREAMBLE.to_string(),
    };
    let mut runs = Vec::new();
    for member in members {
        let Some(agent) = config.agent(&member).cloned() else { continue };
        let (run, attached) = d.runs.claim(&thread.id, &member, || {
            Run::new(
                format!("r-{}", random_id(10)),
                thread.id.clone(),
                member.clone(),
                agent.backend.as_str(),
                Some(message.seq),
                None,
                req.client,
            )
        });
        if !attached {
            let spec = Spec {
                timeout: req.timeout.unwrap_or(Duration::from_secs(config.timeout_s(&member))),
                agent,
                preamble: preamble.clone(),
                style: req.style,
                context: thread.context,
                workspace: PathBuf::from(&thread.workspace),
            };
            tokio::spawn(supervisor::supervise(d.clone(), run.clone(), spec));
        }
        runs.push(SentRun { run: run.info(), attached });
    }
    Ok(Sent { message, runs })
}

/// The members a message goes to: the named ones (each must be a member)
/// or all configured members, less the muted ones.
fn addressees(config: &Config, to: Option<&[String]>, mute: &[String]) -> Result<Vec<String>, ErrorObjectOwned> {
    let members = &config.council.members;
    if members.is_empty() {
        return Err(ErrorCode::InvalidArgument.error(
            "no council members: install claude, codex, cursor (agent) or gemini, or list members in \
             .kd/config.json (council.members, with agents.<name> for each)",
        ));
    }
    let known = |name: &String| name == ALL || members.contains(name) || config.agents.contains_key(name);
    for name in to.unwrap_or_default().iter().chain(mute) {
        if !known(name) {
            return Err(ErrorCode::InvalidArgument
                .error(format!("unknown member {name:?}; the members are {}", members.join(", "))));
        }
    }
    let chosen: Vec<String> = match to {
        Some(to) => to.iter().filter(|n| n.as_str() != ALL).cloned().collect(),
        None => members.clone(),
    };
    let chosen: Vec<String> = if to.is_some_and(|t| t.iter().any(|n| n == ALL)) { members.clone() } else { chosen };
    Ok(chosen.into_iter().filter(|m| !mute.contains(m)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Council, Mode};

    fn config(members: &[&str]) -> Config {
        let env = config::Env { var: &|_| None };
        let mut c = config::load_with(std::path::Path::new("/nonexistent"), &env).unwrap();
        c.council = Council {
            members: members.iter().map(|s| s.to_string()).collect(),
            members_detected: false,
            timeout_s: 600,
            auto_rounds: 3,
            mode: Mode::Broadcast,
            preamble: "p".into(),
        };
        c
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn all_members_less_the_muted() {
        let c = config(&["claude", "codex", "gemini"]);
        assert_eq!(addressees(&c, None, &names(&["codex"])).unwrap(), names(&["claude", "gemini"]));
        assert_eq!(addressees(&c, Some(&names(&["all"])), &[]).unwrap(), names(&["claude", "codex", "gemini"]));
        assert_eq!(addressees(&c, Some(&names(&["gemini"])), &[]).unwrap(), names(&["gemini"]));
    }

    #[test]
    fn an_unknown_name_lists_the_members() {
        let c = config(&["claude", "codex"]);
        let e = addressees(&c, Some(&names(&["gpt"])), &[]).unwrap_err();
        assert_eq!(e.message(), "unknown member \"gpt\"; the members are claude, codex");
        assert!(addressees(&c, None, &names(&["nobody"])).is_err());
    }

    #[test]
    fn no_members_says_how_to_configure_one() {
        let e = addressees(&config(&[]), None, &[]).unwrap_err();
        assert!(e.message().contains(".kd/config.json"), "{}", e.message());
    }
}
