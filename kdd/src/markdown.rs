//! Markdown to sanitised HTML, for kd web (`thread.render`): a member's
//! answer is parsed by pulldown-cmark and its HTML cleaned by ammonia.
//!
//! Two walls, each enough alone: raw HTML in the text is not passed
//! through as HTML but turned into text (an answer holding `<script>`
//! shows those characters), and ammonia then keeps only a fixed set of
//! formatting tags with no attribute that runs anything — no script,
//! style, event handler, image or form; links only to http, https and
//! mailto, opened with `rel="noopener noreferrer nofollow"`. The page's
//! Content-Security-Policy (no inline script) is the third.

use std::collections::HashSet;
use std::sync::OnceLock;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The tags a rendered answer may hold.
const TAGS: &[&str] = &[
    "a",
    "blockquote",
    "br",
    "code",
    "del",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "li",
    "ol",
    "p",
    "pre",
    "strong",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
    "input",
];

fn cleaner() -> &'static ammonia::Builder<'static> {
    static CLEANER: OnceLock<ammonia::Builder<'static>> = OnceLock::new();
    CLEANER.get_or_init(|| {
        let mut b = ammonia::Builder::empty();
        b.tags(TAGS.iter().copied().collect())
            .tag_attributes(
                [
                    ("a", ["href"].into_iter().collect()),
                    ("input", ["type", "checked", "disabled"].into_iter().collect()),
                ]
                .into_iter()
                .collect(),
            )
            .set_tag_attribute_value("input", "disabled", "")
            .url_schemes(["http", "https", "mailto"].into_iter().collect::<HashSet<_>>())
            .link_rel(Some("noopener noreferrer nofollow"))
            .strip_comments(true);
        b
    })
}

/// `text` (markdown) as sanitised HTML.
pub fn render(text: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(text, options).map(|e| match e {
        // Raw HTML in an answer is shown as what it is.
        Event::Html(html) | Event::InlineHtml(html) => Event::Text(html),
        // An image is a link to it (its alt text the link's): the page
        // loads nothing an answer names.
        Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
            Event::Start(Tag::Link { link_type, dest_url, title, id })
        }
        Event::End(TagEnd::Image) => Event::End(TagEnd::Link),
        e => e,
    });
    let mut html = String::with_capacity(text.len() + text.len() / 4);
    pulldown_cmark::html::push_html(&mut html, events);
    let mut clean = cleaner().clean(&html).to_string();
    // The newline after the last block: the page's text would end with it.
    clean.truncate(clean.trim_end().len());
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_is_formatted() {
        let html =
            render("# Plan\n\n- one\n- **two**\n\n```rust\nfn main() {}\n```\n\nSee [docs](https://example.com/d).");
        assert!(html.contains("<h1>Plan</h1>"), "{html}");
        assert!(html.contains("<li>one</li>") && html.contains("<strong>two</strong>"), "{html}");
        assert!(html.contains("<pre><code>fn main() {}\n</code></pre>"), "{html}");
        assert!(
            html.contains("<a href=\"https://example.com/d\" rel=\"noopener noreferrer nofollow\">docs</a>"),
            "{html}"
        );
    }

    #[test]
    fn nothing_executable_survives() {
        let hostile = "<script>window.pwned = 1</script>\n\n<img src=x onerror=\"window.pwned = 2\">\n\n\
                       [click](javascript:window.pwned=3) [data](data:text/html,<script>x</script>) \
                       <a href=\"javascript:alert(1)\">raw</a> ![i](https://example.com/i.png)\n\n\
                       <div onclick=\"x()\" style=\"color:red\">div</div>";
        let html = render(hostile);
        // Every tag of the output, with its attributes.
        let tags: Vec<&str> = html.split('<').skip(1).map(|t| t.split('>').next().unwrap_or(t)).collect();
        assert!(!tags.is_empty(), "{html}");
        for tag in &tags {
            for bad in ["script", "img", "on", "javascript:", "data:", "style", "div", "iframe"] {
                let name_or_attr = tag.split([' ', '=', '/']).any(|w| w == bad || (bad == "on" && w.starts_with("on")));
                assert!(
                    !name_or_attr && !tag.contains("javascript:") && !tag.contains("data:"),
                    "{bad} in <{tag}>: {html}"
                );
            }
        }
        // The raw HTML is there as text.
        assert!(html.contains("&lt;script&gt;window.pwned = 1&lt;/script&gt;"), "{html}");
        assert!(html.contains("&lt;img src=x onerror="), "{html}");
        // The image is a link to it.
        assert!(
            html.contains("<a href=\"https://example.com/i.png\" rel=\"noopener noreferrer nofollow\">i</a>"),
            "{html}"
        );
    }

    #[test]
    fn a_task_list_box_cannot_be_ticked() {
        let html = render("- [x] done\n- [ ] not yet");
        assert!(html.contains("type=\"checkbox\""), "{html}");
        assert_eq!(html.matches("disabled=\"\"").count(), 2, "{html}");
    }
}
