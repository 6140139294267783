//! A real browser for the console tests: Debian's Chromium, headless,
//! driven over WebDriver by its own chromedriver (both installed by
//! `scripts/services.sh up`). Each test gets its own chromedriver process,
//! killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use super::free_port;

/// How long a page gets to show what a step expects: it polls the API
/// every two seconds.
const PAGE: Duration = Duration::from_secs(30);

pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn program(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

impl Browser {
    pub async fn start() -> Browser {
        let port = free_port();
        let driver_bin = program("ABRQ_TEST_CHROMEDRIVER", "chromedriver");
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("start {driver_bin}: {e} (scripts/services.sh up installs chromium-driver)")
            });
        let chrome = program("ABRQ_TEST_CHROMIUM", "/usr/bin/chromium");
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chrome,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            }
        });
        let caps = caps.as_object().expect("an object").clone();
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let builder =
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps.clone())
                    .connect(&url)
                    .await;
            match builder {
                Ok(c) => break c,
                Err(e) if started.elapsed() < Duration::from_secs(30) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("connect to chromedriver at {url}: {e}"),
            }
        };
        Browser { client, driver }
    }

    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("open the page");
    }

    /// The first element matching `css`, once the page shows it.
    pub async fn find(&self, css: &str) -> Element {
        let started = Instant::now();
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                return e;
            }
            assert!(
                started.elapsed() < PAGE,
                "the page never showed {css}; it shows:\n{}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the text of the element matching `css` satisfies `f`.
    pub async fn wait_text(&self, css: &str, what: &str, f: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Ok(e) = self.client.find(Locator::Css(css)).await {
                if let Ok(t) = e.text().await {
                    if f(&t) {
                        return t;
                    }
                }
            }
            assert!(
                started.elapsed() < PAGE,
                "{css} never showed {what}; the page shows:\n{}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the element matching `css`. The page re-renders every poll,
    /// so an element found just before a render can go stale: find it
    /// again and retry.
    pub async fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            let clicked = match self.client.find(Locator::Css(css)).await {
                Ok(e) => e.click().await.is_ok(),
                Err(_) => false,
            };
            if clicked {
                return;
            }
            assert!(
                started.elapsed() < PAGE,
                "cannot click {css}; the page shows:\n{}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        self.find(css)
            .await
            .send_keys(text)
            .await
            .expect("type into the field");
    }

    pub async fn body_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(b) => b.text().await.unwrap_or_default(),
            Err(e) => format!("(no body: {e})"),
        }
    }

    /// A PNG of the whole window into `$ABRQ_SCREENSHOTS/<name>.png` when
    /// that variable names a directory (how `docs/console-*.png` are made).
    pub async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("ABRQ_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(format!("{dir}/{name}.png"), png).expect("write the screenshot");
    }

    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}
