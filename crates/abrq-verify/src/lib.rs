//! `abrq verify`: proof that a relational replica equals its source,
//! without stopping the stream.
//!
//! Per table: checksums over primary-key ranges, computed by each database
//! (`compare.rs`, statements in `sql.rs`), ranges that differ bisected down
//! to the keys. A key that differs may only be a change still in flight,
//! so the differing keys are read again on both sides once the destination
//! has delivered what the source had staged (the [`Pipeline`]'s `settle`),
//! up to three times; a key still different then is reported. `--repair`
//! deletes the replica's extra rows and has the source read the missing
//! and changed keys again (a backfill with a key filter), then checks
//! those keys until they match or a minute has passed.

mod compare;
mod db;
mod plan;
mod report;
mod sql;

use abrq_core::TableRef;
use serde_json::{Map, Value};

pub use plan::Plan;
pub use report::{Difference, Kind, Repair, Report, State, TableReport};

use compare::Sides;
use db::{form_of, source_form, CatalogColumn, Db};
use sql::{qualified, Column, Form, Key, TableSql};

/// How often differing keys are read again after the destination caught up.
const RECHECKS: usize = 3;
/// Differences listed per table.
const LISTED: usize = 1_000;
/// How long a repair waits for its backfill to arrive.
const REPAIR_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What verification asks of the running stream.
#[async_trait::async_trait]
pub trait Pipeline: Send + Sync {
    /// Returns once the destination has delivered everything the source
    /// had read when it was called (or says why it could not).
    async fn settle(&self) -> Result<(), String>;
    /// Asks the source to read `table`'s rows this filter keeps again.
    async fn backfill(&self, table: &str, filter: &str) -> Result<(), String>;
}

/// Compares the replica with the source: every captured table, or `only`.
/// Tables are added to `report` as they finish; an error that stops the
/// whole run (a connection, an unknown table) is returned.
pub async fn run(
    plan: &Plan,
    only: Option<&str>,
    repair: bool,
    pipeline: &dyn Pipeline,
    report: &std::sync::Mutex<Report>,
) -> Result<(), String> {
    let src = Db::connect(plan.dialect, &plan.source)
        .await
        .map_err(|e| format!("source: {e}"))?;
    let dst = Db::connect(plan.dialect, &plan.replica.endpoint)
        .await
        .map_err(|e| format!("replica: {e}"))?;
    for t in tables(plan, &src, only).await? {
        let mut r = TableReport {
            table: t.to_string(),
            ..TableReport::default()
        };
        if let Err(e) = table(plan, &src, &dst, &t, repair, pipeline, &mut r).await {
            r.error = Some(e);
        }
        report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tables
            .push(r);
    }
    Ok(())
}

/// The captured tables, `*` expanded; only `only` when given.
async fn tables(plan: &Plan, src: &Db, only: Option<&str>) -> Result<Vec<TableRef>, String> {
    let mut out = Vec::new();
    let default = src
        .current_schema()
        .await
        .map_err(|e| format!("source: {e}"))?;
    for c in &plan.tables {
        let Some(schema) = c.schema.clone().or_else(|| default.clone()) else {
            return Err(format!("table {:?} names no database", c.name));
        };
        if c.name == "*" {
            for name in src
                .tables_of(&schema)
                .await
                .map_err(|e| format!("source: {e}"))?
            {
                out.push(TableRef {
                    schema: Some(schema.clone()),
                    name,
                });
            }
        } else {
            out.push(TableRef {
                schema: Some(schema),
                name: c.name.clone(),
            });
        }
    }
    let Some(only) = only else {
        return Ok(out);
    };
    let wanted: Vec<TableRef> = out
        .into_iter()
        .filter(|t| t.to_string() == only || t.name == only)
        .collect();
    match wanted.len() {
        0 => Err(format!(
            "table {only:?} is not one stream {:?} captures",
            plan.stream
        )),
        1 => Ok(wanted),
        _ => Err(format!(
            "{only:?} names tables in several schemas: write schema.{only}"
        )),
    }
}

