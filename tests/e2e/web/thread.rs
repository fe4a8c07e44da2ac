//! The threads list and a thread in a real browser (headless Chromium,
//! `kd_tests::browser`) against a real kdd with fake members: the list
//! live, searched, with costs and archived threads on demand, from the
//! keyboard; a thread's actions (rename, fork, archive) and the ask box's
//! options (members, @member, rounds, synthesis); answers rendered from
//! markdown with nothing in them running; the connection coming back after
//! kd web stops and after kdd restarts, with nothing lost or doubled; and
//! the views on a phone. Each test saves screenshots of its views.

use fantoccini::Locator;
use kd_client::Client;
use kd_client::prelude::*;
use kd_tests::browser::Browser;
use kd_tests::{Kdd, Workspace};
use serde_json::json;

use super::browser::{js_str, paired};

/// Opens thread `t`'s view and waits for its subscription.
async fn open_thread(b: &Browser, origin: &str, t: &str) {
    b.client.goto(&format!("{origin}/t/{t}")).await.unwrap();
    b.until(
        "the thread view",
        "return document.querySelector('#conn').dataset.state === 'connected' && document.querySelector('#ask-text') \
         && document.querySelector('#ask-members input') !== null",
    )
    .await;
}

/// The seqs of the messages the page shows, in order.
async fn shown_seqs(b: &Browser) -> Vec<u64> {
    let v = b.eval("return [...document.querySelectorAll('.msg[data-seq]')].map(m => Number(m.dataset.seq))").await;
    v.as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect()
}

/// Waits until the page shows exactly the thread's messages, each once,
/// in the order kd shows a thread (`kd_proto::order::display_order`).
async fn shows_every_message_once(b: &Browser, c: &Client, t: &str) -> Vec<u64> {
    let messages = c.thread_messages(t.into(), None, None, None, None).await.unwrap();
    let want: Vec<u64> = kd_proto::order::display_order(&messages).iter().map(|m| m.seq).collect();
    let script = format!(
        "const s = [...document.querySelectorAll('.msg[data-seq]')].map(m => Number(m.dataset.seq)); \
         return JSON.stringify(s) === {:?} && !document.querySelector('.msg.streaming')",
        serde_json::to_string(&want).unwrap()
    );
    let shown = b.until("every message of the thread, once, in kd's order", &script).await;
    assert_eq!(shown, json!(true));
    assert_eq!(shown_seqs(b).await, want);
    want
}

