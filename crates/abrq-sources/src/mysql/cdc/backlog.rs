//! A backlog checked before it is read, when the binlog does not carry
//! column names (`binlog_row_metadata` is not FULL). A change is then
//! matched to columns by position, with the columns the catalog has now;
//! a change of a table written before an `ALTER TABLE` of it that is also
//! still to be read would be matched to the columns after the ALTER,
//! silently so when the count did not change (a column dropped and
//! another added). Such a backlog is refused by name before anything of
//! it is read; changes after the last ALTER, and ALTERs with no change
//! of their table before them, read as they are.

use std::collections::HashSet;

use mysql_async::prelude::Queryable;

use super::super::config::TableName;
use super::binlog::{ddl_target, Ddl};
use super::BinlogAt;
use crate::error::{Context as _, Failure, SourceError};

/// Events read per `SHOW BINLOG EVENTS` page.
const PAGE: usize = 20_000;

/// Reads the backlog's events in order and says where a captured table
/// is altered after changes of it.
pub struct Scan<'a> {
    captured: &'a HashSet<TableName>,
    changed: HashSet<TableName>,
}

impl<'a> Scan<'a> {
    pub fn new(captured: &'a HashSet<TableName>) -> Scan<'a> {
        Scan {
            captured,
            changed: HashSet::new(),
        }
    }

    /// One event as `SHOW BINLOG EVENTS` lists it; the table altered after
    /// changes of it, if this event is that ALTER.
    pub fn event(&mut self, kind: &str, info: &str) -> Option<TableName> {
        if kind == "Table_map" {
            // "table_id: 18 (db.name)"
            let inner = info.rsplit_once('(')?.1.strip_suffix(')')?;
            let (database, name) = inner.split_once('.')?;
            let t = TableName {
                database: database.to_string(),
                name: name.to_string(),
            };
            if self.captured.contains(&t) {
                self.changed.insert(t);
            }
            return None;
        }
        if !kind.starts_with("Query") {
            return None;
        }
        // "use `db`; ALTER TABLE ..." when the statement had a database
        let (schema, sql) = match info.strip_prefix("use `") {
            Some(rest) => {
                let (db, sql) = rest.split_once("`; ")?;
                (db.replace("``", "`"), sql)
            }
            None => (String::new(), info),
        };
        match ddl_target(sql, &schema)? {
            (Ddl::Alter, t) if self.changed.contains(&t) => Some(t),
            _ => None,
        }
    }
}

/// Checks the binlog from `at` to its end on the server (a file no longer
/// there, or another server's after a failover, is not checked here).
pub async fn check(
    conn: &mut mysql_async::Conn,
    captured: &HashSet<TableName>,
    at: &BinlogAt,
) -> Result<(), SourceError> {
    let logs: Vec<mysql_async::Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .context("cannot list the binlog files")?;
    let files: Vec<String> = logs.iter().filter_map(|r| r.get(0)).collect();
    let Some(first) = files.iter().position(|f| *f == at.file) else {
        return Ok(());
    };
    let mut scan = Scan::new(captured);
    for (i, file) in files[first..].iter().enumerate() {
        let mut from = if i == 0 { at.pos } else { 4 };
        loop {
            let sql = format!(
                "SHOW BINLOG EVENTS IN '{}' FROM {from} LIMIT {PAGE}",
                file.replace('\'', "''")
            );
            let rows: Vec<mysql_async::Row> = conn
                .query(&sql)
                .await
                .context("cannot list the backlog's events")?;
            for r in &rows {
                let kind: String = r.get(2).unwrap_or_default();
                let info: String = r.get(5).unwrap_or_default();
                if let Some(t) = scan.event(&kind, &info) {
                    let pos: u64 = r.get(1).unwrap_or_default();
                    return Err(refused(&t, file, pos, at));
                }
            }
            match rows.last().and_then(|r| r.get::<u64, _>(4)) {
                Some(end) if rows.len() == PAGE && end > from => from = end,
                _ => break,
            }
        }
    }
    Ok(())
}

fn refused(t: &TableName, file: &str, pos: u64, at: &BinlogAt) -> SourceError {
    SourceError::new(
        Failure::Unsupported,
        format!(
            "binlog: {t} was altered at {file}:{pos}, after changes of it the stream has still to \
             read from {}:{}; the binlog does not carry column names (binlog_row_metadata is not \
             FULL), so those changes cannot be matched to the columns they were written with. \
             Set binlog_row_metadata = FULL (MariaDB 10.5+, MySQL 8.0.14+) so later DDL is read \
             by name, and re-snapshot the table into a new stream",
            at.file, at.pos
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured() -> HashSet<TableName> {
        [TableName {
            database: "shop".into(),
            name: "orders".into(),
        }]
        .into()
    }

    #[test]
    fn an_alter_after_changes_of_its_table_is_found() {
        let c = captured();
        let mut s = Scan::new(&c);
        assert_eq!(
            s.event("Query", "use `shop`; ALTER TABLE orders ADD c int"),
            None
        );
        assert_eq!(s.event("Table_map", "table_id: 18 (shop.items)"), None);
        assert_eq!(
            s.event("Query", "use `shop`; ALTER TABLE items DROP c"),
            None
        );
        assert_eq!(s.event("Table_map", "table_id: 19 (shop.orders)"), None);
        assert_eq!(s.event("Query", "use `shop`; TRUNCATE orders"), None);
        let found = s.event("Query", "use `other`; ALTER TABLE `shop`.`orders` DROP c");
        assert_eq!(found, c.iter().next().cloned());
    }
}
