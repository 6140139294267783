//! The cross-engine oracle: a replica on the other engine (PostgreSQL
//! types in MySQL, MariaDB types in PostgreSQL) read back through its own
//! client, each value as that server prints it, against the JSON value
//! the JSON lines history holds for it. The history is itself checked
//! against the source (copy and stream in one form; the same-engine
//! replica equal), so equal here means equal to the source.
//!
//! The other engine prints a value in its own way, so equal means: the
//! same text; or the same decimal (trailing zeros aside); or the same
//! float; or the same instant (an RFC 3339 value against a UTC
//! `YYYY-MM-DD HH:MM:SS.ffffff`); or the same JSON (a JSON value against
//! a json or text column's JSON text); or `true`/`false` against 1/0.

use std::collections::BTreeMap;

use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use chrono::{DateTime, NaiveDateTime};
use serde_json::{Map, Value};

/// Every column of `names`, of every row, as MySQL prints it.
pub async fn mysql_printed(
    pool: &MySqlPool,
    table: &str,
    names: &[&str],
) -> BTreeMap<i32, Vec<Option<String>>> {
    let exprs: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    mysql_rows(pool, table, &exprs).await
}

/// `exprs` of every row, as MySQL prints them (`id` the row's key).
pub async fn mysql_rows(
    pool: &MySqlPool,
    table: &str,
    exprs: &[String],
) -> BTreeMap<i32, Vec<Option<String>>> {
    let cols: Vec<String> = exprs
        .iter()
        .map(|e| format!("COALESCE(CAST({e} AS CHAR), '<null>')"))
        .collect();
    let sql = format!(
        "SELECT id, CONCAT_WS(CHAR(1), {}) FROM {table}",
        cols.join(", ")
    );
    sqlx::query_as::<_, (i32, String)>(&sql)
        .fetch_all(pool)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(id, all)| {
            let values = all
                .split('\u{1}')
                .map(|v| (v != "<null>").then(|| v.to_string()))
                .collect();
            (id, values)
        })
        .collect()
}

/// Every column of `names`, of every row, as PostgreSQL prints it.
pub async fn pg_printed(
    pool: &PgPool,
    table: &str,
    names: &[&str],
) -> BTreeMap<i32, Vec<Option<String>>> {
    let exprs: Vec<String> = names
        .iter()
        .map(|n| format!("\"{}\"::text", n.replace('"', "\"\"")))
        .collect();
    pg_rows(pool, table, &exprs).await
}

/// `exprs` (text) of every row, as PostgreSQL prints them (`id` the
/// row's key).
pub async fn pg_rows(
    pool: &PgPool,
    table: &str,
    exprs: &[String],
) -> BTreeMap<i32, Vec<Option<String>>> {
    let sql = format!("SELECT id, ARRAY[{}] FROM {table}", exprs.join(", "));
    sqlx::query_as::<_, (i32, Vec<Option<String>>)>(&sql)
        .fetch_all(pool)
        .await
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// Every value of `names` the other engine's `got` holds otherwise than
/// the history, and every row it lacks.
pub fn differences(
    history: &BTreeMap<i32, Map<String, Value>>,
    got: &BTreeMap<i32, Vec<Option<String>>>,
    names: &[&str],
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (id, record) in history {
        let Some(values) = got.get(id) else {
            wrong.push(format!("row {id}: missing"));
            continue;
        };
        for (name, g) in names.iter().zip(values) {
            let want = record.get(*name).unwrap_or(&Value::Null);
            if !same_value(want, g.as_deref()) {
                let mut shown = want.to_string();
                shown.truncate(120);
                wrong.push(format!("row {id}, column {name}: {g:?} for {shown}"));
            }
        }
    }
    if got.len() != history.len() {
        wrong.push(format!("{} rows for {}", got.len(), history.len()));
    }
    wrong
}

/// Fails naming the first differences `differences` found at `what`.
pub fn assert_none(what: &str, wrong: &[String]) {
    assert!(
        wrong.is_empty(),
        "{what} differs from the history ({} values), first: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// Whether the other engine's `got` is the history's `want`.
pub fn same_value(want: &Value, got: Option<&str>) -> bool {
    let Some(got) = got else {
        return want.is_null();
    };
    match want {
        Value::Null => false,
        Value::Bool(b) => matches!(
            (b, got),
            (true, "1" | "t" | "true") | (false, "0" | "f" | "false")
        ),
        Value::Number(n) => same_number(&n.to_string(), got),
        Value::String(s) => {
            s == got || same_number(s, got) || same_instant(s, got) || same_json(want, got)
        }
        Value::Array(_) | Value::Object(_) => same_json(want, got),
    }
}

fn same_json(want: &Value, got: &str) -> bool {
    abrq_core::json::from_str::<Value>(got).is_ok_and(|g| &g == want)
}

/// Equal decimals (trailing zeros aside), or equal floats.
fn same_number(a: &str, b: &str) -> bool {
    if let (Some(x), Some(y)) = (decimal(a), decimal(b)) {
        if x == y {
            return true;
        }
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y || (x as f32) == (y as f32),
        _ => false,
    }
}

/// A plain decimal as (negative, integer digits, fraction digits), with
/// no leading or trailing zeros.
fn decimal(s: &str) -> Option<(bool, String, String)> {
    let (neg, t) = match s.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, s),
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int = int.trim_start_matches('0').to_string();
    let frac = frac.trim_end_matches('0').to_string();
    let zero = int.is_empty() && frac.is_empty();
    Some((neg && !zero, int, frac))
}

/// An RFC 3339 instant (with or without offset) and a UTC
/// `YYYY-MM-DD HH:MM:SS[.ffffff]` (either side), or the same day.
fn same_instant(a: &str, b: &str) -> bool {
    match (instant(a), instant(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn instant(s: &str) -> Option<NaiveDateTime> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.naive_utc());
    }
    if let Ok(t) = DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z") {
        return Some(t.naive_utc());
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Some(t);
        }
    }
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn forms_of_one_value_are_equal_and_others_are_not() {
        assert!(same_value(&json!("1.50"), Some("1.500000")));
        assert!(same_value(&json!(-3), Some("-3")));
        assert!(same_value(&json!(true), Some("1")));
        assert!(same_value(
            &json!("2026-06-30T23:59:59.999999+14:00"),
            Some("2026-06-30 09:59:59.999999")
        ));
        assert!(same_value(
            &json!([1, {"b": null}]),
            Some("[1, {\"b\": null}]")
        ));
        assert!(same_value(&json!(null), None));
        assert!(!same_value(&json!("1.5"), Some("1.51")));
        assert!(!same_value(&json!("x"), None));
        assert!(!same_value(&json!(null), Some("")));
        assert!(!same_value(
            &json!("2026-06-30T23:59:59+14:00"),
            Some("2026-06-30 23:59:59")
        ));
    }
}
