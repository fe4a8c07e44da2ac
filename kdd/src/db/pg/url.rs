//! Where a PostgreSQL registry is: a `postgres://` URL or a `key=value`
//! conninfo string, read into the driver's [`tokio_postgres::Config`], the
//! TLS kd speaks to it, and a location to show that never holds a password.
//!
//! TLS (design §2.1): the driver knows only `sslmode=disable|prefer|require`;
//! kd reads `sslmode` and `sslrootcert` itself first.
//! - `verify-full`, `verify-ca`, `require` → TLS required, and rustls always
//!   verifies the chain and the host name: kd never accepts an unverified
//!   server certificate over TCP (so `verify-ca` and `require` are as strict
//!   as `verify-full`).
//! - `prefer` (the default) and `allow` → TLS when the server offers it,
//!   verified as above.
//! - `disable` → no TLS.
//! - `sslrootcert=PATH` → that file's PEM certificates are the only roots;
//!   `sslrootcert=system` or none → the Mozilla roots (webpki-roots).
//! - A Unix-socket host (`host=/run/postgresql`, `%2Frun%2Fpostgresql` in a
//!   URL) → no TLS: PostgreSQL does not speak TLS over a socket.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use tokio_postgres::config::{Host, SslMode};

use crate::db::{DbError, DbResult};

/// A parsed registry address.
pub(crate) struct Target {
    pub config: tokio_postgres::Config,
    pub tls: Tls,
    /// The address without its password, for status, logs and errors.
    pub location: String,
}

/// How kd secures the connections.
#[derive(Debug, PartialEq)]
pub(crate) enum Tls {
    None,
    /// rustls, verifying the server against these roots.
    Verified(Roots),
}

#[derive(Debug, PartialEq)]
pub(crate) enum Roots {
    /// The Mozilla roots (webpki-roots).
    Mozilla,
    /// The PEM certificates of `sslrootcert=PATH`.
    File(PathBuf),
}

