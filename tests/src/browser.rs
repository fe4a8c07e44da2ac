//! A real browser for the tests: headless Chromium driven through
//! WebDriver (`chromedriver`, Debian's `chromium-driver`) by fantoccini.
//! Without chromedriver a browser test is skipped with a line saying so —
//! unless `KD_REQUIRE_BROWSER` is set (CI sets it), when it fails.
//!
//! Every wait polls the page for a condition until [`DEADLINE`]; each test
//! saves screenshots of its views in `$KD_SCREENSHOTS` (else
//! `target/screenshots/`) and prints their paths.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::DEADLINE;

/// A headless Chromium session and the chromedriver serving it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    test: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn chromedriver() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("chromedriver")).find(|p| p.is_file())
}

/// Where screenshots go.
pub fn screenshots() -> PathBuf {
    match std::env::var_os("KD_SCREENSHOTS") {
        Some(d) => PathBuf::from(d),
        None => crate::bin_dir().parent().map(|t| t.join("screenshots")).unwrap_or_else(|| "screenshots".into()),
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium; `None` (the test is
    /// skipped, saying why) when chromedriver is not installed and
    /// `KD_REQUIRE_BROWSER` is not set.
    pub async fn start(test: &str) -> Option<Browser> {
        let Some(driver) = chromedriver() else {
            if std::env::var_os("KD_REQUIRE_BROWSER").is_some_and(|v| !v.is_empty()) {
                panic!(
                    "{test}: chromedriver is not on PATH and KD_REQUIRE_BROWSER is set (apt-get install chromium chromium-driver)"
                );
            }
            eprintln!("skipped {test}: chromedriver is not on PATH (apt-get install chromium chromium-driver)");
            return None;
        };
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < DEADLINE, "chromedriver did not listen on {port}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let profile = tempfile::tempdir().expect("a browser profile");
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1100,900".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        if let Ok(extra) = std::env::var("KD_BROWSER_ARGS") {
            args.extend(extra.split_whitespace().map(String::from));
        }
        let mut options = json!({"args": args});
        if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = "/usr/bin/chromium".into();
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session through chromedriver");
        Some(Browser { client, driver: child, _profile: profile, test: test.to_string() })
    }

    /// Runs `script` (a function body whose `return` is the value) until it
    /// returns something truthy; that value.
    pub async fn until(&self, what: &str, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let last = match self.client.execute(script, vec![]).await {
                Ok(v) if truthy(&v) => return v,
                Ok(v) => v,
                Err(e) => Value::String(e.to_string()),
            };
            if started.elapsed() > DEADLINE {
                self.screenshot("timed-out").await;
                panic!("{}: waited {DEADLINE:?} for {what}; last: {last}", self.test);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Runs `script` once and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.expect("script")
    }

    /// Saves a screenshot of the page as `<test>-<view>.png` and prints
    /// its path.
    pub async fn screenshot(&self, view: &str) -> PathBuf {
        let dir = screenshots();
        std::fs::create_dir_all(&dir).expect("the screenshots directory");
        let path = dir.join(format!("{}-{view}.png", self.test.replace("::", "-")));
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(&path, png).expect("write the screenshot");
        println!("screenshot: {}", path.display());
        path
    }

    /// Ends the session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}
