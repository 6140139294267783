//! The binlog session: row events, transaction boundaries and the DDL of
//! captured tables as the shared reader's steps. A rows event holds many
//! rows: each is a step of its own (a change), so a transaction spanning
//! batches is cut between rows and a restart skips exactly the rows
//! staged.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use abrq_core::{Op, Record};
use futures::StreamExt;
use mysql_async::binlog::events::Event;
use mysql_async::binlog::events::{EventData, OptionalMetadataField, RowsEventData, TableMapEvent};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::BinlogStream;
use serde_json::{Map, Value};

use super::super::catalog::{Column, Shape};
use super::super::config::TableName;
use super::super::errors::BINLOG_UNREADABLE;
use super::super::values;
use super::backfill::Page;
use super::compressed;
use super::gtid::{self, Gtid, GtidPos};
use super::names;
use super::xa::{self, Xa};
use super::{purged, BinlogAt, MysqlCdc, Shaped};
use crate::cdc::{Ctx, Step, Table, TxInfo};
use crate::error::{Failure, SourceError};

/// The binlog event a server sends when it has nothing else to send.
const HEARTBEAT: u8 = 27;

pub struct Session {
    stream: BinlogStream,
    /// The binlog file the stream is in (rotations move it) and the end
    /// of the last event read in it.
    pub(super) file: String,
    pub(super) read_pos: u64,
    /// The name in the rotate the server sends first, until the format
    /// description says whether a checksum ends it.
    first_rotate: Option<Vec<u8>>,
    /// MariaDB: the GTID position of the last transaction read, and the id
    /// of the one being read.
    gtid: GtidPos,
    txn_gtid: Option<Gtid>,
    /// Steps of one event not handed out yet (the rows of a rows event).
    queued: VecDeque<Step<BinlogAt>>,
    /// The transaction being read changed a captured table.
    captured_txn: bool,
    /// The XA transaction being read, or prepared and waiting for its end.
    xa: Option<Xa>,
    /// Events read ahead of a prepared XA transaction, read next.
    ahead: VecDeque<Event>,
    /// A backfill page waiting for the stream to reach its position, and
    /// the connection pages are read on.
    pub(super) page: Option<Page>,
    pub(super) backfill_conn: Option<mysql_async::Conn>,
}

impl Session {
    pub(super) fn new(stream: BinlogStream, at: &BinlogAt, from: GtidPos) -> Session {
        Session {
            stream,
            // by GTID the server says where it starts (its first rotate)
            file: match from.is_empty() {
                true => at.file.clone(),
                false => String::new(),
            },
            read_pos: at.pos,
            first_rotate: None,
            gtid: from,
            txn_gtid: None,
            queued: VecDeque::new(),
            captured_txn: false,
            xa: None,
            ahead: VecDeque::new(),
            page: None,
            backfill_conn: None,
        }
    }

    pub(super) fn pending(&mut self) -> Option<Step<BinlogAt>> {
        self.queued.pop_front()
    }

    /// The next event: one read ahead first, then the stream's; None when
    /// none came within `wait`.
    async fn event(&mut self, ctx: &Ctx<'_, BinlogAt>) -> Result<Option<Event>, SourceError> {
        if let Some(e) = self.ahead.pop_front() {
            return Ok(Some(e));
        }
        match tokio::time::timeout(ctx.wait, self.stream.next()).await {
            Err(_) => Ok(None),
            Ok(None) => Err(SourceError::new(
                Failure::Network,
                "binlog: the server ended the stream",
            )),
            Ok(Some(Err(mysql_async::Error::Server(e)))) if e.code == BINLOG_UNREADABLE => {
                Err(SourceError::caused(
                    Failure::PositionLost,
                    purged(&ctx.cursor.at),
                    mysql_async::Error::Server(e),
                ))
            }
            Ok(Some(Err(e))) => Err(SourceError::from_client("binlog", e)),
            Ok(Some(Ok(e))) => Ok(Some(e)),
        }
    }

    /// Whether changes are held for an XA transaction not yet prepared.
    fn holding(&self) -> bool {
        self.xa.as_ref().is_some_and(|x| x.prepared.is_none())
    }

