//! Markdown to styled lines (pulldown-cmark), for `kd show` on a terminal
//! and the chat TUI: headings, emphasis, lists, code spans and blocks,
//! quotes, links, rules and tables. No wrapping: the terminal (or the TUI
//! widget) wraps. Line breaks inside a paragraph are kept, as chat readers
//! expect.

use pulldown_cmark::{Alignment, CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use unicode_width::UnicodeWidthStr;

/// How a span looks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    pub bold: bool,
    pub italic: bool,
    pub underline: bool,
    /// Inline code or a code block.
    pub code: bool,
    /// Heading level 1–6, 0 for none.
    pub heading: u8,
    pub dim: bool,
    pub strike: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub style: Style,
}

pub type Line = Vec<Span>;

struct Renderer {
    lines: Vec<Line>,
    current: Line,
    style: Vec<Style>,
    /// Prefixes of enclosing blocks (quote bars, list indents).
    prefix: Vec<String>,
    /// Per open list: the next number, or None for bullets.
    lists: Vec<Option<u64>>,
    /// The item marker waiting to start the next line.
    marker: Option<String>,
    in_code_block: bool,
    link: Option<String>,
    table_cells: Vec<String>,
    in_table: bool,
    /// The table's rows so far (the head's first), laid out at its end.
    table_rows: Vec<Vec<String>>,
    table_align: Vec<Alignment>,
}

impl Renderer {
    fn style(&self) -> Style {
        self.style.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, f: impl FnOnce(&mut Style)) {
        let mut s = self.style();
        f(&mut s);
        self.style.push(s);
    }

    fn text(&mut self, text: &str, style: Style) {
        if self.current.is_empty() {
            let mut lead = self.prefix.concat();
            if let Some(m) = self.marker.take() {
                lead.push_str(&m);
            } else if !self.lists.is_empty() && !self.in_code_block {
                lead.push_str("  ");
            }
            if !lead.is_empty() {
                self.current.push(Span { text: lead, style: Style { dim: true, ..Style::default() } });
            }
        }
        match self.current.last_mut() {
            Some(last) if last.style == style && !last.text.is_empty() => last.text.push_str(text),
            _ => self.current.push(Span { text: text.to_string(), style }),
        }
    }

    fn newline(&mut self) {
        let line = std::mem::take(&mut self.current);
        self.lines.push(line);
    }

    fn end_block(&mut self) {
        if !self.current.is_empty() {
            self.newline();
        }
        if self.lists.is_empty() && self.lines.last().is_some_and(|l| !l.is_empty()) {
            self.lines.push(Vec::new());
        }
    }
}

impl Renderer {
    /// Lays out the table read: each column as wide as its widest cell (in
    /// display width), aligned as the delimiter row says, the head bold
    /// and ruled off. The last column is not padded unless aligned right
    /// or centred, so no line ends in spaces.
    fn table(&mut self) {
        let rows = std::mem::take(&mut self.table_rows);
        let align = std::mem::take(&mut self.table_align);
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(UnicodeWidthStr::width(cell.as_str()));
            }
        }
        let bar = Style { dim: true, ..Style::default() };
        for (i, row) in rows.iter().enumerate() {
            let style = if i == 0 { Style { bold: true, ..self.style() } } else { self.style() };
            for (c, width) in widths.iter().enumerate() {
                let cell = row.get(c).map(String::as_str).unwrap_or("");
                let room = width.saturating_sub(UnicodeWidthStr::width(cell));
                let last = c + 1 == columns;
                let (before, after) = match align.get(c) {
                    Some(Alignment::Right) => (room, 0),
                    Some(Alignment::Center) => (room / 2, room - room / 2),
                    _ if last => (0, 0),
                    _ => (0, room),
                };
                if c > 0 {
                    self.text(" │ ", bar);
                }
                self.text(&format!("{}{cell}{}", " ".repeat(before), " ".repeat(after)), style);
            }
            self.newline();
            if i == 0 {
                let rule: Vec<String> = widths
                    .iter()
                    .enumerate()
                    .map(|(c, w)| "─".repeat(w + usize::from(c > 0) + usize::from(c + 1 < columns)))
                    .collect();
                self.text(&rule.join("┼"), bar);
                self.newline();
            }
        }
    }
}

