//! `notify.*` (issue 33): where kd calls the King when it is needed. Unlike
//! the rest of the configuration, which is the workspace's file *or* the
//! user's, the sinks add up: the user's `notify` section, then the
//! workspace's (its webhooks and command added, its `desktop`, `kinds`,
//! `link`, `timeout` and `ack_within` winning). [`section`] checks one
//! file's section (a bad one refuses the file, as any bad key does);
//! [`load`] adds the two.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use kd_proto::notify::NotifyKind;
use serde::Deserialize;
use serde_json::Value;

use super::resolver::Resolver;
use super::{ConfigError, Env};

/// A sink's call is cut after this long by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a sink's call may be given.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an emergency broadcast may wait for its acknowledgements
/// before the King is told, by default.
pub const DEFAULT_ACK_WITHIN: Duration = Duration::from_secs(300);
/// Webhooks one section may name.
pub const MAX_WEBHOOKS: usize = 8;
/// The longest URL, link or argument kd takes here.
const MAX_LEN: usize = 2048;
/// Arguments of `notify.command`.
const MAX_ARGS: usize = 64;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNotify {
    /// A URL, or a list of them: each gets a POST of the event as JSON.
    pub webhook: Option<Value>,
    /// An argv: the program gets the event as JSON on its stdin.
    pub command: Option<Vec<String>>,
    /// Freedesktop notifications over D-Bus (Notification Center on macOS).
    pub desktop: Option<bool>,
    /// Which kinds are sent (all by default).
    pub kinds: Option<Vec<String>>,
    /// Where a notification points, `{thread}` replaced by its thread.
    pub link: Option<String>,
    /// How long one sink's call may take.
    pub timeout: Option<Value>,
    /// How long an emergency broadcast may go unacknowledged.
    pub ack_within: Option<Value>,
}

/// One file's section, checked; `None`: not set there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    pub webhooks: Vec<String>,
    pub command: Option<Vec<String>>,
    pub desktop: Option<bool>,
    pub kinds: Option<BTreeSet<NotifyKind>>,
    pub link: Option<String>,
    pub timeout: Option<Duration>,
    pub ack_within: Option<Duration>,
}

/// Where notifications go, the user's and the workspace's sections added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    pub webhooks: Vec<String>,
    /// Each an argv (the user's, then the workspace's).
    pub commands: Vec<Vec<String>>,
    pub desktop: bool,
    pub kinds: BTreeSet<NotifyKind>,
    pub link: Option<String>,
    pub timeout: Duration,
    pub ack_within: Duration,
}

impl Default for Notify {
    fn default() -> Notify {
        Notify {
            webhooks: Vec::new(),
            commands: Vec::new(),
            desktop: false,
            kinds: NotifyKind::ALL.into_iter().collect(),
            link: None,
            timeout: DEFAULT_TIMEOUT,
            ack_within: DEFAULT_ACK_WITHIN,
        }
    }
}

impl Notify {
    /// Whether any sink is configured.
    pub fn has_sinks(&self) -> bool {
        !self.webhooks.is_empty() || !self.commands.is_empty() || self.desktop
    }

    /// `self` with `s` added: its sinks after these, its values winning.
    pub fn with(mut self, s: &Section) -> Notify {
        for w in &s.webhooks {
            if !self.webhooks.contains(w) {
                self.webhooks.push(w.clone());
            }
        }
        if let Some(c) = &s.command
            && !self.commands.contains(c)
        {
            self.commands.push(c.clone());
        }
        if let Some(d) = s.desktop {
            self.desktop = d;
        }
        if let Some(k) = &s.kinds {
            self.kinds = k.clone();
        }
        if let Some(l) = &s.link {
            self.link = Some(l.clone());
        }
        if let Some(t) = s.timeout {
            self.timeout = t;
        }
        if let Some(a) = s.ack_within {
            self.ack_within = a;
        }
        self
    }
}

