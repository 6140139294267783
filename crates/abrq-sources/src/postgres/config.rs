//! The `postgres` source's keys, checked without I/O. Connection fields:
//! `host` the server (127.0.0.1), `port` (5432), `database`, `username`,
//! `password`. Own keys: `mode` (`cursor` or `cdc`), `table` (`name` or
//! `schema.name`); for `cdc`, `tables = [...]` instead captures several
//! (`schema.*`: every table the schema holds when the stream starts); for `cursor`: `cursor` (the monotonic column),
//! `primary_key` (the tie-break, for a view or a table without one),
//! `poll_interval` (1s); for `cdc`: `slot` and `publication` (default
//! `abrq_{stream}`), `snapshot` (`initial` or `never`),
//! `snapshot_connections` (1: how many connections copy a large table at
//! once, each a range of its key); `tls`,
//! `tls_ca_file`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use abrq_core::config::{Dur, Secret, SourceConfig, Text};

use crate::config::{key_error, text};
use crate::filter::Expr;
use crate::per_table::{PerTable, TableOptions};
use abrq_endpoint::Endpoint;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use sqlx::postgres::PgConnectOptions;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Poll by a monotonic column with the primary key as tie-break.
    #[default]
    Cursor,
    /// Logical decoding through a replication slot.
    Cdc,
}

/// What a cdc stream does with the rows a table holds before its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Snapshot {
    /// Copy them first, in key order, then stream from the slot's start.
    #[default]
    Initial,
    /// Only changes from the slot's creation on.
    Never,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PostgresOptions {
    host: Option<Text>,
    port: Option<u16>,
    database: Option<Text>,
    username: Option<Text>,
    password: Option<Secret>,
    #[serde(default)]
    mode: Mode,
    table: Option<Text>,
    #[serde(default)]
    tables: Vec<Text>,
    cursor: Option<Text>,
    #[serde(default)]
    primary_key: Vec<Text>,
    poll_interval: Option<Dur>,
    slot: Option<Text>,
    publication: Option<Text>,
    snapshot: Option<Snapshot>,
    snapshot_connections: Option<usize>,
    transaction_metadata: Option<bool>,
    transaction_markers: Option<bool>,
    heartbeat_interval: Option<Dur>,
    #[serde(default)]
    per_table: BTreeMap<String, TableOptions>,
    mask_salt: Option<Secret>,
    #[serde(default)]
    tls: bool,
    tls_ca_file: Option<Text>,
}

/// Connections a snapshot copy reads on unless `snapshot_connections`
/// says otherwise, and the most it takes.
pub const DEFAULT_SNAPSHOT_CONNECTIONS: usize = 1;
pub const MAX_SNAPSHOT_CONNECTIONS: usize = 32;

/// A relation: schema (None: the connection's search path) and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: Option<String>,
    pub name: String,
}

impl TableName {
    /// `name` or `schema.name`; a quoted part may hold a dot.
    pub fn parse(raw: &str) -> Result<TableName, String> {
        let parts = split_qualified(raw)?;
        match parts.as_slice() {
            [name] => Ok(TableName {
                schema: None,
                name: name.clone(),
            }),
            [schema, name] => Ok(TableName {
                schema: Some(schema.clone()),
                name: name.clone(),
            }),
            _ => Err(format!("{raw:?} is not a table name (name or schema.name)")),
        }
    }

    /// The name as SQL text, each part quoted.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote(s), quote(&self.name)),
            None => quote(&self.name),
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// An identifier quoted for SQL.
pub fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Splits `a.b` at unquoted dots; `"a.b"` is one part, `""` inside quotes
/// is a quote. Unquoted parts are folded to lower case, as PostgreSQL does.
fn split_qualified(raw: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = raw.trim().chars().peekable();
    let mut quoted_part = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted_part = true;
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            cur.push('"');
                        }
                        Some('"') => break,
                        Some(c) => cur.push(c),
                        None => return Err(format!("{raw:?}: a quote is not closed")),
                    }
                }
            }
            '.' => {
                parts.push(finish(&mut cur, quoted_part, raw)?);
                quoted_part = false;
            }
            c => cur.push(c),
        }
    }
    parts.push(finish(&mut cur, quoted_part, raw)?);
    Ok(parts)
}

fn finish(cur: &mut String, quoted: bool, raw: &str) -> Result<String, String> {
    let part = std::mem::take(cur);
    let part = if quoted {
        part
    } else {
        part.trim().to_lowercase()
    };
    if part.is_empty() {
        return Err(format!("{raw:?} has an empty name part"));
    }
    Ok(part)
}

/// A replication slot name is lower-case letters, digits and underscores
/// (the server's rule), at most 63 bytes.
fn bad_slot_name(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    (!ok).then(|| {
        format!("{name:?} is not a slot name: lower-case letters, digits and _, at most 63")
    })
}

