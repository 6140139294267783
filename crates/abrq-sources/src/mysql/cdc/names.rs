//! Tables that come and go by name in the binlog. A MariaDB source
//! captures tables by name, so a statement that creates or renames one
//! changes what is captured from that point of the binlog on:
//! - `CREATE TABLE` in a database captured whole (`db.*`): captured from
//!   its creation (every row it gets comes after, in the binlog);
//! - a captured table renamed (`RENAME TABLE`, `ALTER TABLE ... RENAME`):
//!   followed under its new name when that database is captured whole;
//!   a table named in `tables` renamed away stops the source by name
//!   (its changes would otherwise be skipped in silence).

use super::super::config::TableName;
use super::MysqlCdc;
use crate::error::{Failure, SourceError};

impl MysqlCdc {
    /// Applies what `sql` (run in database `schema`) does to the captured
    /// tables' names.
    pub(super) fn follow_names(&mut self, sql: &str, schema: &str) -> Result<(), SourceError> {
        if let Some(t) = created(sql, schema) {
            if self.whole(&t.database) && !self.captured.contains(&t) {
                tracing::info!(table = %t, "table created in a captured database: captured from its creation");
                self.capture(t);
            }
        }
        for (from, to) in renamed(sql, schema) {
            if !self.captured.contains(&from) {
                if self.whole(&to.database) {
                    tracing::warn!(%from, %to, "a table moved into a captured database: its changes are read from now on, its rows before are not (backfill it)");
                    self.capture(to);
                }
                continue;
            }
            if !self.whole(&to.database) {
                return Err(SourceError::new(
                    Failure::NotConfigured,
                    format!(
                        "captured table {from} was renamed to {to}: name {to} in tables to go \
                         on reading it (nothing of it is read until then)"
                    ),
                ));
            }
            tracing::info!(%from, %to, "a captured table was renamed: followed under its new name");
            self.captured.remove(&from);
            self.settings.tables.retain(|t| *t != from);
            // the same table: its columns go with it
            if let Some(s) = self.shapes.remove(&from) {
                let shaped = super::Shaped::of(&to, (*s.shape).clone());
                self.shapes.insert(to.clone(), shaped);
            }
            self.capture(to);
        }
        Ok(())
    }

    /// Captured from here on: in the lookup set and the list in order.
    fn capture(&mut self, table: TableName) {
        if self.captured.insert(table.clone()) {
            self.settings.tables.push(table);
        }
    }

    /// `db.*` is among the configured entries.
    fn whole(&self, database: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.name == "*" && e.database == database)
    }
}

/// A table name as a statement writes it (quoted or not, with its
/// database or in `schema`).
pub(super) fn written(token: &str, schema: &str) -> TableName {
    let token = token
        .split('(')
        .next()
        .unwrap_or(token)
        .trim_end_matches([';', ',']);
    let unquote = |s: &str| s.trim_matches('`').replace("``", "`");
    match token.split_once("`.`").or_else(|| token.split_once('.')) {
        Some((db, t)) => TableName {
            database: unquote(db),
            name: unquote(t),
        },
        None => TableName {
            database: schema.to_string(),
            name: unquote(token),
        },
    }
}

/// `CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t ...` (not a temporary
/// one: those are not replicated).
fn created(sql: &str, schema: &str) -> Option<TableName> {
    let words: Vec<String> = sql.split_whitespace().map(str::to_string).collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    if lower.first()? != "create" {
        return None;
    }
    let mut i = 1;
    if lower.get(1).map(String::as_str) == Some("or")
        && lower.get(2).map(String::as_str) == Some("replace")
    {
        i = 3;
    }
    if lower.get(i)? != "table" {
        return None;
    }
    i += 1;
    if lower.get(i).map(String::as_str) == Some("if") {
        i += 3; // IF NOT EXISTS
    }
    Some(written(words.get(i)?, schema))
}

/// `RENAME TABLE a TO b[, c TO d]` or `ALTER [ONLINE|IGNORE] TABLE a
/// RENAME [TO|AS] b`: each (from, to).
fn renamed(sql: &str, schema: &str) -> Vec<(TableName, TableName)> {
    let words: Vec<&str> = sql.split_whitespace().collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let at = |i: usize| lower.get(i).map(String::as_str);
    match at(0) {
        Some("rename") if at(1) == Some("table") => {
            let mut out = Vec::new();
            let mut i = 2;
            while i + 2 < words.len() + 1 && at(i + 1) == Some("to") {
                if let Some(to) = words.get(i + 2) {
                    out.push((written(words[i], schema), written(to, schema)));
                }
                i += 3;
            }
            out
        }
        Some("alter") => {
            let mut i = 1;
            while matches!(at(i), Some("online" | "ignore")) {
                i += 1;
            }
            if at(i) != Some("table") {
                return Vec::new();
            }
            let Some(table) = words.get(i + 1) else {
                return Vec::new();
            };
            if at(i + 2) != Some("rename") {
                return Vec::new();
            }
            let mut j = i + 3;
            if matches!(at(j), Some("to" | "as")) {
                j += 1;
            }
            // RENAME COLUMN / INDEX / KEY rename something else
            match (at(j), words.get(j)) {
                (Some("column" | "index" | "key"), _) | (_, None) => Vec::new(),
                (_, Some(to)) => vec![(written(table, schema), written(to, schema))],
            }
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(db: &str, n: &str) -> TableName {
        TableName {
            database: db.into(),
            name: n.into(),
        }
    }

    #[test]
    fn reads_created_tables() {
        assert_eq!(created("CREATE TABLE t (id int)", "s"), Some(t("s", "t")));
        assert_eq!(
            created("create table `d`.`xy`(id int)", "s"),
            Some(t("d", "xy"))
        );
        assert_eq!(
            created("CREATE OR REPLACE TABLE IF NOT EXISTS d.t LIKE u", "s"),
            Some(t("d", "t"))
        );
        assert_eq!(created("CREATE TEMPORARY TABLE t (id int)", "s"), None);
        assert_eq!(created("CREATE INDEX i ON t (a)", "s"), None);
    }

    #[test]
    fn reads_renames() {
        assert_eq!(
            renamed("RENAME TABLE a TO b, d.c TO `e`.`f`", "s"),
            vec![(t("s", "a"), t("s", "b")), (t("d", "c"), t("e", "f"))]
        );
        assert_eq!(
            renamed("ALTER TABLE a RENAME TO b", "s"),
            vec![(t("s", "a"), t("s", "b"))]
        );
        assert_eq!(
            renamed("alter table a rename b", "s"),
            vec![(t("s", "a"), t("s", "b"))]
        );
        assert!(renamed("ALTER TABLE a RENAME COLUMN x TO y", "s").is_empty());
        assert!(renamed("ALTER TABLE a ADD COLUMN x int", "s").is_empty());
    }
}
