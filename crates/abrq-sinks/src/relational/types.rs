//! Column types as abrq reasons about them, for both engines: what a JSON
//! value needs, whether a column can hold a value, and how a column widens
//! for a value it cannot hold.
//!
//! Exact widening keeps every stored value as it is and stays within a
//! kind: int -> bigint -> numeric, real -> double, numeric(p,s) -> numeric,
//! varchar(n) -> text, date -> timestamp. Widening to text also takes an
//! integer column to double precision for a fraction and any scalar column
//! to text for a value that is text, so a column ends up with the type its
//! values would have had in one batch, whichever batch came first: the
//! same lattice [`join`] uses for a new column.

use std::borrow::Cow;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Utc};
use serde_json::Value;

/// A column type. `Other` is a type abrq does not model (uuid, an enum,
/// time...): values are sent as text and the server converts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlType {
    Bool,
    /// Signed integer of 16, 32 or 64 bits.
    Int(u8),
    /// Approximate number of 32 or 64 bits.
    Float(u8),
    /// Exact number; `None` is unbounded (MySQL has no such thing and uses
    /// its widest decimal instead, see [`Dialect::unbounded_numeric`]).
    Numeric(Option<(u32, u32)>),
    /// Text with an optional length limit in characters.
    Text(Option<u32>),
    /// A calendar day: `date` in both.
    Date,
    /// An instant: `timestamptz` in PostgreSQL, UTC `datetime(6)` in MySQL.
    Timestamp,
    Json,
    /// `name` is the full type as the catalog spells it; `cast` the type to
    /// cast text to (PostgreSQL needs one for non-text types).
    Other {
        name: String,
        cast: String,
    },
}

/// How far a column may widen for a value it cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Within its kind, every stored value kept exactly.
    Exact,
    /// Also an integer column to double precision for a fraction, and a
    /// scalar column to text for a value that is text.
    Text,
}

/// The engines' spellings. Type names and quoting live in `dialect.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    /// The widest exact numeric the engine has.
    pub fn unbounded_numeric(self) -> SqlType {
        match self {
            Dialect::Postgres => SqlType::Numeric(None),
            Dialect::Mysql => SqlType::Numeric(Some((65, 30))),
        }
    }
}

/// One value ready to bind, converted for its column's type.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// An exact number as decimal text.
    Decimal(String),
    Text(Cow<'a, str>),
    Date(NaiveDate),
    Ts(DateTime<Utc>),
    Json(&'a Value),
}

impl Cell<'_> {
    /// Rough size on the wire, for keeping statements under packet limits.
    pub fn wire_len(&self) -> usize {
        match self {
            Cell::Null | Cell::Bool(_) => 1,
            Cell::Int(_) | Cell::Float(_) | Cell::Date(_) | Cell::Ts(_) => 8,
            Cell::Decimal(s) => s.len(),
            Cell::Text(s) => s.len(),
            // serialised length is not known without serialising; a JSON
            // value is bounded by the batch's bytes, so estimate generously
            Cell::Json(v) => json_len(v),
        }
    }
}

fn json_len(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|x| json_len(x) + 1).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, x)| k.len() + 4 + json_len(x))
                .sum::<usize>()
        }
    }
}

/// The type a lone JSON value asks for; `None` for null, which fits any
/// nullable column and never drives a schema change.
pub fn natural(v: &Value, d: Dialect) -> Option<SqlType> {
    match v {
        Value::Null => None,
        Value::Bool(_) => Some(SqlType::Bool),
        Value::Number(n) if n.is_i64() => Some(SqlType::Int(64)),
        Value::Number(n) if n.is_u64() => Some(d.unbounded_numeric()),
        Value::Number(_) => Some(SqlType::Float(64)),
        Value::String(s) if parse_date(s).is_some() => Some(SqlType::Date),
        Value::String(s) if parse_timestamp(s).is_some() => Some(SqlType::Timestamp),
        Value::String(_) => Some(SqlType::Text(None)),
        Value::Array(_) | Value::Object(_) => Some(SqlType::Json),
    }
}

/// `YYYY-MM-DD`, a day from year 1 on (the engines take no year 0).
pub fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' || !b[0].is_ascii_digit() {
        return None;
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .filter(|d| d.year() >= 1)
}

/// RFC 3339 with an offset, or a bare `YYYY-MM-DD[T ]HH:MM:SS[.f]` taken
/// as UTC (what MySQL `datetime` sources and pandas write).
pub fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    // cheap reject first: most text is not a date
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !b[0].is_ascii_digit() {
        return None;
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .map(|n| n.and_utc())
}

