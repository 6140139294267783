//! A large table's copy split into ranges of its first key column, one
//! for each connection on the copy's snapshot, so several server
//! backends read it at once (as `pg_dump -j` reads several tables). The
//! bounds come from a sample of the table's pages read under the same
//! snapshot: the ranges hold about as many rows each, and together every
//! row, whatever the sample saw.

use sqlx::postgres::PgConnection;

use super::super::super::catalog;
use super::super::super::config::{quote, TableName};
use crate::cdc::cursor::KeyRange;
use crate::error::{Context as _, SourceError};

/// A part is worth a connection of its own from this size on.
const PART_BYTES: i64 = 8 << 20;
/// Pages the sample reads, about.
const SAMPLE_PAGES: f64 = 256.0;

/// At most `connections` ranges of `table` by `column` (its first key
/// column); one range with no bounds when the table is too small to be
/// worth splitting.
pub async fn ranges(
    conn: &mut PgConnection,
    table: &TableName,
    column: &str,
    connections: usize,
) -> Result<Vec<KeyRange>, SourceError> {
    let whole = vec![KeyRange {
        column: column.to_string(),
        above: None,
        upto: None,
    }];
    // a partitioned table's size is its partitions'
    let bytes: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(sum(pg_relation_size(h.relid)), 0)::int8 FROM {} h",
        catalog::HOLDERS
    ))
    .bind(table.quoted())
    .fetch_one(&mut *conn)
    .await
    .context("snapshot: cannot read the table's size")?;
    let parts = (bytes / PART_BYTES).clamp(1, connections as i64) as usize;
    if parts < 2 {
        return Ok(whole);
    }
    let pages = (bytes / 8192).max(1) as f64;
    let percent = (SAMPLE_PAGES / pages * 100.0).clamp(0.01, 100.0);
    let fractions: Vec<f64> = (1..parts).map(|i| i as f64 / parts as f64).collect();
    let sql = format!(
        "SELECT (percentile_disc($1::float8[]) WITHIN GROUP (ORDER BY s.k))::text[] \
         FROM (SELECT r.{col} AS k FROM {table} AS r TABLESAMPLE SYSTEM ({percent})) s",
        col = quote(column),
        table = table.quoted(),
    );
    let bounds: Option<Vec<Option<String>>> = sqlx::query_scalar(&sql)
        .bind(&fractions)
        .fetch_one(&mut *conn)
        .await
        .context("snapshot: cannot sample the table to split its copy")?;
    let mut bounds: Vec<String> = bounds.unwrap_or_default().into_iter().flatten().collect();
    // a skewed key repeats a bound: that range would be empty
    bounds.dedup();
    if bounds.is_empty() {
        return Ok(whole);
    }
    tracing::info!(%table, parts = bounds.len() + 1, "snapshot copy split");
    Ok(between(column, bounds))
}

/// The ranges `bounds` (in order) cut the column into: up to the first,
/// between each two, above the last.
fn between(column: &str, bounds: Vec<String>) -> Vec<KeyRange> {
    let lows = std::iter::once(None).chain(bounds.iter().cloned().map(Some));
    let highs = bounds
        .iter()
        .cloned()
        .map(Some)
        .chain(std::iter::once(None));
    lows.zip(highs)
        .map(|(above, upto)| KeyRange {
            column: column.to_string(),
            above,
            upto,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_cut_the_key_into_ranges_that_cover_it() {
        let r = between("id", vec!["10".into(), "20".into()]);
        let ends: Vec<(Option<&str>, Option<&str>)> = r
            .iter()
            .map(|r| (r.above.as_deref(), r.upto.as_deref()))
            .collect();
        assert_eq!(
            ends,
            vec![
                (None, Some("10")),
                (Some("10"), Some("20")),
                (Some("20"), None)
            ]
        );
    }
}
