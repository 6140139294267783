//! The only part of an object destination that differs per engine.

use abrq_core::DeliveryError;
use async_trait::async_trait;
use bytes::Bytes;

/// Stores whole objects under `/`-separated keys relative to the
/// destination's root (directory, bucket, container).
///
/// Each method classifies its own failures into a [`DeliveryError`], since
/// only the engine knows which of its errors are transient.
#[async_trait]
pub trait ObjectTransport: Send + Sync {
    /// The engine name as written in config (`local`, `s3`, ...).
    fn kind(&self) -> &'static str;

    /// Objects one attempt may upload at once (see the destination's
    /// `deliver_group`): enough to hide a cloud region's round trip.
    fn max_in_flight(&self) -> usize {
        16
    }

    /// Stores `data` under `key`, replacing any object already there. The
    /// object is visible only once complete: a reader sees the old object,
    /// the new one, or none, never a part.
    async fn put(&self, key: &str, data: Bytes) -> Result<(), DeliveryError>;

    /// Stores `data` under `key` and then `sidecar` under `sidecar_key`
    /// (the manifest), such that the sidecar is never visible before the
    /// object is complete. Engines that can overlap the two uploads
    /// without breaking that order override this.
    async fn put_with_sidecar(
        &self,
        key: &str,
        data: Bytes,
        sidecar_key: &str,
        sidecar: Bytes,
    ) -> Result<(), DeliveryError> {
        self.put(key, data).await?;
        self.put(sidecar_key, sidecar).await
    }

    /// Removes `key`; removing a missing key succeeds.
    async fn delete(&self, key: &str) -> Result<(), DeliveryError>;

    /// Reads `key` back whole (for `check` and tests, not the hot path).
    async fn get(&self, key: &str) -> Result<Bytes, DeliveryError>;
}