/// Bits 8 and 24 are MySQL's tinyint and mediumint.
fn int_range(bits: u8) -> (i64, i64) {
    if bits >= 64 {
        return (i64::MIN, i64::MAX);
    }
    let half = 1i64 << (bits - 1);
    (-half, half - 1)
}

/// Decimal digits an integer type needs, for numeric(p,s) containment.
fn int_digits(bits: u8) -> u32 {
    let (_, hi) = int_range(bits);
    hi.to_string().len() as u32
}

/// The number as plain decimal text, never in exponent form.
fn decimal_text(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (None, Some(u), _) => u.to_string(),
        (None, None, Some(f)) => format!("{f}"),
        // unreachable without serde_json's arbitrary_precision
        (None, None, None) => n.to_string(),
    }
}

fn as_int(n: &serde_json::Number) -> Option<i64> {
    n.as_i64().or_else(|| {
        // an integral float (3.0) is an integer to a database
        let f = n.as_f64()?;
        (f.fract() == 0.0 && f.abs() < 9.0e18).then_some(f as i64)
    })
}

/// `-12.50`, `3`, `.5`: digits with at most one point and a sign.
fn is_plain_decimal(t: &str) -> bool {
    let body = t.strip_prefix('-').unwrap_or(t);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    !(int.is_empty() && frac.is_empty())
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

fn digits_fit(text: &str, p: u32, s: u32) -> bool {
    let t = text.trim_start_matches('-');
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    int.len() as u32 <= p.saturating_sub(s) && frac.len() as u32 <= s
}

/// The value as a column of this type would need it as text.
fn text_of(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Value::Number(n) => Cow::Owned(decimal_text(n)),
        Value::Null => Cow::Borrowed(""),
        Value::Array(_) | Value::Object(_) => Cow::Owned(v.to_string()),
    }
}

/// Converts `v` for a column of type `ty`; `None` when the column cannot
/// hold it (a type drift).
pub fn cell<'a>(ty: &SqlType, v: &'a Value) -> Option<Cell<'a>> {
    if v.is_null() {
        return Some(Cell::Null);
    }
    match (ty, v) {
        (SqlType::Bool, Value::Bool(b)) => Some(Cell::Bool(*b)),
        (SqlType::Int(bits), Value::Number(n)) => {
            let (lo, hi) = int_range(*bits);
            as_int(n).filter(|i| (lo..=hi).contains(i)).map(Cell::Int)
        }
        (SqlType::Float(bits), Value::Number(n)) => {
            let f = n.as_f64()?;
            (*bits == 64 || (f as f32).is_finite()).then_some(Cell::Float(f))
        }
        // NaN and the infinities have no JSON number: sources send them
        // as these strings
        (SqlType::Float(_), Value::String(t)) => special_float(t).map(Cell::Float),
        (SqlType::Numeric(None), Value::String(t)) if special_float(t).is_some() => {
            Some(Cell::Decimal(t.clone()))
        }
        (SqlType::Numeric(limit), Value::Number(n)) => {
            let text = decimal_text(n);
            match limit {
                Some((p, s)) if !digits_fit(&text, *p, *s) => None,
                Some(_) | None => Some(Cell::Decimal(text)),
            }
        }
        // exact decimals travel as text (a JSON number would lose digits):
        // what database sources send for numeric columns
        (SqlType::Numeric(limit), Value::String(t)) if is_plain_decimal(t) => match limit {
            Some((p, s)) if !digits_fit(t, *p, *s) => None,
            Some(_) | None => Some(Cell::Decimal(t.clone())),
        },
        (SqlType::Text(limit), v) => {
            let t = text_of(v);
            match limit {
                Some(n) if t.chars().count() > *n as usize => None,
                Some(_) | None => Some(Cell::Text(t)),
            }
        }
        // PostgreSQL's own dates beyond chrono's: passed as the text the
        // server parses (elsewhere the server refuses them by name)
        (SqlType::Date | SqlType::Timestamp, Value::String(s)) if beyond_calendar(s) => {
            Some(Cell::Text(Cow::Borrowed(s.as_str())))
        }
        (SqlType::Date, Value::String(s)) => parse_date(s).map(Cell::Date),
        // a day is its first instant, in UTC
        (SqlType::Timestamp, Value::String(s)) => parse_timestamp(s)
            .or_else(|| Some(parse_date(s)?.and_time(chrono::NaiveTime::MIN).and_utc()))
            .map(Cell::Ts),
        (SqlType::Json, v) => Some(Cell::Json(v)),
        // a JSON array into a PostgreSQL array column: its literal
        (SqlType::Other { cast, .. }, Value::Array(items)) if cast.ends_with("[]") => {
            let mut out = String::new();
            array_literal(items, &mut out);
            Some(Cell::Text(Cow::Owned(out)))
        }
        (SqlType::Other { .. }, v) => Some(Cell::Text(text_of(v))),
        (
            SqlType::Bool
            | SqlType::Int(_)
            | SqlType::Float(_)
            | SqlType::Numeric(_)
            | SqlType::Date
            | SqlType::Timestamp,
            _,
        ) => None,
    }
}