    /// A prepared XA transaction: reads one event ahead, and hands out the
    /// transaction once the binlog says how it ended.
    async fn look_ahead(
        &mut self,
        ctx: &Ctx<'_, BinlogAt>,
    ) -> Result<Option<Step<BinlogAt>>, SourceError> {
        let Some(event) = self.event(ctx).await? else {
            return Ok(None);
        };
        if event.header().event_type_raw() == HEARTBEAT {
            return Ok(Some(Step::Nothing));
        }
        let plain = compressed::inflate(&event)?;
        let end = match plain.as_ref().unwrap_or(&event).read_data() {
            Ok(Some(EventData::QueryEvent(q))) => {
                let xid = self.xa.as_ref().and_then(|x| x.prepared.as_ref());
                xid.and_then(|(xid, _)| xa::ends(&q.query(), xid))
            }
            _ => None,
        };
        let at = format!("{}:{}", self.file, self.read_pos);
        let held = self.xa.as_mut().expect("a prepared XA transaction");
        held.keep(event, &at)?;
        let Some(end) = end else {
            return Ok(Some(Step::Nothing));
        };
        let held = self.xa.take().expect("a prepared XA transaction");
        let (xid, commit) = held.prepared.expect("prepared");
        match end {
            xa::End::Commit => self.queued.extend(held.steps),
            xa::End::Rollback => {
                tracing::info!(%xid, changes = held.steps.len(), "XA transaction rolled back: its changes are dropped");
            }
        }
        self.queued.push_back(commit);
        let mut ahead = held.ahead;
        ahead.append(&mut self.ahead);
        self.ahead = ahead;
        Ok(self.pending())
    }

    /// A transaction that begins with the event ending at `log_pos`: its
    /// id is its GTID (MariaDB), or the one its GTID event gave, or where
    /// it begins.
    fn tx_info(&self, gtid: Option<Gtid>, log_pos: u64, time: u32) -> TxInfo {
        let position = format!("{}:{log_pos}", self.file);
        TxInfo {
            id: match gtid.or(self.txn_gtid) {
                Some(g) => format!("{}-{}-{}", g.domain, g.server, g.seq),
                None => position.clone(),
            },
            position,
            time: (time > 0).then(|| UNIX_EPOCH + Duration::from_secs(u64::from(time))),
        }
    }

    /// The end of a source transaction at `log_pos` of the current file.
    fn commit(&mut self, log_pos: u64, time: u32) -> Step<BinlogAt> {
        self.captured_txn = false;
        if let Some(g) = self.txn_gtid.take() {
            self.gtid.advance(&g);
        }
        let at = (log_pos > 0).then(|| BinlogAt {
            file: self.file.clone(),
            pos: log_pos,
            gtid: (!self.gtid.is_empty()).then(|| self.gtid.to_string()),
        });
        Step::Commit {
            at,
            time: (time > 0).then(|| UNIX_EPOCH + Duration::from_secs(u64::from(time))),
        }
    }
}

