//! Where records come from. Each source hands out [`Chunk`]s: records plus
//! the cursor just past them, so the engine can stage both in one
//! transaction and a restart resumes exactly after the last staged record.

pub mod chunk;
pub mod file;
pub mod ingest;

pub use chunk::{Chunk, Limits};
pub use file::FileSource;
pub use ingest::{parse_body, IngestError};