/// Checks a file's `notify` section.
pub(super) fn section(r: &mut Resolver, raw: Option<RawNotify>) -> Result<Section, ConfigError> {
    let Some(raw) = raw else { return Ok(Section::default()) };
    let mut s = Section::default();
    if let Some(w) = raw.webhook {
        let urls = match w {
            Value::String(u) => vec![u],
            Value::Array(a) => a
                .into_iter()
                .map(|v| match v {
                    Value::String(u) => Ok(u),
                    v => Err(r.err("notify.webhook", format!("a URL or a list of URLs is expected, got {v}"))),
                })
                .collect::<Result<_, _>>()?,
            v => return Err(r.err("notify.webhook", format!("a URL or a list of URLs is expected, got {v}"))),
        };
        if urls.len() > MAX_WEBHOOKS {
            return Err(r.err("notify.webhook", format!("at most {MAX_WEBHOOKS} URLs, got {}", urls.len())));
        }
        for u in urls {
            webhook_url(&u).map_err(|m| r.err("notify.webhook", m))?;
            s.webhooks.push(u);
        }
        r.set("notify.webhook", true);
    }
    if let Some(argv) = raw.command {
        if argv.is_empty() || argv[0].trim().is_empty() {
            return Err(r.err("notify.command", "an argv is expected: the program, then its arguments"));
        }
        if argv.len() > MAX_ARGS || argv.iter().any(|a| a.len() > MAX_LEN || a.contains('\0')) {
            return Err(r.err(
                "notify.command",
                format!("at most {MAX_ARGS} arguments of at most {MAX_LEN} bytes each, without NUL"),
            ));
        }
        s.command = Some(argv);
        r.set("notify.command", true);
    }
    s.desktop = raw.desktop;
    r.set("notify.desktop", raw.desktop.is_some());
    if let Some(kinds) = raw.kinds {
        let mut set = BTreeSet::new();
        for k in kinds {
            let kind = NotifyKind::parse(&k).filter(|k| *k != NotifyKind::Test).ok_or_else(|| {
                r.err(
                    "notify.kinds",
                    format!(
                        "unknown kind {k:?}: approval, done, work, failed, timeout, budget or emergency is expected"
                    ),
                )
            })?;
            set.insert(kind);
        }
        set.insert(NotifyKind::Test);
        s.kinds = Some(set);
        r.set("notify.kinds", true);
    }
    if let Some(link) = raw.link {
        if link.len() > MAX_LEN || link.chars().any(char::is_control) {
            return Err(r.err("notify.link", format!("at most {MAX_LEN} bytes, one line")));
        }
        s.link = Some(link);
        r.set("notify.link", true);
    }
    if let Some(t) = raw.timeout {
        let d = super::lifecycle::duration(&t).map_err(|m| r.err("notify.timeout", m))?;
        if d > MAX_TIMEOUT {
            return Err(r.err("notify.timeout", format!("at most {} seconds, got {t}", MAX_TIMEOUT.as_secs())));
        }
        s.timeout = Some(d);
        r.set("notify.timeout", true);
    }
    if let Some(a) = raw.ack_within {
        s.ack_within = Some(super::lifecycle::duration(&a).map_err(|m| r.err("notify.ack_within", m))?);
        r.set("notify.ack_within", true);
    }
    Ok(s)
}

