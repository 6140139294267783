//! What to compare, from the config: the source's server and tables with
//! their masks and filters, the replica's server and the table each
//! source table is written to. Checked without I/O, so a refused pair
//! answers at once.

use abrq_core::config::{DestinationConfig, SourceConfig, SourceEngine};
use abrq_core::TableRef;
use abrq_endpoint::Endpoint;
use abrq_sinks::relational::{DeletePolicy, RelationalSettings, WriteMode};
use abrq_sources::filter::{self, Expr};
use abrq_sources::per_table::PerTable;

use crate::sql::Dialect;

/// A captured table as the config names it.
#[derive(Debug, Clone)]
pub struct Captured {
    /// None: PostgreSQL's search path, MySQL's `database`.
    pub schema: Option<String>,
    /// `*`: every table of the schema.
    pub name: String,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub stream: String,
    pub destination: String,
    pub dialect: Dialect,
    pub source: Endpoint,
    pub tables: Vec<Captured>,
    pub per_table: PerTable,
    pub replica: RelationalSettings,
    /// The source can read rows again (`--repair`'s backfill).
    pub backfills: bool,
}

impl Plan {
    pub fn new(
        stream: &str,
        source: &SourceConfig,
        dest: &DestinationConfig,
    ) -> Result<Plan, String> {
        let replica = RelationalSettings::from_config(stream, dest).map_err(|_| {
            format!(
                "destination {:?} is {}: verify compares a postgres or mysql replica with its source",
                dest.name.as_str(),
                dest.engine.as_str()
            )
        })?;
        if replica.mode != WriteMode::Upsert {
            return Err(format!(
                "destination {:?} appends every change (mode = \"append\"): only a replica kept in \
                 mode = \"upsert\" holds one row per source row to compare",
                dest.name.as_str()
            ));
        }
        let (dialect, endpoint, tables, per_table) = match source.engine {
            SourceEngine::Postgres => {
                let s = abrq_sources::postgres::PostgresSettings::from_config(source)?;
                let tables = s
                    .tables
                    .iter()
                    .map(|t| Captured {
                        schema: t.schema.clone(),
                        name: t.name.clone(),
                    })
                    .collect();
                (Dialect::Postgres, s.endpoint, tables, s.per_table)
            }
            SourceEngine::Mysql => {
                let s = abrq_sources::mysql::MysqlSettings::from_config(source)?;
                let tables = s
                    .tables
                    .iter()
                    .map(|t| Captured {
                        schema: Some(t.database.clone()),
                        name: t.name.clone(),
                    })
                    .collect();
                (Dialect::Mysql, s.endpoint, tables, s.per_table)
            }
            other => {
                return Err(format!(
                "stream {stream:?} reads a {} source: verify compares a database source's tables",
                other.as_str()
            ))
            }
        };
        let same = matches!(
            (dialect, replica.dialect),
            (
                Dialect::Postgres,
                abrq_sinks::relational::types::Dialect::Postgres
            ) | (
                Dialect::Mysql,
                abrq_sinks::relational::types::Dialect::Mysql
            )
        );
        if !same {
            return Err(format!(
                "destination {:?} is on another engine than the source: verify compares checksums \
                 each database computes, so source and replica must both be PostgreSQL or both MySQL",
                dest.name.as_str()
            ));
        }
        Ok(Plan {
            stream: stream.into(),
            destination: dest.name.as_str().into(),
            dialect,
            source: endpoint,
            tables,
            per_table,
            replica,
            backfills: abrq_sources::backfills(source),
        })
    }

    /// The replica table of a source table, and its schema (None: the
    /// connection's own).
    pub fn replica_of(&self, t: &TableRef) -> Result<(Option<String>, String), String> {
        let name = self.replica.target(Some(t))?;
        Ok((self.replica.schema.clone(), name))
    }

    /// Rows of the replica that count: under soft deletes, the live ones.
    pub fn replica_only(&self) -> Option<String> {
        (self.replica.deletes == DeletePolicy::Soft).then(|| {
            format!(
                "{} IS NULL",
                self.dialect
                    .quote(abrq_sinks::relational::plan::SOFT_DELETED)
            )
        })
    }

    /// The source rows that reach the replica: the table's `where`, as SQL.
    pub fn source_only(&self, t: &TableRef) -> Option<String> {
        let d = match self.dialect {
            Dialect::Postgres => filter::Dialect::Postgres,
            Dialect::Mysql => filter::Dialect::Mysql,
        };
        self.per_table.filter(t).map(|e: &Expr| e.to_sql(d))
    }
}
