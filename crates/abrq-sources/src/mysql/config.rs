//! The `mysql` source's keys, checked without I/O. Connection fields:
//! `host` (127.0.0.1), `port` (3306), `database` (the default database of
//! unqualified table names), `username`, `password`. Own keys: `mode`
//! (`cursor`, the default, or `cdc`), `table` (`name` or `database.name`);
//! for `cursor`: `cursor` (the monotonic column), `poll_interval` (1s); for
//! `cdc`: `tables` instead of `table` for several, `server_id`
//! (the replica id abrq registers with; derived from the stream unless
//! set), `snapshot` (`initial`, the default: copy the rows first; `never`:
//! only changes from the stream's start).

use std::collections::BTreeMap;
use std::time::Duration;

use abrq_core::config::{Dur, Secret, SourceConfig, Text};

use crate::config::{key_error, text};
use crate::per_table::{PerTable, TableOptions};
use abrq_endpoint::Endpoint;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MysqlOptions {
    host: Option<Text>,
    port: Option<u16>,
    database: Option<Text>,
    username: Option<Text>,
    password: Option<Secret>,
    mode: Option<Text>,
    table: Option<Text>,
    #[serde(default)]
    tables: Vec<Text>,
    server_id: Option<u32>,
    snapshot: Option<Text>,
    cursor: Option<Text>,
    poll_interval: Option<Dur>,
    transaction_metadata: Option<bool>,
    transaction_markers: Option<bool>,
    #[serde(default)]
    per_table: BTreeMap<String, TableOptions>,
    mask_salt: Option<Secret>,
}

/// A table: its database and name, as the server spells them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    pub database: String,
    pub name: String,
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.database, self.name)
    }
}

/// An identifier quoted for MySQL.
pub fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

impl TableName {
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote(&self.database), quote(&self.name))
    }
}

#[derive(Debug, Clone)]
pub struct MysqlSettings {
    /// The server, the default database of unqualified table names, and
    /// the credentials (this source has no TLS).
    pub endpoint: Endpoint,
    pub tables: Vec<TableName>,
    pub server_id: Option<u32>,
    /// Copy the tables' rows before streaming (`snapshot = "initial"`).
    pub snapshot: bool,
    pub mode: Mode,
    /// The monotonic column (cursor mode).
    pub cursor: Option<String>,
    pub poll_interval: Duration,
    /// Each change carries `_abrq_tx` (cdc).
    pub transaction_metadata: bool,
    /// Transactions begin and commit with markers (cdc).
    pub transaction_markers: bool,
    /// Columns left out or masked, per table.
    pub per_table: PerTable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Poll by a monotonic column with the primary key as tie-break.
    Cursor,
    /// The row-based binlog.
    Cdc,
}

