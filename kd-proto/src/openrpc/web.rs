//! kd web (issue 35) in the OpenRPC document: serving the web client and
//! the browsers paired with it.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::web::{WebRevoked, WebServing, WebSession, WebStopped};

pub(super) fn methods(b: &mut Builder) {
    b.method::<WebServing>(
        "web.serve",
        "serving",
        "Serve the web client on a TCP address (started if it is not; a running one is kept and must be stopped \
         to move) and make a new one-time pairing token: the URL to open once in a browser, which then holds a \
         session cookie. A non-loopback address needs TLS (tls_cert and tls_key, else a self-signed certificate \
         kd makes and keeps, whose fingerprint is returned) unless insecure_http. Refused to an agent's processes.",
    );
    b.param::<String>("listen", false, "the address to listen on (default 127.0.0.1:7433)")
        .param::<bool>("insecure_http", false, "serve a non-loopback address without TLS (not recommended)")
        .param::<String>("tls_cert", false, "a PEM certificate chain to serve (absolute path, with tls_key)")
        .param::<String>("tls_key", false, "its PEM private key (absolute path)")
        .param::<Vec<String>>(
            "names",
            false,
            "more host names the page is reached by (a DNS name, a reverse proxy's; also web.names); a Host naming \
             anything else is refused",
        )
        .errors(&[InvalidArgument, Internal, Forbidden]);
    b.method::<WebStopped>(
        "web.stop",
        "stopped",
        "Stop serving the web client: the listener closes, every page's connection is cut, pairing tokens are \
         dropped (sessions stay, for the next web.serve). Refused to an agent's processes.",
    );
    b.errors(&[Forbidden]);
    b.method::<Vec<WebSession>>(
        "web.sessions",
        "sessions",
        "The browsers paired with the web client, oldest first (kept in kdd's memory: a restart ends them). \
         Refused to an agent's processes.",
    );
    b.errors(&[Forbidden]);
    b.method::<WebRevoked>(
        "web.revoke",
        "revoked",
        "End one browser's session (id) or every one (all): its pages' connections are cut and its cookie is \
         refused from now on. Refused to an agent's processes.",
    );
    b.param::<String>("id", false, "the session (ws-…)").param::<bool>("all", false, "every session").errors(&[
        InvalidArgument,
        NotFound,
        Forbidden,
    ]);
}