impl MysqlCdc {
    /// The next event as a step; None when none came within `wait`.
    pub(super) async fn step(
        &mut self,
        session: &mut Session,
        ctx: &Ctx<'_, BinlogAt>,
    ) -> Result<Option<Step<BinlogAt>>, SourceError> {
        if session.xa.as_ref().is_some_and(|x| x.prepared.is_some()) {
            return session.look_ahead(ctx).await;
        }
        let Some(event) = session.event(ctx).await? else {
            return Ok(None);
        };
        let header = event.header();
        let log_pos = u64::from(header.log_pos());
        let kind = header.event_type_raw();
        if kind == HEARTBEAT {
            return Ok(Some(Step::Nothing));
        }
        // events from a file's header come first with their own, smaller positions
        session.read_pos = session.read_pos.max(log_pos);
        let time = header.timestamp();
        if kind == gtid::EVENT {
            // MariaDB opens each event group with its GTID
            let g = Gtid::parse(event.data(), header.server_id());
            session.txn_gtid = g;
            session.captured_txn = false;
            session.xa = g.is_some_and(|g| g.xa).then(Xa::default);
            return Ok(Some(match g.filter(|g| !g.standalone) {
                Some(g) => Step::Begin(session.tx_info(Some(g), log_pos, time)),
                None => Step::Nothing,
            }));
        }
        // MariaDB's compressed events read as the events they stand for
        let event = compressed::inflate(&event)?.unwrap_or(event);
        let data = event
            .read_data()
            .map_err(|e| SourceError::caused(Failure::Decode, "cannot decode a binlog event", e))?;
        Ok(Some(match data {
            Some(EventData::RotateEvent(r)) if log_pos == 0 && session.file.is_empty() => {
                session.first_rotate = Some(r.name_raw().to_vec());
                session.read_pos = r.position();
                Step::Nothing
            }
            Some(EventData::FormatDescriptionEvent(fde)) => {
                if let Some(mut name) = session.first_rotate.take() {
                    let crc = fde.footer().get_checksum_alg().ok().flatten()
                        == Some(mysql_async::binlog::BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
                    if crc {
                        name.truncate(name.len().saturating_sub(4));
                    }
                    session.file = String::from_utf8_lossy(&name).into_owned();
                }
                Step::Nothing
            }
            // the rotate the server sends first is a fake one, read
            // before the format description says how events end (its
            // name carries the checksum); the file asked for is known
            Some(EventData::RotateEvent(r)) if log_pos > 0 => {
                session.file = r.name().into_owned();
                session.read_pos = r.position();
                Step::Nothing
            }
            Some(EventData::QueryEvent(q)) => {
                let sql = q.query().trim().to_string();
                if sql.eq_ignore_ascii_case("BEGIN") {
                    session.captured_txn = false;
                    return Ok(Some(Step::Begin(session.tx_info(None, log_pos, time))));
                }
                if !ctx.in_txn && xa::starts(&sql) {
                    // MySQL: the statement that opens an XA transaction's group
                    session.captured_txn = false;
                    session.xa = Some(Xa::default());
                    return Ok(Some(Step::Begin(session.tx_info(None, log_pos, time))));
                }
                if ctx.in_txn && sql.eq_ignore_ascii_case("COMMIT") {
                    // the end of a transaction on a non-transactional engine
                    return Ok(Some(session.commit(log_pos, time)));
                }
                if sql.starts_with('#') || ctx.in_txn {
                    return Ok(Some(Step::Nothing));
                }
                // a statement of its own (DDL): a transaction boundary
                let schema = q.schema().to_string();
                self.follow_names(&sql, &schema)?;
                if let Some(step) = self.statement(&sql, &schema).await? {
                    let commit = session.commit(log_pos, time);
                    session.queued.push_back(commit);
                    return Ok(Some(step));
                }
                session.commit(log_pos, time)
            }
            Some(EventData::XidEvent(_)) => {
                // an XA group ends at its prepare, never here; were it to,
                // its changes go out as any transaction's
                if let Some(held) = session.xa.take() {
                    session.queued.extend(held.steps);
                }
                let commit = session.commit(log_pos, time);
                session.queued.push_back(commit);
                session.pending().unwrap_or(Step::Nothing)
            }
            Some(EventData::RowsEvent(RowsEventData::PartialUpdateRowsEvent(_))) => {
                return Err(unsupported(
                    "a PARTIAL_UPDATE_ROWS event (binlog_row_value_options = PARTIAL_JSON): its \
                     JSON columns hold diffs, not values; set binlog_row_value_options = ''",
                ))
            }
            Some(EventData::RowsEvent(rows)) => {
                self.rows(session, &rows).await?;
                if session.holding() {
                    let queued: Vec<_> = session.queued.drain(..).collect();
                    session.xa.as_mut().expect("held").steps.extend(queued);
                    return Ok(Some(Step::Nothing));
                }
                session.pending().unwrap_or(Step::Nothing)
            }
            Some(EventData::TransactionPayloadEvent(_)) => {
                return Err(unsupported(
                    "a TRANSACTION_PAYLOAD event (binlog_transaction_compression = ON): set \
                     binlog_transaction_compression = OFF",
                ))
            }
            Some(EventData::XaPrepareLogEvent(body)) => {
                let held = session.xa.take().filter(|x| !x.steps.is_empty());
                let commit = session.commit(log_pos, time);
                // an XA transaction of tables not captured ends here for us
                let Some(mut held) = held else {
                    return Ok(Some(commit));
                };
                let Some(xid) = xa::prepared_id(&body) else {
                    return Err(SourceError::new(
                        Failure::Decode,
                        format!(
                            "cannot decode the XA PREPARE event at {}:{log_pos}",
                            session.file
                        ),
                    ));
                };
                tracing::debug!(%xid, changes = held.steps.len(), "XA transaction prepared: reading ahead to its end");
                held.prepared = Some((xid, commit));
                session.xa = Some(held);
                Step::Nothing
            }
            Some(EventData::IncidentEvent(i)) => {
                return Err(SourceError::new(
                    Failure::PositionLost,
                    format!(
                        "binlog incident at {}:{log_pos}: the server says changes may be missing \
                         here ({:?}); re-snapshot the tables into a new stream",
                        session.file,
                        i.message()
                    ),
                ))
            }
            // no row changes: table maps (read by the stream itself),
            // statement context, GTID bookkeeping, checkpoints
            Some(
                EventData::TableMapEvent(_)
                | EventData::StartEventV3(_)
                | EventData::StopEvent
                | EventData::IntvarEvent(_)
                | EventData::RandEvent(_)
                | EventData::UserVarEvent(_)
                | EventData::RowsQueryEvent(_)
                | EventData::GtidEvent(_)
                | EventData::AnonymousGtidEvent(_)
                | EventData::PreviousGtidsEvent(_)
                | EventData::TransactionContextEvent(_)
                | EventData::ViewChangeEvent(_)
                | EventData::HeartbeatEvent
                | EventData::IgnorableEvent(_)
                | EventData::RotateEvent(_),
            ) => Step::Nothing,
            Some(other) => {
                return Err(unsupported(&format!(
                    "a binlog event of type {kind} ({}); abrq reads binlog_format = ROW",
                    event_name(&other)
                )))
            }
            None => match kind {
                // MariaDB: annotate rows, binlog checkpoint, GTID list,
                // start encryption (the server sends events decrypted)
                160 | 161 | 163 | 164 => Step::Nothing,
                _ => return Err(unsupported(&format!("a binlog event of type {kind}"))),
            },
        }))
    }

    /// Queues one change per row of a captured table.
    async fn rows(
        &mut self,
        session: &mut Session,
        rows: &RowsEventData<'_>,
    ) -> Result<(), SourceError> {
        let Some(tme) = session.stream.get_tme(rows.table_id()) else {
            return Err(SourceError::new(
                Failure::Decode,
                "cannot decode a change: a row event without its table map",
            ));
        };
        let table = TableName {
            database: tme.database_name().into_owned(),
            name: tme.table_name().into_owned(),
        };
        if !self.captured.contains(&table) {
            return Ok(());
        }
        let op = match rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => Op::Insert,
            RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => Op::Delete,
        };
        let columns = tme.columns_count() as usize;
        let written = written_names(tme)?;
        let mut pairs: Vec<(Option<BinlogRow>, Option<BinlogRow>)> = Vec::new();
        for row in rows.rows(tme) {
            pairs.push(
                row.map_err(|e| SourceError::caused(Failure::Decode, "cannot decode a row", e))?,
            );
        }
        let shaped = self.shape(&table, columns).await?;
        let shaped = as_written(shaped, &table, columns, written)?;
        session.captured_txn = true;
        for (before, after) in pairs {
            let change = |op: Op, row: &BinlogRow| -> Result<Step<BinlogAt>, SourceError> {
                let fields = fields(&shaped.shape, row, op == Op::Delete)
                    .map_err(|e| e.context(&format!("a change of {table}")))?;
                Ok(Step::Change(shaped.table.clone(), Record { op, fields }))
            };
            match (op, before, after) {
                // a new key, or a row without a key (found by its whole
                // old image): the old row's delete, then the new row
                (Op::Update, Some(old), Some(new)) if moved(&shaped.shape, &old, &new)? => {
                    session.queued.push_back(change(Op::Delete, &old)?);
                    session.queued.push_back(change(Op::Insert, &new)?);
                }
                (Op::Delete, Some(row), _) | (Op::Insert | Op::Update, _, Some(row)) => {
                    session.queued.push_back(change(op, &row)?);
                }
                _ => {
                    return Err(SourceError::new(
                        Failure::Decode,
                        format!(
                            "cannot decode a change of {table}: a row event without its row image"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    /// A statement outside a transaction: `TRUNCATE` of a captured table
    /// becomes a truncate instruction, `ALTER TABLE` its columns read
    /// again and declared.
    async fn statement(
        &mut self,
        sql: &str,
        schema: &str,
    ) -> Result<Option<Step<BinlogAt>>, SourceError> {
        let Some((verb, table)) = ddl_target(sql, schema) else {
            return Ok(None);
        };
        if !self.captured.contains(&table) {
            return Ok(None);
        }
        Ok(Some(match verb {
            Ddl::Truncate => Step::Truncate(vec![self.shape(&table, 0).await?.table]),
            Ddl::Alter => {
                self.shapes.remove(&table);
                let shaped = self.shape(&table, 0).await?;
                tracing::info!(%table, columns = shaped.shape.columns.len(), "source table's columns changed");
                Step::Declare(with_renames(&shaped.table, &super::renames::renamed(sql)))
            }
        }))
    }
}

/// The declaration of `table` saying, for each column an ALTER renamed,
/// the name it had (`renamed_from`): a relational destination renames its
/// column rather than adding one. Only this declaration says it; the
/// table's shape stays as read.
fn with_renames(table: &Arc<Table>, renamed: &[(String, String)]) -> Arc<Table> {
    if renamed.is_empty() {
        return table.clone();
    }
    let mut declared = table.declared.clone();
    for (old, new) in renamed {
        if let Some(v) = declared.get_mut(new) {
            let mut o = match v.take() {
                Value::Object(o) => o,
                other => Map::from_iter([("type".to_string(), other)]),
            };
            o.insert(abrq_core::RENAMED_FROM.into(), Value::String(old.clone()));
            *v = Value::Object(o);
        }
    }
    Arc::new(Table {
        table: table.table.clone(),
        declared,
    })
}

/// The column names a table map carries (`binlog_row_metadata = FULL`).
fn written_names(tme: &TableMapEvent<'_>) -> Result<Option<Vec<String>>, SourceError> {
    for field in tme.iter_optional_meta() {
        let field =
            field.map_err(|e| SourceError::caused(Failure::Decode, "a table map's metadata", e))?;
        if let OptionalMetadataField::ColumnName(names) = field {
            let mut out = Vec::new();
            for name in names.iter_names() {
                let name = name.map_err(|e| {
                    SourceError::caused(Failure::Decode, "a table map's column names", e)
                })?;
                out.push(name.name().into_owned());
            }
            return Ok(Some(out));
        }
    }
    Ok(None)
}

/// The table's shape as the change was written. The catalog says what
/// the table is now; a change read from a backlog may predate DDL. With
/// the names the table map carries, each value goes to its own column (a
/// column dropped since keeps its name, typed by its value); without
/// them, a change whose column count is not the table's is refused by
/// name, never decoded shifted.
fn as_written(
    shaped: Shaped,
    table: &TableName,
    columns: usize,
    written: Option<Vec<String>>,
) -> Result<Shaped, SourceError> {
    let now: Vec<&str> = shaped
        .shape
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    match written {
        Some(names) if names.iter().map(String::as_str).eq(now.iter().copied()) => Ok(shaped),
        Some(names) => {
            let cols = names
                .into_iter()
                .map(
                    |name| match shaped.shape.columns.iter().find(|c| c.name == name) {
                        Some(c) => c.clone(),
                        None => Column {
                            name,
                            column_type: String::new(),
                            data_type: String::new(),
                            key: false,
                            charset: None,
                        },
                    },
                )
                .collect();
            let shape = Shape {
                columns: cols,
                declared: shaped.shape.declared.clone(),
            };
            Ok(Shaped {
                shape: Arc::new(shape),
                table: shaped.table,
            })
        }
        None if columns == now.len() => Ok(shaped),
        None => Err(SourceError::new(
            Failure::Unsupported,
            format!(
                "binlog: a change of {table} was written with {columns} columns, and the table \
                 has {} now (DDL after the change, read from a backlog); its values cannot be \
                 matched to columns. Set binlog_row_metadata = FULL (MariaDB 10.5+, MySQL \
                 8.0.14+) so changes carry their column names, and re-snapshot the table into \
                 a new stream",
                now.len()
            ),
        )),
    }
}

fn unsupported(what: &str) -> SourceError {
    SourceError::new(
        Failure::Unsupported,
        format!("binlog: {what} is not supported"),
    )
}

/// A short name for an event abrq does not read.
fn event_name(event: &EventData<'_>) -> String {
    let debug = format!("{event:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Whether an update's before image names another row than its after
/// image: a key column changed, or the table has no key.
fn moved(shape: &Shape, before: &BinlogRow, after: &BinlogRow) -> Result<bool, SourceError> {
    let key = |row: &BinlogRow| -> Result<Vec<Option<Value>>, SourceError> {
        let mut out = Vec::new();
        for (i, col) in shape.columns.iter().enumerate() {
            if col.key {
                out.push(row.as_ref(i).map(|v| values::to_json(col, v)).transpose()?);
            }
        }
        Ok(out)
    };
    Ok(!shape.columns.iter().any(|c| c.key) || key(before)? != key(after)?)
}

/// A row's fields by the catalog's column names; a delete keeps only the
/// key columns when the table has a key.
fn fields(shape: &Shape, row: &BinlogRow, delete: bool) -> Result<Map<String, Value>, SourceError> {
    let has_key = shape.columns.iter().any(|c| c.key);
    let mut out = Map::with_capacity(shape.columns.len());
    for (i, col) in shape.columns.iter().enumerate() {
        if delete && has_key && !col.key {
            continue;
        }
        if let Some(v) = row.as_ref(i) {
            out.insert(col.name.clone(), values::to_json(col, v)?);
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ddl {
    Truncate,
    Alter,
}

/// Which captured-table DDL a statement is, and its table: `TRUNCATE
/// [TABLE] t` and `ALTER [ONLINE|IGNORE] TABLE t ...`; no parser beyond that.
pub(super) fn ddl_target(sql: &str, schema: &str) -> Option<(Ddl, TableName)> {
    let mut words = sql.split_whitespace();
    let first = words.next()?.to_ascii_lowercase();
    let (verb, mut next) = match first.as_str() {
        "truncate" => (Ddl::Truncate, words.next()?),
        "alter" => (Ddl::Alter, words.next()?),
        _ => return None,
    };
    while matches!(
        next.to_ascii_lowercase().as_str(),
        "table" | "online" | "ignore"
    ) {
        next = words.next()?;
    }
    if verb == Ddl::Alter && sql.to_ascii_lowercase().split_whitespace().nth(1) == Some("database")
    {
        return None;
    }
    Some((verb, names::written(next, schema)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_names_its_table() {
        let t = |db: &str, n: &str| TableName {
            database: db.into(),
            name: n.into(),
        };
        assert_eq!(
            ddl_target("TRUNCATE t", "test"),
            Some((Ddl::Truncate, t("test", "t")))
        );
        assert_eq!(
            ddl_target("truncate table `shop`.`orders`", "test"),
            Some((Ddl::Truncate, t("shop", "orders")))
        );
        assert_eq!(
            ddl_target("ALTER TABLE shop.orders ADD COLUMN x int", "test"),
            Some((Ddl::Alter, t("shop", "orders")))
        );
        assert_eq!(ddl_target("CREATE TABLE t (id int)", "test"), None);
        assert_eq!(
            ddl_target("ALTER DATABASE d CHARACTER SET utf8", "test"),
            None
        );
    }
}
