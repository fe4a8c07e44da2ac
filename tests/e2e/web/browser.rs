//! The page in a real browser (headless Chromium through chromedriver,
//! `kd_tests::browser`) against a real kdd with fake members: pairing,
//! a member's answer streaming live, asking in the page, approving in the
//! page, and an answer holding markup showing as text. Each test saves
//! screenshots of its views (`KD_SCREENSHOTS`, else target/screenshots).

use kd_client::prelude::*;
use kd_tests::browser::Browser;
use kd_tests::web::serve;
use kd_tests::{Hold, Kdd, Workspace};
use serde_json::json;

/// A browser paired with `kdd`'s web client, on the threads view; the
/// page's origin.
pub(super) async fn paired(kdd: &Kdd, test: &str) -> Option<(Browser, String)> {
    let browser = Browser::start(test).await?;
    let web = serve(kdd).await;
    browser.client.goto(&web.url).await.expect("open the pairing URL");
    let origin = format!("http://{}", web.addr);
    browser.until("the threads view", "return document.querySelector('#threads') !== null").await;
    browser.until("the page's WebSocket", "return document.querySelector('#conn').dataset.state === 'connected'").await;
    Some((browser, origin))
}

pub(super) fn js_str(s: &str) -> String {
    serde_json::to_string(s).expect("a JSON string")
}

