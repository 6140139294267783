//! [`StoreTransport`]: an [`ObjectTransport`] over an `object_store` client,
//! the transport of the s3 and azure_blob engines (which differ only in how
//! the client is built: `cloud/s3.rs`, `cloud/azure.rs`).

pub mod errors;
pub mod http;

use std::sync::Arc;
use std::time::Duration;

use abrq_core::DeliveryError;
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload,
    RetryConfig, UploadPart,
};

use self::errors::store_error;
use crate::cloud::{CONNECT_TIMEOUT, PARALLEL_PARTS, PART_SIZE, REQUEST_TIMEOUT};
use crate::object::ObjectTransport;

/// Objects in one store (an S3 bucket, an Azure container).
#[derive(Clone)]
pub struct StoreTransport {
    kind: &'static str,
    store: Arc<dyn ObjectStore>,
}

/// The store's `Display` (bucket, account, container) rather than its
/// `Debug`, which prints an Azure account key's bytes.
impl std::fmt::Debug for StoreTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreTransport({}, {})", self.kind, self.store)
    }
}

impl StoreTransport {
    pub(crate) fn new(kind: &'static str, store: Arc<dyn ObjectStore>) -> Self {
        StoreTransport { kind, store }
    }

    /// Every key under `prefix`, sorted (for tests: the transport itself
    /// never lists).
    #[cfg(all(test, feature = "services"))]
    pub(crate) async fn list(&self, prefix: &str) -> Vec<String> {
        use futures::TryStreamExt;
        let prefix = Path::from(prefix);
        let mut keys: Vec<String> = self
            .store
            .list(Some(&prefix))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        keys.sort();
        keys
    }
}

pub(crate) fn client_options(allow_http: bool) -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(allow_http)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
}

/// The drain loop owns retries (jitter, breaker, Retry-After); the client
/// may only paper over a blip inside one attempt, quickly, so that an
/// outage surfaces as a failed attempt within seconds.
pub(crate) fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
    }
}

#[async_trait]
impl ObjectTransport for StoreTransport {
    fn kind(&self) -> &'static str {
        self.kind
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), DeliveryError> {
        let path = Path::from(key);
        if data.len() <= PART_SIZE {
            self.store
                .put(&path, data.into())
                .await
                .map_err(store_error)?;
            return Ok(());
        }
        put_multipart(self.store.as_ref(), &path, data).await
    }

    async fn delete(&self, key: &str) -> Result<(), DeliveryError> {
        match self.store.delete(&Path::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes, DeliveryError> {
        let got = self
            .store
            .get(&Path::from(key))
            .await
            .map_err(store_error)?;
        got.bytes().await.map_err(store_error)
    }
}

/// A multipart upload: parts are slices of `data` (no copies), up to
/// [`PARALLEL_PARTS`] in flight. Nothing is visible until `complete`, so a
/// reader never sees a part; an upload that fails or is dropped (attempt
/// timeout) is aborted so the store does not keep its parts.
async fn put_multipart(
    store: &dyn ObjectStore,
    path: &Path,
    data: Bytes,
) -> Result<(), DeliveryError> {
    let upload = store.put_multipart(path).await.map_err(store_error)?;
    let mut upload = AbortOnDrop(Some(upload));
    let mut inflight: FuturesUnordered<UploadPart> = FuturesUnordered::new();
    for at in (0..data.len()).step_by(PART_SIZE) {
        if inflight.len() >= PARALLEL_PARTS {
            if let Some(done) = inflight.next().await {
                done.map_err(store_error)?;
            }
        }
        let part = data.slice(at..(at + PART_SIZE).min(data.len()));
        // put_part numbers the part when called, so calls stay in order;
        // only the uploads run concurrently.
        inflight.push(upload.get().put_part(PutPayload::from(part)));
    }
    while let Some(done) = inflight.next().await {
        done.map_err(store_error)?;
    }
    upload.get().complete().await.map_err(store_error)?;
    upload.0 = None;
    Ok(())
}

/// Aborts the upload unless it was completed. Abort runs on its own task:
/// the attempt that owned the upload may have been cancelled.
struct AbortOnDrop(Option<Box<dyn MultipartUpload>>);

impl AbortOnDrop {
    fn get(&mut self) -> &mut Box<dyn MultipartUpload> {
        self.0
            .as_mut()
            .expect("the upload is taken only once complete")
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let (Some(mut upload), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(async move {
                // Best effort: an upload left behind costs storage until the
                // bucket's lifecycle rule removes it, never correctness.
                let _ = upload.abort().await;
            });
        }
    }
}
