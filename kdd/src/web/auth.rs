//! Who may use the page: one-time pairing tokens and the sessions they are
//! exchanged for, kept in kdd's memory (a restart ends every session).
//!
//! A token is 32 random bytes, shown once (in the URL `kd web` prints),
//! good for [`TOKEN_LIFETIME`] and one pairing; a session's secret is 32
//! random bytes more, held only by the browser's cookie. Neither is kept
//! here: only their SHA-256, looked up by hash (no secret is compared byte
//! by byte). Tokens and sessions are bounded ([`MAX_TOKENS`],
//! [`MAX_SESSIONS`]: the oldest go first).

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kd_proto::web::WebSession;

use crate::client::ClientId;

/// How long a pairing token may be used.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// Pairing tokens outstanding at most.
pub const MAX_TOKENS: usize = 16;
/// Paired browsers at most.
pub const MAX_SESSIONS: usize = 64;
/// A User-Agent is kept to this many characters.
const MAX_USER_AGENT: usize = 200;

type Hash = [u8; 32];

fn hash(secret: &str) -> Hash {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// `n` random bytes from the system's generator, as hex.
pub fn random_hex(n: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; n];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| "the system's random generator failed".to_string())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

struct Token {
    hash: Hash,
    expires: Instant,
}

struct Session {
    id: String,
    hash: Hash,
    created_ms: i64,
    last_seen_ms: i64,
    peer: String,
    user_agent: Option<String>,
    /// Its pages' WebSocket connections, cut when it is revoked.
    connections: Vec<ClientId>,
}

#[derive(Default)]
struct Inner {
    tokens: Vec<Token>,
    sessions: Vec<Session>,
}

/// The tokens and sessions of kd web.
#[derive(Default)]
pub struct Auth {
    inner: Mutex<Inner>,
}

impl Auth {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new pairing token and when it expires (ms since the epoch).
    pub fn new_token(&self) -> Result<(String, i64), String> {
        let token = random_hex(32)?;
        let mut inner = self.lock();
        let now = Instant::now();
        inner.tokens.retain(|t| t.expires > now);
        if inner.tokens.len() >= MAX_TOKENS {
            inner.tokens.remove(0);
        }
        inner.tokens.push(Token { hash: hash(&token), expires: now + TOKEN_LIFETIME });
        let expires_ms = now_ms().saturating_add(i64::try_from(TOKEN_LIFETIME.as_millis()).unwrap_or(i64::MAX));
        Ok((token, expires_ms))
    }

    /// Every pairing token is void.
    pub fn drop_tokens(&self) {
        self.lock().tokens.clear();
    }

    /// Exchanges a pairing token (used up here, good or not) for a new
    /// session: its cookie's secret, or `None` when the token is unknown,
    /// used or expired.
    pub fn pair(&self, token: &str, peer: String, user_agent: Option<&str>) -> Result<Option<String>, String> {
        let h = hash(token);
        let now = Instant::now();
        let secret = random_hex(32)?;
        let id = format!("ws-{}", random_hex(4)?);
        let mut inner = self.lock();
        inner.tokens.retain(|t| t.expires > now);
        let Some(at) = inner.tokens.iter().position(|t| t.hash == h) else { return Ok(None) };
        inner.tokens.remove(at);
        if inner.sessions.len() >= MAX_SESSIONS {
            inner.sessions.remove(0);
        }
        let user_agent = user_agent.map(|ua| ua.chars().filter(|c| !c.is_control()).take(MAX_USER_AGENT).collect());
        let at = now_ms();
        inner.sessions.push(Session {
            id,
            hash: hash(&secret),
            created_ms: at,
            last_seen_ms: at,
            peer,
            user_agent,
            connections: Vec::new(),
        });
        Ok(Some(secret))
    }

    /// The session a cookie's secret belongs to (its id), marked seen now.
    pub fn session(&self, secret: &str) -> Option<String> {
        let h = hash(secret);
        let mut inner = self.lock();
        let s = inner.sessions.iter_mut().find(|s| s.hash == h)?;
        s.last_seen_ms = now_ms();
        Some(s.id.clone())
    }

