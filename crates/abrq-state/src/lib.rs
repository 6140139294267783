//! The state store behind one trait, so the embedded SQLite backend and a
//! PostgreSQL backend (for scale-out) are interchangeable. `conformance`
//! (feature `conformance`, on for this crate's tests) holds the one test
//! suite every backend must pass.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod lease;
pub mod payload;
pub mod postgres;
pub mod sqlite;
pub mod store;
pub mod types;

pub use lease::{
    drain_resource, source_resource, Fence, LeaseRow, LeaseStore, NodeIdentity, NodeRow,
};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use store::{StateStore, StoreError, StoreResult};
pub use types::*;
