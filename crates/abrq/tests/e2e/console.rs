//! The web console in a real browser (headless Chromium over WebDriver):
//! the operator signs in with the admin token, sees the stream and its
//! destinations, pauses and resumes one, sees a broken destination's open
//! breaker and error, reads a dead letter's reason and records, replays it
//! (it is delivered), and discards another only after confirming that it is
//! data loss; the audit log on the page shows each action as the console's.
//! Every check of an effect goes through the API, not the page.
//!
//! `ABRQ_SCREENSHOTS=DIR` saves the main views as PNGs there.

use std::path::Path;

use crate::common::browser::Browser;
use crate::common::*;
use serde_json::Value;

const STREAM: &str = "events";
const TOKEN: &str = "console-test-token";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .admin_token(TOKEN)
        .stream(
            Stream::new(STREAM, Source::http())
                .destination(Destination::local("lake", abrq.p("out/lake")).format("jsonl"))
                .destination(
                    Destination::local("archive", abrq.p("out/archive"))
                        .format("jsonl")
                        .max_attempts(3)
                        .backoff("10ms", "20ms")
                        .failure_threshold(1000),
                )
                .destination(
                    Destination::local("mirror", abrq.p("out/mirror"))
                        .format("jsonl")
                        .max_attempts(1000)
                        .backoff("10ms", "50ms")
                        .failure_threshold(2)
                        .cooldown("1h"),
                ),
        )
        .to_string()
}

fn body(tag: &str) -> String {
    (0..10)
        .map(|i| format!("{{\"tag\":\"{tag}\",\"i\":{i}}}\n"))
        .collect()
}

/// A plain file where the base directory goes: every write fails.
fn break_dir(dir: &Path) {
    if dir.is_dir() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::write(dir, "not a directory\n").unwrap();
}

