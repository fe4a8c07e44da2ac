//! `web.*` (issue 35): where kd web serves — `web.listen` (an `IP:PORT`,
//! or `localhost:PORT`), `web.tls_cert` and `web.tls_key` (absolute paths
//! of PEM files, together), `web.names` (more host names the page is
//! reached by: a DNS name, a reverse proxy's, a tailnet's). kd web is the daemon's, not a workspace's, so
//! only the user's file (`$XDG_CONFIG_HOME/kd/config.json`) is read for it
//! ([`load`]); a workspace's section is checked like any other key but
//! does not move the listener. With `web.listen` set, kdd serves kd web
//! from its start; `kd web`'s flags win over these keys.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::Deserialize;

use super::resolver::Resolver;
use super::{ConfigError, Env};

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeb {
    pub listen: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub names: Option<Vec<String>>,
}

/// The section, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Web {
    pub listen: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub names: Vec<String>,
}

/// At most this many `web.names`.
pub const MAX_NAMES: usize = 16;

/// A name kd web may be reached by: a DNS name (letters, digits, `-`,
/// labels of at most 63 between dots) or an IP address (IPv6 in brackets
/// or not); lowercased.
pub fn host_name(name: &str) -> Result<String, String> {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    let bare = n.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(&n);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(match ip {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        });
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if n.is_empty() || n.len() > 253 || !n.split('.').all(label_ok) {
        return Err(format!("{name:?} is not a host name or an IP address (e.g. kd.example.lan)"));
    }
    Ok(n)
}

/// `listen` as an address: `IP:PORT`, or `localhost:PORT`.
pub fn listen_addr(listen: &str) -> Result<SocketAddr, String> {
    if let Some(port) = listen.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("{listen:?} has no port number"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    listen.parse().map_err(|_| format!("{listen:?} is not IP:PORT (e.g. 127.0.0.1:7433 or 0.0.0.0:7433)"))
}

/// Checks a file's `web` section.
pub(super) fn section(r: &mut Resolver, raw: Option<RawWeb>) -> Result<Web, ConfigError> {
    let Some(raw) = raw else { return Ok(Web::default()) };
    if let Some(l) = &raw.listen {
        listen_addr(l).map_err(|m| r.err("web.listen", m))?;
        r.set("web.listen", true);
    }
    for (key, path) in [("web.tls_cert", &raw.tls_cert), ("web.tls_key", &raw.tls_key)] {
        if let Some(p) = path {
            if !std::path::Path::new(p).is_absolute() {
                return Err(r.err(key, format!("an absolute path is expected, got {p:?}")));
            }
            r.set(key, true);
        }
    }
    if raw.tls_cert.is_some() != raw.tls_key.is_some() {
        return Err(r.err("web.tls_cert", "web.tls_cert and web.tls_key go together"));
    }
    let mut names = Vec::new();
    if let Some(given) = raw.names {
        if given.len() > MAX_NAMES {
            return Err(r.err("web.names", format!("at most {MAX_NAMES} names, got {}", given.len())));
        }
        for n in &given {
            names.push(host_name(n).map_err(|m| r.err("web.names", m))?);
        }
        r.set("web.names", true);
    }
    Ok(Web { listen: raw.listen, tls_cert: raw.tls_cert, tls_key: raw.tls_key, names })
}

/// The user's `web` section (none: every key unset).
pub fn load(env: &Env<'_>) -> Result<Web, ConfigError> {
    let Some(file) = env.user_config_file().filter(|f| f.is_file()) else { return Ok(Web::default()) };
    let raw = super::raw::read(&file)?;
    let mut r = Resolver::new(Some(file));
    section(&mut r, raw.web)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<Web, ConfigError> {
        let raw: RawWeb = serde_json::from_value(v).unwrap();
        section(&mut Resolver::new(None), Some(raw))
    }

    #[test]
    fn the_section_takes_an_address_and_a_certificate_and_names_a_bad_key() {
        let w = parse(json!({"listen": "0.0.0.0:7433", "tls_cert": "/c.pem", "tls_key": "/k.pem"})).unwrap();
        assert_eq!(w.listen.as_deref(), Some("0.0.0.0:7433"));
        assert_eq!(listen_addr("localhost:8080").unwrap().to_string(), "127.0.0.1:8080");
        for (v, key) in [
            (json!({"listen": "somewhere"}), "web.listen"),
            (json!({"listen": "localhost:x"}), "web.listen"),
            (json!({"tls_cert": "c.pem", "tls_key": "/k.pem"}), "web.tls_cert"),
            (json!({"tls_cert": "/c.pem"}), "web.tls_cert"),
        ] {
            assert_eq!(parse(v.clone()).unwrap_err().key, key, "{v}");
        }
    }

    #[test]
    fn names_are_host_names_or_addresses_lowercased() {
        let web =
            parse(json!({"names": ["KD.Example.LAN.", "10.0.0.7", "::1", "[fe80::1]", "tail-1.ts.net"]})).unwrap();
        assert_eq!(web.names, ["kd.example.lan", "10.0.0.7", "[::1]", "[fe80::1]", "tail-1.ts.net"]);
        for bad in ["evil.com:80", "a b", "-x.lan", "x..lan", "", "é.lan", "a/b"] {
            let e = parse(json!({"names": [bad]})).unwrap_err();
            assert_eq!(e.key, "web.names", "{bad}");
            assert!(e.message.contains("not a host name"), "{bad}: {}", e.message);
        }
        let many: Vec<String> = (0..MAX_NAMES + 1).map(|i| format!("n{i}.lan")).collect();
        assert!(parse(json!({"names": many})).unwrap_err().message.contains("at most"));
    }

    #[test]
    fn load_reads_the_users_file_only() {
        let home = tempfile::tempdir().unwrap();
        let xdg = home.path().as_os_str().to_owned();
        let var = move |k: &str| (k == "XDG_CONFIG_HOME").then(|| xdg.clone());
        let env = Env { var: &var };
        assert_eq!(load(&env).unwrap(), Web::default());
        std::fs::create_dir_all(home.path().join("kd")).unwrap();
        std::fs::write(home.path().join("kd/config.json"), r#"{"web": {"listen": "127.0.0.1:7500"}}"#).unwrap();
        assert_eq!(load(&env).unwrap().listen.as_deref(), Some("127.0.0.1:7500"));
    }
}