/// PostgreSQL's array literal of JSON `items`: `{1,NULL,"a \\"b\\""}`,
/// nested arrays as more dimensions; every string quoted, so `NULL`
/// and the empty string stay strings.
fn array_literal(items: &[Value], out: &mut String) {
    out.push('{');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match item {
            Value::Null => out.push_str("NULL"),
            Value::Array(inner) => array_literal(inner, out),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&n.to_string()),
            other => {
                let text = match other {
                    Value::String(s) => Cow::Borrowed(s.as_str()),
                    v => Cow::Owned(v.to_string()),
                };
                out.push('"');
                for c in text.chars() {
                    if c == '"' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
            }
        }
    }
    out.push('}');
}

/// `infinity`, `-infinity` and BC dates, as PostgreSQL writes them, and
/// MySQL's zero dates (`0000-00-00`, `2026-00-15`).
fn beyond_calendar(s: &str) -> bool {
    zero_date(s) || s == "infinity" || s == "-infinity" || s.ends_with(" BC")
}

/// MySQL's zero dates: `0000-00-00`, `2026-00-15`, `2026-01-00`.
fn zero_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[4] == b'-'
        && b[7] == b'-'
        && (s.get(5..7) == Some("00") || s.get(8..10) == Some("00"))
}

/// `NaN`, `Infinity` and `-Infinity` as PostgreSQL writes them.
fn special_float(t: &str) -> Option<f64> {
    match t {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// Whether `ty` can hold `v` as it is.
pub fn fits(ty: &SqlType, v: &Value) -> bool {
    cell(ty, v).is_some()
}

/// How deep MariaDB's `json` columns take JSON (`json_valid` refuses
/// more nesting; MySQL's limit, 100, is higher).
const MYSQL_JSON_NESTING: usize = 31;

/// A value the engine has no form for in a column of this kind, whatever
/// its size: NaN and the infinities in MySQL's numbers, PostgreSQL's
/// infinite and BC dates in MySQL's, MySQL's zero dates in PostgreSQL's,
/// JSON nested deeper than MariaDB's `json` takes. Only text holds it
/// there.
pub fn beyond_engine(ty: &SqlType, v: &Value, d: Dialect) -> bool {
    if let (Dialect::Mysql, SqlType::Json) = (d, ty) {
        return nested_deeper(v, MYSQL_JSON_NESTING);
    }
    let Value::String(t) = v else {
        return false;
    };
    match (d, ty) {
        (Dialect::Mysql, SqlType::Float(_) | SqlType::Numeric(_)) => special_float(t).is_some(),
        (Dialect::Mysql, SqlType::Date | SqlType::Timestamp) => beyond_calendar(t) && !zero_date(t),
        (Dialect::Postgres, SqlType::Date | SqlType::Timestamp) => zero_date(t),
        _ => false,
    }
}

/// Whether arrays and objects nest in `v` more than `limit` deep (walked
/// without recursion: a value may be thousands deep).
fn nested_deeper(v: &Value, limit: usize) -> bool {
    // a scalar, the common case, costs nothing
    if !matches!(v, Value::Array(_) | Value::Object(_)) {
        return false;
    }
    // containers only, each with how many containers hold it (itself too)
    let container = |c: &&Value| matches!(c, Value::Array(_) | Value::Object(_));
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match v {
            Value::Array(items) => {
                stack.extend(items.iter().filter(container).map(|i| (i, depth + 1)));
            }
            Value::Object(fields) => {
                stack.extend(fields.values().filter(container).map(|i| (i, depth + 1)));
            }
            _ => {}
        }
    }
    false
}

/// [`cell`] for a column of engine `d`.
pub fn cell_in<'a>(d: Dialect, ty: &SqlType, v: &'a Value) -> Option<Cell<'a>> {
    match beyond_engine(ty, v, d) {
        true => None,
        false => cell(ty, v),
    }
}

