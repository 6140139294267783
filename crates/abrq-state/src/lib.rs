//! The state store behind a few traits (`store`: a read and a write half
//! of each part), so the embedded SQLite backend and a PostgreSQL backend
//! (for scale-out) are interchangeable. `conformance` (feature
//! `conformance`, on for this crate's tests) holds the one test
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
pub use store::{
    AuditRead, AuditWrite, DeadLettersRead, DeadLettersWrite, MarksRead, MarksWrite, SpoolRead,
    SpoolWrite, StateRead, StateStore, StateWrite, StoreError, StoreResult,
};
pub use types::*;

/// Every store trait, for code that calls the store's methods on a
/// concrete backend (`use abrq_state::prelude::*`).
pub mod prelude {
    pub use crate::lease::LeaseStore;
    pub use crate::store::{
        AuditRead, AuditWrite, DeadLettersRead, DeadLettersWrite, MarksRead, MarksWrite, SpoolRead,
        SpoolWrite, StateRead, StateStore, StateWrite,
    };
}