/// Elements of the view a finger taps that are less than 44 px high or
/// wide (links inside an answer's prose excepted).
async fn small_targets(b: &Browser) -> serde_json::Value {
    b.eval(
        "return [...document.querySelectorAll('main button, main a, main select, main input:not([type=checkbox]), \
         main label.check, main textarea, header a')]\
           .filter(e => !e.closest('.body') && e.offsetParent !== null)\
           .map(e => [e, e.getBoundingClientRect()])\
           .filter(([e, r]) => r.height < 44 || r.width < 44)\
           .map(([e, r]) => `${e.tagName}#${e.id}.${e.className} ${Math.round(r.width)}x${Math.round(r.height)}`)",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_threads_list_is_live_searchable_costed_and_keyboard_driven() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Lighthouses keep their lamps lit.")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t1 = kd_tests::new_thread(&c, &ws.path()).await;
    c.thread_set_title(t1.clone(), "About lighthouses".into()).await.unwrap();
    kd_tests::send_one_round(&c, &t1, "What do lighthouses do?").await;
    kd_tests::settled(&kdd.db, &t1).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::threads").await else { return };
    let row = |t: &str| format!("document.querySelector('tr.thread[data-thread={}]')", js_str(t));
    // The answer's cost is in its thread's row.
    let cost =
        b.until("the thread's cost", &format!("return {}?.querySelector('td.cost').textContent", row(&t1))).await;
    assert_eq!(cost, json!("<$0.01"), "claude's fake reports $0.0012");
    // A thread made meanwhile appears, and one archived goes, without a reload.
    b.eval("window.notReloaded = true").await;
    let t2 = kd_tests::new_thread(&c, &ws.path()).await;
    c.thread_set_title(t2.clone(), "Arrived while watching".into()).await.unwrap();
    let shown = b.until("the new thread", &format!("return {}?.innerText", row(&t2))).await;
    assert!(shown.as_str().unwrap().contains("Arrived while watching"), "{shown}");
    c.thread_archive(t2.clone()).await.unwrap();
    b.until("the archived thread hidden", &format!("return {} === null", row(&t2))).await;
    b.screenshot("threads").await;
    b.eval("document.querySelector('#show-archived').click()").await;
    let status = b.until("the archived thread shown", &format!("return {}?.dataset.status", row(&t2))).await;
    assert_eq!(status, json!("archived"));
    assert_eq!(b.eval("return window.notReloaded === true").await, json!(true), "the page was not reloaded");
    b.screenshot("archived").await;
    // Search, from the keyboard: / focuses the box, Enter searches.
    b.eval("document.activeElement.blur()").await;
    let body = b.client.find(Locator::Css("body")).await.unwrap();
    body.send_keys("/").await.unwrap();
    b.until("the search box focused", "return document.activeElement.id === 'search'").await;
    b.client.active_element().await.unwrap().send_keys("lighthouses\u{E007}").await.unwrap();
    let hit = b
        .until(
            "the search's hit",
            &format!("return document.querySelector('#hits li.hit[data-thread={}]')?.innerText", js_str(&t1)),
        )
        .await;
    assert!(hit.as_str().unwrap().contains("About lighthouses"), "{hit}");
    b.screenshot("search").await;
    // j moves to the first thread, j again to the second, k back; Enter opens it.
    b.client.active_element().await.unwrap().send_keys("\u{E00C}").await.unwrap();
    b.until("the search box left", "return document.activeElement.id !== 'search'").await;
    let order = b.eval("return [...document.querySelectorAll('tr.thread')].map(r => r.dataset.thread)").await;
    assert_eq!(order.as_array().map(Vec::len), Some(2), "{order}");
    let focused = "return document.activeElement.closest('tr')?.dataset.thread";
    body.send_keys("j").await.unwrap();
    assert_eq!(b.eval(focused).await, order[0]);
    b.client.active_element().await.unwrap().send_keys("j").await.unwrap();
    assert_eq!(b.eval(focused).await, order[1]);
    b.client.active_element().await.unwrap().send_keys("k").await.unwrap();
    assert_eq!(b.eval(focused).await, order[0]);
    b.client.active_element().await.unwrap().send_keys("j").await.unwrap();
    b.screenshot("keyboard").await;
    let t1 = order[1].as_str().unwrap().to_string();
    b.client.active_element().await.unwrap().send_keys("\u{E007}").await.unwrap();
    b.until("the thread opened from the keyboard", "return document.querySelector('#ask-text') !== null").await;
    assert_eq!(b.client.current_url().await.unwrap().as_str(), format!("{origin}/t/{t1}"));
    // On a phone.
    b.client.set_window_size(390, 844).await.unwrap();
    b.client.goto(&format!("{origin}/")).await.unwrap();
    b.until("the list on a phone", "return document.querySelector('tr.thread') !== null").await;
    assert_eq!(small_targets(&b).await, json!([]), "touch targets of 44 px at least");
    b.screenshot("phone").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_is_renamed_archived_forked_and_asked_whom_and_how() {
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Claude here.")]),
        ("codex", "codex", &[("FAKE_TEXT", "Codex here.")]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::actions").await else { return };
    open_thread(&b, &origin, &t).await;
    let members = b.eval("return [...document.querySelectorAll('#ask-members input')].map(i => i.value)").await;
    assert_eq!(members, json!(["claude", "codex"]));
    // Only the ticked members are asked.
    b.eval("document.querySelector('#ask-members input[value=codex]').click()").await;
    b.client.find(Locator::Css("#ask-text")).await.unwrap().send_keys("Only you, Claude.").await.unwrap();
    b.client.find(Locator::Css("#ask-send")).await.unwrap().click().await.unwrap();
    b.until("claude's answer", "return document.querySelector('.msg.agent[data-from=claude]') !== null").await;
    kd_tests::settled(&kdd.db, &t).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(messages[0].to, vec!["claude".to_string()], "{messages:?}");
    assert!(messages.iter().all(|m| m.from != "codex"), "{messages:?}");
    // @codex asks codex alone, whatever is ticked; rounds 0 is one round.
    b.client.find(Locator::Css("#ask-rounds")).await.unwrap().send_keys("0").await.unwrap();
    b.client.find(Locator::Css("#ask-text")).await.unwrap().send_keys("@codex And you?").await.unwrap();
    b.client.find(Locator::Css("#ask-send")).await.unwrap().click().await.unwrap();
    b.until("codex's answer", "return document.querySelector('.msg.agent[data-from=codex]') !== null").await;
    kd_tests::settled(&kdd.db, &t).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let asked = messages.iter().find(|m| m.body == "And you?").expect("the King's second question");
    assert_eq!(asked.to, vec!["codex".to_string()]);
    shows_every_message_once(&b, &c, &t).await;
    b.screenshot("asked").await;
    // Synthesize: both answer, the chair writes one answer from them.
    b.eval("document.querySelector('#ask-members input[value=codex]').click()").await;
    b.eval(
        "const h = document.querySelector('#ask-how'); h.value = 'synthesize'; h.dispatchEvent(new Event('change')); \
         document.querySelector('#ask-chair').value = 'claude'",
    )
    .await;
    b.screenshot("synthesize").await;
    b.client.find(Locator::Css("#ask-text")).await.unwrap().send_keys("One answer, please.").await.unwrap();
    b.client.find(Locator::Css("#ask-send")).await.unwrap().click().await.unwrap();
    let said = b
        .until(
            "the synthesis done",
            "const s = document.querySelector('#view > .said').textContent; return s.includes('synthesis') && s",
        )
        .await;
    assert_eq!(said, json!("claude wrote the synthesis"));
    kd_tests::settled(&kdd.db, &t).await;
    shows_every_message_once(&b, &c, &t).await;
    // Rename (the buttons are at the top: the header stays over them while scrolled).
    b.eval("window.scrollTo(0, 0)").await;
    b.client.find(Locator::Css("#rename")).await.unwrap().click().await.unwrap();
    let input = b.client.find(Locator::Css("#title-input")).await.unwrap();
    input.send_keys("Named in the page\u{E007}").await.unwrap();
    b.until("the new title", "return document.querySelector('h1')?.textContent === 'Named in the page'").await;
    assert_eq!(c.thread_get(t.clone()).await.unwrap().title.as_deref(), Some("Named in the page"));
    // Archive and unarchive.
    b.client.find(Locator::Css("#archive")).await.unwrap().click().await.unwrap();
    b.until("archived", "return document.querySelector('.meta').dataset.status === 'archived'").await;
    assert_eq!(c.thread_get(t.clone()).await.unwrap().status, kd_proto::thread::ThreadStatus::Archived);
    assert_eq!(b.eval("return document.querySelector('#archive').textContent").await, json!("Unarchive"));
    b.screenshot("archived").await;
    b.client.find(Locator::Css("#archive")).await.unwrap().click().await.unwrap();
    b.until("unarchived", "return document.querySelector('.meta').dataset.status !== 'archived'").await;
    assert_ne!(c.thread_get(t.clone()).await.unwrap().status, kd_proto::thread::ThreadStatus::Archived);
    // Fork: the page moves to the new thread.
    b.client.find(Locator::Css("#fork")).await.unwrap().click().await.unwrap();
    let forked = b
        .until(
            "the fork's view",
            &format!(
                "return location.pathname.startsWith('/t/') && location.pathname !== {} && location.pathname",
                js_str(&format!("/t/{t}"))
            ),
        )
        .await;
    let fork_id = forked.as_str().unwrap().trim_start_matches("/t/").to_string();
    let fork = c.thread_get(fork_id.clone()).await.unwrap();
    assert_eq!(fork.parent.as_deref(), Some(t.as_str()), "{fork:?}");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streaming_answer_is_cancelled_and_a_failed_one_retried_in_the_page() {
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_TEXT", "A long answer that never ends."), ("FAKE_DELTAS", "3"), ("FAKE_HOLD", hold.var())],
    )]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::cancel").await else { return };
    open_thread(&b, &origin, &t).await;
    kd_tests::send_one_round(&c, &t, "Go on and on.").await;
    b.until("the streaming answer", "return document.querySelector('.msg.streaming .body')?.textContent").await;
    assert_eq!(b.eval("return document.querySelector('#interrupt').hidden").await, json!(false));
    b.screenshot("streaming").await;
    b.eval("document.querySelector('.msg.streaming button.cancel').click()").await;
    let kind = b
        .until(
            "the cancelled answer",
            "return !document.querySelector('.msg.streaming') && document.querySelector('.msg[data-from=claude]')?.dataset.kind",
        )
        .await;
    assert_eq!(kind, json!("interrupted"));
    assert_eq!(b.eval("return document.querySelector('#interrupt').hidden").await, json!(true));
    // Interrupt stops every run of the thread.
    kd_tests::send_one_round(&c, &t, "Again.").await;
    b.until("the second streaming answer", "return document.querySelector('.msg.streaming .body')?.textContent").await;
    b.client.find(Locator::Css("#interrupt")).await.unwrap().click().await.unwrap();
    b.until(
        "the interrupted answer",
        "return !document.querySelector('.msg.streaming') && document.querySelectorAll('.msg[data-kind=interrupted]').length === 2",
    )
    .await;
    hold.release();
    // A failed answer has a Retry button; the retry's answer replaces it.
    ws.set_agent("claude", "env", json!({"FAKE_NAME": "claude", "FAKE_ERROR": "the model is overloaded"}));
    kd_tests::send_one_round(&c, &t, "Fail, please.").await;
    let error = b.until("the failed answer", "return document.querySelector('.msg.error .body')?.textContent").await;
    assert!(error.as_str().unwrap().contains("overloaded"), "{error}");
    b.screenshot("failed").await;
    ws.set_agent("claude", "env", json!({"FAKE_NAME": "claude", "FAKE_TEXT": "Better now."}));
    b.eval("document.querySelector('.msg.error button.retry').click()").await;
    b.until(
        "the retried answer in place of the failure",
        "return !document.querySelector('.msg.error') && [...document.querySelectorAll('.msg.agent .body')].some(m => m.textContent.trim() === 'Better now.')",
    )
    .await;
    b.screenshot("retried").await;
    b.close().await;
}

/// An answer another member's emergency broadcast stopped says so in the
/// page — live, and from its stored message after a reload — where one
/// you cancelled says `interrupted`.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_a_members_emergency_stopped_says_why_in_the_page() {
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Working on it."), ("FAKE_HOLD", hold.var())]),
        ("codex", "codex", &[]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::emergency").await else { return };
    open_thread(&b, &origin, &t).await;
    let to = Some(vec!["claude".to_string()]);
    c.council_send(t.clone(), "Hold on, please.".into(), to, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    b.until("claude streaming", "return document.querySelector('.msg.streaming .body')?.textContent").await;
    c.emergency_broadcast(t.clone(), "Stop: main is broken.".into(), Some("codex".into()), Some(true), None)
        .await
        .unwrap();
    // (The broadcast itself then asks claude: that run streams, held.)
    let said = "return document.querySelector('.msg[data-from=claude][data-kind=interrupted] .state')?.textContent";
    let stopped = json!("stopped by a member's emergency broadcast");
    assert_eq!(b.until("claude's stopped answer", said).await, stopped);
    b.screenshot("stopped").await;
    open_thread(&b, &origin, &t).await;
    assert_eq!(b.until("claude's stopped answer, reloaded", said).await, stopped);
    hold.release();
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_in_markdown_is_rendered_and_nothing_in_it_runs() {
    let answer = "# A heading\n\nSome *prose* and a list:\n\n- one\n- two\n\n```rust\nfn main() { let x = \"<b>\"; }\n```\n\n\
                  [the docs](https://example.com/docs) and [a trap](javascript:window.pwned=4)\n\n\
                  <script>window.pwned = 1</script>\n\n<img src=x onerror=\"window.pwned = 2\">\n\n\
                  <a href=\"javascript:window.pwned=3\">raw link</a> <b onmouseover=\"window.pwned = 5\">b</b>";
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", answer)])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    kd_tests::send_one_round(&c, &t, "Format something.").await;
    kd_tests::settled(&kdd.db, &t).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::markdown").await else { return };
    open_thread(&b, &origin, &t).await;
    let body = "document.querySelector('.msg[data-from=claude] .body.markdown')";
    b.until("the rendered answer", &format!("return {body}?.querySelector('h1') != null")).await;
    let shape = b
        .eval(&format!(
            "const m = {body}; return {{ h1: m.querySelector('h1').textContent, items: m.querySelectorAll('li').length, \
             code: m.querySelector('pre code').textContent, em: m.querySelector('em')?.textContent, \
             links: [...m.querySelectorAll('a')].map(a => a.getAttribute('href')) }}"
        ))
        .await;
    assert_eq!(shape["h1"], json!("A heading"));
    assert_eq!(shape["items"], json!(2));
    assert_eq!(shape["code"], json!("fn main() { let x = \"<b>\"; }\n"));
    assert_eq!(shape["em"], json!("prose"));
    assert_eq!(shape["links"], json!(["https://example.com/docs", null]), "the javascript: link lost its href");
    // Nothing executable reached the page; the raw HTML shows as text.
    let bad = b
        .eval(
            "return [...document.querySelectorAll('main script, main img, main iframe, main [onerror], main [onmouseover], \
             main [style], main a[href^=\"javascript\" i], main b')].map(e => e.outerHTML)",
        )
        .await;
    assert_eq!(bad, json!([]));
    let text = b.eval(&format!("return {body}.innerText")).await;
    let text = text.as_str().unwrap();
    assert!(text.contains("<script>window.pwned = 1</script>") && text.contains("<img src=x onerror="), "{text}");
    assert_eq!(b.eval("return window.pwned === undefined").await, json!(true));
    b.screenshot("markdown").await;
    b.client.set_window_size(390, 844).await.unwrap();
    b.screenshot("markdown-phone").await;
    b.close().await;
}

/// Asks in the page and waits for the King's question there.
async fn ask_in_page(b: &Browser, question: &str) {
    b.client.find(Locator::Css("#ask-text")).await.unwrap().send_keys(question).await.unwrap();
    b.client.find(Locator::Css("#ask-send")).await.unwrap().click().await.unwrap();
    b.until(
        "the question asked",
        &format!(
            "return [...document.querySelectorAll('.msg.king .body')].some(m => m.textContent === {})",
            js_str(question)
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_reconnects_when_kd_web_comes_back_and_misses_nothing() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Still here.")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    kd_tests::send_one_round(&c, &t, "Before the drop.").await;
    kd_tests::settled(&kdd.db, &t).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::reconnect").await else { return };
    open_thread(&b, &origin, &t).await;
    shows_every_message_once(&b, &c, &t).await;
    // kd web goes away: the page says so, and keeps trying.
    let addr = origin.trim_start_matches("http://").to_string();
    c.web_stop().await.unwrap();
    b.until("the page told of the drop", "return document.querySelector('#conn').dataset.state === 'reconnecting'")
        .await;
    b.screenshot("disconnected").await;
    // Meanwhile the thread goes on.
    kd_tests::send_one_round(&c, &t, "While the page was away.").await;
    kd_tests::settled(&kdd.db, &t).await;
    c.web_serve(Some(addr), None, None, None, None).await.unwrap();
    b.until("the page connected again", "return document.querySelector('#conn').dataset.state === 'connected'").await;
    let seqs = shows_every_message_once(&b, &c, &t).await;
    assert_eq!(seqs.len(), 4, "two questions and their answers: {seqs:?}");
    // And it asks again.
    ask_in_page(&b, "After the drop?").await;
    kd_tests::settled(&kdd.db, &t).await;
    let seqs = shows_every_message_once(&b, &c, &t).await;
    assert_eq!(seqs.len(), 6, "{seqs:?}");
    b.screenshot("reconnected").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_kdd_restarts_the_page_pairs_again_and_catches_up() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Back again.")])]);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    kd_tests::send_one_round(&c, &t, "Before the restart.").await;
    kd_tests::settled(&kdd.db, &t).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::restart").await else { return };
    open_thread(&b, &origin, &t).await;
    shows_every_message_once(&b, &c, &t).await;
    drop(c);
    // kdd restarts on the same socket and database; it forgets sessions,
    // and the page says to pair again.
    kdd.restart();
    let c = kdd.client().await;
    let addr = origin.trim_start_matches("http://").to_string();
    let url = c.web_serve(Some(addr), None, None, None, None).await.unwrap().url;
    b.until("the page told to pair again", "return document.querySelector('#conn').dataset.state === 'unpaired'").await;
    b.screenshot("unpaired").await;
    kd_tests::send_one_round(&c, &t, "While kdd was away.").await;
    kd_tests::settled(&kdd.db, &t).await;
    // Paired again in another tab, the first comes back by itself.
    let first = b.client.window().await.unwrap();
    let tab = b.client.new_window(true).await.unwrap();
    b.client.switch_to_window(tab.handle).await.unwrap();
    b.client.goto(&url).await.unwrap();
    b.until("paired again", "return document.querySelector('#threads') !== null").await;
    b.client.close_window().await.unwrap();
    b.client.switch_to_window(first).await.unwrap();
    b.until("the page connected again", "return document.querySelector('#conn').dataset.state === 'connected'").await;
    let seqs = shows_every_message_once(&b, &c, &t).await;
    assert_eq!(seqs.len(), 4, "{seqs:?}");
    ask_in_page(&b, "After the restart?").await;
    kd_tests::settled(&kdd.db, &t).await;
    let seqs = shows_every_message_once(&b, &c, &t).await;
    assert_eq!(seqs.len(), 6, "{seqs:?}");
    b.screenshot("caught-up").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_on_a_phone_has_touch_sized_targets() {
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "A phone-sized answer with a [link](https://example.com).")]),
        ("codex", "codex", &[("FAKE_ERROR", "no quota")]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    kd_tests::send_one_round(&c, &t, "Does it fit?").await;
    kd_tests::settled(&kdd.db, &t).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::phone").await else { return };
    b.client.set_window_size(390, 844).await.unwrap();
    open_thread(&b, &origin, &t).await;
    b.until("the rendered answer", "return document.querySelector('.body.markdown a') !== null").await;
    let width = b.eval("return document.documentElement.scrollWidth <= window.innerWidth").await;
    assert_eq!(width, json!(true), "nothing wider than the phone");
    assert_eq!(small_targets(&b).await, json!([]), "touch targets of 44 px at least");
    b.eval("window.scrollTo(0, 0)").await;
    b.screenshot("thread").await;
    b.eval("window.scrollTo(0, document.body.scrollHeight)").await;
    b.screenshot("ask").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_streaming_across_a_drop_is_shown_once() {
    let hold = kd_tests::Hold::new();
    let full = "First piece, second piece, and the last piece.";
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_TEXT", full), ("FAKE_DELTAS", "3"), ("FAKE_HOLD", hold.var())],
    )]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::midstream").await else { return };
    open_thread(&b, &origin, &t).await;
    kd_tests::send_one_round(&c, &t, "Stream across the drop.").await;
    let streaming = "return document.querySelector('.msg.streaming .body')?.textContent";
    let before = b.until("the first piece", streaming).await;
    // kd web goes and comes back while the member is held mid-answer.
    let addr = origin.trim_start_matches("http://").to_string();
    c.web_stop().await.unwrap();
    b.until("the drop", "return document.querySelector('#conn').dataset.state === 'reconnecting'").await;
    c.web_serve(Some(addr), None, None, None, None).await.unwrap();
    b.until("the page connected again", "return document.querySelector('#conn').dataset.state === 'connected'").await;
    // The text so far comes again on the new subscription: shown once.
    let again = b.until("the streaming answer again", streaming).await;
    assert_eq!(again, before, "the text so far, once");
    assert_eq!(b.eval("return document.querySelectorAll('.msg.streaming').length").await, json!(1));
    b.screenshot("streaming-again").await;
    hold.release();
    kd_tests::settled(&kdd.db, &t).await;
    shows_every_message_once(&b, &c, &t).await;
    let answer = b.eval("return document.querySelector('.msg.agent .body').textContent.trim()").await;
    assert_eq!(answer, json!(full));
    b.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vote_asked_in_the_page_says_a_tie_is_a_tie() {
    // Each member ranks the other first: a tie nothing breaks.
    let ballot = |other: &str| {
        json!([["[Evaluation]", format!("Fine.\nFINAL RANKING:\n1. {{label:{other}}}")], ["[Synthesis]", "Both."]])
            .to_string()
    };
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Use a queue."), ("FAKE_RULES", &ballot("Use a lock."))]),
        ("codex", "codex", &[("FAKE_TEXT", "Use a lock."), ("FAKE_RULES", &ballot("Use a queue."))]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let Some((b, origin)) = paired(&kdd, "web::thread::vote").await else { return };
    open_thread(&b, &origin, &t).await;
    b.eval("const h = document.querySelector('#ask-how'); h.value = 'vote'; h.dispatchEvent(new Event('change'))")
        .await;
    b.client.find(Locator::Css("#ask-text")).await.unwrap().send_keys("Queue or lock?").await.unwrap();
    b.client.find(Locator::Css("#ask-send")).await.unwrap().click().await.unwrap();
    let said = b
        .until(
            "the vote done",
            "const s = document.querySelector('#view > .said').textContent; return s.startsWith('the vote:') && s",
        )
        .await;
    let said = said.as_str().unwrap();
    assert!(said.starts_with("the vote: tie between ") && said.ends_with(": left to you"), "{said}");
    assert!(said.contains("claude") && said.contains("codex") && !said.contains("wins"), "{said}");
    kd_tests::settled(&kdd.db, &t).await;
    // The tally is in the thread, shown once like every message.
    let messages = shows_every_message_once(&b, &c, &t).await;
    assert!(!messages.is_empty());
    let tally = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert!(tally.iter().any(|m| m.body.starts_with("Vote: tie between")), "{tally:?}");
    b.screenshot("vote").await;
    b.close().await;
}
