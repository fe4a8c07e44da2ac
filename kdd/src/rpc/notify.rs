//! `notify.test`: one test notification to each sink of a workspace's
//! configuration, through the daemon's notifier ([`crate::notify`]), and
//! what each sink answered.

use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::notify::{NotifyApiServer, NotifyTest};

use super::error::invalid;
use super::{Rpc, validate};

#[async_trait]
impl NotifyApiServer for Rpc {
    async fn notify_test(&self, workspace: String) -> RpcResult<NotifyTest> {
        validate::workspace(&workspace)?;
        self.d.notify.test(std::path::Path::new(&workspace)).await.map_err(|e| invalid(format!("configuration: {e}")))
    }
}