/// Whether `s` names a PostgreSQL registry rather than a SQLite file.
pub fn is_postgres(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// Reads a `postgres://`/`postgresql://` URL or a `key=value` conninfo.
pub(crate) fn parse(s: &str) -> DbResult<Target> {
    let (rest, ssl) = if is_postgres(s) { split_url(s)? } else { split_conninfo(s)? };
    let mut config = tokio_postgres::Config::from_str(&rest)
        .map_err(|e| DbError::Invalid(format!("cannot read the database address: {e}")))?;
    let unix_only = !config.get_hosts().is_empty() && config.get_hosts().iter().all(|h| matches!(h, Host::Unix(_)));
    let tls = match (ssl.mode.as_deref(), unix_only) {
        (Some("disable"), _) | (_, true) => {
            config.ssl_mode(SslMode::Disable);
            Tls::None
        }
        (mode, false) => {
            config.ssl_mode(match mode {
                None | Some("prefer" | "allow") => SslMode::Prefer,
                Some("require" | "verify-ca" | "verify-full") => SslMode::Require,
                Some(other) => {
                    return Err(DbError::Invalid(format!(
                        "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                    )));
                }
            });
            Tls::Verified(match ssl.root_cert.as_deref() {
                None | Some("system") => Roots::Mozilla,
                Some(path) => Roots::File(PathBuf::from(path)),
            })
        }
    };
    let location = location(&config, ssl.mode.as_deref());
    Ok(Target { config, tls, location })
}

/// The settings kd reads itself, taken out of the address.
#[derive(Default, Debug)]
struct Ssl {
    mode: Option<String>,
    root_cert: Option<String>,
}

impl Ssl {
    /// Keeps `key`'s value if it is one of ours; false for the driver's keys.
    fn take(&mut self, key: &str, value: String) -> bool {
        match key {
            "sslmode" => self.mode = Some(value),
            "sslrootcert" => self.root_cert = Some(value),
            _ => return false,
        }
        true
    }
}

fn split_url(s: &str) -> DbResult<(String, Ssl)> {
    let mut ssl = Ssl::default();
    let Some((base, query)) = s.split_once('?') else { return Ok((s.to_string(), ssl)) };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !ssl.take(&percent_decode(k)?, percent_decode(v)?) {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    Ok((rest, ssl))
}

fn split_conninfo(s: &str) -> DbResult<(String, Ssl)> {
    let mut ssl = Ssl::default();
    let mut kept = Vec::new();
    for (k, v) in conninfo_pairs(s)? {
        if !ssl.take(&k, v.clone()) {
            kept.push(format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")));
        }
    }
    Ok((kept.join(" "), ssl))
}

/// libpq's `key = value` pairs: values unquoted up to white space, or in
/// single quotes; a backslash escapes the next character in both.
fn conninfo_pairs(s: &str) -> DbResult<Vec<(String, String)>> {
    let bad = |why: &str| DbError::Invalid(format!("cannot read the database address: {why}"));
    let mut pairs = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(bad(&format!("{key} has no value (key=value)")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(bad("unterminated quoted value")),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn percent_decode(s: &str) -> DbResult<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(DbError::Invalid(format!("cannot read the database address: bad escape in {s}")));
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| DbError::Invalid("cannot read the database address: not UTF-8".into()))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `postgres://user@host:port,…/dbname[?sslmode=…]`, rebuilt from what the
/// driver read: whatever the address held, no password can appear in it.
fn location(config: &tokio_postgres::Config, sslmode: Option<&str>) -> String {
    let user = config.get_user().map(|u| format!("{}@", percent_encode(u))).unwrap_or_default();
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) if name.contains(':') => format!("[{name}]"),
                Host::Tcp(name) => percent_encode(name),
                Host::Unix(path) => percent_encode(&path.to_string_lossy()),
            };
            match ports.get(i).or(if ports.len() == 1 { ports.first() } else { None }) {
                Some(port) if *port != 5432 => format!("{host}:{port}"),
                _ => host,
            }
        })
        .collect();
    let db = config.get_dbname().map(|d| format!("/{}", percent_encode(d))).unwrap_or_default();
    let ssl = sslmode.map(|m| format!("?sslmode={}", percent_encode(m))).unwrap_or_default();
    format!("postgres://{user}{}{db}{ssl}", hosts.join(","))
}

/// The rustls configuration for `roots`, with the ring provider.
pub(crate) fn rustls_config(roots: &Roots) -> DbResult<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Roots::Mozilla => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Roots::File(path) => {
            let bad = |e: &dyn std::fmt::Display| {
                DbError::Invalid(format!("cannot read sslrootcert {}: {e}", path.display()))
            };
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
                store.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
            }
            if store.is_empty() {
                return Err(bad(&"no certificate in it"));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DbError::Invalid(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(store)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Target {
        match parse(s) {
            Ok(t) => t,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn a_url_is_read_and_its_location_has_no_password() {
        let t = ok("postgres://kd:s3cret@db.example:5433/registry?sslmode=verify-full&application_name=x");
        assert_eq!(t.config.get_user(), Some("kd"));
        assert_eq!(t.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(t.config.get_dbname(), Some("registry"));
        assert_eq!(t.config.get_ports(), &[5433]);
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(t.config.get_application_name(), Some("x"));
        assert_eq!(t.tls, Tls::Verified(Roots::Mozilla));
        assert_eq!(t.location, "postgres://kd@db.example:5433/registry?sslmode=verify-full");
        assert!(!t.location.contains("s3cret"));
    }

    #[test]
    fn a_password_in_the_query_or_a_conninfo_never_reaches_the_location() {
        for s in [
            "postgresql://kd@db/kd?password=s3cret",
            "host=db user=kd password=s3cret dbname=kd",
            "host=db user=kd password='s3 cr\\'et' dbname=kd",
        ] {
            let t = ok(s);
            assert!(t.config.get_password().is_some(), "{s}");
            assert!(!t.location.contains("s3"), "{s}: {}", t.location);
            assert_eq!(t.location, "postgres://kd@db/kd", "{s}");
        }
        assert_eq!(ok("host=db password='s3 cr\\'et'").config.get_password(), Some(&b"s3 cr'et"[..]));
    }

    #[test]
    fn a_unix_socket_host_speaks_no_tls_whatever_the_sslmode() {
        for s in [
            "postgres://postgres@%2Ftmp%2Fkd-pg.abc/postgres",
            "postgres://postgres@%2Ftmp%2Fkd-pg.abc/postgres?sslmode=require",
            "host=/tmp/kd-pg.abc user=postgres dbname=postgres",
        ] {
            let t = ok(s);
            assert_eq!(t.tls, Tls::None, "{s}");
            assert_eq!(t.config.get_ssl_mode(), SslMode::Disable, "{s}");
            assert!(t.location.starts_with("postgres://postgres@%2Ftmp%2Fkd-pg.abc/postgres"), "{}", t.location);
        }
    }

    #[test]
    fn sslmodes_map_to_what_the_driver_knows_and_sslrootcert_names_the_roots() {
        let t = ok("postgres://kd@db/kd?sslmode=disable");
        assert_eq!((t.tls, t.config.get_ssl_mode()), (Tls::None, SslMode::Disable));
        let t = ok("postgres://kd@db/kd");
        assert_eq!((t.tls, t.config.get_ssl_mode()), (Tls::Verified(Roots::Mozilla), SslMode::Prefer));
        let t = ok("postgres://kd@db/kd?sslmode=verify-ca&sslrootcert=%2Fetc%2Fkd%2Fca.pem");
        assert_eq!(t.tls, Tls::Verified(Roots::File("/etc/kd/ca.pem".into())));
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
        let t = ok("host=db sslmode=require sslrootcert=system");
        assert_eq!(t.tls, Tls::Verified(Roots::Mozilla));
        let Err(DbError::Invalid(e)) = parse("postgres://kd@db/kd?sslmode=sometimes") else { panic!("accepted") };
        assert!(e.contains("sslmode=sometimes"), "{e}");
    }

    #[test]
    fn a_bad_address_is_refused_without_echoing_it() {
        for s in ["postgres://kd:s3cret@db/kd?bogus=1", "host=db password=s3cret bogus", "host=db password='s3cret"] {
            let Err(DbError::Invalid(e)) = parse(s) else { panic!("{s} accepted") };
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn the_mozilla_roots_make_a_tls_config_and_a_missing_root_file_is_named() {
        assert!(rustls_config(&Roots::Mozilla).is_ok());
        let Err(DbError::Invalid(e)) = rustls_config(&Roots::File("/nonexistent/ca.pem".into())) else {
            panic!("accepted")
        };
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn is_postgres_tells_urls_from_paths() {
        assert!(is_postgres("postgres://x/y") && is_postgres("postgresql://x/y"));
        assert!(!is_postgres("/home/k/.local/share/kd/kd.db") && !is_postgres("kd.db"));
    }
}
