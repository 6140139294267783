//! Replies and silences the pyftpdlib servers never produce, from a
//! scripted server: each must end in the right disposition, and a server
//! that will not rename onto an existing name still gets its replay.

mod ftp_support;

use std::time::Duration;

use abrq_core::config::Secret;
use abrq_core::{Destination, Disposition, ReasonClass};
use abrq_sinks::ftp::{FtpSettings, FtpTransport};
use abrq_sinks::object::{ObjectDestination, ObjectTransport};
use ftp_support::fake::{Fake, Script};
use ftp_support::{batch, object_settings};

fn settings(port: u16) -> FtpSettings {
    FtpSettings {
        secure: false,
        host: "127.0.0.1".into(),
        port,
        username: "u".into(),
        password: Secret::new("p"),
        base_dir: "/base".into(),
        ca_file: None,
        connect_timeout: Duration::from_secs(1),
        op_timeout: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn a_server_refusing_to_rename_over_a_file_gets_delete_then_rename() {
    let fake = Fake::start(Script {
        refuse_overwrite: true,
        ..Script::default()
    })
    .await;
    let t = FtpTransport::new(settings(fake.port));
    t.put("d/obj", "one".into()).await.unwrap();
    t.put("d/obj", "two".into()).await.unwrap();
    assert_eq!(t.get("d/obj").await.unwrap(), "two");
    let log = fake.log();
    let i = log
        .iter()
        .position(|l| l == "DELE /base/d/obj")
        .expect("the old file deleted");
    assert!(log[i - 1].starts_with("RNTO /base/d/obj"), "{log:#?}");
    assert!(log[i + 2].starts_with("RNTO /base/d/obj"), "{log:#?}");
    assert_eq!(
        fake.state.lock().unwrap().files.len(),
        1,
        "no temp file left"
    );
    assert_eq!(fake.connections(), 1, "one session served all of it");
}

#[tokio::test]
async fn refusals_about_the_file_dead_letter_the_rest_retry() {
    for (reply, want) in [
        (
            "552 Exceeded storage allocation",
            Disposition::DeadLetter(ReasonClass::Rejected),
        ),
        (
            "553 File name not allowed",
            Disposition::DeadLetter(ReasonClass::Rejected),
        ),
        ("452 Insufficient storage space", Disposition::Retry),
        ("451 Local error in processing", Disposition::Retry),
        ("550 Permission denied", Disposition::Retry),
        ("421 Service not available", Disposition::Retry),
    ] {
        let fake = Fake::start(Script {
            stor_reply: Some(reply),
            ..Script::default()
        })
        .await;
        let dest =
            ObjectDestination::new(FtpTransport::new(settings(fake.port)), object_settings("p"));
        let e = dest.deliver(&batch(1, 3)).await.unwrap_err();
        assert_eq!(e.disposition, want, "{reply}: {}", e.describe());
        let d = e.describe();
        assert!(
            d.contains("cannot upload /base/p/dt=2026-07-30/.part-"),
            "{d}"
        );
        assert!(d.contains(reply), "{d}");
        // a refused upload's temp name is removed while the session lasts
        let cleaned = fake
            .log()
            .iter()
            .any(|l| l.starts_with("DELE /base/p/dt=2026-07-30/.part-"));
        assert_eq!(cleaned, !reply.starts_with("421"), "{reply}");
        // The object and its manifest upload at once, on two sessions. A
        // refusal leaves both usable for the next attempt; 421 closes them.
        let _ = dest.deliver(&batch(1, 3)).await;
        let sessions = if reply.starts_with("421") { 4 } else { 2 };
        assert_eq!(fake.connections(), sessions, "{reply}");
    }
}

#[tokio::test]
async fn a_silent_server_times_out_as_transient() {
    // silent before login: the connect timeout
    let fake = Fake::start(Script {
        hang_on: Some("USER"),
        ..Script::default()
    })
    .await;
    let e = FtpTransport::new(settings(fake.port))
        .put("k", "x".into())
        .await
        .unwrap_err();
    assert!(e.is_transient());
    assert!(
        e.describe().contains("cannot log in as u"),
        "{}",
        e.describe()
    );
    assert!(
        e.describe().contains("timed out after 1s"),
        "{}",
        e.describe()
    );

    // silent mid-upload: the operation timeout, and the session is dropped
    let fake = Fake::start(Script {
        hang_on: Some("STOR"),
        ..Script::default()
    })
    .await;
    let t = FtpTransport::new(settings(fake.port));
    let e = t.put("k", "x".into()).await.unwrap_err();
    assert!(e.is_transient());
    assert!(
        e.describe().contains("cannot upload /base/k"),
        "{}",
        e.describe()
    );
    assert!(e.describe().contains("timed out"), "{}", e.describe());
    assert_eq!(t.idle_sessions(), 0);
}
