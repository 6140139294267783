//! The change reader both change sources run: it opens the source, copies
//! the snapshot table by table, then streams, turning a protocol's steps
//! into chunks with the cursor just past them.
//!
//! The cursor moves only at a transaction's end, so a restart reads a
//! transaction again from its start; when a transaction spans batches the
//! cursor counts the changes of it staged already (`skip`), and a restart
//! skips exactly those.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;

use super::backfill::Backfills;
use super::builder::Builder;
use super::cursor::{CopyAt, Cursor, Staged};
use super::deadline::{self, within};
use super::protocol::{Ctx, Opening, Protocol, Step, Table, TxInfo, View};
use crate::chunk::{Chunk, Limits};
use crate::error::{Failure, SourceError};
use crate::progress::Progress;
use crate::source::{BackfillAsk, Pace, Source};

/// How long a read waits for the first step before it says "nothing for
/// now", and for the next one once a chunk has begun.
const FIRST_WAIT: Duration = Duration::from_millis(200);
const NEXT_WAIT: Duration = Duration::from_millis(5);
/// A read returns at most this long after its first step, so a busy
/// stream still reaches the pump, whose `max_wait` decides when to stage.
const READ_SLICE: Duration = Duration::from_millis(5);

enum Phase<P: Protocol> {
    /// Not connected: the next read opens the source.
    Starting,
    /// The snapshot copy: `queue[0]` is the table being copied.
    Copying {
        copy: P::Copy,
        queue: VecDeque<String>,
    },
    Streaming(P::Session),
}

/// Where the current source transaction stands.
#[derive(Debug, Default)]
struct Txn {
    open: bool,
    /// Changes of it seen so far, staged before or not.
    changes: u64,
    /// Changes at its start a restart already staged.
    skip: u64,
    /// What its first event said of it.
    info: Option<TxInfo>,
    /// Changes of it seen so far per table (`_abrq_tx.table_index`).
    per_table: Vec<(abrq_core::TableRef, u64)>,
    /// The table of its last change read (where its commit marker goes).
    last_table: Option<Arc<Table>>,
}

impl Txn {
    /// The index of a change of `table` among the transaction's changes
    /// of that table, counting this one.
    fn table_index(&mut self, table: &abrq_core::TableRef) -> u64 {
        match self.per_table.iter_mut().find(|(t, _)| t == table) {
            Some((_, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                self.per_table.push((table.clone(), 1));
                0
            }
        }
    }

    /// One more change; false when a restart staged it already.
    fn counts(&mut self) -> bool {
        self.changes += 1;
        self.changes > self.skip
    }
}

pub struct ChangeReader<P: Protocol> {
    proto: P,
    phase: Phase<P>,
    /// Where the next batch starts (last staged, or read and not yet
    /// staged).
    cursor: Cursor<P::At>,
    /// No cursor was stored and the source has not opened yet.
    fresh: bool,
    /// The starting position waits to be staged before anything is read.
    announce: bool,
    txn: Txn,
    backfills: Backfills,
    copied_rows: u64,
    /// Commit time of the last transaction read.
    last_commit: Option<SystemTime>,
    /// Nothing was waiting at the last read.
    caught_up: bool,
    /// The position the engine last reported staged.
    confirmed: Option<P::At>,
    /// When the server last sent anything.
    heard: Instant,
    /// When the protocol last said whether what it captures changed.
    audited: Instant,
    /// Each change carries `_abrq_tx` (`transaction_metadata = true`).
    tx_metadata: bool,
    /// Transactions begin and commit with markers
    /// (`transaction_markers = true`).
    tx_markers: bool,
}

impl<P: Protocol> ChangeReader<P> {
    /// The reader of `proto` from the stored `cursor` (None: a new stream).
    pub fn new(proto: P, start: P::At, cursor: Option<&str>) -> Result<Self, SourceError> {
        let (cursor, fresh) = match cursor {
            Some(text) => (Cursor::decode::<P::Stored>(text)?, false),
            None => (Cursor::new(start), true),
        };
        Ok(ChangeReader {
            proto,
            phase: Phase::Starting,
            txn: Txn {
                skip: cursor.skip,
                ..Txn::default()
            },
            cursor,
            fresh,
            announce: false,
            backfills: Backfills::default(),
            copied_rows: 0,
            last_commit: None,
            caught_up: false,
            confirmed: None,
            heard: Instant::now(),
            audited: Instant::now(),
            tx_metadata: false,
            tx_markers: false,
        })
    }