    /// Notes a WebSocket connection of a session, to be cut with it; false
    /// when the session ended meanwhile.
    pub fn attach(&self, id: &str, client: ClientId) -> bool {
        let mut inner = self.lock();
        match inner.sessions.iter_mut().find(|s| s.id == id) {
            Some(s) => {
                s.connections.push(client);
                true
            }
            None => false,
        }
    }

    /// Forgets a connection that closed.
    pub fn detach(&self, id: &str, client: ClientId) {
        let mut inner = self.lock();
        if let Some(s) = inner.sessions.iter_mut().find(|s| s.id == id) {
            s.connections.retain(|c| *c != client);
        }
    }

    /// The sessions, oldest first.
    pub fn list(&self) -> Vec<WebSession> {
        self.lock()
            .sessions
            .iter()
            .map(|s| WebSession {
                id: s.id.clone(),
                created_ms: s.created_ms,
                last_seen_ms: s.last_seen_ms,
                peer: s.peer.clone(),
                user_agent: s.user_agent.clone(),
            })
            .collect()
    }

    /// Ends the session `id` (every one with `None`): how many ended and
    /// their connections, to be cut.
    pub fn revoke(&self, id: Option<&str>) -> (usize, Vec<ClientId>) {
        let mut inner = self.lock();
        let (gone, kept): (Vec<Session>, Vec<Session>) =
            std::mem::take(&mut inner.sessions).into_iter().partition(|s| id.is_none_or(|id| s.id == id));
        inner.sessions = kept;
        let connections = gone.iter().flat_map(|s| s.connections.iter().copied()).collect();
        (gone.len(), connections)
    }
}

/// The session cookie's secret in a request's `Cookie` headers.
pub fn cookie(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// The session cookie's name.
pub const COOKIE: &str = "kd_session";

/// The `Set-Cookie` value for a session's secret: never readable by
/// script, sent only to this origin's same-site requests, over TLS only
/// when served over TLS.
pub fn set_cookie(secret: &str, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_pairs_once_and_a_session_is_found_by_its_secret_until_revoked() {
        let auth = Auth::default();
        let (token, _) = auth.new_token().unwrap();
        assert_eq!(token.len(), 64);
        assert!(auth.pair("not-a-token", "p".into(), None).unwrap().is_none());
        let secret = auth.pair(&token, "127.0.0.1".into(), Some("Firefox\u{1b}[2J")).unwrap().expect("paired");
        assert!(auth.pair(&token, "p".into(), None).unwrap().is_none(), "used once");
        let id = auth.session(&secret).expect("a session");
        assert!(auth.session(&token).is_none());
        let list = auth.list();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].user_agent.as_deref(), Some("Firefox[2J"), "no control characters kept");
        assert!(auth.attach(&id, ClientId(3)));
        assert_eq!(auth.revoke(Some("ws-other")).0, 0);
        assert_eq!(auth.revoke(Some(&id)), (1, vec![ClientId(3)]));
        assert!(auth.session(&secret).is_none(), "revoked");
    }

    #[test]
    fn tokens_are_dropped_and_bounded() {
        let auth = Auth::default();
        let (token, _) = auth.new_token().unwrap();
        auth.drop_tokens();
        assert!(auth.pair(&token, "p".into(), None).unwrap().is_none());
        let first = auth.new_token().unwrap().0;
        for _ in 0..MAX_TOKENS {
            auth.new_token().unwrap();
        }
        assert!(auth.pair(&first, "p".into(), None).unwrap().is_none(), "the oldest went first");
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::COOKIE, "a=1; kd_session=abc; b=2".parse().unwrap());
        assert_eq!(cookie(&h).as_deref(), Some("abc"));
        assert_eq!(set_cookie("s", true), "kd_session=s; HttpOnly; SameSite=Strict; Path=/; Secure");
    }
}