#[tokio::test(flavor = "multi_thread")]
async fn pairing_with_the_token_lands_on_the_threads_view() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    c.thread_set_title(t.clone(), "Where the page begins".into()).await.unwrap();
    let Some((b, origin)) = paired(&kdd, "web::browser::pairing").await else { return };
    // The token left the address bar; the thread is listed, linked to its view.
    assert_eq!(b.client.current_url().await.unwrap().as_str(), format!("{origin}/"));
    let row = b
        .until(
            "the thread's row",
            &format!("return document.querySelector('tr.thread[data-thread={}]')?.innerText", js_str(&t)),
        )
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains("Where the page begins") && row.contains(&ws.path()), "{row}");
    b.screenshot("threads").await;
    // The link opens the thread's own URL, in the page.
    b.eval(&format!("document.querySelector('tr.thread[data-thread={}] a').click()", js_str(&t))).await;
    b.until("the thread view", "return document.querySelector('#ask-text') !== null").await;
    assert_eq!(b.client.current_url().await.unwrap().as_str(), format!("{origin}/t/{t}"));
    // The pairing link is spent: a second browser gets nothing.
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_members_answer_streams_into_the_thread_live() {
    let hold = Hold::new();
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[
            ("FAKE_TEXT", "First piece, second piece, and the last piece."),
            ("FAKE_DELTAS", "3"),
            ("FAKE_HOLD", hold.var()),
        ],
    )]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::browser::live").await else { return };
    b.client.goto(&format!("{origin}/t/{t}")).await.unwrap();
    b.until(
        "the thread view",
        "return document.querySelector('#conn').dataset.state === 'connected' && document.querySelector('#ask-text')",
    )
    .await;
    c.council_send(t.clone(), "Stream to me.".into(), None, None, None, None, None, Some(1), None, None).await.unwrap();
    // The first piece is on the page while the member is held mid-answer.
    let partial = b
        .until(
            "the streaming answer's first piece",
            "const s = document.querySelector('.msg.streaming[data-from=\"claude\"] .body'); return s && s.textContent",
        )
        .await;
    let partial = partial.as_str().unwrap().to_string();
    assert!("First piece, second piece, and the last piece.".starts_with(&partial), "{partial}");
    assert!(partial.len() < "First piece, second piece, and the last piece.".len(), "only part of it: {partial}");
    b.screenshot("streaming").await;
    hold.release();
    let done = b
        .until(
            "the finished answer",
            "const m = [...document.querySelectorAll('.msg[data-from=\"claude\"]:not(.streaming) .body')]; \
             return m.length === 1 && !document.querySelector('.msg.streaming') && m[0].textContent",
        )
        .await;
    assert_eq!(done.as_str(), Some("First piece, second piece, and the last piece."));
    b.screenshot("thread").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_asked_in_the_page_gets_every_members_answer() {
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Claude answers the page.")]),
        ("codex", "codex", &[("FAKE_TEXT", "Codex answers the page.")]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::browser::ask").await else { return };
    b.client.goto(&format!("{origin}/t/{t}")).await.unwrap();
    b.until(
        "the ask box",
        "return document.querySelector('#conn').dataset.state === 'connected' && document.querySelector('#ask-text')",
    )
    .await;
    let text = b.client.find(fantoccini::Locator::Css("#ask-text")).await.unwrap();
    text.send_keys("What does the page say?").await.unwrap();
    b.client.find(fantoccini::Locator::Css("#ask-send")).await.unwrap().click().await.unwrap();
    let answers = b
        .until(
            "both members' answers",
            "const a = [...document.querySelectorAll('.msg:not(.streaming)')].map(m => m.dataset.from + ': ' + m.querySelector('.body').textContent); \
             return a.length >= 3 && a",
        )
        .await;
    let answers: Vec<&str> = answers.as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(answers.contains(&"king: What does the page say?"), "{answers:?}");
    assert!(answers.contains(&"claude: Claude answers the page."), "{answers:?}");
    assert!(answers.contains(&"codex: Codex answers the page."), "{answers:?}");
    b.screenshot("asked").await;
    // The King's question is the thread's, as kd ask would have written it.
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(messages[0].body, "What does the page say?");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_approved_in_the_page_and_the_tool_runs() {
    let ws = Workspace::new(&[]);
    let file = crate::approvals::asking(&ws, "x-web-approved", json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    c.thread_set_title(t.clone(), "The page's file".into()).await.unwrap();
    let Some((b, origin)) = paired(&kdd, "web::browser::approvals").await else { return };
    b.client.goto(&format!("{origin}/approvals")).await.unwrap();
    b.until("the approvals view", "return document.querySelector('#approvals') !== null").await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let a = crate::approvals::requested(&mut sub).await;
    let item = format!("document.querySelector('.approval[data-id={}]')", js_str(&a.id));
    let shown = b.until("the pending approval", &format!("return {item}?.innerText")).await;
    assert!(shown.as_str().unwrap().contains(&format!("touch {file}")), "{shown}");
    // Why it asks (claude's description), and the thread by its title.
    let why = b.until("why it asks", &format!("return {item}.querySelector('.why')?.textContent")).await;
    assert_eq!(why.as_str(), Some("why: touch it"));
    let place = b
        .until(
            "the thread's title",
            &format!(
                "const a = {item}.querySelector('.where a'); return a.textContent !== {} && a.textContent",
                js_str(&t)
            ),
        )
        .await;
    assert_eq!(place.as_str(), Some("The page's file"));
    assert!(!std::path::Path::new(&file).exists(), "nothing runs before the King says so");
    b.screenshot("approvals").await;
    b.eval(&format!("{item}.querySelector('button.approve').click()")).await;
    b.until("the approval gone from the page", &format!("return {item} === null")).await;
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    assert!(std::path::Path::new(&file).exists(), "the approved command ran");
    let decided = c.approval_list(Some(true), None, None).await.unwrap();
    assert_eq!(decided[0].decided_by, Some(kd_proto::approval::DecidedBy::King));
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_holding_markup_shows_as_text() {
    let hostile = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"><b>bold?</b>";
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", hostile)])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    c.thread_set_title(t.clone(), "<img src=x onerror=\"window.pwned = 3\">".into()).await.unwrap();
    kd_tests::send_one_round(&c, &t, "Say something hostile.").await;
    kd_tests::settled(&kdd.db, &t).await;
    let Some((b, origin)) = paired(&kdd, "web::browser::markup").await else { return };
    b.until("the thread's row", "return document.querySelector('tr.thread') !== null").await;
    b.client.goto(&format!("{origin}/t/{t}")).await.unwrap();
    let text = b
        .until(
            "the answer",
            "const m = document.querySelector('.msg[data-from=\"claude\"] .body.markdown'); return m && m.textContent.trim()",
        )
        .await;
    assert_eq!(text.as_str(), Some(hostile), "the answer's text, as it is, rendered by kdd");
    let visible = b.eval("return document.querySelector('.msg[data-from=\"claude\"] .body').innerText").await;
    assert!(visible.as_str().unwrap().contains("<script>"), "{visible}");
    let markup = b.eval("return document.querySelectorAll('main script, main img, main b').length").await;
    assert_eq!(markup, json!(0), "no element made from the answer or the title");
    assert_eq!(b.eval("return window.pwned === undefined").await, json!(true));
    b.screenshot("markup").await;
    b.close().await;
}