    /// Each transaction with a captured change gets a begin marker before
    /// its first change and a commit marker after its last.
    pub fn with_tx_markers(mut self, on: bool) -> Self {
        self.tx_markers = on;
        self
    }

    /// Each change carries `_abrq_tx`, and each table declares it.
    pub fn with_tx_metadata(mut self, on: bool) -> Self {
        self.tx_metadata = on;
        self
    }

    pub fn protocol(&self) -> &P {
        &self.proto
    }

    /// The next read opens the session again, from the cursor (a copy
    /// goes on at the current state from its last row).
    fn reopen(&mut self) {
        self.phase = Phase::Starting;
        self.proto.reset();
    }

    fn stored(&self) -> Option<&Cursor<P::At>> {
        (!self.fresh).then_some(&self.cursor)
    }

    async fn open_source(&mut self) -> Result<(), SourceError> {
        let stored = (!self.fresh).then(|| self.cursor.clone());
        let opened = within(deadline::OPEN, "opening the source", async {
            self.proto.open(stored.as_ref()).await
        })
        .await?;
        self.fresh = false;
        match opened {
            Opening::Copy { copy, at, tables } => {
                let taken = self.cursor.taken;
                self.cursor = Cursor::new(at);
                self.cursor.taken = taken;
                match tables.first() {
                    Some(first) => {
                        self.cursor.copy = Some(CopyAt::start(first.clone()));
                        self.phase = Phase::Copying {
                            copy,
                            queue: tables.into(),
                        };
                    }
                    None => self.stream_after_copy(copy).await?,
                }
            }
            Opening::Stream {
                session,
                at,
                tables,
                announce,
                recopy,
                backfill,
            } => {
                self.cursor.at = at;
                if let Some(copy) = self.cursor.copy.take() {
                    // the copy's snapshot is gone with its session: the
                    // rest is read as a backfill, merged with the stream
                    tracing::info!(table = %copy.table, "snapshot copy cut short: the rest is read as a backfill");
                    self.cursor.backfill = Staged::resume_copy(&tables, copy);
                } else if recopy {
                    tracing::info!("snapshot copy cut short before its first page: the tables are read as a backfill");
                    self.cursor.backfill = Staged::of(&tables, None);
                }
                match self.cursor.backfill.as_mut() {
                    // after the one that runs
                    Some(b) => {
                        for t in backfill {
                            if t != b.table && !b.rest.contains(&t) {
                                b.rest.push(t);
                            }
                        }
                    }
                    None => self.cursor.backfill = Staged::of(&backfill, None),
                }
                self.txn = Txn {
                    skip: self.cursor.skip,
                    ..Txn::default()
                };
                self.announce = announce;
                self.heard = Instant::now();
                self.phase = Phase::Streaming(session);
            }
        }
        Ok(())
    }

    async fn stream_after_copy(&mut self, copy: P::Copy) -> Result<(), SourceError> {
        let (session, at) = self.proto.stream_after_copy(copy, &self.cursor).await?;
        self.cursor.at = at;
        self.txn = Txn::default();
        self.heard = Instant::now();
        self.phase = Phase::Streaming(session);
        Ok(())
    }

    async fn read_any(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        if matches!(self.phase, Phase::Starting) {
            self.open_source().await?;
        }
        match self.phase {
            Phase::Starting => Ok(Chunk::default()),
            Phase::Copying { .. } => self.read_copy(limits).await,
            Phase::Streaming(_) => self.read_stream(limits).await,
        }
    }

