//! The contract every destination engine implements.

use async_trait::async_trait;
use serde::Serialize;

use crate::batch::Batch;
use crate::error::DeliveryError;

/// What a successful delivery wrote and what it chose not to write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeliveryReport {
    /// Bytes as stored at the destination.
    pub bytes: u64,
    /// Truncate and schema instructions the engine does not apply.
    pub ignored_truncates: u64,
    pub ignored_schemas: u64,
    /// Values and rows dropped by a schema drift policy.
    pub dropped_values: u64,
    pub dropped_rows: u64,
}

/// What `abrq check` learned about a destination.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub detail: String,
}

#[async_trait]
pub trait Destination: Send + Sync {
    /// The engine name as written in config (`local`, `s3`, ...).
    fn kind(&self) -> &'static str;

    /// Delivers the whole batch durably, or fails. Delivering the same batch
    /// twice must not duplicate it where the destination can prevent that
    /// (same object name, ledger row), and must be harmless otherwise.
    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError>;

    /// Takes spooled batches as their lines (`Batch::lines`), not decoded:
    /// the engine then decodes nothing, and the destination checks each
    /// line as it writes it (one it cannot read is an `encoding` failure).
    fn reads_lines(&self) -> bool {
        false
    }

    /// How many contiguous batches one attempt may carry through
    /// [`Destination::deliver_group`]; 1, the default, is one batch per
    /// attempt.
    fn group_limit(&self) -> usize {
        1
    }

    /// Delivers contiguous batches as one unit: all of them durably, each
    /// exactly as [`Destination::deliver`] would (one report per batch,
    /// a batch delivered before skipped or harmlessly rewritten), or an
    /// error; batches a failed group wrote are delivered again, one at a
    /// time, under the same names and keys. Called with at most
    /// [`Destination::group_limit`] batches; an engine that groups must
    /// override it (this default is one batch after the other).
    async fn deliver_group(&self, batches: &[Batch]) -> Result<Vec<DeliveryReport>, DeliveryError> {
        deliver_each(self, batches).await
    }

    /// Proves the destination is reachable and writable, without data.
    async fn check(&self) -> Result<CheckReport, DeliveryError>;
}

/// Delivers `batches` one after the other, stopping at the first failure:
/// a group for an engine that cannot take one in a single unit.
pub async fn deliver_each<D: Destination + ?Sized>(
    dest: &D,
    batches: &[Batch],
) -> Result<Vec<DeliveryReport>, DeliveryError> {
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        out.push(dest.deliver(b).await?);
    }
    Ok(out)
}
