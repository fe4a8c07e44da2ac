//! `council.send`: append the King's message, decide who answers, start the
//! first round and hand the rest of the exchange to [`super::exchange`].
//! The workspace's configuration is read afresh on every send.

use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::{ALL, KING};
use kd_proto::types::{MessageKind, Mode, Sent, SentRun, Style, Thread};
use serde::{Deserialize, Serialize};

use super::exchange::{self, Journal, Plan};
use super::exchanges::Exchange;
use super::{Council, Launch, WorkRuns};
use crate::agent::registry::{Claim, Place};
use crate::client::ClientId;
use crate::config::{self, Config};
use crate::db::exchanges::{Kind, NewExchange, StepKey};
use crate::db::messages::NewMessage;
use crate::db::threads::NewThread;
use crate::prompt::mentions::mentions;

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
    /// Overrides `council.auto_rounds`.
    pub rounds: Option<u32>,
    pub client: Option<ClientId>,
    /// Create the thread `thread` with the message.
    pub new_thread: Option<kd_proto::types::NewThread>,
    /// The members vote over the work once the rounds are over
    /// (`kd work --vote`): the exchange's plan says so.
    pub vote: bool,
    /// The asking client's `PATH`: the members are found on it and run
    /// with it, in every round of the exchange (none: kdd's own).
    pub path: Option<String>,
    /// Its exchange begins beside the thread's open one and supersedes
    /// none: kd sending a member back to fix its work while the vote over
    /// the task waits for the fix.
    pub beside: bool,
    /// Kept on its exchange as the exchange's correlation id (unique on
    /// the thread), for whoever asked to find it again after a restart
    /// (`kd rebase` following the member it asked: [`crate::work::rebase`]).
    pub tag: Option<String>,
    /// The workspace's configuration as the request already read it, and
    /// the workspace it was read for (`council.ask` reads it to find the
    /// current thread): not read again when the question goes there.
    pub config: Option<(String, Config)>,
}

/// Who a message is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressees {
    /// The members who answer, in council order where they are members.
    pub members: Vec<String>,
    /// Addressed to named members only (no auto-rounds).
    pub directed: bool,
    /// The message's `to`.
    pub to: Vec<String>,
}

/// A question asked on another node than the one that has its thread's
/// workspace, as its exchange's plan holds it until that node plans it
/// ([`take_routed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routed {
    pub to: Option<Vec<String>>,
    pub mute: Vec<String>,
    pub style: Style,
    pub timeout_s: Option<u64>,
    pub rounds: Option<u32>,
    pub vote: bool,
    /// The node it was asked on.
    pub from: String,
}

impl Routed {
    /// The routed question a plan holds, if it is one.
    pub fn of(plan: &serde_json::Value) -> Option<Routed> {
        serde_json::from_value(plan.get("routed")?.clone()).ok()
    }
}

/// The configuration of `workspace` as a question from a client whose
/// `PATH` is `path` reads it; refused as bad input.
pub fn read_config(workspace: &str, path: Option<&str>) -> Result<Config, ErrorObjectOwned> {
    config::load_for(std::path::Path::new(workspace), path)
        .map_err(|e| ErrorCode::InvalidArgument.error(format!("configuration: {e}")))
}

