//! What a cloud store's answer means, for every cloud engine: an HTTP
//! status (with the store's error code and any `Retry-After`) onto the
//! shared [`Failure`] table (`crate::failure`), so S3, Azure and GCS can
//! never disagree about, say, a 403. Each client's own errors are reduced
//! in `store/errors.rs` (S3, Azure) and `gcs/errors.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use http::HeaderMap;

use crate::failure::{Failure, MAX_RETRY_AFTER};

/// Store error codes that mean "this object is too big", sent with 400 by
/// S3 and with 413 by Azure: no retry can make the same batch smaller.
const TOO_LARGE: [&str; 2] = ["EntityTooLarge", "RequestBodyTooLarge"];

/// An error status, by what it says about the batch. Only an object the
/// store can never accept is the batch's fault; credentials, permissions,
/// missing buckets and odd 4xx are the destination's.
pub fn status_failure(status: u16, code: Option<&str>, retry_after: Option<Duration>) -> Failure {
    if code.is_some_and(|c| TOO_LARGE.iter().any(|t| t.eq_ignore_ascii_case(c))) {
        return Failure::TooLarge { record: None };
    }
    match status {
        413 => Failure::TooLarge { record: None },
        401 | 403 => Failure::Unauthorized,
        404 => Failure::Missing,
        408 => Failure::Timeout,
        409 | 412 => Failure::Conflict,
        429 => Failure::Throttled { retry_after },
        500..=599 => Failure::Unavailable { retry_after },
        // a bucket name the store refuses, a method it does not allow:
        // the same for every batch
        400..=499 => Failure::Misconfigured,
        // not an error status at all
        0..=399 | 600..=u16::MAX => Failure::Protocol,
    }
}

/// An error answer kept typed, so classification never parses a message.
/// Made where the client would otherwise lose the status, code or
/// Retry-After (see `store/http.rs`, `gcs/errors.rs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server answered {status}{}{}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default(), retry_after.map(|d| format!(", retry after {}s", d.as_secs())).unwrap_or_default())]
pub struct ServerAnswer {
    pub status: u16,
    pub code: Option<String>,
    pub retry_after: Option<Duration>,
}

impl ServerAnswer {
    /// From a status, its headers and (for the code) its XML or JSON body.
    pub fn new(status: u16, headers: &HeaderMap, body: &[u8]) -> Self {
        ServerAnswer {
            status,
            code: error_code(body),
            retry_after: retry_after(headers, Utc::now()),
        }
    }

    pub fn failure(&self) -> Failure {
        status_failure(self.status, self.code.as_deref(), self.retry_after)
    }
}

/// `Retry-After` as delay-seconds or an HTTP date, capped.
pub fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    let v = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let after = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
            (at - now).to_std().unwrap_or(Duration::ZERO)
        }
    };
    Some(after.min(MAX_RETRY_AFTER))
}

/// The error code in an S3/Azure XML body (`<Code>X</Code>`) or a GCS JSON
/// body (`"reason": "x"`).
fn error_code(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    if let Some(start) = text.find("<Code>") {
        let rest = &text[start + "<Code>".len()..];
        return rest
            .find("</Code>")
            .map(|end| rest[..end].trim().to_string());
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.pointer("/error/errors/0/reason")
        .and_then(|r| r.as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Disposition, ReasonClass};
    use chrono::TimeZone;

    fn status(status: u16, code: Option<&str>) -> Disposition {
        status_failure(status, code, None).disposition()
    }

    #[test]
    fn only_too_large_is_the_batch_fault() {
        let rejected = Disposition::DeadLetter(ReasonClass::Rejected);
        assert_eq!(status(413, None), rejected);
        assert_eq!(status(400, Some("EntityTooLarge")), rejected);
        assert_eq!(status(413, Some("RequestBodyTooLarge")), rejected);
        for (s, c) in [
            (400, Some("InvalidBucketName")),
            (401, None),
            (403, Some("AccessDenied")),
            (404, Some("NoSuchBucket")),
            (408, None),
            (429, None),
            (500, Some("InternalError")),
            (503, Some("SlowDown")),
        ] {
            assert_eq!(status(s, c), Disposition::Retry, "{s} {c:?}");
        }
    }

    #[test]
    fn retry_after_seconds_date_and_cap() {
        let now = Utc.with_ymd_and_hms(2026, 7, 30, 8, 0, 0).unwrap();
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(http::header::RETRY_AFTER, v.parse().unwrap());
            m
        };
        assert_eq!(retry_after(&h("7"), now), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after(&h("Thu, 30 Jul 2026 08:00:30 GMT"), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(&h("Thu, 30 Jul 2026 07:00:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&h("86400"), now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&h("soon"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn codes_from_xml_and_json_bodies() {
        let xml = b"<?xml version=\"1.0\"?><Error><Code>EntityTooLarge</Code><Message>x</Message></Error>";
        assert_eq!(error_code(xml).as_deref(), Some("EntityTooLarge"));
        let json = br#"{"error":{"code":429,"message":"m","errors":[{"reason":"rateLimitExceeded","message":"m","domain":"global"}]}}"#;
        assert_eq!(error_code(json).as_deref(), Some("rateLimitExceeded"));
        assert_eq!(error_code(b"plain"), None);
        let e = ServerAnswer {
            status: 503,
            code: Some("SlowDown".into()),
            retry_after: Some(Duration::from_secs(3)),
        }
        .failure()
        .error("x");
        assert!(e.is_transient());
        assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
    }
}
