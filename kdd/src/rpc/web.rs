//! `web.*`: kd web, started, stopped and its paired browsers managed by
//! the King (an agent's process is refused by `confine`), through
//! [`crate::state::WebControl`].

use jsonrpsee::core::async_trait;
use kd_proto::web::{WebApiServer, WebRevoked, WebServing, WebSession, WebStopped};
use kd_proto::{ErrorCode, RpcResult};

use super::Rpc;
use super::error::invalid;
use crate::state::{WebControl, WebServe};

impl Rpc {
    fn web(&self) -> RpcResult<&dyn WebControl> {
        self.d.web.get().map(|w| w.as_ref()).ok_or_else(|| ErrorCode::Internal.error("kd web is not available"))
    }
}

#[async_trait]
impl WebApiServer for Rpc {
    async fn web_serve(
        &self,
        listen: Option<String>,
        insecure_http: Option<bool>,
        tls_cert: Option<String>,
        tls_key: Option<String>,
        names: Option<Vec<String>>,
    ) -> RpcResult<WebServing> {
        for path in [&tls_cert, &tls_key].into_iter().flatten() {
            if !std::path::Path::new(path).is_absolute() {
                return Err(invalid(format!("tls_cert and tls_key are absolute paths, not {path:?}")));
            }
        }
        let names = names.unwrap_or_default();
        if names.len() > crate::config::web::MAX_NAMES {
            return Err(invalid(format!("at most {} names", crate::config::web::MAX_NAMES)));
        }
        let names = names
            .iter()
            .map(|n| crate::config::web::host_name(n).map_err(|m| invalid(format!("names: {m}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let req = WebServe { listen, insecure_http: insecure_http.unwrap_or(false), tls_cert, tls_key, names };
        self.web()?.serve(req).await
    }

    async fn web_stop(&self) -> RpcResult<WebStopped> {
        Ok(WebStopped { stopped: self.web()?.stop().await })
    }

    async fn web_sessions(&self) -> RpcResult<Vec<WebSession>> {
        Ok(self.web()?.sessions())
    }

    async fn web_revoke(&self, id: Option<String>, all: Option<bool>) -> RpcResult<WebRevoked> {
        let web = self.web()?;
        let revoked = match (id, all.unwrap_or(false)) {
            (Some(_), true) => return Err(invalid("id or all, not both")),
            (None, false) => return Err(invalid("which session: id, or all")),
            (None, true) => web.revoke(None),
            (Some(id), false) => match web.revoke(Some(&id)) {
                0 => return Err(ErrorCode::NotFound.error(format!("no kd web session {id}"))),
                n => n,
            },
        };
        Ok(WebRevoked { revoked: u32::try_from(revoked).unwrap_or(u32::MAX) })
    }
}