/// How long a question waits at most for the thread's exchange whose rounds
/// are over to record its end ([`super::exchanges::Exchanges::settled`]).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn send(c: &Arc<Council>, mut req: Request) -> Result<Sent, ErrorObjectOwned> {
    if c.agents.is_closed() {
        return Err(ErrorCode::ShuttingDown.error("the daemon is shutting down"));
    }
    let db = &c.agents.db;
    // Everything is checked before anything is written: a refused question
    // leaves no message, and no thread when it was to create one.
    let target = match req.new_thread.clone() {
        Some(new) => Target::New(new),
        None => Target::Existing(db.thread(req.thread.clone()).await?),
    };
    // A thread whose workspace is another node's is answered there; a
    // dead node's, here when this host has the workspace.
    if let Target::Existing(t) = &target
        && let Some((owner, live)) = db.thread_node(t.id.clone()).await?
        && (live || !std::path::Path::new(&t.workspace).is_dir())
    {
        return send_to_node(c, req, t, owner, live).await;
    }
    let workspace = match &target {
        Target::Existing(t) => &t.workspace,
        Target::New(n) => &n.workspace,
    };
    let config = match req.config.take() {
        Some((read_for, config)) if read_for == *workspace => config,
        _ => read_config(workspace, req.path.as_deref())?,
    };
    // Aged first, by the settings just read: a branch quiet past its
    // archive time refuses the message.
    let target = match target {
        Target::Existing(t) => {
            let mut settings = crate::lifecycle::Settings::with(&t.workspace, config.lifecycle.clone());
            Target::Existing(crate::lifecycle::check(db, &c.archived, t, &mut settings).await)
        }
        new => new,
    };
    let who = addressees(&config, req.to.as_deref(), &req.body, &req.mute)?;
    let king = NewMessage {
        correlation_id: req.correlation_id.clone(),
        ..NewMessage::new(&req.thread, KING, who.to.clone(), MessageKind::King, req.body.clone())
    };
    // The plan is made before anything is written, and written with the
    // question: a written question always has its journal (F-J1).
    let journal = Journal {
        beside: req.beside,
        ..plan(&config, &who, &req.mute, req.style, req.rounds, req.timeout.map(|t| t.as_secs()), req.vote)
    };
    let (mode, rounds) = (journal.mode, journal.rounds);
    let work = match &target {
        Target::Existing(t) => super::work_runs(db, &t.id).await?,
        Target::New(_) => WorkRuns::default(),
    };
    let starting = match mode {
        Mode::Broadcast => &who.members[..],
        Mode::Sequential => &who.members[..who.members.len().min(1)],
    };
    let exchange = NewExchange {
        thread: req.thread.clone(),
        seq: 0,
        kind: if work.is_empty() { Kind::Council } else { Kind::Work },
        correlation_id: req.tag.clone(),
        plan: journal.to_plan(),
        first_steps: starting.iter().map(|m| StepKey::answer(1, m)).collect(),
        path: req.path.clone(),
    };
    let (thread, asked) = match target {
        Target::Existing(thread) => {
            super::keep_members(db, &thread, &config).await?;
            if exchange.supersedes() {
                c.exchanges.settled(&thread.id, SETTLE).await;
            }
            let asked = db.ask(None, vec![king], exchange).await?;
            (thread, asked)
        }
        Target::New(new) => {
            let t = NewThread {
                id: Some(req.thread.clone()),
                workspace: new.workspace,
                branch: new.branch,
                title: new.title,
                members: config.council.members.clone(),
                lineage: new.lineage,
                parent: None,
                set_current: new.set_current,
                context: new.context.unwrap_or_default(),
                origin: None,
            };
            // A new thread branching off the trunk starts with its bundle.
            let mut messages: Vec<NewMessage> = crate::lifecycle::bundle_for(db, &t).await?.into_iter().collect();
            messages.push(king);
            let mut asked = db.ask(Some(t), messages, exchange).await?;
            let thread = asked.thread.take().ok_or_else(|| ErrorCode::Internal.error("the thread was not written"))?;
            (thread, asked)
        }
    };
    let message = asked.message;
    let notice = config.council.members_detected.then(|| {
        format!(
            "no council is configured (.kd/config.json), so the agent CLIs found on PATH answer: {}",
            config.council.members.join(", ")
        )
    });
    let launch =
        Launch { thread, config, style: req.style, timeout: req.timeout, client: req.client, prompt: None, work };
    let ex = Arc::new(Exchange::new(launch.thread.id.clone(), message.seq, asked.exchange.id));
    // The new exchange replaces (stops) the thread's pending one, unless
    // it goes beside it.
    if !req.beside {
        c.exchanges.begin(ex.clone());
    }
    let first_round = Place {
        reply_to: Some(message.seq),
        round: Some(1),
        exchange: Some(message.seq),
        replaces: None,
        purpose: None,
        step: None,
    };
    let mut runs = Vec::new();
    let mut started = Vec::new();
    for step in &asked.steps {
        if let Some(claim) = launch.start_step(c, &step.key.member, first_round, step) {
            let attached = matches!(claim, Claim::Joined(_));
            let run = claim.into_run();
            runs.push(SentRun { run: run.info(), attached });
            started.push(run);
        }
    }
    let plan = Plan { launch, journal, started };
    tokio::spawn(exchange::run(c.clone(), ex, plan));
    Ok(Sent { message, members: who.members, rounds, mode, notice, runs })
}

