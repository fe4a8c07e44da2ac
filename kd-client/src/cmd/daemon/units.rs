//! The files `kd daemon install` writes: a systemd user socket + service
//! pair, or a launchd LaunchAgent. Pure text from a [`Service`]; installing
//! them is `install.rs`'s.

use std::fmt::Write as _;
use std::path::PathBuf;

/// The launchd job's label, and the plist's file stem.
pub const LAUNCHD_LABEL: &str = "dev.kd.kdd";
/// The systemd units' names.
pub const SOCKET_UNIT: &str = "kdd.socket";
pub const SERVICE_UNIT: &str = "kdd.service";

/// What the service runs and where it listens, resolved at install time
/// from the installing shell so that the service's daemon is the one kd
/// would have started.
#[derive(Debug, Clone)]
pub struct Service {
    /// Absolute path of `kdd`.
    pub kdd: PathBuf,
    /// The socket kd dials.
    pub socket: PathBuf,
    /// The installing shell's `$XDG_RUNTIME_DIR`: a socket under it is
    /// written as systemd's `%t`, which stays right if the directory's
    /// path changes (another uid, a systemd that places it elsewhere).
    pub runtime_dir: Option<PathBuf>,
    /// Variables the daemon and its agents need from the shell: `PATH`
    /// (agents are found as in the shell), and kd's own when set.
    pub env: Vec<(String, String)>,
    /// Where launchd writes kdd's stderr (systemd has the journal).
    pub log: PathBuf,
}

impl Service {
    /// Refuses a value with a control character, naming where it came
    /// from: in a unit a newline starts a line of its own (a directive of
    /// the caller's choosing, such as `ExecStartPre=`), and XML cannot hold
    /// most of them. Every value the files hold is checked.
    pub fn check(&self) -> Result<(), String> {
        let paths = [
            ("the kdd binary's path (KD_KDD)", &self.kdd),
            ("the socket (KD_SOCKET or --socket)", &self.socket),
            ("the log path", &self.log),
        ];
        let paths = paths.iter().map(|(what, p)| (what.to_string(), p.to_string_lossy().into_owned()));
        let env = self.env.iter().flat_map(|(k, v)| [(format!("the name {k:?}"), k.clone()), (k.clone(), v.clone())]);
        // The variables first: the log's place derives from KD_DB.
        for (what, value) in env.chain(paths) {
            if let Some(c) = value.chars().find(|c| c.is_control()) {
                return Err(format!(
                    "{what} contains a control character ({c:?}), which cannot go into a service file: {value:?}"
                ));
            }
        }
        Ok(())
    }
}

/// `%` and `$` are systemd's specifier and variable signs; doubled they
/// are themselves.
fn systemd_escape(s: &str) -> String {
    s.replace('%', "%%").replace('$', "$$")
}

/// One word of a systemd command line or assignment, quoted when needed.
fn systemd_word(s: &str) -> String {
    let s = systemd_escape(s);
    if !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';')) {
        return s;
    }
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `kdd.socket`: the socket kd dials, private, named for kdd.
pub fn systemd_socket(s: &Service) -> String {
    format!(
        "# Written by `kd daemon install`; `kd daemon uninstall` removes it.\n\
         [Unit]\n\
         Description=kd daemon socket (a council of AI coding agents)\n\
         \n\
         [Socket]\n\
         ListenStream={socket}\n\
         FileDescriptorName=kdd\n\
         SocketMode=0600\n\
         DirectoryMode=0700\n\
         RemoveOnStop=yes\n\
         \n\
         [Install]\n\
         WantedBy=sockets.target\n",
        socket = systemd_socket_path(s),
    )
}

/// The socket as `kdd.socket` names it: `%t/…` under the runtime
/// directory, else its absolute path.
fn systemd_socket_path(s: &Service) -> String {
    match s.runtime_dir.as_deref().and_then(|dir| s.socket.strip_prefix(dir).ok()) {
        Some(rest) if !rest.as_os_str().is_empty() => format!("%t/{}", systemd_escape(&rest.display().to_string())),
        _ => systemd_escape(&s.socket.display().to_string()),
    }
}

