//! The vocabulary every other abrq crate speaks: records and batches, the
//! idempotency key, the error classes a destination reports, and the pure
//! retry and circuit-breaker arithmetic. Nothing here does I/O.

pub mod batch;
pub mod breaker;
pub mod config;
pub mod destination;
pub mod error;
pub mod json;
pub mod lines;
pub mod record;
pub mod retry;

pub use batch::{idempotency_key, staging_nonce, Batch, BatchMeta};
pub use breaker::{Breaker, BreakerConfig, BreakerState, Permit, Transition};
pub use destination::{CheckReport, DeliveryReport, Destination};
pub use error::{DeliveryError, Disposition, ReasonClass};
pub use record::{
    key_columns, scoped, source_columns, Item, Op, Record, TableRef, MARKER_FIELD, RENAMED_FROM,
    SOURCE_COLUMN, TX_FIELD,
};
pub use retry::{backoff_ceiling, full_jitter, RetryPolicy};