/// The journal of a question to `who`: the council's mode and auto-rounds
/// for `style` (or `rounds` more), one round for a directed message or a
/// single member — a council of one does not argue with itself.
fn plan(
    config: &Config,
    who: &Addressees,
    mute: &[String],
    style: Style,
    rounds: Option<u32>,
    timeout_s: Option<u64>,
    vote: bool,
) -> Journal {
    let planned = config.rounds(style);
    let mode = match planned.mode {
        config::Mode::Broadcast => Mode::Broadcast,
        config::Mode::Sequential => Mode::Sequential,
    };
    let rounds = if who.directed || who.members.len() == 1 { 1 } else { 1 + rounds.unwrap_or(planned.auto_rounds) };
    Journal {
        mode,
        rounds,
        first: who.members.clone(),
        turns: config.council.members.iter().filter(|m| !mute.contains(m)).cloned().collect(),
        style,
        timeout_s,
        vote,
        beside: false,
    }
}

/// Writes a question to a thread whose workspace is node `owner`'s, for
/// that node to begin ([`take_routed`]): the addressees are checked against
/// the members the thread was last asked with (this node cannot read the
/// workspace's configuration), the rest is the owner's to decide. Clients
/// watch it here as any other.
async fn send_to_node(
    c: &Arc<Council>,
    req: Request,
    thread: &Thread,
    owner: String,
    live: bool,
) -> Result<Sent, ErrorObjectOwned> {
    let db = &c.agents.db;
    let who = addressees_among(&thread.members, req.to.as_deref(), &req.body, &req.mute)?;
    let king = NewMessage {
        correlation_id: req.correlation_id.clone(),
        ..NewMessage::new(&req.thread, KING, who.to.clone(), MessageKind::King, req.body.clone())
    };
    let work = super::work_runs(db, &thread.id).await?;
    let routed = Routed {
        to: req.to.clone(),
        mute: req.mute.clone(),
        style: req.style,
        timeout_s: req.timeout.map(|t| t.as_secs()),
        rounds: req.rounds,
        vote: req.vote,
        from: db.node().id.clone(),
    };
    let exchange = NewExchange {
        thread: req.thread.clone(),
        seq: 0,
        kind: if work.is_empty() { Kind::Council } else { Kind::Work },
        correlation_id: req.tag.clone(),
        plan: serde_json::json!({ "routed": routed }),
        first_steps: vec![],
        // A PATH of this host means nothing on the owner's: it runs the
        // members with its own.
        path: None,
    };
    let asked = db.ask_node(king, exchange, owner.clone()).await?;
    let notice = if live {
        format!("node {owner} has this thread's workspace: its members answer there")
    } else {
        format!("node {owner}, which has this thread's workspace, is not live: the question waits for it")
    };
    // The owner's configuration decides the rounds; its round events say
    // how many.
    let rounds = if who.directed || who.members.len() == 1 { 1 } else { 1 + req.rounds.unwrap_or(0) };
    Ok(Sent {
        message: asked.message,
        members: who.members,
        rounds,
        mode: Mode::Broadcast,
        notice: Some(notice),
        runs: vec![],
    })
}

