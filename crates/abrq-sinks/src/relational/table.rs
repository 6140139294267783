//! A table as the catalog describes it, and what abrq creates.

use std::collections::HashMap;

use super::types::SqlType;

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: SqlType,
    pub nullable: bool,
    /// The source column it holds (PostgreSQL's `attnum`), as its comment
    /// says: a renamed source column renames it.
    pub source: Option<i64>,
}

impl Column {
    pub fn new(name: impl Into<String>, ty: SqlType, nullable: bool) -> Column {
        Column {
            name: name.into(),
            ty,
            nullable,
            source: None,
        }
    }
}

/// The comment on a column that holds source column `n`.
pub fn source_comment(n: i64) -> String {
    format!("abrq source column {n}")
}

/// The source column a column's comment names, if it names one.
pub fn source_of(comment: Option<&str>) -> Option<i64> {
    comment?.strip_prefix("abrq source column ")?.parse().ok()
}

/// The columns in catalog order and the primary key (empty: none).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableInfo {
    pub columns: Vec<Column>,
    pub key: Vec<String>,
    /// The primary key constraint's name (PostgreSQL names it).
    pub key_name: Option<String>,
    /// abrq created the table (its comment says so): its primary key
    /// follows the source's.
    pub created: bool,
    /// Deletes set `_abrq_deleted_at` instead (`deletes = "soft"`), and a
    /// row written again clears it.
    pub soft_delete: bool,
}

/// The comment abrq gives the tables it creates; a table with it re-keys
/// when its source's primary key moves to other columns.
pub const CREATED: &str = "created by abrq: its primary key follows the source table";

impl TableInfo {
    pub fn index(&self) -> HashMap<&str, usize> {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect()
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// One line for `check`: `id bigint, name text; primary key (id)`.
    pub fn describe(&self, type_name: impl Fn(&SqlType) -> String) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("{} {}", c.name, type_name(&c.ty)))
            .collect();
        let mut out = cols.join(", ");
        if !self.key.is_empty() {
            out.push_str(&format!("; primary key ({})", self.key.join(", ")));
        }
        out
    }
}