fn fix_dir(dir: &Path) {
    if dir.is_file() {
        std::fs::remove_file(dir).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
}

fn dest_row(name: &str) -> String {
    format!("tr[data-dest=\"{STREAM}/{name}\"]")
}

async fn pending(abrq: &Abrq, destination: &str) -> Vec<Value> {
    abrq.dead_letters(STREAM, destination)
        .await
        .into_iter()
        .filter(|d| d["state"] == "pending")
        .collect()
}

async fn audited(abrq: &Abrq, action: &str, destination: &str) -> bool {
    let log = abrq.get("/v1/audit?limit=100").await;
    log["entries"].as_array().unwrap().iter().any(|e| {
        e["action"] == action && e["destination"] == destination && e["actor"] == "console"
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn console_shows_state_and_drives_every_operator_action() {
    let mut abrq = Abrq::new();
    abrq.admin_token = Some(TOKEN.to_string());
    abrq.write_config(&config(&abrq));
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    let (archive, mirror) = (abrq.path("out/archive"), abrq.path("out/mirror"));
    break_dir(&archive);
    break_dir(&mirror);
    abrq.start().await;
    let page = Browser::start().await;

    // --- the page asks for the token, then lists the stream ---------------
    page.open(&abrq.base()).await;
    page.find("#login:not([hidden])").await;
    page.type_into("#token", "wrong").await;
    page.click("#login-form button[type=submit]").await;
    page.wait_text("#login-error", "the refusal", |t| t.contains("invalid"))
        .await;
    page.type_into("#token", TOKEN).await;
    page.click("#login-form button[type=submit]").await;
    page.find(&format!("section[data-stream=\"{STREAM}\"]"))
        .await;
    for d in ["lake", "archive", "mirror"] {
        page.find(&dest_row(d)).await;
    }
    page.wait_text(
        &format!("section[data-stream=\"{STREAM}\"] .facts"),
        "the source",
        |t| t.contains("http"),
    )
    .await;

    let ack = abrq.ingest(STREAM, &body("a")).await;
    assert_eq!(ack["records"], 10, "{ack}");

    // --- a broken destination: breaker open, with its error ---------------
    let mirror_row = dest_row("mirror");
    page.find(&format!("{mirror_row} [data-state=breaker_open]"))
        .await;
    page.wait_text(&format!("{mirror_row} [data-role=breaker]"), "trial", |t| {
        t.contains("trial in")
    })
    .await;
    let error = page
        .wait_text(
            &format!("{mirror_row} [data-role=last-error]"),
            "an error",
            |t| !t.is_empty(),
        )
        .await;
    let api_error = dest_of(&abrq.status(STREAM).await, "mirror")["last_error"].clone();
    assert!(
        api_error.as_str().is_some_and(|e| error.contains(e)),
        "page {error:?}, api {api_error}"
    );
    // mirror holds batch 1 back: a backlog of one, a lag that grows
    page.wait_text(&format!("{mirror_row} [data-role=backlog]"), "1", |t| {
        t == "1"
    })
    .await;
    page.wait_text(&format!("{mirror_row} [data-role=lag]"), "a lag", |t| {
        t.trim_end_matches('s')
            .parse::<f64>()
            .is_ok_and(|s| s >= 1.0)
    })
    .await;
    page.wait_text(
        &format!("{} [data-role=hwm]", dest_row("lake")),
        "seq 1",
        |t| t == "1",
    )
    .await;
    page.screenshot("console-streams").await;

    // --- breaker reset from the page: closed at once (it opens again) ------
    page.click(&format!("{mirror_row} button[data-action=reset-breaker]"))
        .await;
    abrq.wait_for("the reset in the audit log", async || {
        audited(&abrq, "breaker_reset", "mirror").await
    })
    .await;

    // --- pause and resume from the page -----------------------------------
    let lake_row = dest_row("lake");
    page.click(&format!("{lake_row} button[data-action=pause]"))
        .await;
    abrq.wait_status(STREAM, "lake paused", |st| {
        dest_of(st, "lake")["paused"] == true
    })
    .await;
    page.find(&format!("{lake_row} [data-state=paused]")).await;
    assert!(audited(&abrq, "pause", "lake").await);
    page.click(&format!("{lake_row} button[data-action=resume]"))
        .await;
    abrq.wait_status(STREAM, "lake resumed", |st| {
        dest_of(st, "lake")["paused"] == false
    })
    .await;

    // --- a dead letter: reason, records, replay ---------------------------
    abrq.wait_for("archive's dead letter", async || {
        pending(&abrq, "archive").await.len() == 1
    })
    .await;
    let archive_row = dest_row("archive");
    page.wait_text(
        &format!("{archive_row} [data-role=pending-dead-letters]"),
        "one pending",
        |t| t == "1",
    )
    .await;
    page.click(&format!("{archive_row} button[data-action=dead-letters]"))
        .await;
    let panel = format!("tr[data-dead-letters=\"{STREAM}/archive\"]");
    page.wait_text(&format!("{panel} [data-role=reason]"), "the reason", |t| {
        t == "retries_exhausted"
    })
    .await;
    page.click(&format!("{panel} button[data-action=preview]"))
        .await;
    let records = page
        .wait_text(&format!("{panel} pre[data-preview]"), "the records", |t| {
            t.contains("\"tag\":\"a\"")
        })
        .await;
    assert_eq!(records.matches("\"tag\":\"a\"").count(), 10, "{records}");
    page.screenshot("console-dead-letters").await;

    fix_dir(&archive);
    page.click(&format!("{panel} button[data-action=replay]"))
        .await;
    abrq.wait_for("the replay to deliver", async || {
        abrq.dead_letters(STREAM, "archive").await[0]["state"] == "replayed"
    })
    .await;
    let out = read_dest(&archive);
    assert_eq!(out.records().count(), 10);
    assert!(audited(&abrq, "replay", "archive").await);

    // --- discard: cancelled first, then confirmed --------------------------
    break_dir(&archive);
    abrq.ingest(STREAM, &body("b")).await;
    abrq.wait_for("a second dead letter", async || {
        pending(&abrq, "archive").await.len() == 1
    })
    .await;
    let id = pending(&abrq, "archive").await[0]["id"].clone();
    let row = format!("{panel} tr[data-dead-letter=\"{id}\"]");
    page.click(&format!("{row} button[data-action=discard]"))
        .await;
    let warning = page
        .wait_text("#confirm-text", "the warning", |t| t.contains("data loss"))
        .await;
    assert!(warning.contains("10 records"), "{warning}");
    page.screenshot("console-discard").await;
    page.click("#confirm-cancel").await;
    page.wait_text("#notice", "the cancel", |t| t.contains("cancelled"))
        .await;
    assert_eq!(pending(&abrq, "archive").await.len(), 1, "cancel discarded");
    page.click(&format!("{row} button[data-action=discard]"))
        .await;
    page.find("#confirm[open]").await;
    page.click("#confirm-ok").await;
    abrq.wait_for("the discard", async || {
        pending(&abrq, "archive").await.is_empty()
    })
    .await;
    page.wait_text(
        "#audit-rows tr[data-audit=discard]",
        "the discard in the audit log",
        |t| t.contains("console") && t.contains("archive"),
    )
    .await;
    assert!(audited(&abrq, "discard", "archive").await);

    // --- discard all (asks first), then replay all --------------------------
    for tag in ["c", "d"] {
        abrq.ingest(STREAM, &body(tag)).await;
    }
    abrq.wait_for("two pending dead letters", async || {
        pending(&abrq, "archive").await.len() == 2
    })
    .await;
    // the page may not have polled the second dead letter yet: its
    // warning then counts what it shows, so ask again until it has
    let mut warning = String::new();
    for _ in 0..20 {
        page.click(&format!("{panel} button[data-action=discard-all]"))
            .await;
        warning = page
            .wait_text("#confirm-text", "the warning", |t| t.contains("data loss"))
            .await;
        if warning.contains("20 records") {
            break;
        }
        page.click("#confirm-cancel").await;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(warning.contains("20 records"), "{warning}");
    page.click("#confirm-ok").await;
    abrq.wait_for("the discard of all", async || {
        pending(&abrq, "archive").await.is_empty()
    })
    .await;
    abrq.ingest(STREAM, &body("e")).await;
    abrq.wait_for("one more dead letter", async || {
        pending(&abrq, "archive").await.len() == 1
    })
    .await;
    fix_dir(&archive);
    page.click(&format!("{panel} button[data-action=replay-all]"))
        .await;
    abrq.wait_for("the replay of all", async || {
        let all = abrq.dead_letters(STREAM, "archive").await;
        all.iter().filter(|d| d["state"] == "replayed").count() == 2
    })
    .await;
    let tags: Vec<String> = read_dest(&archive)
        .records()
        .map(|r| r["tag"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tags.len(), 10, "{tags:?}");
    assert!(tags.iter().all(|t| t == "e"), "{tags:?}");
    break_dir(&archive);

    // --- disable asks first and says what it costs -------------------------
    page.click(&format!("{archive_row} button[data-action=disable]"))
        .await;
    page.wait_text("#confirm-text", "the GC warning", |t| {
        t.contains("GC may delete batches")
    })
    .await;
    page.click("#confirm-ok").await;
    abrq.wait_status(STREAM, "archive disabled", |st| {
        dest_of(st, "archive")["enabled"] == false
    })
    .await;
    page.click(&format!("{archive_row} button[data-action=enable]"))
        .await;
    abrq.wait_status(STREAM, "archive enabled", |st| {
        dest_of(st, "archive")["enabled"] == true
    })
    .await;
    assert!(audited(&abrq, "disable", "archive").await);
    assert!(audited(&abrq, "enable", "archive").await);

    // --- sign out: the data goes with the token ----------------------------
    page.click("#logout").await;
    page.find("#login:not([hidden])").await;
    assert!(!page.body_text().await.contains("archive"));
    page.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn console_files_refuse_framing_and_inline_script() {
    let mut abrq = Abrq::new();
    abrq.admin_token = Some(TOKEN.to_string());
    abrq.write_config(&config(&abrq));
    abrq.start().await;
    for path in ["/", "/console/app.js", "/console/app.css"] {
        let resp = abrq
            .http
            .get(format!("{}{path}", abrq.base()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path} without the token");
        let h = resp.headers();
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
    }
    // the data itself still needs the token
    let resp = abrq
        .http
        .get(format!("{}/v1/streams", abrq.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

/// The page updates in place: text an operator selected (an error to
/// copy) stays selected and a focused button keeps focus across polls,
/// while the numbers around them change.
#[tokio::test(flavor = "multi_thread")]
async fn console_updates_in_place_keeping_selection_and_focus() {
    let mut abrq = Abrq::new();
    abrq.admin_token = Some(TOKEN.to_string());
    abrq.write_config(&config(&abrq));
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    break_dir(&abrq.path("out/mirror"));
    abrq.start().await;
    let page = Browser::start().await;
    page.open(&abrq.base()).await;
    page.type_into("#token", TOKEN).await;
    page.click("#login-form button[type=submit]").await;
    abrq.ingest(STREAM, &body("a")).await;
    let mirror_row = dest_row("mirror");
    let error_css = format!("{mirror_row} [data-role=last-error]");
    let error = page
        .wait_text(&error_css, "the error", |t| !t.is_empty())
        .await;
    let lag_css = format!("{mirror_row} [data-role=lag]");
    page.wait_text(&lag_css, "a lag", |t| t != "0.0s").await;

    let select = r#"
        const e = document.querySelector(arguments[0]);
        const r = document.createRange();
        r.selectNodeContents(e);
        getSelection().removeAllRanges();
        getSelection().addRange(r);
        document.querySelector(arguments[1]).focus();
        return [getSelection().toString(), document.activeElement.dataset.action];
    "#;
    let button_css = format!("{} button[data-action=pause]", dest_row("lake"));
    let before = page
        .client
        .execute(
            select,
            vec![error_css.clone().into(), button_css.clone().into()],
        )
        .await
        .expect("select and focus");
    assert_eq!(before[0], error.as_str(), "the selection");
    assert_eq!(before[1], "pause", "the focus");
    let lag = page.find(&lag_css).await.text().await.unwrap();

    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let read = r#"
        const a = document.activeElement;
        return [getSelection().toString(),
                a.dataset.action || a.tagName,
                a === document.querySelector(arguments[0])];
    "#;
    let after = page
        .client
        .execute(read, vec![button_css.into()])
        .await
        .expect("read the selection and focus");
    let lag_now = page.find(&lag_css).await.text().await.unwrap();
    assert_ne!(lag_now, lag, "the page updated meanwhile (the lag grows)");
    assert_eq!(after[0], error.as_str(), "the selection survived the polls");
    assert_eq!(after[1], "pause", "the focus survived the polls");
    assert_eq!(after[2], true, "the focused button is the page's own");
    page.close().await;
}
