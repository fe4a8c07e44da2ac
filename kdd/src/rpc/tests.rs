//! The method table as a whole: what is served is what the OpenRPC
//! document describes, and that document is the one checked in
//! (`docs/openrpc.json`), so that no change of the wire goes unnoticed.

use std::collections::BTreeSet;
use std::sync::Arc;

use jsonrpsee::core::params::ObjectParams;
use serde_json::Value;

use super::module;
use crate::db::Db;
use crate::hub::Hub;
use crate::state::Daemon;

/// The OpenRPC document checked in; `KD_UPDATE_OPENRPC=1` rewrites it.
const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openrpc.json");

async fn daemon(tmp: &tempfile::TempDir) -> Arc<Daemon> {
    let hub = Arc::new(Hub::new());
    let db = Db::open(
        &kd_proto::paths::DbLocation::File(tmp.path().join("kd.sqlite3")),
        hub.clone(),
        crate::db::Node::here("test"),
    )
    .await
    .unwrap();
    Arc::new(Daemon::new(
        db,
        hub,
        tmp.path().join("s"),
        &crate::limits::Limits::default(),
        std::time::Duration::from_secs(1),
        crate::lifecycle::Archived::channel().0,
    ))
}

#[tokio::test]
async fn every_served_method_is_documented_and_every_documented_method_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let module = module(daemon(&tmp).await);
    let served: BTreeSet<&str> = module.method_names().collect();
    let documented: BTreeSet<&str> = kd_proto::openrpc::methods()
        .iter()
        .flat_map(|m| std::iter::once(m.name).chain(m.subscription.map(|(_, unsubscribe)| unsubscribe)))
        .collect();
    assert_eq!(served, documented);
}

/// The first place two JSON values differ, as a path.
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(a), Some(b)) => first_difference(&format!("{path}/{k}"), a, b),
                (a, _) => Some(format!("{path}/{k} ({})", if a.is_some() { "gone" } else { "new" })),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (a, b))| first_difference(&format!("{path}/{i}"), a, b))
        }
        _ if a == b => None,
        _ => Some(path.to_string()),
    }
}

#[tokio::test]
async fn rpc_discover_serves_the_checked_in_openrpc_document() {
    let tmp = tempfile::tempdir().unwrap();
    let module = module(daemon(&tmp).await);
    let served: Value = module.call("rpc.discover", ObjectParams::new()).await.unwrap();
    if std::env::var_os("KD_UPDATE_OPENRPC").is_some_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&served).unwrap() + "\n";
        std::fs::write(SNAPSHOT, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(SNAPSHOT).unwrap_or_default();
    let snapshot: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert!(
        served == snapshot,
        "rpc.discover no longer serves docs/openrpc.json: the wire changed at {}. If that is meant, \
         regenerate it with `KD_UPDATE_OPENRPC=1 cargo test -p kdd --lib rpc::tests` and commit it",
        first_difference("", &snapshot, &served).unwrap_or_default()
    );
}
