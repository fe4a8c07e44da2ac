//! `exchange.get`: the daemon's view of an exchange's journal (issue 24),
//! read from [`crate::db::exchanges`]; a client that reconnected after a
//! restart asks it whether what it waited on is over.

use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::exchange::{ExchangeApiServer, ExchangeInfo};

use super::{Rpc, validate};
use crate::db::DbError;

#[async_trait]
impl ExchangeApiServer for Rpc {
    async fn exchange_get(&self, thread: String, seq: u64) -> RpcResult<ExchangeInfo> {
        validate::thread_id(&thread)?;
        validate::position("seq", Some(seq))?;
        let what = format!("no exchange begun by message {seq} of thread {thread}");
        match self.d.db.exchange_info(thread, seq).await? {
            Some(info) => Ok(info),
            None => Err(DbError::NotFound(what).into()),
        }
    }
}
