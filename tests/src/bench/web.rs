//! kd web's rows (issue 35), in a real headless Chromium through
//! chromedriver ([`crate::browser`]) against a real kdd: a token delta from
//! the agent's write to the page's DOM, the first paint of a 1,000-message
//! thread, and kdd's resident memory with ten pages open.
//!
//! The page is measured from inside: a `MutationObserver` stamps when a
//! delta's text reaches the DOM (the agent stamps when it wrote it,
//! `FAKE_STAMP`, on the same clock); a thread's first paint is from the
//! page's route change to the frame after its last message is in the DOM
//! (`requestAnimationFrame` then a task: the frame is painted).

use kd_client::prelude::*;

use super::{check, percentile, row, rss_mib};
use crate::browser::Browser;
use crate::{Kdd, Workspace};

/// A browser paired with `kdd`'s web client, on the threads view; the
/// page's origin. `None`: no chromedriver (said).
async fn paired(kdd: &Kdd, what: &str) -> Option<(Browser, String)> {
    let Some(browser) = Browser::start(what).await else {
        row(what, "no browser".into(), "apt-get install chromium chromium-driver");
        return None;
    };
    let web = crate::web::serve(kdd).await;
    browser.client.goto(&web.url).await.expect("open the pairing URL");
    browser.until("the threads view", "return document.querySelector('#threads') !== null").await;
    browser.until("the page's WebSocket", "return document.querySelector('#conn').dataset.state === 'connected'").await;
    Some((browser, format!("http://{}", web.addr)))
}

/// Moves the page to `path` as its own links do (no reload).
fn route(path: &str) -> String {
    format!(
        "history.pushState(null, '', {}); window.dispatchEvent(new PopStateEvent('popstate'));",
        serde_json::to_string(path).expect("a path")
    )
}

/// Records, for each `[t=MICROS]` stamp reaching `#messages`, how long
/// after the agent wrote it (ms, in `window.lat`); each stamp once.
const STAMPS: &str = "window.lat = []; const seen = new Set(); const upTo = new WeakMap(); \
  const scan = (text, from, now) => { const re = /\\[t=(\\d+)\\]/g; re.lastIndex = from; let m, end = from; \
    while ((m = re.exec(text))) { end = re.lastIndex; if (!seen.has(m[1])) { seen.add(m[1]); \
      window.lat.push((now - Number(m[1])) / 1000); } } return end; }; \
  new MutationObserver((records) => { const now = (performance.timeOrigin + performance.now()) * 1000; \
    for (const r of records) { \
      if (r.type === 'characterData') upTo.set(r.target, scan(r.target.data, upTo.get(r.target) || 0, now)); \
      else for (const n of r.addedNodes) scan(n.textContent || '', 0, now); } \
  }).observe(document.getElementById('messages'), { subtree: true, characterData: true, childList: true });";

/// A member streaming `deltas` stamped pieces at `rate`/s into an open
/// thread page: each one's latency from the agent's write to the DOM.
pub async fn delta_to_page(deltas: usize, rate: usize) {
    let (n, r) = (deltas.to_string(), rate.to_string());
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_STAMP", "1"), ("FAKE_RATE", &r), ("FAKE_DELTAS", &n)])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = crate::new_thread(&c, &ws.path()).await;
    let Some((b, _)) = paired(&kdd, "bench::web::delta").await else { return };
    b.eval(&route(&format!("/t/{t}"))).await;
    b.until("the thread view", "return document.querySelector('#messages') !== null").await;
    b.eval(STAMPS).await;
    c.council_send(t, "go".into(), None, None, None, None, None, Some(0), None, None).await.expect("send");
    b.until("every delta in the page", &format!("return window.lat.length >= {deltas}")).await;
    let lat = b.eval("return window.lat").await;
    let mut lat: Vec<f64> = lat.as_array().map(|a| a.iter().filter_map(|v| v.as_f64()).collect()).unwrap_or_default();
    lat.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    row(&format!("deltas seen in the page ({deltas} at {rate}/s)"), lat.len().to_string(), &deltas.to_string());
    check("token delta agent write → page DOM, p50", format!("{p50:.2} ms"), "< 5 ms", p50 < 5.0);
    row("token delta agent write → page DOM, p99", format!("{p99:.2} ms"), "");
    b.close().await;
}

/// A body like an agent's answer, with some markdown.
fn body(i: u64) -> String {
    format!(
        "Answer {i}: the migration adds a **nullable column** first, backfills it in batches of a thousand rows, \
         then makes it `NOT NULL` once every writer sends it.\n\n- rolling back drops the column\n- readers never \
         see a half-written row"
    )
}

