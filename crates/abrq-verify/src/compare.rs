//! The comparison of one table: cut the key space into ranges of about
//! [`CHUNK`] source rows, checksum each range on both sides, and cut every
//! range that differs into [`FANOUT`] parts again until a part holds at
//! most [`LEAF`] rows, whose keys and row hashes both sides then list.
//! Equal ranges cost one checksum query per side; only differing ones are
//! looked into.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};

use crate::db::Db;
use crate::report::Kind;
use crate::sql::{Key, Query, Range, TableSql};

/// Rows per range of the first cut.
const CHUNK: u64 = 20_000;
/// A range this small is listed row by row.
const LEAF: u64 = 1_000;
/// Parts a differing range is cut into.
const FANOUT: u64 = 8;
/// Ranges checksummed at once (each on both sides).
const PARALLEL: usize = 2;
/// Keys per statement of a recheck.
const KEYS_PER_QUERY: usize = 500;

/// Both sides of one table.
pub struct Sides<'a> {
    pub src: &'a Db,
    pub dst: &'a Db,
    pub s: &'a TableSql,
    pub d: &'a TableSql,
}

/// A range's row count and hash sum on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sum {
    rows: u64,
    hash: String,
}

/// What a scan found: keys that differ, and what it counted.
#[derive(Debug, Default)]
pub struct Found {
    pub differing: BTreeMap<Key, Kind>,
    pub source_rows: u64,
    pub replica_rows: u64,
    pub ranges: u64,
}

fn sql_error(side: &str, e: sqlx::Error) -> String {
    format!("{side}: {e}")
}

fn sum_of(rows: Rows) -> Result<Sum, String> {
    let row = rows
        .into_iter()
        .next()
        .ok_or("a checksum answered no row")?;
    let rows = row
        .first()
        .cloned()
        .flatten()
        .and_then(|c| c.parse().ok())
        .ok_or("a checksum answered no count")?;
    let hash = row.get(1).cloned().flatten().unwrap_or_default();
    Ok(Sum { rows, hash })
}

/// Key texts and hash, per row.
fn hashes(rows: Rows, key_len: usize) -> BTreeMap<Key, String> {
    rows.into_iter()
        .map(|mut r| {
            let hash = r.pop().flatten().unwrap_or_default();
            r.truncate(key_len);
            (r.into_iter().map(Option::unwrap_or_default).collect(), hash)
        })
        .collect()
}

/// Keys that differ between two listings of the same keys or range.
fn differ(src: &BTreeMap<Key, String>, dst: &BTreeMap<Key, String>, out: &mut BTreeMap<Key, Kind>) {
    for (k, h) in src {
        match dst.get(k) {
            None => {
                out.insert(k.clone(), Kind::Missing);
            }
            Some(d) if d != h => {
                out.insert(k.clone(), Kind::Changed);
            }
            Some(_) => {}
        }
    }
    for k in dst.keys().filter(|k| !src.contains_key(*k)) {
        out.insert(k.clone(), Kind::Extra);
    }
}

/// `whole` cut at `points` (ascending, inside it).
fn cut(whole: &Range, points: Vec<Key>) -> Vec<Range> {
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut lo = whole.lo.clone();
    for p in points {
        out.push(Range {
            lo,
            hi: Some(p.clone()),
        });
        lo = Some(p);
    }
    out.push(Range {
        lo,
        hi: whole.hi.clone(),
    });
    out
}

type Rows = Vec<Vec<Option<String>>>;