/// [`fits`] for a column of engine `d`.
pub fn fits_in(d: Dialect, ty: &SqlType, v: &Value) -> bool {
    cell_in(d, ty, v).is_some()
}

/// The types `ty` may be altered to, narrowest first. With
/// [`Reach::Exact`] every stored value stays as it is; [`Reach::Text`]
/// adds double precision after the integers (for fractions only, see
/// [`widen_for`]) and text last, which holds every scalar's text.
fn chain(ty: &SqlType, d: Dialect, reach: Reach) -> Vec<SqlType> {
    let loose = reach == Reach::Text;
    let mut out = match ty {
        SqlType::Int(bits) => [16, 32, 64]
            .into_iter()
            .filter(|b| b > bits)
            .map(SqlType::Int)
            .chain(loose.then_some(SqlType::Float(64)))
            .chain([d.unbounded_numeric()])
            .collect(),
        SqlType::Float(32) => vec![SqlType::Float(64)],
        SqlType::Numeric(Some(_)) if *ty != d.unbounded_numeric() => vec![d.unbounded_numeric()],
        SqlType::Text(Some(_)) => vec![SqlType::Text(None)],
        SqlType::Date => vec![SqlType::Timestamp],
        SqlType::Bool
        | SqlType::Float(_)
        | SqlType::Numeric(_)
        | SqlType::Text(None)
        | SqlType::Timestamp
        | SqlType::Json
        | SqlType::Other { .. } => vec![],
    };
    let scalar = matches!(
        ty,
        SqlType::Bool
            | SqlType::Int(_)
            | SqlType::Float(_)
            | SqlType::Numeric(_)
            | SqlType::Date
            | SqlType::Timestamp
    );
    // MariaDB's json takes only so much nesting: text takes any
    let deep_json = d == Dialect::Mysql && *ty == SqlType::Json;
    if loose && (scalar || deep_json) {
        out.push(SqlType::Text(None));
    }
    out
}

/// The narrowest widening of `ty` that holds `v`, if there is one. An
/// integer goes to an exact type, never to double precision.
pub fn widen_for(ty: &SqlType, v: &Value, d: Dialect, reach: Reach) -> Option<SqlType> {
    let integer = v.as_i64().is_some() || v.as_u64().is_some();
    chain(ty, d, reach)
        .into_iter()
        .find(|t| fits_in(d, t, v) && !(integer && matches!(t, SqlType::Float(_))))
}

/// Whether every value of type `b` is a value of type `a`.
pub fn holds(a: &SqlType, b: &SqlType) -> bool {
    use SqlType::*;
    match (a, b) {
        _ if a == b => true,
        (Int(x), Int(y)) | (Float(x), Float(y)) => x >= y,
        (Numeric(None), Int(_) | Numeric(_) | Float(_)) => true,
        (Numeric(Some((p, s))), Int(w)) => p.saturating_sub(*s) >= int_digits(*w),
        (Numeric(Some((p1, s1))), Numeric(Some((p2, s2)))) => {
            s1 >= s2 && p1.saturating_sub(*s1) >= p2.saturating_sub(*s2)
        }
        // approximate columns take any number, as the engines do
        (Numeric(Some(_)), Float(_)) | (Float(_), Int(_) | Numeric(_)) => true,
        (Text(None), Text(_)) => true,
        (Timestamp, Date) => true,
        (Text(Some(n)), Text(Some(m))) => n >= m,
        (Json, _) => true,
        _ => false,
    }
}

/// The narrowest exact widening of `ty` that holds every value of `want`.
pub fn widen_to(ty: &SqlType, want: &SqlType, d: Dialect) -> Option<SqlType> {
    chain(ty, d, Reach::Exact)
        .into_iter()
        .find(|t| holds(t, want))
}

