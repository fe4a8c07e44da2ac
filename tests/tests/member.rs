//! The member surface end to end (issue 22, F-B6): a run's agent acts
//! through kd as its member, on its thread, by the capability its run was
//! given (`KD_RUN_TOKEN`) — `member.*` called directly with the token a
//! held run wrote out, and `kd send`/`kd inbox`/`kd ack`/`kd claim` run from
//! the agent's shell — with a real kdd and fake agents.

use jsonrpsee::core::ClientError;
use kd_client::{Client, KdApiClient};
use kd_proto::ErrorCode;
use kd_proto::MemberApiClient;
use kd_proto::types::*;
use kd_tests::{Hold, Kdd, Workspace, collect_until};

/// A member: its name, its `FAKE_*` environment, more keys of its agent.
type Fake<'a> = (&'a str, &'a [(&'a str, &'a str)], serde_json::Value);

fn config(ws: &Workspace, members: &[Fake<'_>], council: serde_json::Value) {
    let mut agents = serde_json::Map::new();
    for (name, env, extra) in members {
        let mut a = kd_tests::fake(name, name, env);
        if let (Some(a), Some(extra)) = (a.as_object_mut(), extra.as_object()) {
            a.extend(extra.clone());
        }
        agents.insert(name.to_string(), a);
    }
    let mut council = council;
    council["members"] = members.iter().map(|m| m.0).collect::<Vec<_>>().into();
    ws.write_config(&serde_json::json!({"council": council, "agents": agents}));
}

fn none() -> serde_json::Value {
    serde_json::json!({})
}

/// The `FAKE_RUN` of a member whose run writes its capability to `file`.
fn token_to(file: &str) -> String {
    format!("printf %s \"$KD_RUN_TOKEN\" > {file}")
}

/// The error code of a refused call.
fn code(e: &ClientError) -> i32 {
    match e {
        ClientError::Call(e) => e.code(),
        other => panic!("not a call error: {other}"),
    }
}

/// Waits until `member`'s run on the subscribed thread has streamed its
/// first piece (its `FAKE_RUN` has run: the fake runs it first); its id.
async fn first_piece(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, member: &str) -> String {
    let events =
        collect_until(sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { member: m, .. } if m == member)))
            .await;
    events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::Delta { run, member: m, .. } if m == member => Some(run.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// claude holding its run mid-stream after writing its token to a file;
/// `others` more members. The kdd, a client, the thread, its subscription,
/// the hold and the token file.
struct Held {
    kdd: Kdd,
    c: Client,
    t: String,
    sub: jsonrpsee::core::client::Subscription<ThreadEvent>,
    hold: Hold,
    ws: Workspace,
    token_file: String,
}

impl Held {
    async fn start(others: &[Fake<'_>], council: serde_json::Value) -> Held {
        let ws = Workspace::new(&[]);
        let hold = Hold::new();
        let token_file = ws.file("token");
        let run = token_to(&token_file);
        let env = [("FAKE_RUN", run.as_str()), ("FAKE_HOLD", hold.var())];
        let mut members: Vec<Fake<'_>> = vec![("claude", &env[..], none())];
        members.extend(others.iter().cloned());
        config(&ws, &members, council);
        let kdd = Kdd::start();
        let c = kdd.client().await;
        let t = kd_tests::new_thread(&c, &ws.path()).await;
        let sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
        Held { kdd, c, t, sub, hold, ws, token_file }
    }

    /// Asks claude and waits for its run to hold; its token and run id.
    async fn ask_claude(&mut self) -> (String, String) {
        self.c
            .council_send(self.t.clone(), "@claude go".into(), None, None, None, None, None, Some(0), None)
            .await
            .unwrap();
        let run = first_piece(&mut self.sub, "claude").await;
        (std::fs::read_to_string(&self.token_file).unwrap_or_default(), run)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_given_its_capability_which_names_its_member_thread_and_run_until_it_ends() {
    let mut h = Held::start(&[], none()).await;
    let (token, run) = h.ask_claude().await;
    assert!(token.starts_with("kdcap_") && token.len() == 70, "KD_RUN_TOKEN of the run: {token:?}");
    let grant = h.c.member_whoami(token.clone()).await.unwrap();
    assert_eq!(
        (grant.member.as_str(), grant.thread.as_str(), grant.run.as_deref(), grant.workspace.as_str()),
        ("claude", h.t.as_str(), Some(run.as_str()), h.ws.path().as_str())
    );
    let forged = format!("kdcap_{}", "0".repeat(64));
    let e = h.c.member_whoami(forged).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::Forbidden.code(), "{e}");
    h.hold.release();
    collect_until(&mut h.sub, |e| kd_tests::ended(e) == 1).await;
    let e = h.c.member_whoami(token).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::Forbidden.code(), "a stale token: {e}");
    drop(h.kdd);
}