/// Renders Markdown into styled lines.
pub fn render(markdown: &str) -> Vec<Line> {
    // What the text says is shown, never obeyed by the terminal.
    let markdown = crate::terminal::safe(markdown);
    let markdown = markdown.as_ref();
    let mut r = Renderer {
        lines: Vec::new(),
        current: Vec::new(),
        style: vec![Style::default()],
        prefix: Vec::new(),
        lists: Vec::new(),
        marker: None,
        in_code_block: false,
        link: None,
        table_cells: Vec::new(),
        in_table: false,
        table_rows: Vec::new(),
        table_align: Vec::new(),
    };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Heading { level, .. } => {
                    let n = match level {
                        HeadingLevel::H1 => 1,
                        HeadingLevel::H2 => 2,
                        HeadingLevel::H3 => 3,
                        HeadingLevel::H4 => 4,
                        HeadingLevel::H5 => 5,
                        HeadingLevel::H6 => 6,
                    };
                    r.push_style(|s| {
                        s.bold = true;
                        s.heading = n;
                        s.underline = n <= 2;
                    });
                }
                Tag::Emphasis => r.push_style(|s| s.italic = true),
                Tag::Strong => r.push_style(|s| s.bold = true),
                Tag::Strikethrough => r.push_style(|s| s.strike = true),
                Tag::BlockQuote(_) => r.prefix.push("│ ".into()),
                Tag::CodeBlock(kind) => {
                    if !r.current.is_empty() {
                        r.newline();
                    }
                    if let CodeBlockKind::Fenced(lang) = kind
                        && !lang.is_empty()
                    {
                        r.text(&lang, Style { dim: true, ..Style::default() });
                        r.newline();
                    }
                    r.in_code_block = true;
                    r.prefix.push("  ".into());
                    r.push_style(|s| s.code = true);
                }
                Tag::List(start) => {
                    if !r.current.is_empty() {
                        r.newline();
                    }
                    if !r.lists.is_empty() {
                        r.prefix.push("  ".into());
                    }
                    r.lists.push(start);
                }
                Tag::Item => {
                    if !r.current.is_empty() {
                        r.newline();
                    }
                    let marker = match r.lists.last_mut() {
                        Some(Some(n)) => {
                            let m = format!("{n}. ");
                            *n += 1;
                            m
                        }
                        _ => "• ".to_string(),
                    };
                    r.marker = Some(marker);
                }
                Tag::Link { dest_url, .. } => {
                    r.link = Some(dest_url.to_string());
                    r.push_style(|s| s.underline = true);
                }
                Tag::Table(align) => {
                    r.in_table = true;
                    r.table_align = align;
                }
                Tag::TableHead => r.push_style(|s| s.bold = true),
                Tag::TableCell => r.table_cells.push(String::new()),
                Tag::TableRow | Tag::Paragraph | Tag::Image { .. } => {}
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Heading(_) => {
                    r.style.pop();
                    r.end_block();
                }
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                    r.style.pop();
                }
                TagEnd::Paragraph => r.end_block(),
                TagEnd::BlockQuote(_) => {
                    r.prefix.pop();
                    r.end_block();
                }
                TagEnd::CodeBlock => {
                    r.style.pop();
                    r.prefix.pop();
                    r.in_code_block = false;
                    r.end_block();
                }
                TagEnd::List(_) => {
                    r.lists.pop();
                    if !r.lists.is_empty() {
                        r.prefix.pop();
                    }
                    r.end_block();
                }
                TagEnd::Item if !r.current.is_empty() => r.newline(),
                TagEnd::Link => {
                    r.style.pop();
                    if let Some(url) = r.link.take() {
                        let shown: String = r.current.iter().map(|s| s.text.as_str()).collect();
                        if !shown.ends_with(&url) {
                            r.text(&format!(" ({url})"), Style { dim: true, ..Style::default() });
                        }
                    }
                }
                TagEnd::TableHead => {
                    let head = std::mem::take(&mut r.table_cells);
                    r.table_rows.push(head);
                    r.style.pop();
                }
                TagEnd::TableRow => {
                    let row = std::mem::take(&mut r.table_cells);
                    r.table_rows.push(row);
                }
                TagEnd::Table => {
                    r.in_table = false;
                    r.table();
                    r.end_block();
                }
                _ => {}
            },
            Event::Text(t) => {
                if r.in_table {
                    if let Some(c) = r.table_cells.last_mut() {
                        c.push_str(&t);
                    }
                } else if r.in_code_block {
                    let style = r.style();
                    let mut parts = t.split('\n').peekable();
                    while let Some(part) = parts.next() {
                        if parts.peek().is_none() && part.is_empty() {
                            break;
                        }
                        r.text(part, style);
                        r.newline();
                    }
                } else {
                    let style = r.style();
                    r.text(&t, style);
                }
            }
            Event::Code(t) => {
                if r.in_table {
                    if let Some(c) = r.table_cells.last_mut() {
                        c.push_str(&t);
                    }
                } else {
                    let mut style = r.style();
                    style.code = true;
                    r.text(&t, style);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if r.in_table {
                    continue;
                }
                r.newline();
            }
            Event::Rule => {
                r.text("────────", Style { dim: true, ..Style::default() });
                r.end_block();
            }
            Event::TaskListMarker(done) => {
                let style = r.style();
                r.text(if done { "[x] " } else { "[ ] " }, style);
            }
            Event::Html(t) | Event::InlineHtml(t) => {
                let style = r.style();
                r.text(t.trim_end_matches('\n'), style);
            }
            _ => {}
        }
    }
    if !r.current.is_empty() {
        r.newline();
    }
    while r.lines.last().is_some_and(|l| l.is_empty()) {
        r.lines.pop();
    }
    r.lines
}

