//! Plain-text formatting for the terminal: times, durations, tables.

use kd_client::terminal::safe;
use unicode_width::UnicodeWidthStr;

/// Collapses whitespace runs (newlines included) into single spaces.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A Unix-ms time as local `YYYY-MM-DD HH:MM:SS`.
pub fn time_ms(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => ts.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => format!("@{ms}"),
    }
}

/// How long ago a Unix-ms time was, e.g. `3m ago`.
pub fn ago_ms(ms: i64, now_ms: i64) -> String {
    let secs = (now_ms - ms).max(0) / 1000;
    match secs {
        0..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{}m ago", secs / 60),
        3600..=86_399 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// A duration in ms as `1h2m`, `3m4s`, `5s`, `120ms`.
pub fn duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

/// `n` of `noun`, the noun in the plural unless there is one: `1 message`,
/// `3 messages` (every noun kd counts takes an `s`).
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| one_line(&safe(&c))).collect());
    }

    /// Indents the first cell of the last row by `spaces` (a tree's depth:
    /// the cells' own whitespace is folded).
    pub fn indent_first(&mut self, spaces: usize) {
        if let Some(first) = self.rows.last_mut().and_then(|r| r.first_mut()) {
            first.insert_str(0, &" ".repeat(spaces));
        }
    }

    /// Puts `cell` at column `at` of the last row.
    pub fn insert_cell(&mut self, at: usize, cell: String) {
        if let Some(row) = self.rows.last_mut() {
            row.insert(at.min(row.len()), one_line(&safe(&cell)));
        }
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.width()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.width());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(cols) {
                line.push_str(cell);
                if i + 1 < cols {
                    line.push_str(&" ".repeat(widths[i] - cell.width() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_by_display_width() {
        let mut t = Table::new(&["ID", "TITLE"]);
        t.row(vec!["a".into(), "héllo\nworld".into()]);
        t.row(vec!["long-id".into(), "x".into()]);
        assert_eq!(t.render(), "ID       TITLE\na        héllo world\nlong-id  x\n");
    }

    #[test]
    fn table_cells_are_made_safe() {
        let mut t = Table::new(&["A"]);
        t.row(vec!["\u{1b}[31mred".into()]);
        assert_eq!(t.render(), "A\n␛[31mred\n");
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(0u64, "message"), "0 messages");
        assert_eq!(count(1u64, "message"), "1 message");
        assert_eq!(count(2u64, "thread"), "2 threads");
    }

    #[test]
    fn relative_times_and_durations() {
        assert_eq!(ago_ms(0, 59_000), "59s ago");
        assert_eq!(ago_ms(0, 120_000), "2m ago");
        assert_eq!(ago_ms(0, 7_200_000), "2h ago");
        assert_eq!(ago_ms(0, 3 * 86_400_000), "3d ago");
        assert_eq!(ago_ms(10, 0), "0s ago");
        assert_eq!(duration_ms(120), "120ms");
        assert_eq!(duration_ms(65_000), "1m5s");
        assert_eq!(duration_ms(3_720_000), "1h2m");
    }
}
