//! Durations as people write them in the configuration and on the command
//! line: `90` or `90s` (seconds), `30m`, `24h`, `3d`; and how long a
//! run may be given.

/// The longest timeout a run may be given, in seconds (a week): the bound of
/// every `timeout_s` parameter, `council.timeout` and `agents.NAME.timeout`.
/// Anything longer is refused, never added to a clock.
pub const MAX_TIMEOUT_S: u64 = 7 * 24 * 3600;

/// The seconds `text` says, or `None` when it is not such a duration (or
/// does not fit in a u64).
pub fn parse_secs(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = digits.parse().ok()?;
    let scale = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_or_a_number_with_a_unit() {
        let cases =
            [("90", Some(90)), ("90s", Some(90)), ("30m", Some(1800)), ("24h", Some(86_400)), ("3d", Some(259_200))];
        for (text, secs) in cases {
            assert_eq!(parse_secs(text), secs, "{text}");
        }
        for bad in ["", "h", "-1h", "1w", "1.5h", "99999999999999999999d"] {
            assert_eq!(parse_secs(bad), None, "{bad}");
        }
    }
}