impl Sides<'_> {
    /// `s` on the source and `d` on the replica, at once.
    async fn both(&self, s: Query, d: Query) -> Result<(Rows, Rows), String> {
        let (a, b) = tokio::join!(self.src.texts(&s), self.dst.texts(&d));
        Ok((
            a.map_err(|e| sql_error("source", e))?,
            b.map_err(|e| sql_error("replica", e))?,
        ))
    }

    async fn sums(&self, r: &Range) -> Result<(Sum, Sum), String> {
        let (a, b) = self.both(self.s.checksum(r), self.d.checksum(r)).await?;
        Ok((sum_of(a)?, sum_of(b)?))
    }

    async fn points(&self, on_source: bool, r: &Range, step: u64) -> Result<Vec<Key>, String> {
        let (db, t, side) = match on_source {
            true => (self.src, self.s, "source"),
            false => (self.dst, self.d, "replica"),
        };
        let rows = db
            .texts(&t.split_points(r, step.max(1)))
            .await
            .map_err(|e| sql_error(side, e))?;
        Ok(rows
            .into_iter()
            .map(|r| r.into_iter().map(Option::unwrap_or_default).collect())
            .collect())
    }

    /// Checksums of `ranges`, two at a time, each with its range.
    async fn sums_of(&self, ranges: Vec<Range>) -> Result<Vec<(Range, Sum, Sum)>, String> {
        futures::stream::iter(ranges)
            .map(|r| async move {
                let (a, b) = self.sums(&r).await?;
                Ok::<_, String>((r, a, b))
            })
            .buffered(PARALLEL)
            .try_collect()
            .await
    }

    /// Scans the whole table.
    pub async fn scan(&self) -> Result<Found, String> {
        let mut found = Found::default();
        let whole = Range::default();
        let top = cut(&whole, self.points(true, &whole, CHUNK).await?);
        let mut todo = Vec::new();
        found.ranges += top.len() as u64;
        for (r, a, b) in self.sums_of(top).await? {
            found.source_rows += a.rows;
            found.replica_rows += b.rows;
            if a != b {
                todo.push((r, a.rows.max(b.rows), a.rows >= b.rows));
            }
        }
        while let Some((r, rows, source_fuller)) = todo.pop() {
            if rows <= LEAF {
                self.list(&r, &mut found.differing).await?;
                continue;
            }
            let step = rows.div_ceil(FANOUT);
            let parts = cut(&r, self.points(source_fuller, &r, step).await?);
            found.ranges += parts.len() as u64;
            for (p, a, b) in self.sums_of(parts).await? {
                if a != b {
                    todo.push((p, a.rows.max(b.rows), a.rows >= b.rows));
                }
            }
        }
        Ok(found)
    }

    /// Lists a small range on both sides and adds the keys that differ.
    async fn list(&self, r: &Range, out: &mut BTreeMap<Key, Kind>) -> Result<(), String> {
        let (a, b) = self.both(self.s.rows(r), self.d.rows(r)).await?;
        let n = self.s.key.len();
        differ(&hashes(a, n), &hashes(b, n), out);
        Ok(())
    }

    /// Which of `keys` differ now.
    pub async fn recheck(&self, keys: &[Key]) -> Result<BTreeMap<Key, Kind>, String> {
        let mut out = BTreeMap::new();
        let n = self.s.key.len();
        for part in keys.chunks(KEYS_PER_QUERY) {
            let (a, b) = self
                .both(self.s.rows_by_key(part), self.d.rows_by_key(part))
                .await?;
            differ(&hashes(a, n), &hashes(b, n), &mut out);
        }
        Ok(out)
    }

    /// Deletes the replica's rows with these keys.
    pub async fn delete(&self, keys: &[Key]) -> Result<u64, String> {
        let mut n = 0;
        for part in keys.chunks(KEYS_PER_QUERY) {
            n += self
                .dst
                .execute(&self.d.delete_by_key(part))
                .await
                .map_err(|e| sql_error("replica", e))?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Key {
        vec![s.to_string()]
    }

    #[test]
    fn listings_differ_by_kind() {
        let src = BTreeMap::from([
            (k("1"), "a".into()),
            (k("2"), "b".into()),
            (k("3"), "c".into()),
        ]);
        let dst = BTreeMap::from([
            (k("1"), "a".into()),
            (k("3"), "x".into()),
            (k("4"), "d".into()),
        ]);
        let mut out = BTreeMap::new();
        differ(&src, &dst, &mut out);
        assert_eq!(
            out,
            BTreeMap::from([
                (k("2"), Kind::Missing),
                (k("3"), Kind::Changed),
                (k("4"), Kind::Extra)
            ])
        );
    }

    #[test]
    fn a_cut_covers_the_range_without_overlap() {
        let whole = Range {
            lo: Some(k("0")),
            hi: None,
        };
        let parts = cut(&whole, vec![k("5"), k("9")]);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].lo, Some(k("0")));
        assert_eq!(parts[0].hi, Some(k("5")));
        assert_eq!(parts[1].lo, Some(k("5")));
        assert_eq!(parts[2].lo, Some(k("9")));
        assert_eq!(parts[2].hi, None);
    }
}