impl MysqlSettings {
    pub fn from_config(cfg: &SourceConfig) -> Result<MysqlSettings, String> {
        let o: MysqlOptions = cfg.options.parse()?;
        let at = |key: &str, why: String| key_error(cfg, key, why);
        let only = |key: &str, set: bool, mode: &str| match set {
            true => Err(at(key, format!("applies to mode = \"{mode}\" only"))),
            false => Ok(()),
        };
        let mode = match text(&o.mode).as_deref() {
            Some("cdc") => {
                only("cursor", o.cursor.is_some(), "cursor")?;
                only("poll_interval", o.poll_interval.is_some(), "cursor")?;
                Mode::Cdc
            }
            Some("cursor") | None => {
                only("server_id", o.server_id.is_some(), "cdc")?;
                only("snapshot", o.snapshot.is_some(), "cdc")?;
                only("tables", !o.tables.is_empty(), "cdc")?;
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
                if text(&o.cursor).is_none() {
                    return Err(at(
                        "cursor",
                        "cursor (a monotonic column such as an auto-increment id or updated_at) is required for mode = \"cursor\"".into(),
                    ));
                }
                Mode::Cursor
            }
            Some(other) => {
                return Err(at(
                    "mode",
                    format!("{other:?} is not a mode: \"cursor\" or \"cdc\""),
                ))
            }
        };
        let poll_interval = o.poll_interval.map_or(Duration::from_secs(1), |d| d.0);
        if poll_interval.is_zero() {
            return Err(at("poll_interval", "must be more than 0".into()));
        }
        let snapshot = match text(&o.snapshot).as_deref() {
            Some("never") => false,
            None | Some("initial") => true,
            Some(other) => {
                return Err(at(
                    "snapshot",
                    format!("{other:?} is not a snapshot mode: \"initial\" or \"never\""),
                ))
            }
        };
        let database = text(&o.database);
        let names: Vec<String> = match (text(&o.table), o.tables.is_empty()) {
            (Some(_), false) => return Err(at("tables", "set table or tables, not both".into())),
            (Some(t), true) => vec![t],
            (None, false) => o.tables.iter().map(|t| t.as_str().to_string()).collect(),
            (None, true) => return Err(at("table", "table is required".into())),
        };
        let mut tables = Vec::new();
        for n in names {
            let (db, name) = match n.split_once('.') {
                Some((db, name)) => (
                    db.trim_matches('`').to_string(),
                    name.trim_matches('`').to_string(),
                ),
                None => match &database {
                    Some(db) => (db.clone(), n.trim_matches('`').to_string()),
                    None => {
                        return Err(at(
                            "table",
                            format!("{n:?} names no database: write database.{n} or set database"),
                        ))
                    }
                },
            };
            if db.is_empty() || name.is_empty() {
                return Err(at("table", format!("{n:?} is not a table name")));
            }
            let t = TableName { database: db, name };
            if !tables.contains(&t) {
                tables.push(t);
            }
        }
        let per_table = PerTable::new(o.per_table.clone(), o.mask_salt.clone())
            .map_err(|(key, why)| at(key, why))?;
        for name in per_table.names() {
            let (db, t) = match name.split_once('.') {
                Some((db, t)) => (Some(db), t),
                None => (None, name),
            };
            let read = tables.iter().any(|c: &TableName| {
                (c.name == t || c.name == "*") && db.is_none_or(|d| d == c.database)
            });
            if !read {
                return Err(at(
                    "per_table",
                    format!("{name:?} is not a table this source reads"),
                ));
            }
        }
        Ok(MysqlSettings {
            endpoint: Endpoint {
                host: text(&o.host).unwrap_or_else(|| "127.0.0.1".into()),
                port: o.port.unwrap_or(3306),
                database,
                username: text(&o.username),
                password: o.password.clone().filter(|p| !p.is_empty()),
                tls: false,
                tls_ca_file: None,
            },
            tables,
            server_id: o.server_id,
            snapshot,
            mode,
            cursor: text(&o.cursor),
            poll_interval,
            transaction_metadata: o.transaction_metadata.unwrap_or(false),
            transaction_markers: o.transaction_markers.unwrap_or(false),
            per_table,
        })
    }

    /// The replica id: configured, or drawn at random when the source
    /// opens. Two replicas with one id disconnect each other (ERROR
    /// 4052), and a stream's name is not unique across deployments that
    /// share a server, so no id is derived from it.
    pub fn server_id_for(&self, stream: &str) -> u32 {
        self.server_id.unwrap_or_else(|| {
            let drawn = abrq_core::staging_nonce();
            let b = drawn.as_bytes();
            let h = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            tracing::debug!(%stream, "a server_id drawn for the binlog session");
            // clear of the small ids servers are usually given
            1_000_000 + h % 1_000_000_000
        })
    }

    /// The server's options; the user is root when none is given.
    /// Every session in UTC: a TIMESTAMP reads as the UTC date and time
    /// the binlog's epoch seconds give, in the copy as in the stream.
    pub fn opts(&self) -> mysql_async::Opts {
        mysql_async::OptsBuilder::from_opts(self.endpoint.mysql_async())
            .init(vec!["SET time_zone = '+00:00'"])
            .into()
    }

    /// Where the source reads, for messages (never the password).
    pub fn describe(&self) -> String {
        let names: Vec<String> = self.tables.iter().map(ToString::to_string).collect();
        format!(
            "mysql://{}:{} tables {}",
            self.endpoint.host,
            self.endpoint.port,
            names.join(", ")
        )
    }
}
