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
            (Ddl::Alter, t) if self.changed.contains(&t) && alters_columns(sql) => Some(t),
            _ => None,
        }
    }
}

/// Whether an `ALTER TABLE` changes what a change's values are matched
/// to: a column added, dropped, changed or modified, or the table's text
/// converted. Indexes, keys, options, defaults and renames of a column
/// (its values stay in their place) do not. A clause it does not know
/// counts as changing.
fn alters_columns(sql: &str) -> bool {
    const NOT_COLUMNS: &[&str] = &[
        "index",
        "key",
        "constraint",
        "primary",
        "unique",
        "fulltext",
        "spatial",
        "foreign",
        "partition",
        "check",
        "period",
        "system",
    ];
    const OPTIONS: &[&str] = &[
        "force",
        "engine",
        "algorithm",
        "lock",
        "order",
        "auto_increment",
        "comment",
        "row_format",
        "default",
        "character",
        "charset",
        "collate",
        "key_block_size",
        "stats_persistent",
        "stats_auto_recalc",
        "stats_sample_pages",
        "pack_keys",
        "checksum",
        "min_rows",
        "max_rows",
        "avg_row_length",
        "page_compressed",
        "encrypted",
        "enable",
        "disable",
        "discard",
        "import",
        "with",
        "without",
        "wait",
        "nowait",
        "remove",
        "coalesce",
        "reorganize",
        "truncate",
        "analyze",
        "optimize",
        "rebuild",
        "repair",
        "exchange",
        "transactional",
    ];
    for (i, clause) in clauses(sql).iter().enumerate() {
        let words = words(clause);
        let mut w = words.iter().map(|w| w.to_ascii_lowercase());
        if i == 0 {
            // ALTER [ONLINE] [IGNORE] TABLE name
            let mut skipped = 0;
            for word in w.by_ref() {
                skipped += 1;
                if word == "table" {
                    break;
                }
            }
            if skipped == 0 || w.next().is_none() {
                continue;
            }
        }
        let Some(first) = w.next() else { continue };
        let first = first.split('=').next().unwrap_or_default().to_string();
        let second = w.next().unwrap_or_default();
        let changes = match first.as_str() {
            "add" | "drop" => !NOT_COLUMNS.contains(&second.as_str()),
            "change" | "modify" | "convert" => true,
            "rename" | "alter" => false,
            o if OPTIONS.contains(&o) => false,
            _ => true,
        };
        if changes {
            return true;
        }
    }
    false
}

/// The statement's clauses: split at commas outside parentheses and
/// quotes.
pub(super) fn clauses(sql: &str) -> Vec<String> {
    let (mut out, mut cur) = (Vec::new(), String::new());
    let (mut depth, mut quote) = (0usize, None::<char>);
    for c in sql.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

/// A clause's words: split at whitespace outside quotes.
pub(super) fn words(clause: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote) = (Vec::new(), String::new(), None::<char>);
    for c in clause.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
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
        // an index or an option leaves the columns as they are
        assert_eq!(
            s.event("Query", "use `shop`; ALTER TABLE orders ADD INDEX (b)"),
            None
        );
        assert_eq!(
            s.event("Query", "use `shop`; ALTER TABLE orders ENGINE=InnoDB"),
            None
        );
        let found = s.event("Query", "use `other`; ALTER TABLE `shop`.`orders` DROP c");
        assert_eq!(found, c.iter().next().cloned());
    }

    #[test]
    fn alters_that_move_values_are_told_from_those_that_do_not() {
        for sql in [
            "ALTER TABLE t ADD COLUMN c int",
            "ALTER TABLE t ADD c int AFTER id",
            "ALTER TABLE `my t` ADD INDEX (a), DROP COLUMN b",
            "ALTER ONLINE TABLE t MODIFY e enum('x','y,z')",
            "ALTER TABLE t CHANGE a b text",
            "ALTER TABLE t CONVERT TO CHARACTER SET latin1",
            "ALTER TABLE t SOMETHING NEW",
        ] {
            assert!(alters_columns(sql), "{sql}");
        }
        for sql in [
            "ALTER TABLE t ADD INDEX i (a, b), ADD UNIQUE KEY (c)",
            "ALTER TABLE t DROP INDEX i, DROP PRIMARY KEY, ADD PRIMARY KEY (k)",
            "ALTER TABLE t ENGINE=InnoDB, ALGORITHM=INPLACE, LOCK=NONE",
            "ALTER TABLE t RENAME COLUMN a TO b",
            "ALTER TABLE t ALTER COLUMN a SET DEFAULT 'x,y'",
            "ALTER TABLE t COMMENT 'a, b'",
            "ALTER TABLE t DEFAULT CHARACTER SET utf8mb4",
        ] {
            assert!(!alters_columns(sql), "{sql}");
        }
    }
}
