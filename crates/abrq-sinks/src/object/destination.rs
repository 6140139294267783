//! [`ObjectDestination`]: the object-writing path as an abrq `Destination`.

use abrq_core::{Batch, CheckReport, DeliveryError, DeliveryReport, Destination};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Semaphore;

use super::manifest::Manifest;
use super::naming;
use super::shared::Writer;
use super::{ObjectSettings, ObjectTransport};
use crate::failure::Failure;

/// A batch encoded and named, not stored yet.
struct Prepared {
    key: String,
    data: Bytes,
    /// The manifest's key and body.
    manifest: Option<(String, Bytes)>,
    report: DeliveryReport,
}

/// The key `batch` is stored under with settings `s`.
fn key_of(s: &ObjectSettings, batch: &Batch) -> Result<String, DeliveryError> {
    naming::object_key(&s.prefix, s.date_partitioning, s.format, &batch.meta)
}

/// Encodes `batch` into its object (and manifest), ready to store.
fn prepare(s: &ObjectSettings, w: &Writer, batch: &Batch) -> Result<Prepared, DeliveryError> {
    let key = key_of(s, batch)?;
    let enc = w.encode(batch)?;
    let data = enc.data;
    let manifest = s.manifest.then(|| {
        let m = Manifest::new(&key, &data, enc.rows, &batch.meta, s.format);
        (naming::manifest_key(&key), Bytes::from(m.to_json()))
    });
    let report = DeliveryReport {
        bytes: data.len() as u64,
        ignored_truncates: enc.ignored_truncates,
        ignored_schemas: enc.ignored_schemas,
        ..DeliveryReport::default()
    };
    Ok(Prepared {
        key,
        data,
        manifest,
        report,
    })
}

/// Any object or file destination: the shared write path over one engine's
/// transport.
#[derive(Debug)]
pub struct ObjectDestination<T> {
    transport: T,
    settings: ObjectSettings,
    /// Shares each batch's encoding with this process's other
    /// destinations of the stream in the same format.
    writer: Writer,
}

impl<T: ObjectTransport> ObjectDestination<T> {
    pub fn new(transport: T, settings: ObjectSettings) -> Self {
        let writer = Writer::join(&settings.stream, settings.format);
        ObjectDestination {
            transport,
            settings,
            writer,
        }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn settings(&self) -> &ObjectSettings {
        &self.settings
    }

    /// Stores one prepared object. The manifest is a promise that its
    /// object is complete, so it may become visible only after the object.
    /// A failure retries the whole batch, which rewrites the identical
    /// object first.
    async fn store(&self, object: Prepared) -> Result<DeliveryReport, DeliveryError> {
        let Prepared {
            key,
            data,
            manifest,
            report,
        } = object;
        match manifest {
            Some((mkey, m)) => {
                self.transport
                    .put_with_sidecar(&key, data, &mkey, m)
                    .await?
            }
            None => self.transport.put(&key, data).await?,
        }
        Ok(report)
    }

    /// The key `batch` is (or will be) stored under.
    pub fn object_key(&self, batch: &Batch) -> Result<String, DeliveryError> {
        key_of(&self.settings, batch)
    }
}

#[async_trait]
impl<T: ObjectTransport + 'static> Destination for ObjectDestination<T> {
    fn kind(&self) -> &'static str {
        self.transport.kind()
    }

    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        // Encoding runs on the calling task: a batch is bounded (4 MiB by
        // default) and moving it to a blocking thread would mean cloning it.
        let object = prepare(&self.settings, &self.writer, batch)?;
        self.store(object).await
    }

    /// JSON lines are written from the spool's lines as they are.
    fn reads_lines(&self) -> bool {
        super::encode::reads_lines(self.settings.format)
    }

    fn group_limit(&self) -> usize {
        self.transport.max_in_flight()
    }

    /// Every object of the group uploaded at once, each as soon as it is
    /// encoded, the encoding spread over the machine's cores: behind a 20 ms
    /// round trip, K uploads cost about one. Objects of a group may appear
    /// in any order among themselves (each before its manifest, as always);
    /// the high-water mark moves only when all are stored. A failure fails
    /// the group and the engine goes again one batch at a time, rewriting
    /// the same names.
    async fn deliver_group(&self, batches: &[Batch]) -> Result<Vec<DeliveryReport>, DeliveryError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // one encoding per core at a time, taken in batch order, so the
        // first objects are ready (and uploading) while the last encode
        let cores = Arc::new(Semaphore::new(cores));
        let each = batches.iter().map(|batch| {
            let cores = cores.clone();
            async move {
                let object = {
                    let _core = cores.acquire_owned().await.expect("never closed");
                    let (settings, batch) = (self.settings.clone(), batch.clone());
                    let writer = self.writer.clone();
                    tokio::task::spawn_blocking(move || prepare(&settings, &writer, &batch))
                        .await
                        .expect("encoding does not panic")?
                };
                self.store(object).await
            }
        });
        futures::future::try_join_all(each).await
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