/// Begins exchange `x`, a question another node routed to this one: its
/// plan made from this workspace's configuration and written once, then
/// driven as a question asked here. A question the configuration refuses
/// is answered by kd saying why, and its exchange ends. False when another
/// driver had planned it already.
pub async fn take_routed(c: &Arc<Council>, x: &crate::db::exchanges::Exchange) -> Result<bool, crate::db::DbError> {
    let Some(routed) = Routed::of(&x.plan) else { return Ok(false) };
    let db = &c.agents.db;
    let thread = db.thread(x.thread.clone()).await?;
    let king = db.message(x.thread.clone(), x.seq).await?;
    let me = &db.node().id;
    let refuse = |why: String| {
        let notice = NewMessage {
            reply_to: Some(x.seq),
            correlation_id: Some(format!("x-{}", x.seq)),
            ..NewMessage::new(&x.thread, kd_proto::names::KD, vec![KING.to_string()], MessageKind::System, why)
        };
        db.stop_exchange_with_notice(x.id, "refused".into(), notice)
    };
    let config = match config::load(std::path::Path::new(&thread.workspace)) {
        Ok(config) => config,
        Err(e) => {
            refuse(format!("node {me}, which has this workspace, cannot ask the members: configuration: {e}")).await?;
            return Ok(true);
        }
    };
    let who = match addressees(&config, routed.to.as_deref(), &king.body, &routed.mute) {
        Ok(who) => who,
        Err(e) => {
            refuse(format!("node {me}, which has this workspace, cannot ask the members: {}", e.message())).await?;
            return Ok(true);
        }
    };
    let mut journal = plan(&config, &who, &routed.mute, routed.style, routed.rounds, routed.timeout_s, routed.vote);
    // A question of the King's came after it (asked here before this one
    // was taken): this one's first answers are owed, its auto-rounds are
    // not, and the later question's exchange goes on undisturbed.
    let later = db.messages(x.thread.clone(), crate::db::messages::Page::all_after(x.seq)).await?;
    let superseded = later.iter().any(|m| m.kind == MessageKind::King);
    if superseded {
        journal.rounds = 1;
    }
    if !db.plan_exchange(x.id, journal.to_plan()).await? {
        return Ok(false);
    }
    super::keep_members(db, &thread, &config).await?;
    let work = super::work_runs(db, &thread.id).await?;
    let timeout = routed.timeout_s.map(Duration::from_secs);
    let launch = Launch { thread, config, style: routed.style, timeout, client: None, prompt: None, work };
    let ex = Arc::new(Exchange::new(launch.thread.id.clone(), x.seq, x.id));
    if !superseded {
        c.exchanges.begin(ex.clone());
    }
    // Its first round's steps are taken by the driver, as a resumed
    // exchange's are.
    tokio::spawn(exchange::run(c.clone(), ex, Plan { launch, journal, started: vec![] }));
    Ok(true)
}

/// The thread a send goes to.
enum Target {
    Existing(Thread),
    /// Created with the message, once it is accepted.
    New(kd_proto::types::NewThread),
}

/// Who answers a message: the members named by `to`, or by `@mentions` in
/// the body, or everyone (`@all`, or no one named), less the muted. Every
/// name must be a member.
pub fn addressees(
    config: &Config,
    to: Option<&[String]>,
    body: &str,
    mute: &[String],
) -> Result<Addressees, ErrorObjectOwned> {
    addressees_among(&config.council.members, to, body, mute)
}

