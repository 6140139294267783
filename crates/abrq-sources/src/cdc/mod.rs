//! The shared change reader: both change sources (PostgreSQL logical
//! decoding, the MySQL/MariaDB binlog) are a [`Protocol`] that opens the
//! source and turns its replication stream into [`Step`]s; one
//! [`ChangeReader`] does the rest for both: the phases (starting, copying
//! the snapshot, streaming), transactions and the skip count of one that
//! spans batches, chunks with their table scopes and columns, the cursor,
//! a copy cut short going on as a backfill, lag, and deadlines.
//!
//! - `protocol.rs`: the contract a protocol keeps, and its steps;
//! - `reader.rs`: the reader;
//! - `builder.rs`: one chunk's items and its sizing rule;
//! - `cursor.rs`: the cursor both protocols keep (each in its own form);
//! - `backfill.rs`: backfills asked for (how a page joins the stream is
//!   each protocol's own);
//! - `copy_task.rs`: a table's snapshot copy read ahead by a task;
//! - `deadline.rs`: how long a source waits on its server.

pub mod backfill;
pub mod builder;
pub mod copy_task;
pub mod cursor;
pub mod deadline;
pub mod protocol;
pub mod reader;

pub use backfill::Backfills;
pub use cursor::{CopyAt, Cursor, Staged};
pub use protocol::{CopyPage, Ctx, Opening, Protocol, Step, Table, TxInfo, View};
pub use reader::ChangeReader;
