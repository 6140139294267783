//! What a change protocol (pgoutput, the binlog) gives the shared reader:
//! a way to open the source (a snapshot to copy first, or the stream from
//! a position), pages of that copy, and the stream as [`Step`]s.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use abrq_core::{Record, TableRef};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::backfill::Backfills;
use super::cursor::{CopyAt, Cursor};
use crate::chunk::{Chunk, Limits};
use crate::error::SourceError;

/// A captured table as the changes after this point have it: its name
/// and the schema instruction that declares its columns. A new shape is a
/// new `Arc`, so the chunk builder declares it again before its next
/// change.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub table: TableRef,
    pub declared: Map<String, Value>,
}

/// What a transaction's first event says of it, for `_abrq_tx`.
#[derive(Debug, Clone, PartialEq)]
pub struct TxInfo {
    /// The server's id of it: PostgreSQL's xid, MariaDB's GTID, or for a
    /// server without GTIDs the binlog place where it begins.
    pub id: String,
    /// PostgreSQL: its commit LSN; the binlog: `file:pos` where it begins.
    pub position: String,
    /// Its commit time (the binlog: its first event's time, in seconds).
    pub time: Option<SystemTime>,
}

/// One thing read from the change stream.
#[derive(Debug)]
pub enum Step<A> {
    /// A source transaction begins.
    Begin(TxInfo),
    /// A row changed.
    Change(Arc<Table>, Record),
    /// The tables were emptied (one change, however many tables).
    Truncate(Vec<Arc<Table>>),
    /// The table's columns changed outside a row (DDL): declared at once
    /// (one change).
    Declare(Arc<Table>),
    /// A source transaction ends; `at` is where the stream stands after it
    /// (None for an event that carries no position), `time` its commit.
    Commit {
        at: Option<A>,
        time: Option<SystemTime>,
    },
    /// The server has sent everything up to `at` and nothing of it is
    /// captured (a keepalive).
    Idle(A),
    /// A backfill page joins the stream here: its items bring their own
    /// table scope and columns.
    Page(Chunk),
    /// Read, with nothing to stage (a file rotation, a table description).
    Nothing,
}

/// What opening the source found.
pub enum Opening<P: Protocol> {
    /// Copy `tables` in a snapshot first; the stream then starts at `at`,
    /// where the snapshot was taken.
    Copy {
        copy: P::Copy,
        at: P::At,
        tables: Vec<String>,
    },
    /// Stream from `at`.
    Stream {
        session: P::Session,
        at: P::At,
        /// The captured tables (a copy cut short goes on over them as a
        /// backfill).
        tables: Vec<String>,
        /// A first start: stage the starting position before anything is
        /// read, so a crash before the first batch resumes there.
        announce: bool,
        /// A copy was wanted but its snapshot is gone before its first
        /// page was staged: every table is read as a backfill.
        recopy: bool,
        /// Tables whose changes were not captured for a while (added to
        /// the capture since the stream began): read as a backfill.
        backfill: Vec<String>,
    },
}

/// One page of the copy (where the copy stands after it is in the
/// `CopyAt` the protocol was handed).
pub struct CopyPage {
    /// The rows, after their table scope and columns.
    pub chunk: Chunk,
    /// The table has no more rows.
    pub done: bool,
}

/// What a protocol may read and change of the reader's state while it
/// steps: whether a source transaction is open (a backfill page only
/// joins between transactions), the cursor (its backfill), and the
/// backfills asked for.
pub struct Ctx<'a, A> {
    /// How long `next` waits for the server.
    pub wait: Duration,
    pub in_txn: bool,
    pub cursor: &'a mut Cursor<A>,
    pub backfills: &'a mut Backfills,
}

/// What status shows of a change stream, for the protocol to render.
pub struct View<'a, A> {
    pub cursor: &'a Cursor<A>,
    /// A position was read from the server or the store (not a first
    /// start still opening).
    pub started: bool,
    pub confirmed: Option<&'a A>,
    /// `{"state": "copying" | "done", "rows", ...}`
    pub snapshot: Value,
    /// `{"state": "running" | "idle", ...}`
    pub backfill: Value,
}

/// A change protocol: one translator from a server's replication stream
/// to [`Step`]s.
pub trait Protocol: Send + Sized + 'static {
    /// Where the stream stands in the server's log.
    type At: Clone + PartialEq + PartialOrd + Send + Sync + std::fmt::Debug + 'static;
    /// The snapshot copy while it runs.
    type Copy: Send;
    /// The replication session while it streams.
    type Session: Send;
    /// The cursor as the store keeps it (JSON), in the protocol's own form.
    type Stored: Serialize + DeserializeOwned + From<Cursor<Self::At>> + Into<Cursor<Self::At>>;

    fn describe(&self) -> String;

    /// Connects, checks the prerequisites and says where reading starts
    /// (`cursor` None: the stream never staged anything).
    fn open(
        &mut self,
        cursor: Option<&Cursor<Self::At>>,
    ) -> impl Future<Output = Result<Opening<Self>, SourceError>> + Send;

    /// The next page of the copy, at `at`, which it moves past the page.
    fn copy_page(
        &mut self,
        copy: &mut Self::Copy,
        at: &mut CopyAt,
        limits: Limits,
    ) -> impl Future<Output = Result<CopyPage, SourceError>> + Send;

    /// The stream after the copy, from `cursor`, and where it stands (a
    /// protocol may learn more of the position, such as a GTID).
    fn stream_after_copy(
        &mut self,
        copy: Self::Copy,
        cursor: &Cursor<Self::At>,
    ) -> impl Future<Output = Result<(Self::Session, Self::At), SourceError>> + Send;

    /// At the start of each read: a backfill takes up its next page.
    fn prepare(
        &mut self,
        session: &mut Self::Session,
        ctx: Ctx<'_, Self::At>,
    ) -> impl Future<Output = Result<(), SourceError>> + Send;

    /// The next step, or None when nothing arrives within `ctx.wait`.
    fn next(
        &mut self,
        session: &mut Self::Session,
        ctx: Ctx<'_, Self::At>,
    ) -> impl Future<Output = Result<Option<Step<Self::At>>, SourceError>> + Send;

    /// Everything before `at` is staged: the server may forget it.
    fn confirm(&mut self, session: &mut Self::Session, at: &Self::At);

    /// The longest the server stays silent on a healthy session (it sends
    /// heartbeats at least this often); None when it promises none.
    fn keepalive(&self) -> Option<Duration>;

    /// Asks the server, another way than the session, whether the session
    /// still streams (for a server that sends no heartbeat): called after
    /// `deadline::PROBE` of silence, within `deadline::CONNECT`.
    fn probe(
        &mut self,
        _session: &mut Self::Session,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        async { Ok(()) }
    }

    /// Whether the session must open again because what it captures
    /// changed (a table created, or dropped and created again): called
    /// every `deadline::AUDIT` between transactions, within
    /// `deadline::CONNECT`.
    fn audit(&mut self) -> impl Future<Output = Result<bool, SourceError>> + Send {
        async { Ok(false) }
    }

    /// For `abrq check`.
    fn check(
        &mut self,
        cursor: Option<&Cursor<Self::At>>,
    ) -> impl Future<Output = Result<String, SourceError>> + Send;

    /// Status `source.position`.
    fn position(&self, view: View<'_, Self::At>) -> Value;

    /// WAL or binlog the server keeps for this stream.
    fn lag_bytes(&self) -> Option<i64>;

    /// After a failed read: connections are dropped, the next read opens
    /// again from the cursor.
    fn reset(&mut self);
}
