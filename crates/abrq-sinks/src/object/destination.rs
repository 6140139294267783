//! [`ObjectDestination`]: the object-writing path as an abrq `Destination`.

use abrq_core::{Batch, CheckReport, DeliveryError, DeliveryReport, Destination};
use async_trait::async_trait;
use bytes::Bytes;

use super::encode::encode;
use super::manifest::Manifest;
use super::naming;
use super::{ObjectSettings, ObjectTransport};
use crate::failure::Failure;

/// Any object or file destination: the shared write path over one engine's
/// transport.
#[derive(Debug)]
pub struct ObjectDestination<T> {
    transport: T,
    settings: ObjectSettings,
}

impl<T: ObjectTransport> ObjectDestination<T> {
    pub fn new(transport: T, settings: ObjectSettings) -> Self {
        ObjectDestination {
            transport,
            settings,
        }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn settings(&self) -> &ObjectSettings {
        &self.settings
    }

    /// The key `batch` is (or will be) stored under.
    pub fn object_key(&self, batch: &Batch) -> Result<String, DeliveryError> {
        let s = &self.settings;
        naming::object_key(&s.prefix, s.date_partitioning, s.format, &batch.meta)
    }
}

#[async_trait]
impl<T: ObjectTransport + 'static> Destination for ObjectDestination<T> {
    fn kind(&self) -> &'static str {
        self.transport.kind()
    }

    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        let s = &self.settings;
        let key = self.object_key(batch)?;
        // Encoding runs on the calling task: a batch is bounded (4 MiB by
        // default) and moving it to a blocking thread would mean cloning it.
        let enc = encode(s.format, batch)?;
        let data = Bytes::from(enc.data);
        let manifest = s
            .manifest
            .then(|| Manifest::new(&key, &data, enc.rows, &batch.meta, s.format));
        let bytes = data.len() as u64;
        // The manifest is a promise that its object is complete, so it may
        // become visible only after the object. A failure retries the whole
        // batch, which rewrites the identical object first.
        match manifest {
            Some(m) => {
                let mkey = naming::manifest_key(&key);
                let m = Bytes::from(m.to_json());
                self.transport
                    .put_with_sidecar(&key, data, &mkey, m)
                    .await?;
            }
            None => self.transport.put(&key, data).await?,
        }
        Ok(DeliveryReport {
            bytes,
            ignored_truncates: enc.ignored_truncates,
            ignored_schemas: enc.ignored_schemas,
            ..DeliveryReport::default()
        })
    }

    /// Writes, reads back and deletes a dot-named probe object, which proves
    /// the same permissions a delivery needs.
    async fn check(&self) -> Result<CheckReport, DeliveryError> {
        let s = &self.settings;
        let token = format!("{:016x}", rand::random::<u64>());
        let key = naming::probe_key(&s.prefix, &token);
        let body = Bytes::from(format!("abrq probe {token}\n"));
        self.transport.put(&key, body.clone()).await?;
        // Delete even when the read fails, so a failed check leaves nothing.
        let read = self.transport.get(&key).await;
        let deleted = self.transport.delete(&key).await;
        if read? != body {
            return Err(
                Failure::Protocol.error(format!("probe object {key} read back different bytes"))
            );
        }
        deleted?;
        Ok(CheckReport {
            detail: format!(
                "{} destination {:?} of stream {:?}: wrote, read back and deleted {key}",
                self.transport.kind(),
                s.destination,
                s.stream
            ),
        })
    }
}
