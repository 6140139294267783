//! Where records come from. Each source hands out [`Chunk`]s: records plus
//! the cursor just past them, so the engine can stage both in one
//! transaction and a restart resumes exactly after the last staged record.

pub mod chunk;
pub mod config;
pub mod file;
pub mod generate;
pub mod http;
pub mod ingest;
pub mod mysql;
pub mod postgres;
pub mod progress;

pub use chunk::{Chunk, Limits};
pub use config::validate;
pub use file::{FileSource, SourceError};
pub use generate::GenerateSource;
pub use ingest::{for_each_record, parse_body, IngestError};
pub use postgres::PgCursorSource;
pub use progress::Progress;

/// A source read in chunks on a blocking thread.
pub trait ReadChunk: Send + 'static {
    /// Reads up to `limits` of records after the cursor; `at_end` says the
    /// source has nothing more for now.
    fn read_chunk(&mut self, limits: Limits) -> Result<Chunk, SourceError>;
}