/// The lines as ANSI-styled text for a terminal.
pub fn to_ansi(lines: &[Line]) -> String {
    let mut out = String::new();
    for line in lines {
        for span in line {
            let mut codes = Vec::new();
            let s = span.style;
            if s.bold {
                codes.push("1");
            }
            if s.dim {
                codes.push("2");
            }
            if s.italic {
                codes.push("3");
            }
            if s.underline {
                codes.push("4");
            }
            if s.strike {
                codes.push("9");
            }
            if s.code {
                codes.push("36");
            }
            if s.heading > 0 {
                codes.push("35");
            }
            if codes.is_empty() {
                out.push_str(&span.text);
            } else {
                out.push_str(&format!("\x1b[{}m{}\x1b[0m", codes.join(";"), span.text));
            }
        }
        out.push('\n');
    }
    out
}

/// The lines as plain text (what the styles decorate).
pub fn to_plain(lines: &[Line]) -> String {
    let mut out = String::new();
    for line in lines {
        for span in line {
            out.push_str(&span.text);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(md: &str) -> String {
        to_plain(&render(md))
    }

    #[test]
    fn blocks_lists_code_quotes_and_rules() {
        let md = "# Plan\n\nWe should **normalize** and *index*.\nSecond line.\n\n- one\n- two\n  - nested\n\n1. first\n2. second\n\n```sql\nCREATE TABLE t (id INTEGER);\nSELECT 1;\n```\n\n> quoted\n\n---\n\nSee [docs](https://example.com) and `x = 1`.";
        assert_eq!(
            plain(md),
            "Plan\n\nWe should normalize and index.\nSecond line.\n\n• one\n• two\n  • nested\n\n1. first\n2. second\n\nsql\n  CREATE TABLE t (id INTEGER);\n  SELECT 1;\n\n│ quoted\n\n────────\n\nSee docs (https://example.com) and x = 1.\n"
        );
    }

    #[test]
    fn styles_mark_headings_emphasis_and_code() {
        let lines = render("## Title\n\nA **b** *c* `d`");
        assert!(lines[0][0].style.bold && lines[0][0].style.heading == 2);
        let para = &lines[2];
        let style_of = |t: &str| para.iter().find(|s| s.text == t).map(|s| s.style).unwrap();
        assert!(style_of("b").bold);
        assert!(style_of("c").italic);
        assert!(style_of("d").code);
        let ansi = to_ansi(&lines);
        assert!(ansi.contains("\x1b[1;4;35mTitle\x1b[0m"), "{ansi:?}");
    }

    #[test]
    fn tables_and_tasks() {
        let md = "| a | b |\n|---|---|\n| 1 | 2 |\n\n- [x] done\n- [ ] todo";
        assert_eq!(plain(md), "a │ b\n──┼──\n1 │ 2\n\n• [x] done\n• [ ] todo\n");
    }

    #[test]
    fn a_tables_columns_line_up_by_display_width() {
        let md = "| answer | member | points |\n|---|---|--:|\n| Response B | codex | 12 |\n| Response A | 漢字 | 0 |";
        assert_eq!(
            plain(md),
            "answer     │ member │ points\n\
             ───────────┼────────┼───────\n\
             Response B │ codex  │     12\n\
             Response A │ 漢字   │      0\n"
        );
        // The header stays bold, cell by cell.
        let lines = render("| a | bb |\n|---|---|\n| ccc | d |");
        assert!(lines[0].iter().filter(|s| !s.text.trim_matches(['│', ' ']).is_empty()).all(|s| s.style.bold));
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(plain("just words"), "just words\n");
        assert_eq!(plain(""), "");
    }
}
