//! S3: moto, from `scripts/services.sh`.

use anyhow::Context;

use crate::env::{var, Secret};
use crate::http;

/// Where the S3 service is and the keys to use with it.
#[derive(Clone, Debug)]
pub struct S3 {
    /// `ABRQ_TEST_S3_ENDPOINT`: path-style endpoint URL.
    pub endpoint: String,
    /// `ABRQ_TEST_S3_REGION`
    pub region: String,
    /// `ABRQ_TEST_S3_ACCESS_KEY_ID`
    pub access_key_id: String,
    /// `ABRQ_TEST_S3_SECRET_ACCESS_KEY`
    pub secret_access_key: Secret,
}

impl S3 {
    pub fn from_env() -> Self {
        // A test that reads this endpoint builds a client for it next.
        crate::install_crypto_provider();
        Self {
            endpoint: var("ABRQ_TEST_S3_ENDPOINT", "http://127.0.0.1:4566"),
            region: var("ABRQ_TEST_S3_REGION", "us-east-1"),
            access_key_id: var("ABRQ_TEST_S3_ACCESS_KEY_ID", "test"),
            secret_access_key: Secret::new(var("ABRQ_TEST_S3_SECRET_ACCESS_KEY", "test")),
        }
    }

    /// Creates bucket `name`. object_store cannot create buckets, and the
    /// emulator does not check signatures, so a plain PUT does it.
    pub async fn create_bucket(&self, name: &str) -> anyhow::Result<()> {
        let mut request = http::client().put(self.bucket_url(name));
        if self.region != "us-east-1" {
            // every region but the default one must be named in the body
            request = request.body(format!(
                "<CreateBucketConfiguration><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.region
            ));
        }
        let response = request
            .send()
            .await
            .with_context(|| http::unreachable("s3", &self.endpoint))?;
        http::ensure_success(&format!("creating bucket {name}"), response).await
    }

    /// Deletes bucket `name`, which must be empty.
    pub async fn delete_bucket(&self, name: &str) -> anyhow::Result<()> {
        let response = http::client()
            .delete(self.bucket_url(name))
            .send()
            .await
            .with_context(|| http::unreachable("s3", &self.endpoint))?;
        http::ensure_success(&format!("deleting bucket {name}"), response).await
    }

    fn bucket_url(&self, name: &str) -> String {
        format!("{}/{name}", self.endpoint.trim_end_matches('/'))
    }
}
