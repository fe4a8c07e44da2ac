//! `web.*` (issue 35): where kd web serves — `web.listen` (an `IP:PORT`,
//! or `localhost:PORT`), `web.tls_cert` and `web.tls_key` (absolute paths
//! of PEM files, together). kd web is the daemon's, not a workspace's, so
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
}

/// The section, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Web {
    pub listen: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
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
    Ok(Web { listen: raw.listen, tls_cert: raw.tls_cert, tls_key: raw.tls_key })
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
