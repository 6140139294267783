//! GCS: fake-gcs-server, from `scripts/services.sh`.

use anyhow::Context;

use crate::env::var;
use crate::http;

/// Where the GCS service is. The emulator is anonymous: no credentials.
#[derive(Clone, Debug)]
pub struct Gcs {
    /// `ABRQ_TEST_GCS_ENDPOINT`: the JSON API's base URL (no `/storage/v1`).
    pub endpoint: String,
    /// `ABRQ_TEST_GCS_PROJECT`: the project new buckets are made in.
    pub project: String,
}

impl Gcs {
    pub fn from_env() -> Self {
        // A test that reads this endpoint builds a client for it next.
        crate::install_crypto_provider();
        Self {
            endpoint: var("ABRQ_TEST_GCS_ENDPOINT", "http://127.0.0.1:4443"),
            project: var("ABRQ_TEST_GCS_PROJECT", "test"),
        }
    }

    /// Creates bucket `name` through the JSON API (the emulator is
    /// anonymous, so a plain request does it).
    pub async fn create_bucket(&self, name: &str) -> anyhow::Result<()> {
        let response = http::client()
            .post(format!("{}/storage/v1/b", self.base()))
            .query(&[("project", self.project.as_str())])
            .header("content-type", "application/json")
            // names from `names` are lowercase letters, digits and dashes
            .body(format!(r#"{{"name":"{name}"}}"#))
            .send()
            .await
            .with_context(|| http::unreachable("gcs", &self.endpoint))?;
        http::ensure_success(&format!("creating bucket {name}"), response).await
    }

    fn base(&self) -> &str {
        self.endpoint.trim_end_matches('/')
    }
}