    /// One page of the copy; after a table's last page the next table (on
    /// the same snapshot), after the last table the stream.
    async fn read_copy(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let Phase::Copying { copy, queue } = &mut self.phase else {
            return Ok(Chunk::default());
        };
        let Some(mut at) = self.cursor.copy.clone() else {
            return Err(SourceError::new(
                Failure::Invalid,
                "the cursor lost its place in the copy",
            ));
        };
        let page = within(
            deadline::PAGE,
            "copying a page",
            self.proto.copy_page(copy, &mut at, limits),
        )
        .await?;
        self.copied_rows += page.chunk.records;
        let mut chunk = page.chunk;
        super::builder::read_rows(&mut chunk);
        chunk.at_end = false;
        let finished = match page.done {
            false => {
                self.cursor.copy = Some(at);
                false
            }
            true => {
                tracing::info!(table = %at.table, rows = self.copied_rows, "snapshot copy of a table done");
                queue.pop_front();
                self.cursor.copy = queue.front().cloned().map(CopyAt::start);
                self.cursor.copy.is_none()
            }
        };
        chunk.cursor = Some(self.cursor.encode::<P::Stored>());
        if finished {
            let Phase::Copying { copy, .. } = std::mem::replace(&mut self.phase, Phase::Starting)
            else {
                unreachable!("copying above");
            };
            self.stream_after_copy(copy).await?;
        }
        self.caught_up = false;
        Ok(chunk)
    }

