//! How members look on a terminal: a colour per member — the four default
//! CLIs fixed, others by name, never two alike in a council of up to eight,
//! `agents.NAME.color` overriding ([`kd_proto::color`]) — and the ANSI
//! escapes to draw them. The King has no colour of his own: bold in the
//! terminal's own foreground, readable on dark and light backgrounds.

use kd_proto::color::{self, Color};
use kd_proto::names::KING;
use kd_proto::types::ConfigView;

/// The colours of a council's members.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Palette {
    members: Vec<String>,
    overrides: Vec<(String, Color)>,
    assigned: Vec<(String, Color)>,
}

impl Palette {
    /// The palette of `members` (in council order) with configured colours.
    pub fn new(members: &[String], overrides: Vec<(String, Color)>) -> Palette {
        let assigned = color::assign(members, &overrides);
        Palette { members: members.to_vec(), overrides, assigned }
    }

    /// The palette of a workspace's council as `config.get` describes it,
    /// with `others` (e.g. a thread's senders) after its members.
    pub fn from_config(view: Option<&ConfigView>, others: &[String]) -> Palette {
        let mut members: Vec<String> = Vec::new();
        let mut overrides = Vec::new();
        if let Some(view) = view {
            for e in &view.entries {
                if e.key == "council.members" {
                    members
                        .extend(e.value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)));
                } else if let Some(name) = e.key.strip_prefix("agents.").and_then(|k| k.strip_suffix(".color")) {
                    let text = match &e.value {
                        serde_json::Value::String(s) => Some(s.clone()),
                        serde_json::Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    };
                    if let Some(c) = text.and_then(|t| color::parse(&t).ok()) {
                        overrides.push((name.to_string(), c));
                    }
                }
            }
        }
        for o in others {
            if o != KING && !members.contains(o) {
                members.push(o.clone());
            }
        }
        Palette::new(&members, overrides)
    }

    /// A member's colour; `None` for the King.
    pub fn color(&self, name: &str) -> Option<Color> {
        if name == KING {
            return None;
        }
        if let Some((_, c)) = self.assigned.iter().find(|(n, _)| n == name) {
            return Some(*c);
        }
        // Someone outside the council: as if they sat at its end.
        let mut members = self.members.clone();
        members.push(name.to_string());
        color::assign(&members, &self.overrides).pop().map(|(_, c)| c)
    }

    /// `text` in the member's colour (bold for the King), when `on`.
    pub fn paint(&self, on: bool, name: &str, text: &str) -> String {
        match self.color(name) {
            _ if !on => text.to_string(),
            Some(c) => format!("{}{text}\x1b[0m", foreground(c)),
            None => text.to_string(),
        }
    }
}

/// The ANSI escape that sets the foreground to `c`.
pub fn foreground(c: Color) -> String {
    match c {
        Color::Indexed(i) => format!("\x1b[38;5;{i}m"),
        Color::Rgb(r, g, b) => format!("\x1b[38;2;{r};{g};{b}m"),
    }
}

/// Wraps text in an ANSI colour (a basic SGR code, e.g. 31 red) when `on`.
pub fn paint(on: bool, code: u8, text: &str) -> String {
    if on { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
}

pub fn bold(on: bool, text: &str) -> String {
    if on { format!("\x1b[1m{text}\x1b[0m") } else { text.to_string() }
}

pub fn dim(on: bool, text: &str) -> String {
    if on { format!("\x1b[2m{text}\x1b[0m") } else { text.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::types::ConfigEntry;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_king_is_plain_and_members_are_painted_only_when_on() {
        let p = Palette::new(&names(&["claude"]), vec![]);
        assert_eq!(p.paint(true, "claude", "x"), "\x1b[38;5;166mx\x1b[0m");
        assert_eq!(p.paint(false, "claude", "x"), "x");
        assert_eq!(p.paint(true, "king", "x"), "x");
        assert_eq!(paint(false, 31, "x"), "x");
        assert_eq!(paint(true, 31, "x"), "\x1b[31mx\x1b[0m");
    }

    #[test]
    fn the_palette_comes_from_config_get_with_overrides_and_outsiders() {
        let view = ConfigView {
            workspace: "/w".into(),
            file: None,
            entries: vec![
                ConfigEntry {
                    key: "council.members".into(),
                    value: serde_json::json!(["claude", "bot"]),
                    source: "".into(),
                },
                ConfigEntry { key: "agents.bot.color".into(), value: serde_json::json!("#010203"), source: "".into() },
                ConfigEntry { key: "agents.claude.color".into(), value: serde_json::Value::Null, source: "".into() },
            ],
            notice: None,
            notices: vec![],
            warnings: vec![],
        };
        let p = Palette::from_config(Some(&view), &names(&["king", "guest"]));
        assert_eq!(p.color("bot"), Some(Color::Rgb(1, 2, 3)));
        assert_eq!(p.color("claude"), Some(Color::Indexed(166)));
        let guest = p.color("guest").unwrap();
        assert!(guest != Color::Indexed(166) && guest != Color::Rgb(1, 2, 3));
        assert_eq!(p.color("king"), None);
        assert_eq!(Palette::from_config(None, &[]).color("codex"), Some(Color::Indexed(29)));
    }
}