/// The type for a new column that must hold values of both types: the
/// wider one, a common widening, or text (json when either side is json).
pub fn join(a: &SqlType, b: &SqlType, d: Dialect) -> SqlType {
    if holds(a, b) {
        return a.clone();
    }
    if holds(b, a) {
        return b.clone();
    }
    let common = chain(a, d, Reach::Exact)
        .into_iter()
        .chain(chain(b, d, Reach::Exact))
        .find(|t| holds(t, a) && holds(t, b));
    match common {
        Some(t) => t,
        None if *a == SqlType::Json || *b == SqlType::Json => SqlType::Json,
        None => SqlType::Text(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PG: Dialect = Dialect::Postgres;

    #[test]
    fn natural_types() {
        assert_eq!(natural(&json!(1), PG), Some(SqlType::Int(64)));
        assert_eq!(natural(&json!(u64::MAX), PG), Some(SqlType::Numeric(None)));
        assert_eq!(natural(&json!(1.5), PG), Some(SqlType::Float(64)));
        assert_eq!(
            natural(&json!("2024-01-02T03:04:05+01:00"), PG),
            Some(SqlType::Timestamp)
        );
        assert_eq!(
            natural(&json!("2024-01-02 03:04:05.25"), PG),
            Some(SqlType::Timestamp)
        );
        assert_eq!(natural(&json!("2024-01-02"), PG), Some(SqlType::Date));
        assert_eq!(natural(&json!("0000-01-02"), PG), Some(SqlType::Text(None)));
        assert_eq!(natural(&json!("2024-02-30"), PG), Some(SqlType::Text(None)));
        assert_eq!(
            natural(&json!("2024-01-02T03:04:05"), PG),
            Some(SqlType::Timestamp)
        );
        assert_eq!(
            natural(&json!("2024-01-02T03:04:05Z"), PG),
            Some(SqlType::Timestamp)
        );
        assert_eq!(
            natural(&json!("2024-01-02 03:04"), PG),
            Some(SqlType::Text(None))
        );
        assert_eq!(natural(&json!({"a": 1}), PG), Some(SqlType::Json));
        assert_eq!(natural(&json!(null), PG), None);
    }

    #[test]
    fn fits_respects_ranges_and_lengths() {
        assert!(fits(&SqlType::Int(32), &json!(i32::MAX)));
        assert!(!fits(&SqlType::Int(32), &json!(i64::from(i32::MAX) + 1)));
        assert!(fits(&SqlType::Int(64), &json!(3.0)));
        assert!(!fits(&SqlType::Int(64), &json!(3.5)));
        assert!(!fits(&SqlType::Int(64), &json!(u64::MAX)));
        assert!(fits(&SqlType::Text(Some(3)), &json!("äöü")));
        assert!(!fits(&SqlType::Text(Some(3)), &json!("abcd")));
        assert!(fits(&SqlType::Numeric(Some((5, 2))), &json!(123.45)));
        assert!(!fits(&SqlType::Numeric(Some((5, 2))), &json!(1234.5)));
        assert!(!fits(&SqlType::Numeric(Some((5, 2))), &json!(1.125)));
        // decimals as text, as database sources send them
        assert!(fits(&SqlType::Numeric(Some((5, 2))), &json!("-123.40")));
        assert!(fits(
            &SqlType::Numeric(None),
            &json!("123456789012345678901234.5")
        ));
        assert!(!fits(&SqlType::Numeric(Some((5, 2))), &json!("1234.5")));
        assert!(!fits(&SqlType::Numeric(None), &json!("1e5")));
        assert!(!fits(&SqlType::Numeric(None), &json!("12a")));
        assert!(!fits(&SqlType::Numeric(None), &json!("-")));
        assert!(!fits(&SqlType::Timestamp, &json!("soon")));
        assert!(fits(&SqlType::Timestamp, &json!("2024-01-02")));
        assert!(fits(&SqlType::Date, &json!("2024-01-02")));
        assert!(!fits(&SqlType::Date, &json!("2024-01-02 03:04:05")));
        assert!(fits(&SqlType::Json, &json!("anything")));
        assert!(fits(&SqlType::Bool, &json!(null)));
        assert!(!fits(&SqlType::Bool, &json!(1)));
    }

    #[test]
    fn exact_widening_stays_within_a_kind() {
        let w = |ty: SqlType, v: Value, d| widen_for(&ty, &v, d, Reach::Exact);
        assert_eq!(
            w(SqlType::Int(32), json!(1i64 << 40), PG),
            Some(SqlType::Int(64))
        );
        assert_eq!(
            w(SqlType::Int(64), json!(2.5), PG),
            Some(SqlType::Numeric(None))
        );
        assert_eq!(
            w(SqlType::Int(64), json!(u64::MAX), Dialect::Mysql),
            Some(SqlType::Numeric(Some((65, 30))))
        );
        assert_eq!(
            w(SqlType::Text(Some(2)), json!("abc"), PG),
            Some(SqlType::Text(None))
        );
        assert_eq!(
            w(SqlType::Date, json!("2024-01-02T03:04:05Z"), PG),
            Some(SqlType::Timestamp)
        );
        assert_eq!(w(SqlType::Int(64), json!("abc"), PG), None);
        assert_eq!(w(SqlType::Timestamp, json!("abc"), PG), None);
        assert_eq!(w(SqlType::Bool, json!(1), PG), None);
    }

    #[test]
    fn widening_to_text_follows_the_join() {
        let w = |ty: SqlType, v: Value| widen_for(&ty, &v, PG, Reach::Text);
        assert_eq!(
            w(SqlType::Int(32), json!(1i64 << 40)),
            Some(SqlType::Int(64))
        );
        // a fraction makes double precision, as in one batch; a number
        // past bigint stays exact
        assert_eq!(w(SqlType::Int(64), json!(2.5)), Some(SqlType::Float(64)));
        assert_eq!(w(SqlType::Int(16), json!(2.5)), Some(SqlType::Float(64)));
        assert_eq!(
            w(SqlType::Int(64), json!(u64::MAX)),
            Some(SqlType::Numeric(None))
        );
        assert_eq!(
            w(SqlType::Float(64), json!("calm")),
            Some(SqlType::Text(None))
        );
        assert_eq!(w(SqlType::Bool, json!(1)), Some(SqlType::Text(None)));
        assert_eq!(
            w(SqlType::Date, json!("2024-01-02 03:04:05")),
            Some(SqlType::Timestamp)
        );
        assert_eq!(w(SqlType::Date, json!("soon")), Some(SqlType::Text(None)));
        assert_eq!(
            w(SqlType::Timestamp, json!("soon")),
            Some(SqlType::Text(None))
        );
        assert_eq!(w(SqlType::Json, json!("x")), None);
        assert_eq!(
            w(
                SqlType::Other {
                    name: "uuid".into(),
                    cast: "uuid".into()
                },
                json!("x")
            ),
            None
        );
        // whatever the order values come in, the column ends where one
        // batch of all of them would have started it
        let values = [
            json!(1),
            json!(2.5),
            json!("2024-01-02"),
            json!("x"),
            json!(true),
        ];
        for a in &values {
            for b in &values {
                let (ta, tb) = (natural(a, PG).unwrap(), natural(b, PG).unwrap());
                let widened = if fits(&ta, b) {
                    Some(ta.clone())
                } else {
                    w(ta.clone(), b.clone())
                };
                assert_eq!(widened, Some(join(&ta, &tb, PG)), "{a} then {b}");
            }
        }
    }

    #[test]
    fn declared_types_widen_and_join() {
        assert_eq!(
            widen_to(&SqlType::Int(32), &SqlType::Int(64), PG),
            Some(SqlType::Int(64))
        );
        assert_eq!(widen_to(&SqlType::Int(64), &SqlType::Text(None), PG), None);
        assert!(holds(&SqlType::Int(64), &SqlType::Int(32)));
        assert_eq!(
            join(&SqlType::Int(64), &SqlType::Float(64), PG),
            SqlType::Float(64)
        );
        assert_eq!(
            join(&SqlType::Bool, &SqlType::Int(64), PG),
            SqlType::Text(None)
        );
        assert_eq!(join(&SqlType::Json, &SqlType::Int(64), PG), SqlType::Json);
        assert_eq!(
            join(&SqlType::Timestamp, &SqlType::Text(None), PG),
            SqlType::Text(None)
        );
        assert_eq!(
            join(&SqlType::Date, &SqlType::Timestamp, PG),
            SqlType::Timestamp
        );
        assert_eq!(
            join(&SqlType::Date, &SqlType::Int(64), PG),
            SqlType::Text(None)
        );
    }

    #[test]
    fn cells_convert() {
        assert_eq!(
            cell(&SqlType::Text(None), &json!(12)),
            Some(Cell::Text("12".into()))
        );
        assert_eq!(
            cell(&SqlType::Numeric(None), &json!(0.1)),
            Some(Cell::Decimal("0.1".into()))
        );
        assert_eq!(
            cell(&SqlType::Numeric(None), &json!(1e21)),
            Some(Cell::Decimal("1000000000000000000000".into()))
        );
        let v = json!({"a": [1]});
        assert_eq!(
            cell(&SqlType::Text(None), &v),
            Some(Cell::Text("{\"a\":[1]}".into()))
        );
    }
}
