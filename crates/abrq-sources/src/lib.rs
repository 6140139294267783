//! Where records come from. Every pulled source is a [`Source`]: it hands
//! out [`Chunk`]s, records plus the cursor just past them, so the engine
//! can stage both in one transaction and a restart resumes exactly after
//! the last staged record. [`open`] makes one from its config (one table
//! of every engine, `registry.rs`); its failures are typed
//! ([`SourceError`], [`Failure`]: `error.rs`), so the engine knows a
//! definite failure from a transient one.
//!
//! - `file/`, `generate.rs`: read on a blocking thread;
//! - `http.rs`, `ingest.rs`: the records of an ingest request;
//! - `postgres/`, `mysql/`: a table polled by a cursor column, or its
//!   changes (`cdc`), both change sources read by the shared change reader
//!   in `cdc/`.

pub mod cdc;
pub mod chunk;
pub mod config;
pub mod error;
pub mod file;
pub mod filter;
pub mod generate;
pub mod http;
pub mod ingest;
pub mod mysql;
pub mod per_table;
pub mod postgres;
pub mod progress;
mod registry;
pub mod source;

pub use chunk::{Chunk, Limits};
pub use config::validate;
pub use error::{Failure, SourceError};
pub use file::FileSource;
pub use generate::GenerateSource;
pub use ingest::{for_each_record, parse_body, IngestError};
pub use postgres::PgCursorSource;
pub use progress::Progress;
pub use registry::{backfills, check, open, probed};
pub use source::{BackfillAsk, Pace, ReadChunk, Source, SourceFactory, SourceSpec};
