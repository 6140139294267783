//! Classification through the real clients: each engine's transport sends
//! to a fake server that answers one way, and the error must say what the
//! drain loop should do. Plus each classifier's arms on synthetic errors.

use std::time::Duration;

use abrq_core::{DeliveryError, Disposition, ReasonClass};
use bytes::Bytes;

use super::config;
use super::fake_http::{refused_url, serve};
use crate::object::ObjectTransport;

const REJECTED: Disposition = Disposition::DeadLetter(ReasonClass::Rejected);

fn s3_at(url: &str) -> impl ObjectTransport {
    let fields = [
        ("host", url),
        ("database", "b"),
        ("username", "id"),
        ("password", "secret"),
    ];
    crate::cloud::s3::transport(&config("s3", &fields, "")).unwrap()
}

fn azure_at(url: &str) -> impl ObjectTransport {
    let url = format!("{url}/acct");
    let fields = [
        ("host", url.as_str()),
        ("database", "c"),
        ("username", "acct"),
        ("password", "a2V5"),
    ];
    crate::cloud::azure::transport(&config("azure_blob", &fields, "")).unwrap()
}

fn gcs_at(url: &str) -> impl ObjectTransport {
    let fields = [("host", url), ("database", "b")];
    crate::cloud::gcs::transport(&config("gcs", &fields, "")).unwrap()
}

async fn put_err(t: impl ObjectTransport) -> DeliveryError {
    t.put("p/part-0.jsonl", Bytes::from_static(b"{}\n"))
        .await
        .unwrap_err()
}

fn xml(code: &str) -> String {
    format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>")
}

fn json(code: u16, reason: &str) -> String {
    format!(
        r#"{{"error":{{"code":{code},"message":"m","errors":[{{"reason":"{reason}","message":"m","domain":"global"}}]}}}}"#
    )
}

#[tokio::test]
async fn too_large_is_a_rejected_dead_letter() {
    let s3 = serve("400 Bad Request", &[], &xml("EntityTooLarge")).await;
    let e = put_err(s3_at(&s3.url)).await;
    assert_eq!(e.disposition, REJECTED, "{}", e.describe());
    assert!(e.describe().contains("EntityTooLarge"), "{}", e.describe());

    let az = serve(
        "413 Request Entity Too Large",
        &[],
        &xml("RequestBodyTooLarge"),
    )
    .await;
    let e = put_err(azure_at(&az.url)).await;
    assert_eq!(e.disposition, REJECTED, "{}", e.describe());

    let gcs = serve(
        "413 Payload Too Large",
        &["Content-Type: application/json"],
        &json(413, "uploadTooLarge"),
    )
    .await;
    let e = put_err(gcs_at(&gcs.url)).await;
    assert_eq!(e.disposition, REJECTED, "{}", e.describe());
}

#[tokio::test]
async fn slow_down_with_retry_after_is_transient_and_keeps_the_hint() {
    let seven = Some(Duration::from_secs(7));
    let s3 = serve("503 Slow Down", &["Retry-After: 7"], &xml("SlowDown")).await;
    let e = put_err(s3_at(&s3.url)).await;
    assert_eq!((e.disposition, e.retry_after), (Disposition::Retry, seven));
    assert_eq!(
        s3.hits(),
        1,
        "the hint goes to the drain loop, not a client retry"
    );

    let az = serve("503 Server Busy", &["Retry-After: 7"], &xml("ServerBusy")).await;
    let e = put_err(azure_at(&az.url)).await;
    assert_eq!((e.disposition, e.retry_after), (Disposition::Retry, seven));

    let gcs = serve(
        "429 Too Many Requests",
        &["Retry-After: 7"],
        &json(429, "rateLimitExceeded"),
    )
    .await;
    let e = put_err(gcs_at(&gcs.url)).await;
    assert_eq!((e.disposition, e.retry_after), (Disposition::Retry, seven));
}