/// Compares one table, filling `r`.
async fn table(
    plan: &Plan,
    src: &Db,
    dst: &Db,
    t: &TableRef,
    repair: bool,
    pipeline: &dyn Pipeline,
    r: &mut TableReport,
) -> Result<(), String> {
    let d = plan.dialect;
    let (rschema, rname) = plan.replica_of(t)?;
    let rschema = match rschema {
        Some(s) => Some(s),
        None => dst
            .current_schema()
            .await
            .map_err(|e| format!("replica: {e}"))?,
    };
    r.replica = match &rschema {
        Some(s) => format!("{s}.{rname}"),
        None => rname.clone(),
    };
    let scols = src
        .columns(t.schema.as_deref(), &t.name)
        .await
        .map_err(|e| format!("source: {e}"))?
        .ok_or_else(|| format!("the source has no table {t}"))?;
    let dcols = dst
        .columns(rschema.as_deref(), &rname)
        .await
        .map_err(|e| format!("replica: {e}"))?
        .ok_or_else(|| format!("the replica has no table {} yet", r.replica))?;
    let (s, dsql) = shapes(plan, t, &scols, &dcols, r)?;
    let (s, dsql) = (
        TableSql {
            table: qualified(d, t.schema.as_deref(), &t.name),
            ..s
        },
        TableSql {
            table: qualified(d, rschema.as_deref(), &rname),
            ..dsql
        },
    );
    let sides = Sides {
        src,
        dst,
        s: &s,
        d: &dsql,
    };
    let found = sides.scan().await?;
    r.source_rows = found.source_rows;
    r.replica_rows = found.replica_rows;
    r.ranges = found.ranges;
    let first = found.differing.len() as u64;
    let mut left = found.differing;
    for _ in 0..RECHECKS {
        if left.is_empty() {
            break;
        }
        pipeline.settle().await?;
        let keys: Vec<Key> = left.keys().cloned().collect();
        left = sides.recheck(&keys).await?;
    }
    r.in_flight = first - left.len() as u64;
    let names: Vec<&str> = s.key.iter().map(|c| c.name.as_str()).collect();
    r.differences = left
        .iter()
        .take(LISTED)
        .map(|(k, kind)| Difference {
            key: key_map(&names, k),
            kind: *kind,
        })
        .collect();
    r.more = (left.len() as u64).saturating_sub(LISTED as u64);
    if repair && !left.is_empty() {
        r.repair = Some(mend(plan, t, &sides, &left, pipeline).await);
    }
    Ok(())
}

fn key_map(names: &[&str], key: &Key) -> Map<String, Value> {
    names
        .iter()
        .zip(key)
        .map(|(n, v)| (n.to_string(), Value::String(v.clone())))
        .collect()
}

/// Both sides' statements for a table (their `table` still to be set):
/// the key, the compared columns and which rows count.
fn shapes(
    plan: &Plan,
    t: &TableRef,
    scols: &[CatalogColumn],
    dcols: &[CatalogColumn],
    r: &mut TableReport,
) -> Result<(TableSql, TableSql), String> {
    let d = plan.dialect;
    let masked = plan.per_table.masked(t);
    let mut key: Vec<&CatalogColumn> = scols.iter().filter(|c| c.key.is_some()).collect();
    key.sort_by_key(|c| c.key);
    if key.is_empty() {
        return Err(format!(
            "{t} has no primary key: verify finds rows by their key"
        ));
    }
    let replica_col = |name: &str| dcols.iter().find(|c| c.name == name);
    let mut skey = Vec::new();
    let mut dkey = Vec::new();
    for c in &key {
        if masked.contains(&c.name) {
            return Err(format!(
                "key column {:?} is masked: the replica's keys are not the source's",
                c.name
            ));
        }
        let rc = replica_col(&c.name)
            .ok_or_else(|| format!("the replica {} has no key column {:?}", r.replica, c.name))?;
        skey.push(Column {
            name: c.name.clone(),
            form: form_of(d, c),
        });
        dkey.push(Column {
            name: c.name.clone(),
            form: form_of(d, rc),
        });
    }
    // (source form, replica form) per compared column
    let mut columns = Vec::new();
    for c in scols {
        if c.name.starts_with("_abrq_") {
            continue;
        }
        if masked.contains(&c.name) {
            r.skipped_columns.push(format!("{}: masked", c.name));
            continue;
        }
        let Some(rc) = replica_col(&c.name) else {
            r.skipped_columns
                .push(format!("{}: not in the replica", c.name));
            continue;
        };
        let column = |form| Column {
            name: c.name.clone(),
            form,
        };
        columns.push((column(source_form(d, c, rc)), column(form_of(d, rc))));
    }
    // the key first, as the report lists it
    columns.sort_by_key(|(c, _)| !key.iter().any(|k| k.name == c.name));
    r.columns = columns.iter().map(|(c, _)| c.name.clone()).collect();
    let (scolumns, dcolumns): (Vec<Column>, Vec<Column>) = columns.into_iter().unzip();
    let side = |key: Vec<Column>, columns: Vec<Column>, only: Option<String>| TableSql {
        dialect: d,
        table: String::new(),
        key,
        columns,
        only,
    };
    Ok((
        side(skey, scolumns, plan.source_only(t)),
        side(dkey, dcolumns, plan.replica_only()),
    ))
}