/// `kdd.service`: started by the socket, notifies readiness, pinged by the
/// watchdog, restarted when it fails.
pub fn systemd_service(s: &Service) -> String {
    let mut env = String::new();
    for (k, v) in &s.env {
        let _ = writeln!(env, "Environment={}", systemd_word(&format!("{k}={v}")));
    }
    format!(
        "# Written by `kd daemon install`; `kd daemon uninstall` removes it.\n\
         [Unit]\n\
         Description=kd daemon (a council of AI coding agents)\n\
         Requires=kdd.socket\n\
         After=kdd.socket\n\
         \n\
         [Service]\n\
         Type=notify\n\
         NotifyAccess=main\n\
         ExecStart={kdd}\n\
         {env}\
         # Secrets for the agents (API keys), one NAME=value per line.\n\
         EnvironmentFile=-%E/kd/kdd.env\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         WatchdogSec=30\n\
         TimeoutStopSec=30\n\
         # SIGTERM to kdd alone: it stops its agents and records them itself.\n\
         KillMode=mixed\n\
         UMask=0077\n\
         NoNewPrivileges=yes\n\
         LockPersonality=yes\n\
         RestrictRealtime=yes\n\
         RestrictSUIDSGID=yes\n\
         # No PrivateTmp, ProtectHome or ProtectSystem: the agents kdd runs work\n\
         # in the user's own checkouts, wherever they are, /tmp included.\n\
         \n\
         [Install]\n\
         Also=kdd.socket\n",
        kdd = systemd_word(&s.kdd.display().to_string()),
    )
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The LaunchAgent: launchd holds the socket and starts kdd on the first
/// connection; kdd is started again when it fails.
pub fn launchd_plist(s: &Service) -> String {
    let mut env = String::new();
    for (k, v) in &s.env {
        let _ = write!(env, "\n        <key>{}</key>\n        <string>{}</string>", xml(k), xml(v));
    }
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `kd daemon install`; `kd daemon uninstall` removes it. -->
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>{label}</string>
    <key>ProgramArguments</key>
    <array>
        <string>{kdd}</string>
    </array>
    <key>EnvironmentVariables</key>
    <dict>{env}
    </dict>
    <key>Sockets</key>
    <dict>
        <key>kdd</key>
        <dict>
            <key>SockPathName</key>
            <string>{socket}</string>
            <key>SockPathMode</key>
            <integer>384</integer>
        </dict>
    </dict>
    <key>KeepAlive</key>
    <dict>
        <key>SuccessfulExit</key>
        <false/>
    </dict>
    <key>RunAtLoad</key>
    <false/>
    <key>ProcessType</key>
    <string>Interactive</string>
    <key>Umask</key>
    <integer>63</integer>
    <key>StandardErrorPath</key>
    <string>{log}</string>
</dict>
</plist>
"#,
        label = LAUNCHD_LABEL,
        kdd = xml(&s.kdd.display().to_string()),
        socket = xml(&s.socket.display().to_string()),
        log = xml(&s.log.display().to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> Service {
        Service {
            kdd: PathBuf::from("/opt/my tools/kdd"),
            socket: PathBuf::from("/run/user/1000/kd/kdd.sock"),
            runtime_dir: None,
            env: vec![("PATH".into(), "/usr/bin:/home/u/100%/bin".into()), ("KD_DB".into(), "/data/a&b.db".into())],
            log: PathBuf::from("/Users/u/Library/Logs/kd/kdd.log"),
        }
    }

    #[test]
    fn systemd_words_are_quoted_and_escaped() {
        assert_eq!(systemd_word("/usr/bin/kdd"), "/usr/bin/kdd");
        assert_eq!(systemd_word("/opt/my tools/kdd"), "\"/opt/my tools/kdd\"");
        assert_eq!(systemd_word("a%b$c"), "a%%b$$c");
        assert_eq!(systemd_word("say \"hi\""), "\"say \\\"hi\\\"\"");
    }

    #[test]
    fn the_units_name_the_binary_socket_and_environment() {
        let s = service();
        let socket = systemd_socket(&s);
        assert!(socket.contains("ListenStream=/run/user/1000/kd/kdd.sock\n"), "{socket}");
        assert!(socket.contains("SocketMode=0600\n") && socket.contains("DirectoryMode=0700\n"));
        let unit = systemd_service(&s);
        assert!(unit.contains("ExecStart=\"/opt/my tools/kdd\"\n"), "{unit}");
        assert!(unit.contains("Environment=PATH=/usr/bin:/home/u/100%%/bin\n"), "{unit}");
        assert!(
            unit.contains("Type=notify\n") && unit.contains("WatchdogSec=") && unit.contains("NoNewPrivileges=yes")
        );
        assert!(!unit.contains("PrivateTmp="), "agents must keep the real /tmp");
    }

    #[test]
    fn a_socket_in_the_runtime_directory_is_written_as_percent_t() {
        let mut s = service();
        s.runtime_dir = Some(PathBuf::from("/run/user/1000"));
        assert!(systemd_socket(&s).contains("ListenStream=%t/kd/kdd.sock\n"));
        s.socket = PathBuf::from("/run/user/1000/my 100%/kdd.sock");
        assert!(systemd_socket(&s).contains("ListenStream=%t/my 100%%/kdd.sock\n"));
        s.runtime_dir = Some(PathBuf::from("/run/user/1001"));
        assert!(systemd_socket(&s).contains("ListenStream=/run/user/1000/my 100%%/kdd.sock\n"));
    }

    #[test]
    fn a_control_character_in_any_value_is_refused_naming_it() {
        assert_eq!(service().check(), Ok(()));
        let mut s = service();
        s.env[1].1 = "/x\nExecStartPre=/bin/touch /tmp/p\nX=".into();
        assert!(s.check().is_err_and(|e| e.starts_with("KD_DB contains a control character ('\\n')")));
        let mut s = service();
        s.socket = PathBuf::from("/run/\u{1b}[2J/kdd.sock");
        assert!(s.check().is_err_and(|e| e.starts_with("the socket")));
        let mut s = service();
        s.kdd = PathBuf::from("/bin/kdd\r");
        assert!(s.check().is_err_and(|e| e.starts_with("the kdd binary")));
        let mut s = service();
        s.log = PathBuf::from("/log\t");
        assert!(s.check().is_err_and(|e| e.starts_with("the log path")));
    }

    #[test]
    fn the_plist_escapes_what_xml_needs() {
        let plist = launchd_plist(&service());
        assert!(plist.contains("<string>/data/a&amp;b.db</string>"), "{plist}");
        assert!(plist.contains("<string>/opt/my tools/kdd</string>"), "{plist}");
    }
}