    async fn read_stream(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let Phase::Streaming(session) = &mut self.phase else {
            return Ok(Chunk::default());
        };
        if std::mem::take(&mut self.announce) {
            return Ok(Chunk {
                cursor: Some(self.cursor.encode::<P::Stored>()),
                at_end: true,
                ..Chunk::default()
            });
        }
        if !self.txn.open && self.audited.elapsed() >= deadline::AUDIT {
            let audit = self.proto.audit();
            let reopen = within(deadline::CONNECT, "checking the captured tables", audit).await?;
            self.audited = Instant::now();
            if reopen {
                self.reopen();
                return Ok(Chunk::default());
            }
        }
        let mut out = Builder::with_tx_column(self.tx_metadata);
        let ctx = Ctx {
            wait: FIRST_WAIT,
            in_txn: self.txn.open,
            cursor: &mut self.cursor,
            backfills: &mut self.backfills,
        };
        self.proto.prepare(session, ctx).await?;
        let mut wait = FIRST_WAIT;
        let mut first: Option<Instant> = None;
        let mut reopen = false;
        loop {
            if first.is_some_and(|t| t.elapsed() >= READ_SLICE) {
                break;
            }
            let ctx = Ctx {
                wait,
                in_txn: self.txn.open,
                cursor: &mut self.cursor,
                backfills: &mut self.backfills,
            };
            let step = match self.proto.next(session, ctx).await {
                Ok(step) => step,
                // the transactions read before a definite failure are
                // staged first: the session opens again after them and
                // meets the failure again, with nothing else in hand
                Err(e)
                    if e.failure().is_definite()
                        && !self.txn.open
                        && !out.is_empty()
                        && out.chunk.cursor.is_some() =>
                {
                    tracing::info!(error = %e, "staging what was read before a failure");
                    reopen = true;
                    break;
                }
                Err(e) => return Err(e),
            };
            let Some(step) = step else {
                let silent = self.heard.elapsed();
                match self.proto.keepalive() {
                    Some(limit) if silent > limit * deadline::MISSED_HEARTBEATS => {
                        return Err(SourceError::new(
                            Failure::Timeout,
                            format!(
                                "the server sent nothing for {}s, not even a heartbeat",
                                silent.as_secs()
                            ),
                        ));
                    }
                    None if silent > deadline::PROBE => {
                        let probe = self.proto.probe(session);
                        within(deadline::CONNECT, "probing a quiet session", probe).await?;
                        self.heard = Instant::now();
                    }
                    _ => {}
                }
                out.chunk.at_end = true;
                break;
            };
            self.heard = Instant::now();
            wait = NEXT_WAIT;
            first.get_or_insert_with(Instant::now);
            match step {
                Step::Begin(info) => {
                    self.txn.open = true;
                    self.txn.changes = 0;
                    self.txn.info = Some(info);
                    self.txn.per_table.clear();
                }
                Step::Change(table, mut record) => {
                    let in_table = match self.tx_metadata || self.tx_markers {
                        true => self.txn.table_index(&table.table),
                        false => 0,
                    };
                    // a restart inside a transaction staged its begin already
                    let first = self.txn.changes == 0 && self.txn.skip == 0;
                    if self.tx_markers {
                        self.txn.last_table = Some(table.clone());
                    }
                    if self.txn.counts() {
                        if self.tx_markers && first {
                            out.marker(
                                &table,
                                marker("begin", tx_field(self.txn.info.as_ref(), None)),
                            );
                        }
                        if self.tx_metadata {
                            let at = (self.txn.changes - 1, in_table);
                            let tx = tx_field(self.txn.info.as_ref(), Some(at));
                            record.fields.insert(abrq_core::TX_FIELD.into(), tx);
                        }
                        out.record(&table, record);
                    }
                    if out.is_full(limits) && self.txn.open {
                        // a transaction spanning batches: the cursor stays at
                        // its start and counts what is staged
                        out.chunk.cursor = Some(mid_transaction::<P>(&self.cursor, &self.txn));
                        break;
                    }
                }
                Step::Truncate(tables) => {
                    if self.txn.counts() {
                        for t in &tables {
                            out.truncate(t);
                        }
                    }
                }
                Step::Declare(table) => {
                    if self.txn.counts() {
                        out.declare(&table);
                    }
                }
                Step::Commit { at, time } => {
                    if let (true, Some(last)) = (self.tx_markers, self.txn.last_table.take()) {
                        let mut tx = tx_field(self.txn.info.as_ref(), None);
                        tx["changes"] = self.txn.changes.into();
                        let tables: serde_json::Map<String, serde_json::Value> = self
                            .txn
                            .per_table
                            .iter()
                            .map(|(t, n)| (t.to_string(), (*n).into()))
                            .collect();
                        tx["tables"] = tables.into();
                        out.marker(&last, marker("commit", tx));
                    }
                    self.txn = Txn::default();
                    if time.is_some() {
                        self.last_commit = time;
                    }
                    if let Some(at) = at {
                        self.cursor.at = at;
                        self.cursor.skip = 0;
                        out.chunk.cursor = Some(self.cursor.encode::<P::Stored>());
                        if out.is_full(limits) {
                            break;
                        }
                    }
                }
                Step::Idle(at) => {
                    // the server sent everything up to `at`: when all read
                    // so far is staged, nothing captured lies before it, so
                    // it may forget it (a stream of quiet tables holds
                    // nothing back while the rest of the server writes); a
                    // transaction open at `at` is sent again after a restart
                    let all_staged = !self.txn.open
                        && out.is_empty()
                        && self.cursor.skip == 0
                        && self.cursor.copy.is_none()
                        && self.confirmed.as_ref() == Some(&self.cursor.at);
                    if all_staged && at > self.cursor.at {
                        self.proto.confirm(session, &at);
                        self.confirmed = Some(at.clone());
                        self.cursor.at = at;
                    }
                }
                Step::Page(page) => {
                    out.page(page);
                    // a valid cursor now: a restart goes on after this page
                    out.chunk.cursor = Some(self.cursor.encode::<P::Stored>());
                    if out.is_full(limits) {
                        break;
                    }
                }
                Step::Nothing => {}
            }
        }
        if reopen {
            self.reopen();
        }
        let mut chunk = out.chunk;
        self.caught_up = chunk.at_end && chunk.is_empty() && !self.txn.open;
        if self.txn.open && self.txn.changes > 0 && !chunk.is_empty() {
            chunk.cursor = Some(mid_transaction::<P>(&self.cursor, &self.txn));
        }
        Ok(chunk)
    }

