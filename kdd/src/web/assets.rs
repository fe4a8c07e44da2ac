//! The page's files, embedded in kdd at compile time (no build step: plain
//! ES modules and a style sheet, served as they are from `web/page/`), and
//! the page's own URLs, each of which is `index.html` (the page routes on
//! the client with the history API).

/// One embedded file: its body and content type.
#[derive(Clone, Copy)]
pub struct Asset {
    pub body: &'static [u8],
    pub content_type: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const INDEX: Asset = Asset { body: include_bytes!("page/index.html"), content_type: HTML };

/// The page's scripts and style sheet, by URL: one ES module per view
/// (`threads.js`, `thread.js`, `work.js`, `approvals.js`,
/// `attention.js`) beside the router
/// (`app.js`), the JSON-RPC connection (`rpc.js`) and the helpers they share
/// (`dom.js`); the work view's own style sheet (`work.css`, which it loads).
const FILES: &[(&str, Asset)] = &[
    ("/app.js", Asset { body: include_bytes!("page/app.js"), content_type: JS }),
    ("/rpc.js", Asset { body: include_bytes!("page/rpc.js"), content_type: JS }),
    ("/dom.js", Asset { body: include_bytes!("page/dom.js"), content_type: JS }),
    ("/threads.js", Asset { body: include_bytes!("page/threads.js"), content_type: JS }),
    ("/thread.js", Asset { body: include_bytes!("page/thread.js"), content_type: JS }),
    ("/work.js", Asset { body: include_bytes!("page/work.js"), content_type: JS }),
    ("/approvals.js", Asset { body: include_bytes!("page/approvals.js"), content_type: JS }),
    ("/attention.js", Asset { body: include_bytes!("page/attention.js"), content_type: JS }),
    ("/style.css", Asset { body: include_bytes!("page/style.css"), content_type: CSS }),
    ("/work.css", Asset { body: include_bytes!("page/work.css"), content_type: CSS }),
];

/// The file at `path`, or the page for one of its views.
pub fn find(path: &str) -> Option<Asset> {
    if is_view(path) {
        return Some(INDEX);
    }
    FILES.iter().find(|(url, _)| *url == path).map(|(_, asset)| *asset)
}

/// The page's own URLs: `/`, `/approvals`, `/attention`, a thread `/t/<id>`, a work's
/// `/work/<thread>`.
pub fn is_view(path: &str) -> bool {
    let one_segment = |rest: &str| !rest.is_empty() && !rest.contains('/');
    match path {
        "/" | "/approvals" | "/attention" => true,
        p => p.strip_prefix("/t/").is_some_and(one_segment) || p.strip_prefix("/work/").is_some_and(one_segment),
    }
}

/// The page shown without a session: how to pair (no script, no style).
pub const PAIR_FIRST: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>kd — pair first</title></head>\
<body><h1>Pair first</h1><p>This browser is not paired with kd. Run <code>kd web</code> on the machine kdd runs \
on and open the URL it prints (once: it is a one-time link).</p></body></html>\n";

/// The page shown for a pairing link that is unknown, used or expired.
pub const PAIR_FAILED: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>kd — pairing refused</title></head>\
<body><h1>Pairing refused</h1><p>This pairing link was used already, has expired, or is not kd's. Run \
<code>kd web</code> again for a new one. If you did not use it, someone else may have: \
<code>kd web sessions</code> lists the browsers paired, <code>kd web revoke --all</code> ends them.</p></body></html>\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_are_the_page_and_nothing_else_is_served() {
        for view in ["/", "/approvals", "/attention", "/t/t-1", "/work/t-1"] {
            assert_eq!(find(view).map(|a| a.content_type), Some(HTML), "{view}");
        }
        for other in ["/t/", "/t/a/b", "/index.html/x", "/../Cargo.toml", "/work", "/rpc"] {
            assert!(find(other).is_none(), "{other}");
        }
        assert_eq!(find("/app.js").map(|a| a.content_type), Some(JS));
        assert_eq!(find("/work.css").map(|a| a.content_type), Some(CSS));
    }

    #[test]
    fn no_page_file_holds_inline_script_or_style() {
        let index = std::str::from_utf8(INDEX.body).unwrap();
        assert!(!index.contains("<script>") && !index.contains("style="), "{index}");
        assert!(!index.contains("onclick") && !index.contains("<style"), "{index}");
        let mut inserts = Vec::new();
        for (js, asset) in FILES.iter().filter(|(url, _)| url.ends_with(".js")) {
            let text = std::str::from_utf8(asset.body).unwrap();
            for html in ["innerHTML", "outerHTML", "insertAdjacentHTML", "createContextualFragment", "DOMParser"] {
                for (at, _) in text.match_indices(html) {
                    // The function the insertion is in.
                    let before = &text[..at];
                    let function = before.rfind("function ").map(|f| &before[f..]).unwrap_or("");
                    let name: String = function["function ".len().min(function.len())..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    inserts.push((*js, html, name));
                }
            }
            assert!(!text.contains("eval(") && !text.contains("new Function"), "{js}");
            assert!(!text.contains("document.write"), "{js}");
        }
        // HTML enters the page in one place: dom.js's renderMarkdown, which
        // takes kdd's thread.render answer (sanitised there) and nothing else.
        assert_eq!(inserts, vec![("/dom.js", "innerHTML", "renderMarkdown".to_string())]);
        let dom = std::str::from_utf8(find("/dom.js").unwrap().body).unwrap();
        let helper = &dom[dom.find("export async function renderMarkdown(").unwrap()..];
        let helper = &helper[..helper.find("\n}\n").unwrap()];
        assert!(helper.contains("rpc.call('thread.render'"), "{helper}");
        assert_eq!(helper.matches("innerHTML = r.html").count(), 1, "{helper}");
    }
}
