//! The attention view in a real browser: kd's notifications reach the page
//! live (`notify.subscribe`) with no sink configured, the header counts the
//! unseen ones, the browser's Notification API is called for each new one
//! (the page's only use of it, spied on here: a headless browser shows
//! nothing), and each notification opens the view it is about.

use kd_client::prelude::*;
use kd_tests::{Kdd, Workspace};

use super::browser::{js_str, paired};

/// Stands in for the browser's Notification API, permission granted: each
/// notification made is kept in `window.shown`.
const SPY: &str = "window.shown = []; \
    window.Notification = class { \
      static permission = 'granted'; \
      static requestPermission() { return Promise.resolve('granted'); } \
      constructor(title, options) { this.title = title; this.tag = options.tag; window.shown.push(this); } \
      close() {} };";

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_and_the_end_of_an_exchange_reach_the_page_and_the_browsers_notifications() {
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[("FAKE_ERROR", "codex broke")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::attention").await else { return };
    b.eval(SPY).await;
    // On another view than the thread's: the browser is told.
    b.eval("document.querySelector('a[href=\"/approvals\"]').click()").await;
    b.until("the approvals view", "return document.querySelector('#approvals') !== null").await;

    c.council_send(t.clone(), "Anyone there?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let shown = b
        .until(
            "two browser notifications",
            "return window.shown.length >= 2 && window.shown.map((n) => n.title + ' ' + n.tag).join('\\n')",
        )
        .await;
    let shown = shown.as_str().unwrap().to_string();
    assert!(shown.contains("kd: codex failed") && shown.contains("kd: the council answered"), "{shown}");
    assert!(shown.lines().all(|l| l.contains(" kd-")), "tagged by number: {shown}");
    b.until("the header's count", "return document.querySelector('#attention-count').textContent === '2'").await;
    b.screenshot("header").await;

    // The view lists them, newest first, and visiting marks them seen.
    b.eval("document.querySelector('a[href=\"/attention\"]').click()").await;
    let kinds = b
        .until(
            "the attention view",
            "return document.querySelectorAll('#attention li.note').length === 2 && \
             [...document.querySelectorAll('#attention li.note')].map((n) => n.dataset.kind).join(',')",
        )
        .await;
    assert_eq!(kinds.as_str(), Some("done,failed"));
    b.until("the count cleared", "return document.querySelector('#attention-count').textContent === ''").await;
    assert_eq!(b.client.current_url().await.unwrap().as_str(), format!("{origin}/attention"));
    b.screenshot("attention").await;

    // A browser notification, clicked, opens the thread.
    b.eval("window.shown.find((n) => n.title.includes('failed')).onclick()").await;
    b.until("the thread view", "return document.querySelector('#ask-text') !== null").await;
    assert_eq!(b.client.current_url().await.unwrap().as_str(), format!("{origin}/t/{t}"));

    // A page opened later lists the kept ones but does not notify again.
    b.client.goto(&format!("{origin}/attention")).await.unwrap();
    b.eval(SPY).await;
    b.until(
        "the kept notifications",
        &format!(
            "return [...document.querySelectorAll('#attention li.note a')].some((a) => a.getAttribute('href') === {})",
            js_str(&format!("/t/{t}"))
        ),
    )
    .await;
    assert_eq!(b.eval("return window.shown.length").await.as_u64(), Some(0));
    b.close().await;
}
