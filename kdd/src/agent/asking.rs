//! A permission a long-lived agent (codex app-server, an ACP agent) asks,
//! answered off the peer's reading loop: the agent keeps being read — its
//! other requests answered, its updates streamed, a cancel sent — while
//! the approvals service decides, which may take the King minutes.
//!
//! The peer's [`Dialect`](super::peer::Dialect) reads the request into a
//! [`Later`] (the tool as the agent described it, the scopes its CLI can
//! honour, what kd answered before approvals, how an answer is written);
//! the peer hands it as a [`Question`] to the run following the request's
//! conversation, whose answer is queued straight to the agent's stdin.
//! Nobody following the conversation: the agent gets today's answer at
//! once. A question let go unanswered (the run ended) is answered
//! `cancelled`; a run that stops answers its questions `cancelled` before
//! it sends its cancel. The run keeps its questions in [`Asking`]: each asked of
//! [`crate::approvals::Approvals::ask`] in a task of its own, all of them
//! cancelled (and the agent told so) when the run stops, dropped (the
//! service records them cancelled) when the run ends.

use std::collections::HashMap;
use std::sync::Arc;

use kd_proto::approval::{ApprovalTool, Scope};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::Runner;
use super::registry::Run;
use super::spec::Spec;
use crate::approvals::{Answer, Ask};

/// How an answer is written to the agent (the reply to its request).
pub type Writer = Arc<dyn Fn(&Answer) -> Value + Send + Sync>;

/// A request a dialect answers later.
pub struct Later {
    pub tool: ApprovalTool,
    /// What the CLI can honour (`once` first).
    pub scopes: Vec<Scope>,
    /// What kd answered before approvals (the member's fixed policy).
    pub today: Answer,
    pub write: Writer,
}

impl Later {
    /// The question for the run; its reply goes to `replies` (the agent's
    /// stdin).
    pub fn question(self, replies: mpsc::Sender<String>) -> Question {
        let Later { tool, scopes, today, write } = self;
        Question { tool, scopes, today, write, replies: Some(replies) }
    }
}

/// A permission the run following a conversation is to answer. Dropped
/// unanswered, it is answered `cancelled`.
pub struct Question {
    pub tool: ApprovalTool,
    pub scopes: Vec<Scope>,
    pub today: Answer,
    write: Writer,
    /// Where the reply goes; taken once it went.
    replies: Option<mpsc::Sender<String>>,
}

impl std::fmt::Debug for Question {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Question").field("tool", &self.tool).field("today", &self.today).finish_non_exhaustive()
    }
}

impl Question {
    /// Answers the agent: the reply is queued at once, before anything
    /// kd sends it after (a cancel follows its `cancelled`).
    pub fn answer(mut self, answer: &Answer) {
        self.reply(answer);
    }

    fn reply(&mut self, answer: &Answer) {
        let Some(replies) = self.replies.take() else { return };
        let line = (self.write)(answer).to_string();
        // A full queue (the agent does not read): sent when there is room.
        if let Err(mpsc::error::TrySendError::Full(line)) = replies.try_send(line)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = replies.send(line).await;
            });
        }
    }
}

impl Drop for Question {
    fn drop(&mut self) {
        self.reply(&Answer::Cancelled);
    }
}

/// The questions of a run being asked.
#[derive(Default)]
pub struct Asking {
    /// The asks in flight, each answering its question's key.
    asks: JoinSet<(u64, Answer)>,
    questions: HashMap<u64, Question>,
    keys: u64,
    /// Once the run stopped: questions are answered `cancelled` at once.
    stopped: bool,
}

impl Asking {
    /// Asks `question` of the approvals service as `run`'s member, beside
    /// the run's loop; [`Asking::next`] gives its answer.
    pub fn ask(&mut self, d: &Runner, run: &Run, spec: &Spec, question: Question) {
        if self.stopped {
            question.answer(&Answer::Cancelled);
            return;
        }
        let mut ask = Ask::new(run.thread.clone(), run.member.clone(), spec.agent.backend, question.tool.clone());
        ask.run = Some(run.id.clone());
        ask.scopes = question.scopes.clone();
        ask.worktree = spec.work.as_ref().map(|w| w.dir.clone());
        let (approvals, today) = (d.approvals.clone(), question.today.clone());
        let key = self.keys;
        self.keys += 1;
        self.questions.insert(key, question);
        self.asks.spawn(async move { (key, approvals.ask(ask, today).await) });
    }