/// The slot or publication name abrq derives for `stream`: `abrq_` and
/// the stream's name when that is a slot name already; otherwise the name
/// folded to what a slot name may hold and 8 hex digits of the name's
/// SHA-256, so streams whose folded names meet (`shop-a` and `shop_a`,
/// `Orders` and `orders`, long names with one prefix) never share a slot
/// or a publication.
pub fn derived_name(stream: &str) -> String {
    let plain = format!("abrq_{stream}");
    if bad_slot_name(&plain).is_none() {
        return plain;
    }
    let mut out = legacy_derived_name(stream);
    out.truncate(54);
    let digest = Sha256::digest(stream.as_bytes());
    out.push('_');
    for b in &digest[..4] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The name earlier releases derived (folded, cut at 63, so not always
/// unique): a stream whose slot was made then keeps it.
pub fn legacy_derived_name(stream: &str) -> String {
    let mut out = String::from("abrq_");
    for c in stream.chars() {
        match c {
            'a'..='z' | '0'..='9' | '_' => out.push(c),
            'A'..='Z' => out.push(c.to_ascii_lowercase()),
            _ => out.push('_'),
        }
    }
    out.truncate(63);
    out
}

/// Everything a postgres source needs, checked. `Debug` shows the
/// password as `***`.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    /// The server, its database and credentials, and TLS.
    pub endpoint: Endpoint,
    pub mode: Mode,
    /// The first (in cursor mode the only) table.
    pub table: TableName,
    /// Every table a cdc stream captures (`table` first); a name `*`
    /// stands for every table of its schema.
    pub tables: Vec<TableName>,
    pub cursor: String,
    pub primary_key: Vec<String>,
    pub poll_interval: Duration,
    /// The replication slot (cdc); None: derived from the stream.
    pub slot: Option<String>,
    /// The publication (cdc); None: derived from the stream.
    pub publication: Option<String>,
    pub snapshot: Snapshot,
    /// Connections the snapshot copy reads on at once (cdc): a large
    /// table is read in that many parts.
    pub snapshot_connections: usize,
    /// Each change carries `_abrq_tx` (cdc).
    pub transaction_metadata: bool,
    /// Transactions begin and commit with markers (cdc).
    pub transaction_markers: bool,
    /// Writes a logical message into the source database this often
    /// (cdc), so the slot has a position to confirm even when nothing it
    /// captures changes.
    pub heartbeat_interval: Option<Duration>,
    /// Columns left out or masked, per table.
    pub per_table: PerTable,
    /// Only the rows this filter keeps, in the query (a backfill's
    /// `--where`; never set from config).
    pub filter: Option<Expr>,
}

impl PostgresSettings {
    pub fn from_config(cfg: &SourceConfig) -> Result<PostgresSettings, String> {
        let o: PostgresOptions = cfg.options.parse()?;
        let at = |key: &str, why: String| key_error(cfg, key, why);
        let mode_name = match o.mode {
            Mode::Cursor => "cursor",
            Mode::Cdc => "cdc",
        };
        let tables: Vec<TableName> = match (text(&o.table), o.tables.is_empty()) {
            (Some(_), false) => return Err(at("tables", "set table or tables, not both".into())),
            (Some(t), true) => vec![TableName::parse(&t).map_err(|e| at("table", e))?],
            (None, false) if o.mode == Mode::Cursor => {
                return Err(at(
                    "tables",
                    "applies to mode = \"cdc\" only; a cursor stream reads one table".into(),
                ))
            }
            (None, false) => {
                let mut out: Vec<TableName> = Vec::new();
                for t in &o.tables {
                    let name = TableName::parse(t.as_str()).map_err(|e| at("tables", e))?;
                    if name.name == "*" && name.schema.is_none() {
                        return Err(at("tables", "\"*\" needs its schema: \"public.*\"".into()));
                    }
                    if !out.contains(&name) {
                        out.push(name);
                    }
                }
                out
            }
            (None, true) => {
                return Err(at(
                    "table",
                    format!("table is required for mode = \"{mode_name}\""),
                ))
            }
        };
        let table = tables[0].clone();
        let only = |key: &str, set: bool, mode: &str| match set {
            true => Err(at(key, format!("applies to mode = \"{mode}\" only"))),
            false => Ok(()),
        };
        let cursor = match o.mode {
            Mode::Cursor => text(&o.cursor).ok_or_else(|| {
                at(
                    "cursor",
                    "cursor (a monotonic column such as a bigserial id or updated_at) is required for mode = \"cursor\"".into(),
                )
            })?,
            Mode::Cdc => {
                only("cursor", o.cursor.is_some(), "cursor")?;
                only("poll_interval", o.poll_interval.is_some(), "cursor")?;
                only("primary_key", !o.primary_key.is_empty(), "cursor")?;
                String::new()
            }
        };
        if o.mode == Mode::Cursor {
            only("slot", o.slot.is_some(), "cdc")?;
            only("publication", o.publication.is_some(), "cdc")?;
            only("snapshot", o.snapshot.is_some(), "cdc")?;
            only(
                "snapshot_connections",
                o.snapshot_connections.is_some(),
                "cdc",
            )?;
            only(
                "transaction_metadata",
                o.transaction_metadata.is_some(),
                "cdc",
            )?;
            only(
                "transaction_markers",
                o.transaction_markers.is_some(),
                "cdc",
            )?;
            only("heartbeat_interval", o.heartbeat_interval.is_some(), "cdc")?;
        }
        let per_table = PerTable::new(o.per_table.clone(), o.mask_salt.clone())
            .map_err(|(key, why)| at(key, why))?;
        for name in per_table.names() {
            let t = TableName::parse(name).map_err(|e| at("per_table", e))?;
            let read = tables.iter().any(|c| {
                c.name == t.name && (t.schema.is_none() || c.schema == t.schema)
                    || c.name == "*" && c.schema == t.schema
            });
            if !read {
                return Err(at(
                    "per_table",
                    format!("{name:?} is not a table this source reads"),
                ));
            }
        }
        let slot = text(&o.slot);
        if let Some(bad) = slot.as_deref().and_then(bad_slot_name) {
            return Err(at("slot", bad));
        }
        let poll_interval = o.poll_interval.map_or(Duration::from_secs(1), |d| d.0);
        if poll_interval.is_zero() {
            return Err(at("poll_interval", "must be more than 0".into()));
        }
        let snapshot_connections = o
            .snapshot_connections
            .unwrap_or(DEFAULT_SNAPSHOT_CONNECTIONS);
        if !(1..=MAX_SNAPSHOT_CONNECTIONS).contains(&snapshot_connections) {
            return Err(at(
                "snapshot_connections",
                format!("must be 1 to {MAX_SNAPSHOT_CONNECTIONS}"),
            ));
        }
        let heartbeat_interval = o.heartbeat_interval.map(|d| d.0);
        if heartbeat_interval.is_some_and(|d| d < Duration::from_secs(1)) {
            return Err(at("heartbeat_interval", "must be at least 1s".into()));
        }
        Ok(PostgresSettings {
            endpoint: Endpoint {
                host: text(&o.host).unwrap_or_else(|| "127.0.0.1".into()),
                port: o.port.unwrap_or(5432),
                database: text(&o.database),
                username: text(&o.username),
                password: o.password.clone().filter(|p| !p.is_empty()),
                tls: o.tls,
                tls_ca_file: text(&o.tls_ca_file).map(PathBuf::from),
            },
            mode: o.mode,
            table,
            tables,
            cursor,
            primary_key: o.primary_key.iter().map(|k| k.0.clone()).collect(),
            poll_interval,
            slot,
            publication: text(&o.publication),
            snapshot: o.snapshot.unwrap_or_default(),
            snapshot_connections,
            transaction_metadata: o.transaction_metadata.unwrap_or(false),
            transaction_markers: o.transaction_markers.unwrap_or(false),
            heartbeat_interval,
            per_table,
            filter: None,
        })
    }

    /// The server's options (TLS as [`Endpoint::tls_on`] says), the
    /// connection named `abrq source` on the server.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.endpoint.postgres("abrq source")
    }

    /// Where the source reads, for messages (never the password).
    pub fn describe(&self) -> String {
        let names: Vec<String> = self.tables.iter().map(ToString::to_string).collect();
        format!(
            "postgres://{} table{} {}",
            self.endpoint,
            if names.len() == 1 { "" } else { "s" },
            names.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_never_meet() {
        assert_eq!(derived_name("orders"), "abrq_orders");
        let long = "x".repeat(70);
        let names = [
            "shop-a".to_string(),
            "shop_a".to_string(),
            "Orders".to_string(),
            "orders".to_string(),
            format!("{long}1"),
            format!("{long}2"),
            "échange".to_string(),
        ];
        let derived: std::collections::HashSet<String> =
            names.iter().map(|n| derived_name(n)).collect();
        assert_eq!(derived.len(), names.len(), "{derived:?}");
        for name in &derived {
            assert!(bad_slot_name(name).is_none(), "{name}");
        }
        // a stream made before keeps the name it had then
        assert_eq!(legacy_derived_name("shop-a"), "abrq_shop_a");
    }

    #[test]
    fn table_names_split_at_unquoted_dots() {
        let t = TableName::parse("public.Orders").unwrap();
        assert_eq!(t.schema.as_deref(), Some("public"));
        assert_eq!(t.name, "orders");
        let t = TableName::parse("\"My.Schema\".\"Or\"\"ders\"").unwrap();
        assert_eq!(t.schema.as_deref(), Some("My.Schema"));
        assert_eq!(t.name, "Or\"ders");
        assert_eq!(t.quoted(), "\"My.Schema\".\"Or\"\"ders\"");
        assert!(TableName::parse("a.b.c").is_err());
        assert!(TableName::parse("a.").is_err());
        assert!(TableName::parse("\"a").is_err());
    }
}