    fn snapshot_progress(&self) -> serde_json::Value {
        match (&self.phase, &self.cursor.copy) {
            (Phase::Copying { queue, .. }, Some(at)) => {
                let mut v = serde_json::json!({
                    "state": "copying",
                    "rows": self.copied_rows,
                    "table": at.table,
                    "tables_left": queue.len().saturating_sub(1),
                });
                if !at.parts.is_empty() {
                    v["parts"] = at.parts.len().into();
                    v["parts_done"] = at.parts.iter().filter(|p| p.done).count().into();
                }
                v
            }
            _ => serde_json::json!({"state": "done", "rows": self.copied_rows}),
        }
    }
}

/// `_abrq_tx`: the change's transaction (id, commit position, commit
/// time), and for a change its index in it and among its table's changes
/// in it, from 0.
fn tx_field(info: Option<&TxInfo>, at: Option<(u64, u64)>) -> serde_json::Value {
    let time = info.and_then(|i| i.time).map(|t| {
        chrono::DateTime::<chrono::Utc>::from(t)
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    });
    let mut tx = serde_json::json!({
        "id": info.map(|i| &i.id),
        "position": info.map(|i| &i.position),
        "time": time,
    });
    if let Some((index, table_index)) = at {
        tx["index"] = index.into();
        tx["table_index"] = table_index.into();
    }
    tx
}

/// A transaction marker's fields.
fn marker(mark: &str, tx: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = serde_json::Map::new();
    fields.insert(abrq_core::MARKER_FIELD.into(), mark.into());
    fields.insert(abrq_core::TX_FIELD.into(), tx);
    fields
}

/// The cursor of a transaction spanning batches: at its start, counting
/// the changes of it staged.
fn mid_transaction<P: Protocol>(cursor: &Cursor<P::At>, txn: &Txn) -> String {
    Cursor {
        skip: txn.changes,
        ..cursor.clone()
    }
    .encode::<P::Stored>()
}

#[async_trait]
impl<P: Protocol> Source for ChangeReader<P> {
    fn describe(&self) -> String {
        self.proto.describe()
    }

    /// A read waits for changes itself: no nap after it.
    fn pace(&self) -> Pace {
        Pace::forever(Duration::from_millis(1))
    }

    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let result = self.read_any(limits).await;
        if result.is_err() {
            self.reopen();
        }
        result.map_err(|e| e.at(self.proto.describe()))
    }

    /// The engine staged everything up to `cursor`: the server may forget
    /// what is before its transaction boundary.
    fn staged(&mut self, cursor: &str) {
        let Phase::Streaming(session) = &mut self.phase else {
            return;
        };
        if let Ok(c) = Cursor::<P::At>::decode::<P::Stored>(cursor) {
            self.proto.confirm(session, &c.at);
            self.confirmed = Some(c.at);
        }
    }

    fn progress(&self) -> Option<Progress> {
        let lag_seconds = match (self.caught_up, self.last_commit) {
            (true, _) => Some(0.0),
            (false, Some(at)) => Some(
                SystemTime::now()
                    .duration_since(at)
                    .map_or(0.0, |d| d.as_secs_f64()),
            ),
            (false, None) => None,
        };
        let view = View {
            cursor: &self.cursor,
            started: !self.fresh,
            confirmed: self.confirmed.as_ref(),
            snapshot: self.snapshot_progress(),
            backfill: self.backfills.progress(self.cursor.backfill.as_ref()),
        };
        Some(Progress {
            position: self.proto.position(view),
            lag_seconds,
            lag_bytes: self.proto.lag_bytes(),
        })
    }

    fn backfill(&mut self, ask: BackfillAsk) {
        self.backfills.ask(ask, self.cursor.taken);
    }

    fn asked_before(&mut self, asked: Vec<BackfillAsk>, newest: Option<i64>) {
        if self.cursor.taken.is_none() {
            // a new stream has taken nothing up: all of them wait; a
            // cursor stored before requests were counted took up those
            // of its time, however many that was
            self.cursor.taken = match self.fresh {
                true => Some(0),
                false => Some(newest.unwrap_or(0)),
            };
        }
        for ask in asked {
            self.backfills.ask(ask, self.cursor.taken);
        }
    }

    async fn check(&mut self) -> Result<String, SourceError> {
        let stored = self.stored().cloned();
        self.proto
            .check(stored.as_ref())
            .await
            .map_err(|e| e.at(self.proto.describe()))
    }
}