/// An `http` or `https` URL with a host.
fn webhook_url(u: &str) -> Result<(), String> {
    if u.len() > MAX_LEN {
        return Err(format!("a URL of at most {MAX_LEN} bytes is expected"));
    }
    let uri: http::Uri = u.parse().map_err(|e| format!("not a URL: {u:?} ({e})"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err(format!("an http:// or https:// URL with a host is expected, got {u:?}")),
    }
}

/// The sinks for `workspace`: the user's section, then the workspace's own
/// file's (when it has one).
pub fn load(workspace: &Path, env: &Env<'_>) -> Result<Notify, ConfigError> {
    let mut notify = Notify::default();
    let user = env.user_config_file().filter(|f| f.is_file());
    let own = workspace.join(".kd").join("config.json");
    let own = own.is_file().then_some(own);
    for file in [user, own].into_iter().flatten() {
        let raw = super::raw::read(&file)?;
        let mut r = Resolver::new(Some(file));
        notify = notify.with(&section(&mut r, raw.notify)?);
    }
    Ok(notify)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Section, ConfigError> {
        let raw: RawNotify = serde_json::from_value(v).map_err(|e| ConfigError {
            file: None,
            key: "notify".into(),
            message: e.to_string(),
        })?;
        section(&mut Resolver::new(None), Some(raw))
    }

    #[test]
    fn a_section_takes_urls_an_argv_and_kinds() {
        let s = parse(json!({
            "webhook": "https://ntfy.sh/kd-topic",
            "command": ["/usr/bin/logger", "-t", "kd"],
            "desktop": true,
            "kinds": ["approval", "failed"],
            "link": "https://example.com/{thread}",
            "timeout": "5s",
            "ack_within": "2m"
        }))
        .unwrap();
        assert_eq!(s.webhooks, vec!["https://ntfy.sh/kd-topic".to_string()]);
        assert_eq!(s.command.as_deref(), Some(&["/usr/bin/logger".to_string(), "-t".into(), "kd".into()][..]));
        assert_eq!(s.desktop, Some(true));
        let kinds: Vec<_> = s.kinds.clone().unwrap().into_iter().collect();
        assert_eq!(kinds, vec![NotifyKind::Approval, NotifyKind::Failed, NotifyKind::Test]);
        assert_eq!(s.timeout, Some(Duration::from_secs(5)));
        assert_eq!(s.ack_within, Some(Duration::from_secs(120)));
        assert_eq!(parse(json!({"webhook": ["http://127.0.0.1:9/a", "https://x.org"]})).unwrap().webhooks.len(), 2);
    }

    #[test]
    fn a_bad_section_names_its_key() {
        for (v, key) in [
            (json!({"webhook": "ftp://x.org/a"}), "notify.webhook"),
            (json!({"webhook": "not a url"}), "notify.webhook"),
            (json!({"webhook": [1]}), "notify.webhook"),
            (json!({"webhook": vec!["http://a.org"; 9]}), "notify.webhook"),
            (json!({"command": []}), "notify.command"),
            (json!({"command": [""]}), "notify.command"),
            (json!({"kinds": ["done", "lunch"]}), "notify.kinds"),
            (json!({"kinds": ["test"]}), "notify.kinds"),
            (json!({"timeout": "1h"}), "notify.timeout"),
            (json!({"timeout": 0}), "notify.timeout"),
            (json!({"ack_within": "soon"}), "notify.ack_within"),
            (json!({"link": "a\nb"}), "notify.link"),
        ] {
            assert_eq!(parse(v.clone()).unwrap_err().key, key, "{v}");
        }
    }

    #[test]
    fn the_workspaces_section_adds_to_the_users() {
        let user = parse(json!({"webhook": "https://a.org/t", "command": ["a"], "kinds": ["done"]})).unwrap();
        let ws = parse(json!({"webhook": ["https://a.org/t", "https://b.org/t"], "command": ["b"], "desktop": true}))
            .unwrap();
        let n = Notify::default().with(&user).with(&ws);
        assert_eq!(n.webhooks, vec!["https://a.org/t".to_string(), "https://b.org/t".to_string()]);
        assert_eq!(n.commands, vec![vec!["a".to_string()], vec!["b".to_string()]]);
        assert!(n.desktop && n.has_sinks());
        assert!(n.kinds.contains(&NotifyKind::Done) && !n.kinds.contains(&NotifyKind::Failed));
        assert_eq!(n.timeout, DEFAULT_TIMEOUT);
        assert!(!Notify::default().has_sinks());
    }

    #[test]
    fn load_reads_the_users_file_then_the_workspaces() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("kd")).unwrap();
        std::fs::write(home.path().join("kd/config.json"), r#"{"notify": {"webhook": "http://127.0.0.1:1/u"}}"#)
            .unwrap();
        let xdg = home.path().as_os_str().to_owned();
        let var = move |k: &str| (k == "XDG_CONFIG_HOME").then(|| xdg.clone());
        let env = Env { var: &var };
        assert_eq!(load(ws.path(), &env).unwrap().webhooks, vec!["http://127.0.0.1:1/u".to_string()]);
        std::fs::create_dir_all(ws.path().join(".kd")).unwrap();
        std::fs::write(ws.path().join(".kd/config.json"), r#"{"notify": {"command": ["true"]}}"#).unwrap();
        let n = load(ws.path(), &env).unwrap();
        assert_eq!((n.webhooks.len(), n.commands.len()), (1, 1));
        std::fs::write(ws.path().join(".kd/config.json"), r#"{"notify": {"command": []}}"#).unwrap();
        let e = load(ws.path(), &env).unwrap_err();
        assert_eq!(e.key, "notify.command");
        assert!(e.to_string().contains(".kd/config.json"), "{e}");
    }
}