#[tokio::test]
async fn denied_and_server_errors_are_transient() {
    let s3 = serve("403 Forbidden", &[], &xml("AccessDenied")).await;
    let e = put_err(s3_at(&s3.url)).await;
    assert_eq!((e.disposition, e.retry_after), (Disposition::Retry, None));

    // no hint: the client's own quick retries, then a transient error
    let s3 = serve("500 Internal Server Error", &[], &xml("InternalError")).await;
    let e = put_err(s3_at(&s3.url)).await;
    assert!(e.is_transient());
    assert_eq!(s3.hits(), 3);

    let az = serve("403 Forbidden", &[], &xml("AuthenticationFailed")).await;
    assert!(put_err(azure_at(&az.url)).await.is_transient());

    let gcs = serve(
        "403 Forbidden",
        &["Content-Type: application/json"],
        &json(403, "forbidden"),
    )
    .await;
    assert!(put_err(gcs_at(&gcs.url)).await.is_transient());
    let gcs = serve("503 Service Unavailable", &[], "").await;
    assert!(put_err(gcs_at(&gcs.url)).await.is_transient());
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let (url, _held) = refused_url().await;
    assert!(put_err(s3_at(&url)).await.is_transient());
    assert!(put_err(azure_at(&url)).await.is_transient());
    assert!(put_err(gcs_at(&url)).await.is_transient());
}

#[test]
fn store_classifier_arms() {
    use object_store::client::{HttpError, HttpErrorKind};
    use object_store::Error;
    let generic = |kind| Error::Generic {
        store: "S3",
        source: Box::new(HttpError::new(kind, std::io::Error::other("x"))),
    };
    for kind in [
        HttpErrorKind::Connect,
        HttpErrorKind::Timeout,
        HttpErrorKind::Interrupted,
        HttpErrorKind::Request,
        HttpErrorKind::Decode,
        HttpErrorKind::Unknown,
    ] {
        let e = crate::cloud::store::errors::store_error(generic(kind));
        assert!(e.is_transient(), "{kind:?}");
    }
    let denied = Error::PermissionDenied {
        path: "p".into(),
        source: "no".into(),
    };
    assert!(crate::cloud::store::errors::store_error(denied).is_transient());
}

#[test]
fn gcs_classifier_arms() {
    use crate::cloud::answer::ServerAnswer;
    use gcloud_storage::http::error::ErrorResponse;
    use gcloud_storage::http::Error;
    let classify = crate::cloud::gcs::errors::gcs_error;
    let response = |code| {
        Error::Response(ErrorResponse {
            code,
            errors: vec![],
            message: "m".into(),
        })
    };
    assert_eq!(classify(response(413)).disposition, REJECTED);
    assert!(classify(response(401)).is_transient());
    assert!(classify(response(500)).is_transient());
    assert!(classify(Error::TokenSource("expired".into())).is_transient());
    let answer = ServerAnswer {
        status: 503,
        code: None,
        retry_after: Some(Duration::from_secs(2)),
    };
    let e = classify(Error::HttpMiddleware(answer.into()));
    assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
}

/// Secrets never show in `Debug` (logs, panics): not the S3 secret, not
/// the Azure key (object_store's own Debug prints its bytes), not a GCS
/// service-account key.
#[test]
fn secrets_are_hidden_in_debug() {
    let s3 = [
        ("database", "b"),
        ("username", "AKIDEXAMPLE"),
        ("password", "s3-secret-value"),
    ];
    let az = [
        ("database", "c"),
        ("username", "acct"),
        ("password", "c2VjcmV0LWF6dXJlLWtleQ=="),
    ];
    let key = r#"{"type":"service_account","private_key":"gcs-private-key","client_email":"a@b"}"#;
    let gcs = [("database", "b"), ("password", key)];
    let shown = [
        format!(
            "{:?}",
            crate::cloud::s3::transport(&config("s3", &s3, "")).unwrap()
        ),
        format!(
            "{:?}",
            crate::cloud::azure::transport(&config("azure_blob", &az, "")).unwrap()
        ),
        format!(
            "{:?}",
            crate::cloud::gcs::transport(&config("gcs", &gcs, "")).unwrap()
        ),
    ];
    for (text, secret) in shown
        .iter()
        .zip(["s3-secret-value", "c2VjcmV0", "gcs-private-key"])
    {
        assert!(!text.contains(secret), "{text}");
    }
    // what the Azure key decodes to, as object_store's Debug would print it
    assert!(!shown[1].contains("115, 101, 99"), "{}", shown[1]);
}
