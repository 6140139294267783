//! Azure Blob: Azurite, from `scripts/services.sh`.

use anyhow::Context;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::{Method, Url};
use sha2::Sha256;

use crate::env::{var, Secret};
use crate::http;

/// Azurite's fixed development account and Microsoft's published key for it.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const API_VERSION: &str = "2021-08-06";

/// Where the Azure Blob service is and the account to use with it.
#[derive(Clone, Debug)]
pub struct Azure {
    /// `ABRQ_TEST_AZURE_ENDPOINT`: the account's blob endpoint; for Azurite
    /// the account name is the first path segment.
    pub endpoint: String,
    /// `ABRQ_TEST_AZURE_ACCOUNT`
    pub account: String,
    /// `ABRQ_TEST_AZURE_KEY`: the account key, base64.
    pub key: Secret,
}

impl Azure {
    pub fn from_env() -> Self {
        // A test that reads this endpoint builds a client for it next.
        crate::install_crypto_provider();
        let account = var("ABRQ_TEST_AZURE_ACCOUNT", DEV_ACCOUNT);
        Self {
            endpoint: var(
                "ABRQ_TEST_AZURE_ENDPOINT",
                &format!("http://127.0.0.1:10000/{account}"),
            ),
            key: Secret::new(var("ABRQ_TEST_AZURE_KEY", DEV_KEY)),
            account,
        }
    }

    /// Creates container `name`. object_store cannot, so this signs the one
    /// request itself (Shared Key).
    pub async fn create_container(&self, name: &str) -> anyhow::Result<()> {
        self.container_request(Method::PUT, name).await
    }

    /// Deletes container `name` and everything in it.
    pub async fn delete_container(&self, name: &str) -> anyhow::Result<()> {
        self.container_request(Method::DELETE, name).await
    }

    async fn container_request(&self, method: Method, name: &str) -> anyhow::Result<()> {
        let url = Url::parse(&format!(
            "{}/{name}?restype=container",
            self.endpoint.trim_end_matches('/')
        ))
        .with_context(|| format!("bad azure endpoint {}", self.endpoint))?;
        let date = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let signature = self.sign(&method, &url, &date)?;
        let response = http::client()
            .request(method.clone(), url)
            .header("x-ms-date", &date)
            .header("x-ms-version", API_VERSION)
            .header("content-length", "0")
            .header(
                "authorization",
                format!("SharedKey {}:{signature}", self.account),
            )
            .send()
            .await
            .with_context(|| http::unreachable("azure blob", &self.endpoint))?;
        http::ensure_success(&format!("{method} container {name}"), response).await
    }

    /// The Shared Key signature of a bodiless container request: every
    /// standard header empty, then the x-ms headers and the resource.
    fn sign(&self, method: &Method, url: &Url, date: &str) -> anyhow::Result<String> {
        let string_to_sign = format!(
            "{method}\n\n\n\n\n\n\n\n\n\n\n\n\
             x-ms-date:{date}\nx-ms-version:{API_VERSION}\n\
             /{}{}\nrestype:container",
            self.account,
            url.path()
        );
        let key = BASE64
            .decode(self.key.expose())
            .context("ABRQ_TEST_AZURE_KEY is not base64")?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).context("bad azure key")?;
        mac.update(string_to_sign.as_bytes());
        Ok(BASE64.encode(mac.finalize().into_bytes()))
    }
}
