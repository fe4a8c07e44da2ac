//! Member colours: how `agents.NAME.color` is written, and the palette
//! members are drawn in when it is not set. Shared by the daemon (which
//! validates the configuration) and the clients (which draw).
//!
//! The palette is 256-colour indices of middle lightness, readable on dark
//! and on light terminals alike; red is left out (it means an error). The
//! four default CLIs have colours of their own; any other member takes a
//! free colour chosen by its name, so that a council of up to
//! [`PALETTE`]`.len()` members never shows two members alike.

/// A colour as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Color {
    /// An xterm 256-colour index.
    Indexed(u8),
    /// A 24-bit colour.
    Rgb(u8, u8, u8),
}

/// Members' colours, in the order free colours are handed out.
pub const PALETTE: [u8; 8] = [
    166, // orange
    29,  // green
    32,  // blue
    134, // purple
    162, // pink
    136, // gold
    30,  // teal
    61,  // slate
];

/// The colour a default CLI always gets (when no override takes it).
fn reserved(name: &str) -> Option<u8> {
    match name {
        "claude" => Some(PALETTE[0]),
        "codex" => Some(PALETTE[1]),
        "cursor" => Some(PALETTE[2]),
        "gemini" => Some(PALETTE[3]),
        _ => None,
    }
}

/// Names accepted for `agents.NAME.color`, with their 256-colour index.
pub const NAMED: &[(&str, u8)] = &[
    ("orange", 166),
    ("green", 29),
    ("blue", 32),
    ("purple", 134),
    ("pink", 162),
    ("gold", 136),
    ("teal", 30),
    ("slate", 61),
    ("red", 160),
    ("yellow", 178),
    ("cyan", 37),
    ("magenta", 163),
    ("brown", 130),
    ("gray", 244),
    ("grey", 244),
];

/// Parses `agents.NAME.color`: a name from [`NAMED`], a 256-colour index
/// (`0`–`255`, as a number or a string), or `#rrggbb`.
pub fn parse(value: &str) -> Result<Color, String> {
    let v = value.trim().to_ascii_lowercase();
    if let Some((_, i)) = NAMED.iter().find(|(n, _)| *n == v) {
        return Ok(Color::Indexed(*i));
    }
    if let Ok(i) = v.parse::<u8>() {
        return Ok(Color::Indexed(i));
    }
    if let Some(hex) = v.strip_prefix('#')
        && hex.len() == 6
        && hex.chars().all(|c| c.is_ascii_hexdigit())
    {
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
        return Ok(Color::Rgb(byte(0), byte(2), byte(4)));
    }
    let names: Vec<&str> = NAMED.iter().map(|(n, _)| *n).filter(|n| *n != "grey").collect();
    Err(format!("{value:?} is not a colour; use a name ({}), a 256-colour index 0-255, or #rrggbb", names.join(", ")))
}

/// FNV-1a: stable across runs and platforms, unlike std's hasher.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The colour of every member of a council, in council order. `overrides`
/// are the configured colours. Members take, in order: their override,
/// their reserved colour if no one else has it, then a free palette colour
/// preferred by a hash of their name. Past the palette's size colours
/// repeat.
pub fn assign(members: &[String], overrides: &[(String, Color)]) -> Vec<(String, Color)> {
    let mut taken: Vec<Color> = overrides.iter().map(|(_, c)| *c).collect();
    let mut out: Vec<(String, Option<Color>)> =
        members.iter().map(|m| (m.clone(), overrides.iter().find(|(n, _)| n == m).map(|(_, c)| *c))).collect();
    for (name, color) in out.iter_mut().filter(|(_, c)| c.is_none()) {
        if let Some(r) = reserved(name).map(Color::Indexed).filter(|r| !taken.contains(r)) {
            taken.push(r);
            *color = Some(r);
        }
    }
    for (name, color) in out.iter_mut().filter(|(_, c)| c.is_none()) {
        let start = (hash(name) % PALETTE.len() as u64) as usize;
        let free = (0..PALETTE.len())
            .map(|i| Color::Indexed(PALETTE[(start + i) % PALETTE.len()]))
            .find(|c| !taken.contains(c) && !is_reserved_for_another(c, name, members));
        let chosen = free.unwrap_or(Color::Indexed(PALETTE[start]));
        taken.push(chosen);
        *color = Some(chosen);
    }
    out.into_iter().map(|(n, c)| (n, c.unwrap_or(Color::Indexed(PALETTE[0])))).collect()
}

/// Whether `c` is the reserved colour of a default CLI that is on the council.
fn is_reserved_for_another(c: &Color, name: &str, members: &[String]) -> bool {
    members.iter().any(|m| m != name && reserved(m).map(Color::Indexed).as_ref() == Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn colors(members: &[&str], overrides: &[(&str, Color)]) -> Vec<Color> {
        let o: Vec<(String, Color)> = overrides.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        assign(&names(members), &o).into_iter().map(|(_, c)| c).collect()
    }

    fn distinct(v: &[Color]) -> bool {
        v.iter().enumerate().all(|(i, c)| !v[..i].contains(c))
    }

    #[test]
    fn the_four_default_clis_have_distinct_fixed_colours() {
        let c = colors(&["claude", "codex", "cursor", "gemini"], &[]);
        assert_eq!(c, PALETTE[..4].iter().map(|i| Color::Indexed(*i)).collect::<Vec<_>>());
        assert_eq!(colors(&["gemini", "claude"], &[]), vec![Color::Indexed(134), Color::Indexed(166)], "by name");
    }

    #[test]
    fn councils_up_to_eight_are_all_distinct_and_stable() {
        let council = ["claude", "codex", "cursor", "gemini", "reviewer", "bot", "x", "scribe"];
        let a = colors(&council, &[]);
        assert!(distinct(&a), "{a:?}");
        assert_eq!(a, colors(&council, &[]));
        let customs = ["a", "b", "c", "d", "e", "f", "g", "h"];
        assert!(distinct(&colors(&customs, &[])));
        // A custom member never takes a default CLI's colour while that CLI sits on the council.
        let mixed = colors(&["claude", "reviewer"], &[]);
        assert_ne!(mixed[1], mixed[0]);
    }

    #[test]
    fn overrides_win_and_others_step_aside() {
        let c = colors(&["claude", "codex"], &[("codex", Color::Indexed(166))]);
        assert_eq!(c[1], Color::Indexed(166));
        assert_ne!(c[0], Color::Indexed(166), "claude gives up its colour to the override");
        assert!(distinct(&c));
    }

    #[test]
    fn colours_parse_from_names_indices_and_hex() {
        assert_eq!(parse("Orange"), Ok(Color::Indexed(166)));
        assert_eq!(parse("42"), Ok(Color::Indexed(42)));
        assert_eq!(parse("#ff8000"), Ok(Color::Rgb(255, 128, 0)));
        let e = parse("chartreuse").unwrap_err();
        assert!(e.contains("not a colour") && e.contains("#rrggbb"), "{e}");
        assert!(parse("256").is_err() && parse("#12345").is_err() && parse("#gggggg").is_err());
    }
}