    /// The next question decided, answered to the agent: its answer and
    /// tool. Pending forever when none is being asked (for `select!`).
    pub async fn next(&mut self) -> (Answer, ApprovalTool) {
        loop {
            match self.asks.join_next().await {
                Some(Ok((key, answer))) => {
                    let Some(question) = self.questions.remove(&key) else { continue };
                    let tool = question.tool.clone();
                    question.answer(&answer);
                    return (answer, tool);
                }
                // Aborted (the run stopped): answered `cancelled` then.
                Some(Err(_)) => continue,
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// The run stopped (cancelled, timed out, kd stops): every question
    /// pending is answered `cancelled` now (its ask dropped: the service
    /// records it so), and so is any later one.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.asks.abort_all();
        for (_, question) in self.questions.drain() {
            question.answer(&Answer::Cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::peer::{Dialect, Note, Peer, Reply};
    use crate::agent::process::Invocation;
    use serde_json::json;
    use std::path::Path;
    use std::time::Duration;

    fn later() -> Later {
        let write: Writer =
            Arc::new(|a: &Answer| json!({"allowed": a.is_allow(), "cancelled": *a == Answer::Cancelled}));
        Later {
            tool: ApprovalTool::new(kd_proto::approval::ToolKind::Execute, "touch x"),
            scopes: vec![Scope::Once],
            today: Answer::Deny { message: "no".into() },
            write,
        }
    }

    /// Asks on `{"c": CONVERSATION}` are permissions: allowed or not.
    struct Asks;

    impl Dialect for Asks {
        fn name(&self) -> &str {
            "the asking agent"
        }
        fn conversation(&self, _method: &str, params: &Value) -> Option<String> {
            params.get("c").and_then(Value::as_str).map(str::to_string)
        }
        fn ends_turn(&self, _method: &str) -> bool {
            false
        }
        fn answer(&self, id: &Value, _method: &str, _params: &Value) -> Reply {
            let id = id.clone();
            let write: Writer = Arc::new(
                move |a: &Answer| json!({"id": id, "result": {"allowed": a.is_allow(), "cancelled": *a == Answer::Cancelled}}),
            );
            Reply::Later(Later { write, ..later() })
        }
    }

    /// An agent that, once told to go, asks on conversation `x`, says
    /// something more there, then tells on conversation `g` the reply it read.
    fn agent() -> Invocation {
        let script = r#"read go; printf '%s\n' '{"id":5,"method":"ask","params":{"c":"x"}}' '{"method":"more","params":{"c":"x"}}'
read reply; printf '{"method":"got","params":{"c":"g","reply":%s}}\n' "$reply"; exec sleep 600"#;
        Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            stdin: Some(String::new()),
            env: vec![],
        }
    }

    async fn next(f: &mut super::super::peer::Following) -> Note {
        tokio::time::timeout(Duration::from_secs(30), f.notes.recv()).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn the_agent_is_read_while_a_permission_waits_then_answered() {
        let peer = Peer::start(&agent(), Path::new("/"), Arc::new(Asks)).unwrap();
        let (mut f, mut g) = (peer.follow("x").unwrap(), peer.follow("g").unwrap());
        peer.notify(json!({"go": true})).await.unwrap();
        let mut asked = next(&mut f).await;
        let question = asked.question.take().expect("the request is a question for the run");
        assert_eq!(question.tool.title, "touch x");
        // Unanswered, and what the agent says next still comes.
        assert_eq!(next(&mut f).await.method, "more");
        question.answer(&Answer::Allow { scope: Scope::Once });
        let got = next(&mut g).await;
        assert_eq!(got.params["reply"], json!({"id": 5, "result": {"allowed": true, "cancelled": false}}));
        peer.stop(Duration::from_millis(200)).await;
    }

    #[tokio::test]
    async fn a_question_the_run_lets_go_is_cancelled_and_one_nobody_follows_gets_todays_answer() {
        let peer = Peer::start(&agent(), Path::new("/"), Arc::new(Asks)).unwrap();
        let (mut f, mut g) = (peer.follow("x").unwrap(), peer.follow("g").unwrap());
        peer.notify(json!({"go": true})).await.unwrap();
        let mut asked = next(&mut f).await;
        drop(asked.question.take());
        let got = next(&mut g).await;
        assert_eq!(got.params["reply"]["result"], json!({"allowed": false, "cancelled": true}));
        peer.stop(Duration::from_millis(200)).await;

        // Nobody follows `x`: the agent is answered at once, as before
        // approvals (today: denied).
        let peer = Peer::start(&agent(), Path::new("/"), Arc::new(Asks)).unwrap();
        let mut g = peer.follow("g").unwrap();
        peer.notify(json!({"go": true})).await.unwrap();
        let got = next(&mut g).await;
        assert_eq!(got.params["reply"]["result"], json!({"allowed": false, "cancelled": false}));
        peer.stop(Duration::from_millis(200)).await;
    }

    #[tokio::test]
    async fn a_question_answered_or_let_go_replies_to_the_agent_once() {
        let (tx, mut rx) = mpsc::channel(4);
        later().question(tx.clone()).answer(&Answer::Allow { scope: Scope::Once });
        let line: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(line, json!({"allowed": true, "cancelled": false}));
        drop(later().question(tx));
        let line: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(line, json!({"allowed": false, "cancelled": true}), "let go: cancelled");
        assert!(rx.recv().await.is_none(), "nothing more");
    }
}