/// `--repair` for the keys in `left`.
async fn mend(
    plan: &Plan,
    t: &TableRef,
    sides: &Sides<'_>,
    left: &std::collections::BTreeMap<Key, Kind>,
    pipeline: &dyn Pipeline,
) -> Repair {
    let mut out = Repair::default();
    let extra: Vec<Key> = left
        .iter()
        .filter(|(_, k)| **k == Kind::Extra)
        .map(|(k, _)| k.clone())
        .collect();
    let read: Vec<Key> = left
        .iter()
        .filter(|(_, k)| **k != Kind::Extra)
        .map(|(k, _)| k.clone())
        .collect();
    let result = async {
        out.deleted = sides.delete(&extra).await?;
        if !read.is_empty() {
            if !plan.backfills {
                return Err(
                    "the source cannot read rows again: only a cdc source backfills".into(),
                );
            }
            let filter = key_filter(&sides.s.key, &read)?;
            pipeline.backfill(&t.to_string(), &filter).await?;
            out.backfilled = read.len() as u64;
            out.filter = Some(filter);
        }
        let all: Vec<Key> = left.keys().cloned().collect();
        let until = std::time::Instant::now() + REPAIR_WAIT;
        loop {
            pipeline.settle().await?;
            let still = sides.recheck(&all).await?;
            out.still_different = still.len() as u64;
            if still.is_empty() || std::time::Instant::now() >= until {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    .await;
    if let Err(e) = result {
        out.error = Some(e);
    }
    out
}

/// A filter in abrq's grammar that keeps exactly `keys`.
fn key_filter(key: &[Column], keys: &[Key]) -> Result<String, String> {
    let literal = |c: &Column, v: &str| -> Result<String, String> {
        let integer = match &c.form {
            Form::Pg(ty) => matches!(ty.as_str(), "smallint" | "integer" | "bigint"),
            Form::My { binary: true, .. } => {
                return Err(format!(
                    "key column {:?} is binary, which a backfill filter cannot name",
                    c.name
                ))
            }
            Form::My { cast, .. } => cast.as_deref() == Some("DECIMAL(65,0)"),
            Form::MyBytesAsText => false,
        };
        if let Form::Pg(ty) = &c.form {
            if ty == "bytea" {
                return Err(format!(
                    "key column {:?} is binary, which a backfill filter cannot name",
                    c.name
                ));
            }
        }
        Ok(match integer {
            true => v.to_string(),
            false => format!("'{}'", v.replace('\'', "''")),
        })
    };
    let name = |c: &Column| format!("\"{}\"", c.name.replace('"', "\"\""));
    if let [only] = key {
        let list: Result<Vec<String>, String> = keys.iter().map(|k| literal(only, &k[0])).collect();
        return Ok(format!("{} IN ({})", name(only), list?.join(", ")));
    }
    let mut ors = Vec::with_capacity(keys.len());
    for k in keys {
        let ands: Result<Vec<String>, String> = key
            .iter()
            .zip(k)
            .map(|(c, v)| Ok(format!("{} = {}", name(c), literal(c, v)?)))
            .collect();
        ors.push(format!("({})", ands?.join(" AND ")));
    }
    Ok(ors.join(" OR "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_filters_parse_in_the_backfill_grammar() {
        let id = Column {
            name: "id".into(),
            form: Form::Pg("bigint".into()),
        };
        let f = key_filter(
            std::slice::from_ref(&id),
            &[vec!["1".into()], vec!["20".into()]],
        )
        .unwrap();
        assert_eq!(f, "\"id\" IN (1, 20)");
        abrq_sources::filter::Expr::parse(&f).unwrap();
        let name = Column {
            name: "na\"me".into(),
            form: Form::Pg("text".into()),
        };
        let f = key_filter(&[id, name], &[vec!["1".into(), "o'k".into()]]).unwrap();
        assert_eq!(f, "(\"id\" = 1 AND \"na\"\"me\" = 'o''k')");
        let e = abrq_sources::filter::Expr::parse(&f).unwrap();
        assert_eq!(e.columns(), vec!["id", "na\"me"]);
    }
}