/// Opens a `n`-message thread in the page `times` times: from the route
/// change to the frame after its last message is in the DOM, in ms.
async fn paints(b: &Browser, thread: &str, n: u64, times: usize) -> Vec<f64> {
    let mut all = Vec::new();
    for _ in 0..times {
        b.eval(&route("/")).await;
        b.until("the threads view", "return document.querySelector('#threads') !== null").await;
        b.eval(&format!(
            "window.painted = null; window.firstSeq = null; let done = false; const t0 = performance.now(); \
             const o = new MutationObserver(() => {{ \
               const shown = document.getElementById('messages')?.childElementCount || 0; \
               if (shown && window.firstSeq === null) window.firstSeq = performance.now() - t0; \
               if (done || shown < {n}) return; \
               done = true; o.disconnect(); \
               requestAnimationFrame(() => setTimeout(() => {{ window.painted = performance.now() - t0; }}, 0)); }}); \
             o.observe(document.getElementById('view'), {{ childList: true, subtree: true }}); {}",
            route(&format!("/t/{thread}"))
        ))
        .await;
        let ms = b.until("the thread painted", "return window.painted").await;
        all.push(ms.as_f64().unwrap_or(f64::MAX));
        let first = b.eval("return window.firstSeq").await;
        eprintln!("  (first message in the DOM after {:.0} ms)", first.as_f64().unwrap_or(-1.0));
    }
    all
}

/// The first paint of a 1,000-message thread, the first time and after.
pub async fn first_paint() {
    const N: u64 = 1_000;
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = crate::new_thread(&c, &crate::workspace("web-paint")).await;
    crate::fill(&kdd, &t, N, 4, body).await;
    let Some((b, _)) = paired(&kdd, "bench::web::paint").await else { return };
    // The same history over a WebSocket of its own, no DOM: what the
    // page's work adds beside kdd's.
    let bare = b
        .client
        .execute_async(
            &format!(
                "const done = arguments[0]; const t0 = performance.now(); let n = 0; \
             const ws = new WebSocket(`ws://${{location.host}}/rpc`); \
             ws.onopen = () => ws.send(JSON.stringify({{ jsonrpc: '2.0', id: 1, method: 'thread.subscribe', \
               params: {{ thread: {}, since_seq: 0 }} }})); \
             ws.onmessage = (e) => {{ const m = JSON.parse(e.data); \
               if (m.params && m.params.result && m.params.result.type === 'message' && ++n === {N}) \
                 {{ ws.close(); done(performance.now() - t0); }} }};",
                serde_json::to_string(&t).expect("an id")
            ),
            vec![],
        )
        .await
        .expect("the bare WebSocket");
    let mut times = paints(&b, &t, N, 6).await;
    let first = times.remove(0);
    times.sort_by(|a, b| a.total_cmp(b));
    let p50 = percentile(&times, 0.5);
    check("first paint of a 1,000-message thread, first open", format!("{first:.0} ms"), "< 300 ms", first < 300.0);
    row("  opened again, p50 of 5", format!("{p50:.0} ms"), "");
    row("  the same history over a bare WebSocket, no DOM", format!("{:.0} ms", bare.as_f64().unwrap_or(-1.0)), "");
    b.close().await;
}

/// kdd's resident memory with the page open in ten windows, each on a
/// 1,000-message thread, beside kdd serving kd web with none.
pub async fn ten_pages() {
    const N: u64 = 1_000;
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = crate::new_thread(&c, &crate::workspace("web-pages")).await;
    crate::fill(&kdd, &t, N, 4, body).await;
    let Some((b, origin)) = paired(&kdd, "bench::web::pages").await else { return };
    let one = rss_mib(kdd.pid);
    let first = b.client.window().await.expect("a window");
    for i in 0..10 {
        if i > 0 {
            let w = b.client.new_window(false).await.expect("a new window");
            b.client.switch_to_window(w.handle).await.expect("switch");
        }
        b.client.goto(&format!("{origin}/t/{t}")).await.expect("open the thread");
        b.until("the thread", &format!("return document.querySelectorAll('#messages [data-seq]').length >= {N}")).await;
    }
    let ten = rss_mib(kdd.pid);
    row("kdd RSS, kd web serving, one page on the threads view", format!("{one:.1} MiB"), "");
    check(
        "kdd RSS with 10 pages open on a 1,000-message thread",
        format!("{ten:.1} MiB"),
        "< 40 MB",
        ten * 1.048_576 < 40.0,
    );
    b.client.switch_to_window(first).await.expect("back");
    b.close().await;
}
