//! How members look on a terminal: a colour per member, stable by name.

/// ANSI colours members are drawn in (the king has his own).
const PALETTE: [u8; 6] = [36, 35, 33, 32, 34, 91];

/// The ANSI colour code of a member, the same for a name everywhere.
pub fn member_color(name: &str) -> u8 {
    if name == "king" {
        return 97;
    }
    // FNV-1a: stable across runs and platforms, unlike std's hasher.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    PALETTE[(h % PALETTE.len() as u64) as usize]
}

/// Index of a member's colour in the palette (for the TUI).
pub fn member_color_index(name: &str) -> usize {
    PALETTE.iter().position(|c| *c == member_color(name)).unwrap_or(0)
}

/// Wraps text in an ANSI colour when `on`.
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

    #[test]
    fn colours_are_stable_and_painting_is_optional() {
        assert_eq!(member_color("claude"), member_color("claude"));
        assert_eq!(member_color("king"), 97);
        assert!(PALETTE.contains(&member_color("codex")));
        assert_eq!(paint(false, 31, "x"), "x");
        assert_eq!(paint(true, 31, "x"), "\x1b[31mx\x1b[0m");
    }
}
