//! Word wrapping of styled lines to a width, by display width (wide
//! characters count double). Words longer than the width are split.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Wraps each line to `width` columns; an empty line stays one empty line.
pub fn wrap(lines: &[Line<'static>], width: usize) -> Vec<Line<'static>> {
    let width = width.max(1);
    let mut out = Vec::new();
    for line in lines {
        wrap_line(line, width, &mut out);
    }
    out
}

/// A run of characters of one style, with the break opportunity after it.
struct Piece {
    text: String,
    style: Style,
    width: usize,
    space: bool,
}

fn wrap_line(line: &Line<'static>, width: usize, out: &mut Vec<Line<'static>>) {
    // Split into words and spaces, keeping styles.
    let mut pieces: Vec<Piece> = Vec::new();
    for span in &line.spans {
        let style = line.style.patch(span.style);
        let mut cur = String::new();
        let mut cur_space = None;
        for c in span.content.chars() {
            let is_space = c == ' ';
            if cur_space.is_some_and(|s| s != is_space) {
                let w = display_width(&cur);
                pieces.push(Piece { text: std::mem::take(&mut cur), style, width: w, space: cur_space == Some(true) });
            }
            cur_space = Some(is_space);
            cur.push(c);
        }
        if !cur.is_empty() {
            let w = display_width(&cur);
            pieces.push(Piece { text: cur, style, width: w, space: cur_space == Some(true) });
        }
    }
    let mut row: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    let flush = |row: &mut Vec<Span<'static>>, out: &mut Vec<Line<'static>>| {
        // Trailing spaces at a break are dropped.
        while row.last().is_some_and(|s| s.content.chars().all(|c| c == ' ') && !s.content.is_empty()) {
            row.pop();
        }
        out.push(Line::from(std::mem::take(row)));
    };
    // Merge adjacent non-space pieces (a word may span styles) for fitting.
    let mut i = 0;
    while i < pieces.len() {
        let mut j = i;
        let mut word_width = 0;
        while j < pieces.len() && !pieces[j].space {
            word_width += pieces[j].width;
            j += 1;
        }
        if j == i {
            // A run of spaces: keep it unless it starts a row after a break.
            let p = &pieces[i];
            if used > 0 && used + p.width <= width {
                row.push(Span::styled(p.text.clone(), p.style));
                used += p.width;
            } else if used == 0 && out_is_first(&row) {
                // Leading indentation of the line is kept.
                let take = p.width.min(width);
                row.push(Span::styled(" ".repeat(take), p.style));
                used += take;
            }
            i += 1;
            continue;
        }
        if used > 0 && used + word_width > width {
            flush(&mut row, out);
            used = 0;
        }
        for p in &pieces[i..j] {
            if p.width + used <= width {
                row.push(Span::styled(p.text.clone(), p.style));
                used += p.width;
                continue;
            }
            // The word is longer than the row: split by characters.
            let mut chunk = String::new();
            for c in p.text.chars() {
                let w = c.width().unwrap_or(0);
                if used + w > width && used > 0 {
                    if !chunk.is_empty() {
                        row.push(Span::styled(std::mem::take(&mut chunk), p.style));
                    }
                    flush(&mut row, out);
                    used = 0;
                }
                chunk.push(c);
                used += w;
            }
            if !chunk.is_empty() {
                row.push(Span::styled(chunk, p.style));
            }
        }
        i = j;
    }
    flush(&mut row, out);
}

fn out_is_first(row: &[Span<'static>]) -> bool {
    row.is_empty()
}

pub fn display_width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::Modifier;

    fn text(lines: &[Line<'static>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn words_wrap_at_the_width_and_long_words_split() {
        let l = vec![Line::from("the quick brown fox jumps")];
        assert_eq!(text(&wrap(&l, 10)), ["the quick", "brown fox", "jumps"]);
        let l = vec![Line::from("abcdefghijkl xy")];
        assert_eq!(text(&wrap(&l, 5)), ["abcde", "fghij", "kl xy"]);
    }

    #[test]
    fn styles_survive_and_wide_characters_count_double() {
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let l = vec![Line::from(vec![Span::raw("a "), Span::styled("bold", bold), Span::raw(" end")])];
        let w = wrap(&l, 6);
        assert_eq!(text(&w), ["a bold", "end"]);
        assert_eq!(w[0].spans.iter().find(|s| s.content == "bold").map(|s| s.style), Some(bold));
        let wide = vec![Line::from("日本語テキスト")];
        assert_eq!(text(&wrap(&wide, 6)), ["日本語", "テキス", "ト"]);
    }

    #[test]
    fn empty_lines_and_indentation_stay() {
        let l = vec![Line::from(""), Line::from("  indented code")];
        assert_eq!(text(&wrap(&l, 40)), ["", "  indented code"]);
    }
}
