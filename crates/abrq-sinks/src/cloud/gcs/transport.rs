//! [`GcsTransport`]: objects in one GCS bucket through `gcloud-storage`.
//! Small objects go up in one media upload; larger ones in a resumable
//! session, chunk by chunk, each chunk a slice of the encoded object.

use std::fmt;
use std::sync::Arc;

use abrq_core::DeliveryError;
use async_trait::async_trait;
use bytes::Bytes;
use gcloud_storage::client::google_cloud_auth::credentials::CredentialsFile;
use gcloud_storage::client::{Client, ClientConfig};
use gcloud_storage::http::objects::delete::DeleteObjectRequest;
use gcloud_storage::http::objects::download::Range;
use gcloud_storage::http::objects::get::GetObjectRequest;
use gcloud_storage::http::objects::upload::{Media, UploadObjectRequest, UploadType};
use gcloud_storage::http::resumable_upload_client::{ChunkSize, UploadStatus};
use reqwest_middleware::{reqwest, ClientBuilder};
use tokio::sync::OnceCell;

use super::errors::{gcs_error, is_not_found, RetryAfterAnswers};
use crate::cloud::{CONNECT_TIMEOUT, PART_SIZE, REQUEST_TIMEOUT};
use crate::failure::Failure;
use crate::object::ObjectTransport;

#[derive(Clone)]
pub struct GcsTransport(Arc<Inner>);

struct Inner {
    bucket: String,
    endpoint: String,
    /// Service-account key JSON; None is anonymous.
    key: Option<String>,
    client: OnceCell<Client>,
}

impl fmt::Debug for GcsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcsTransport")
            .field("bucket", &self.0.bucket)
            .field("endpoint", &self.0.endpoint)
            .field("key", &self.0.key.as_ref().map(|_| "***"))
            .finish()
    }
}

impl GcsTransport {
    /// The bucket `s` names; no I/O.
    pub fn from_settings(s: &super::GcsSettings) -> Self {
        let key = s.key.as_ref().map(|k| k.expose().to_string());
        GcsTransport::new(&s.bucket, &s.endpoint, key)
    }

    /// `endpoint` is the JSON API's base URL, without `/storage/v1`.
    pub fn new(bucket: &str, endpoint: &str, key: Option<String>) -> Self {
        GcsTransport(Arc::new(Inner {
            bucket: bucket.to_string(),
            endpoint: endpoint.to_string(),
            key,
            client: OnceCell::new(),
        }))
    }

    /// Every key under `prefix`, sorted (for tests: the transport itself
    /// never lists).
    #[cfg(all(test, feature = "services"))]
    pub(crate) async fn list(&self, prefix: &str) -> Vec<String> {
        use gcloud_storage::http::objects::list::ListObjectsRequest;
        let req = ListObjectsRequest {
            bucket: self.0.bucket.clone(),
            prefix: Some(prefix.to_string()),
            ..Default::default()
        };
        let res = self
            .client()
            .await
            .unwrap()
            .list_objects(&req)
            .await
            .unwrap();
        let mut keys: Vec<String> = res
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|o| o.name)
            .collect();
        keys.sort();
        keys
    }

    async fn client(&self) -> Result<&Client, DeliveryError> {
        self.0.client.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<Client, DeliveryError> {
        crate::cloud::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| Failure::Misconfigured.error(e))?;
        let config = ClientConfig {
            http: Some(ClientBuilder::new(http).with(RetryAfterAnswers).build()),
            storage_endpoint: self.0.endpoint.clone(),
            ..ClientConfig::default()
        };
        let config = match &self.0.key {
            None => config.anonymous(),
            Some(json) => {
                let file = CredentialsFile::new_from_str(json)
                    .await
                    .map_err(|e| Failure::Unauthorized.error(e))?;
                config
                    .with_credentials(file)
                    .await
                    .map_err(|e| Failure::Unauthorized.error(e))?
            }
        };
        Ok(Client::new(config))
    }

    fn media(key: &str, len: usize) -> UploadType {
        UploadType::Simple(Media {
            name: key.to_string().into(),
            content_type: "application/octet-stream".into(),
            content_length: Some(len as u64),
        })
    }

    /// Chunk by chunk through a resumable session, resuming from whatever
    /// the server says it kept.
    async fn put_resumable(&self, key: &str, data: Bytes) -> Result<(), DeliveryError> {
        let req = UploadObjectRequest {
            bucket: self.0.bucket.clone(),
            ..Default::default()
        };
        let session = self
            .client()
            .await?
            .prepare_resumable_upload(&req, &Self::media(key, data.len()))
            .await
            .map_err(gcs_error)?;
        let total = data.len() as u64;
        let mut at = 0u64;
        while at < total {
            let end = (at + PART_SIZE as u64).min(total);
            let size = ChunkSize::new(at, end - 1, Some(total));
            let chunk = data.slice(at as usize..end as usize);
            match session
                .upload_multiple_chunk(chunk, &size)
                .await
                .map_err(gcs_error)?
            {
                UploadStatus::Ok(_) => return Ok(()),
                UploadStatus::ResumeIncomplete(kept) if kept.last_byte + 1 > at => {
                    at = kept.last_byte + 1;
                }
                UploadStatus::ResumeIncomplete(_) | UploadStatus::NotStarted => {
                    return Err(Failure::Protocol.error(format!(
                        "resumable upload of {key}: the server kept nothing past byte {at}"
                    )))
                }
            }
        }
        Err(Failure::Protocol.error(format!(
            "resumable upload of {key}: every byte sent but the object was not finished"
        )))
    }
}

#[async_trait]
impl ObjectTransport for GcsTransport {
    fn kind(&self) -> &'static str {
        "gcs"
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), DeliveryError> {
        if data.len() > PART_SIZE {
            return self.put_resumable(key, data).await;
        }
        let req = UploadObjectRequest {
            bucket: self.0.bucket.clone(),
            ..Default::default()
        };
        let media = Self::media(key, data.len());
        self.client()
            .await?
            .upload_object(&req, data, &media)
            .await
            .map_err(gcs_error)?;
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), DeliveryError> {
        let req = DeleteObjectRequest {
            bucket: self.0.bucket.clone(),
            object: key.to_string(),
            ..Default::default()
        };
        match self.client().await?.delete_object(&req).await {
            Err(e) if !is_not_found(&e) => Err(gcs_error(e)),
            _ => Ok(()),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes, DeliveryError> {
        let req = GetObjectRequest {
            bucket: self.0.bucket.clone(),
            object: key.to_string(),
            ..Default::default()
        };
        let data = self
            .client()
            .await?
            .download_object(&req, &Range::default())
            .await
            .map_err(gcs_error)?;
        Ok(Bytes::from(data))
    }
}