/// [`addressees`] among `members`.
fn addressees_among(
    members: &[String],
    to: Option<&[String]>,
    body: &str,
    mute: &[String],
) -> Result<Addressees, ErrorObjectOwned> {
    if members.is_empty() {
        return Err(ErrorCode::InvalidArgument.error(
            "no council members: install claude, codex, cursor (agent) or gemini, or list members in \
             .kd/config.json (council.members, with agents.<name> for each)",
        ));
    }
    let named: Vec<String> = match to {
        Some(to) => to.to_vec(),
        None => mentions(body),
    };
    let known = |name: &String| name == ALL || members.contains(name);
    if let Some(unknown) = named.iter().chain(mute).find(|n| !known(n)) {
        let at = if to.is_none() && !mute.contains(unknown) { "@" } else { "" };
        return Err(ErrorCode::InvalidArgument
            .error(format!("unknown member {at}{unknown}; the members are {}", members.join(", "))));
    }
    let everyone = named.is_empty() || named.iter().any(|n| n == ALL);
    let chosen: Vec<String> =
        if everyone { members.to_vec() } else { members.iter().filter(|m| named.contains(m)).cloned().collect() };
    let answering: Vec<String> = chosen.into_iter().filter(|m| !mute.contains(m)).collect();
    if answering.is_empty() {
        return Err(ErrorCode::InvalidArgument.error("every addressed member is muted"));
    }
    Ok(Addressees {
        directed: !everyone,
        to: if everyone { vec![ALL.to_string()] } else { answering.clone() },
        members: answering,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Council, Mode, Rounds};

    fn config(members: &[&str]) -> Config {
        let env = config::Env { var: &|_| None };
        let mut c = config::load_with(std::path::Path::new("/nonexistent"), &env).unwrap();
        c.council = Council {
            members: members.iter().map(|s| s.to_string()).collect(),
            members_detected: false,
            timeout_s: 600,
            max_answer_bytes: config::DEFAULT_MAX_ANSWER_BYTES,
            ask: Rounds { mode: Mode::Broadcast, auto_rounds: 3 },
            chat: Rounds { mode: Mode::Broadcast, auto_rounds: 3 },
            preamble: "p".into(),
            chat_preamble: "c".into(),
            work_preamble: "w".into(),
            budget_usd: None,
            mcp: true,
            resume_within: config::DEFAULT_RESUME_WITHIN,
            resume_attempts: config::DEFAULT_RESUME_ATTEMPTS,
        };
        c
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn who(c: &Config, to: Option<&[&str]>, body: &str, mute: &[&str]) -> Result<Addressees, String> {
        let to = to.map(names);
        addressees(c, to.as_deref(), body, &names(mute)).map_err(|e| e.message().to_string())
    }

    #[test]
    fn plain_messages_go_to_all_members_less_the_muted() {
        let c = config(&["claude", "codex", "gemini"]);
        let a = who(&c, None, "What now?", &["codex"]).unwrap();
        assert_eq!((a.members, a.directed, a.to), (names(&["claude", "gemini"]), false, names(&["all"])));
        let a = who(&c, None, "@all thoughts?", &[]).unwrap();
        assert_eq!((a.members.len(), a.directed), (3, false));
    }

    #[test]
    fn mentions_and_to_direct_a_message_in_council_order() {
        let c = config(&["claude", "codex", "gemini"]);
        let a = who(&c, None, "@Gemini and @claude: yes?", &[]).unwrap();
        assert_eq!(
            (a.members, a.directed, a.to.clone()),
            (names(&["claude", "gemini"]), true, names(&["claude", "gemini"]))
        );
        let a = who(&c, Some(&["codex"]), "@claude ignored when to is given", &[]).unwrap();
        assert_eq!((a.members, a.directed), (names(&["codex"]), true));
    }

    #[test]
    fn unknown_names_list_the_members() {
        let c = config(&["claude", "codex"]);
        assert_eq!(who(&c, None, "@gpt hi", &[]).unwrap_err(), "unknown member @gpt; the members are claude, codex");
        assert_eq!(
            who(&c, Some(&["gpt"]), "hi", &[]).unwrap_err(),
            "unknown member gpt; the members are claude, codex"
        );
        assert!(who(&c, None, "hi", &["nobody"]).unwrap_err().starts_with("unknown member nobody"));
        assert_eq!(who(&c, None, "@codex", &["codex"]).unwrap_err(), "every addressed member is muted");
    }

    #[test]
    fn no_members_says_how_to_configure_one() {
        let e = who(&config(&[]), None, "hi", &[]).unwrap_err();
        assert!(e.contains(".kd/config.json"), "{e}");
    }
}
