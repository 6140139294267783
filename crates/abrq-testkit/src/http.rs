//! The small HTTP client the testkit's own setup calls use.

use std::time::Duration;

/// A client that gives up quickly, so a stopped service fails a test at once
/// instead of hanging it.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(15))
        .build()
        .expect("the http client builds")
}

/// The context attached to an error reaching a service.
pub(crate) fn unreachable(service: &str, endpoint: &str) -> String {
    format!("{service} at {endpoint} is unreachable; start it with scripts/services.sh up")
}

/// Fails with the status and body of an unsuccessful response.
pub(crate) async fn ensure_success(what: &str, response: reqwest::Response) -> anyhow::Result<()> {
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    anyhow::bail!("{what} failed with {status}: {body}")
}
