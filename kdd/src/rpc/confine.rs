//! The check (run by [`super::check::CheckLayer`]) that confines an agent's
//! processes (see [`crate::identity`]): a peer placed as a process of an
//! agent kd runs may say hello (`daemon.hello`), read the API's description
//! (`rpc.discover`) and use the member surface (`member.*`, whose token
//! must also agree with its ancestry: `rpc::member`); any other method —
//! every King action, acting as another member or on another thread — is
//! answered `forbidden` with a one-line reason naming kd's tools.

use jsonrpsee::types::{ErrorObject, Request};
use kd_proto::ErrorCode;

use crate::identity::Peer;

/// The methods a confined peer may call (and `member.*`).
const OPEN: [&str; 2] = ["daemon.hello", "rpc.discover"];

/// The check for [`super::check::CheckLayer`].
pub fn check_request(request: &Request<'_>) -> Result<(), ErrorObject<'static>> {
    check(&request.method, request.extensions.get::<Peer>())
}

fn check(method: &str, peer: Option<&Peer>) -> Result<(), ErrorObject<'static>> {
    match peer {
        Some(p @ Peer::Confined { .. }) if !may_call(method) => Err(ErrorCode::Forbidden.error(p.refusal(method))),
        _ => Ok(()),
    }
}

fn may_call(method: &str) -> bool {
    OPEN.contains(&method) || method.starts_with("member.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Origin;

    #[test]
    fn a_confined_peer_says_hello_and_acts_as_a_member_and_nothing_else() {
        let agent = Peer::Confined { pid: 9, origin: Some(Origin::Run { run: "r1".into(), member: None }) };
        for open in ["daemon.hello", "rpc.discover", "member.send", "member.whoami"] {
            assert!(check(open, Some(&agent)).is_ok(), "{open}");
        }
        for king in [
            "message.route",
            "council.send",
            "council.ask",
            "daemon.shutdown",
            "emergency.ack",
            "thread.subscribe",
            "approval.list",
            "approval.decide",
            "approval.subscribe",
            "notify.subscribe",
            "web.serve",
            "web.sessions",
            "web.revoke",
            "x.y",
        ] {
            let e = check(king, Some(&agent)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::Forbidden.code(), "{king}");
            assert!(e.message().starts_with(&format!("{king} is refused")), "{}", e.message());
        }
        assert!(check("daemon.shutdown", Some(&Peer::Free)).is_ok(), "the King");
        assert!(check("daemon.shutdown", None).is_ok(), "a call no server placed (in-process)");
    }
}
