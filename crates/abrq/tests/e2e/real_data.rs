//! Real files as users have them, through the binary with default settings:
//! palmerpenguins' `penguins.csv` (R's `NA` for a missing value) and
//! vega_datasets' `cars.json` (as NDJSON; `Year` is a date), read from
//! their PyPI packages as `scripts/services.sh up` unpacks them, and a
//! generated CSV with a BOM, R's unnamed row-number column, names with
//! spaces and dots, a numeric column empty for its first 5,000 rows, `NA`
//! in a column its first batches filled, and integers that turn decimal.
//! Each goes to postgres, mysql and local parquet, in batches small enough
//! that no batch sees every kind of value a column holds: no dead letter,
//! every row, numeric columns numeric, dates dates, `NA` as NULL (and a
//! quoted "NA" as text).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::common::*;
use abrq_sinks::relational::sqlx::mysql::MySqlPool;
use abrq_sinks::relational::sqlx::postgres::{PgConnectOptions, PgPool};
use abrq_sinks::relational::sqlx::{self, Row};
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

/// What a column holds, and so the type each destination must give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Text,
    Date,
    Timestamp,
}

impl Kind {
    fn postgres(self) -> &'static str {
        match self {
            Kind::Int => "bigint",
            Kind::Float => "double precision",
            Kind::Text => "text",
            Kind::Date => "date",
            Kind::Timestamp => "timestamp with time zone",
        }
    }

    fn mysql(self) -> &'static str {
        match self {
            Kind::Int => "bigint(20)",
            Kind::Float => "double",
            Kind::Text => "longtext",
            Kind::Date => "date",
            Kind::Timestamp => "datetime(6)",
        }
    }

    /// The parquet types an object may give it: each object is typed from
    /// its own batch, so a batch of whole numbers is int64.
    fn parquet(self) -> &'static [&'static str] {
        match self {
            Kind::Int => &["Int64"],
            Kind::Float => &["Float64", "Int64"],
            Kind::Text => &["Utf8"],
            Kind::Date => &["Date32"],
            Kind::Timestamp => &["Timestamp(µs, \"UTC\")"],
        }
    }
}

/// What the source file says about one column.
#[derive(Debug, Clone)]
struct Expect {
    name: String,
    kind: Kind,
    nulls: u64,
    /// Numeric columns: the sum of the values.
    sum: f64,
    /// Dates and timestamps: the first and last, as `YYYY-MM-DD[ HH:MM:SS]`.
    range: Option<(String, String)>,
    /// Text columns: how many values are the text "NA".
    na_text: u64,
}

struct DataSet {
    stream: &'static str,
    /// The input file, written into the test's directory.
    file: &'static str,
    bytes: Vec<u8>,
    rows: u64,
    columns: Vec<Expect>,
    max_records: u64,
}

fn dataset_file(rel: &str) -> PathBuf {
    let path = abrq_testkit::datasets_dir().join(rel);
    assert!(
        path.is_file(),
        "{} is missing: `scripts/services.sh up` unpacks the data sets",
        path.display()
    );
    path
}

/// Folds one source cell into a column's expectation.
fn see(e: &mut Expect, cell: Option<&str>) {
    let Some(v) = cell else {
        e.nulls += 1;
        return;
    };
    match e.kind {
        Kind::Int | Kind::Float => e.sum += v.parse::<f64>().unwrap(),
        Kind::Text => e.na_text += u64::from(v == "NA"),
        Kind::Date | Kind::Timestamp => {
            let r = e.range.get_or_insert_with(|| (v.into(), v.into()));
            if v < r.0.as_str() {
                r.0 = v.into();
            }
            if v > r.1.as_str() {
                r.1 = v.into();
            }
        }
    }
}

fn expect(columns: &[(&str, Kind)]) -> Vec<Expect> {
    columns
        .iter()
        .map(|(name, kind)| Expect {
            name: name.to_string(),
            kind: *kind,
            nulls: 0,
            sum: 0.0,
            range: None,
            na_text: 0,
        })
        .collect()
}

fn penguins() -> DataSet {
    let bytes = std::fs::read(dataset_file("palmerpenguins/data/penguins.csv")).unwrap();
    let mut columns = expect(&[
        ("species", Kind::Text),
        ("island", Kind::Text),
        ("bill_length_mm", Kind::Float),
        ("bill_depth_mm", Kind::Float),
        ("flipper_length_mm", Kind::Int),
        ("body_mass_g", Kind::Int),
        ("sex", Kind::Text),
        ("year", Kind::Int),
    ]);
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(header, names, "the packaged file's header");
    let mut rows = 0;
    for r in reader.records() {
        let r = r.unwrap();
        for (e, cell) in columns.iter_mut().zip(r.iter()) {
            see(e, (cell != "NA").then_some(cell));
        }
        rows += 1;
    }
    assert_eq!(rows, 344);
    assert!(
        columns[2].nulls > 0 && columns[6].nulls > 0,
        "NA in the file"
    );
    DataSet {
        stream: "penguins",
        file: "penguins.csv",
        bytes,
        rows,
        columns,
        max_records: 64,
    }
}

fn cars() -> DataSet {
    let raw = std::fs::read(dataset_file("vega_datasets/_data/cars.json")).unwrap();
    let Value::Array(records) = serde_json::from_slice(&raw).unwrap() else {
        panic!("cars.json is a JSON array");
    };
    let mut columns = expect(&[
        ("Name", Kind::Text),
        ("Miles_per_Gallon", Kind::Float),
        ("Cylinders", Kind::Int),
        ("Displacement", Kind::Float),
        ("Horsepower", Kind::Int),
        ("Weight_in_lbs", Kind::Int),
        ("Acceleration", Kind::Float),
        ("Year", Kind::Date),
        ("Origin", Kind::Text),
    ]);
    let mut ndjson = String::new();
    for r in &records {
        writeln!(ndjson, "{r}").unwrap();
        for e in columns.iter_mut() {
            match &r[&e.name] {
                Value::Null => see(e, None),
                Value::String(s) => see(e, Some(s)),
                other => see(e, Some(&other.to_string())),
            }
        }
    }
    assert_eq!(records.len(), 406);
    DataSet {
        stream: "cars",
        file: "cars.ndjson",
        bytes: ndjson.into_bytes(),
        rows: records.len() as u64,
        columns,
        max_records: 64,
    }
}

/// 8,000 readings as an R user exports them.
fn readings() -> DataSet {
    let mut columns = expect(&[
        ("column_1", Kind::Int),
        ("at", Kind::Timestamp),
        ("day", Kind::Date),
        ("reading.value", Kind::Float),
        ("wind speed", Kind::Float),
        ("count", Kind::Float),
        ("label", Kind::Text),
    ]);
    let mut text = String::from(
        "\u{feff}\"\",\"at\",\"day\",\"reading.value\",\"wind speed\",\"count\",\" label \"\n",
    );
    for i in 0..8000u64 {
        // a minute apart from 2024-01-01 00:00:00
        let day = format!("2024-01-{:02}", 1 + i / 1440);
        let at_s = format!("{day} {:02}:{:02}:00", i % 1440 / 60, i % 60);
        // empty for the first 5,000 rows
        let reading = (i >= 5000).then(|| format!("{:.2}", i as f64 / 4.0));
        // filled in the first batches, NA now and then later
        let wind = (i <= 3000 || i % 7 != 0).then(|| format!("{:.1}", (i % 200) as f64 / 10.0));
        // whole numbers, then halves
        let count = if i < 6000 {
            i.to_string()
        } else {
            format!("{i}.5")
        };
        let label = match (i % 101, i % 100) {
            (1, _) => None,
            (_, 0) => Some("NA".to_string()),
            _ => Some(format!("a {}", i % 3)),
        };
        let cells = [
            Some(i.to_string()),
            Some(at_s),
            Some(day),
            reading,
            wind,
            Some(count),
            label,
        ];
        for (e, cell) in columns.iter_mut().zip(&cells) {
            see(e, cell.as_deref());
        }
        // R: text quoted, a missing value NA, bare; the reading column
        // leaves it empty, as pandas does
        let line: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(k, c)| match c {
                None if k == 3 => String::new(),
                None => "NA".to_string(),
                Some(v) if matches!(k, 0 | 1 | 2 | 6) => format!("\"{v}\""),
                Some(v) => v.clone(),
            })
            .collect();
        text.push_str(&line.join(","));
        text.push('\n');
    }
    assert_eq!(columns[3].nulls, 5000);
    DataSet {
        stream: "readings",
        file: "readings.csv",
        bytes: text.into_bytes(),
        rows: 8000,
        columns,
        max_records: 1000,
    }
}

struct Databases {
    pg: PgPool,
    schema: String,
    my: MySqlPool,
    database: String,
    pg_url: reqwest::Url,
    my_url: reqwest::Url,
}

impl Databases {
    async fn new(prefix: &str) -> Databases {
        let pg_url = abrq_testkit::Postgres::from_env().url;
        let opts = PgConnectOptions::from_str(&pg_url)
            .unwrap()
            .options([("TimeZone", "UTC")]);
        let pg = PgPool::connect_with(opts).await.expect("postgres");
        let schema = abrq_testkit::names::database(prefix);
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&pg)
            .await
            .unwrap();
        let my_url = abrq_testkit::Mysql::from_env().url;
        let admin = MySqlPool::connect(&my_url).await.expect("mysql");
        let database = abrq_testkit::names::database(prefix);
        sqlx::query(&format!("CREATE DATABASE {database}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let my = MySqlPool::connect(&abrq_testkit::Mysql::from_env().url_for(&database).unwrap())
            .await
            .unwrap();
        Databases {
            pg,
            schema,
            my,
            database,
            pg_url: reqwest::Url::parse(&pg_url).unwrap(),
            my_url: reqwest::Url::parse(&my_url).unwrap(),
        }
    }

    async fn drop(self) {
        let _ = sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.schema))
            .execute(&self.pg)
            .await;
        let _ = sqlx::query(&format!("DROP DATABASE {}", self.database))
            .execute(&self.my)
            .await;
    }
}

fn config(abrq: &Abrq, ds: &DataSet, db: &Databases) -> String {
    let pg = Destination::postgres("pg")
        .connection(db.pg_url.as_str())
        .schema(&db.schema)
        .table(ds.stream);
    let my = Destination::mysql("my")
        .connection(db.my_url.as_str())
        .database(&db.database)
        .table(ds.stream);
    Config::new(abrq)
        .stream(
            Stream::new(ds.stream, Source::file(abrq.path(ds.file)))
                .max_records(ds.max_records as i64)
                .destination(with_password(pg, &db.pg_url))
                .destination(with_password(my, &db.my_url))
                .destination(Destination::local("pq", abrq.p("out/pq")).format("parquet")),
        )
        .to_string()
}

/// A password in the server's URL goes into the destination's table too.
fn with_password(d: Destination, url: &reqwest::Url) -> Destination {
    match url.password() {
        Some(p) => d.password(p),
        None => d,
    }
}

/// Loads `ds` and checks what every destination made of it.
async fn load(ds: DataSet) {
    let db = Databases::new(&format!("real {}", ds.stream)).await;
    let mut abrq = Abrq::new();
    std::fs::write(abrq.path(ds.file), &ds.bytes).unwrap();
    abrq.write_config(&config(&abrq, &ds, &db));
    abrq.start().await;
    let st = abrq
        .wait_status(ds.stream, "every destination past the last batch", |st| {
            let last = &st["spool"]["last_seq"];
            st["source"]["done"] == true
                && ["pg", "my", "pq"]
                    .iter()
                    .all(|d| dest_of(st, d)["high_water_mark"] == *last)
        })
        .await;
    for d in ["pg", "my", "pq"] {
        let s = dest_of(&st, d);
        assert_eq!(
            (
                u(&s["dead_lettered_batches"]),
                u(&s["pending_dead_letters"]),
                u(&s["delivered_records"])
            ),
            (0, 0, ds.rows),
            "{d}: {s}"
        );
    }
    abrq.kill();

    check_postgres(&db, &ds).await;
    check_mysql(&db, &ds).await;
    check_parquet(&abrq.path("out/pq"), &ds);
    db.drop().await;
}

/// By name: a column first seen in a later batch is added last.
fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: {got} != {want}"
    );
}

async fn check_postgres(db: &Databases, ds: &DataSet) {
    let table = format!("{}.\"{}\"", db.schema, ds.stream);
    let types: Vec<(String, String)> = sqlx::query(
        "SELECT column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
    )
    .bind(&db.schema)
    .bind(ds.stream)
    .fetch_all(&db.pg)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let want: Vec<(String, String)> = ds
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.kind.postgres().to_string()))
        .collect();
    assert_eq!(sorted(types), sorted(want), "postgres column types");
    for c in &ds.columns {
        let q = format!("\"{}\"", c.name);
        let sql = match c.kind {
            Kind::Int | Kind::Float => format!(
                "SELECT count(*)::text, count({q})::text, sum({q})::float8::text, NULL FROM {table}"
            ),
            Kind::Text => format!(
                "SELECT count(*)::text, count({q})::text, count(*) FILTER (WHERE {q} = 'NA')::text, NULL FROM {table}"
            ),
            Kind::Date | Kind::Timestamp => format!(
                "SELECT count(*)::text, count({q})::text, min({q})::text, max({q})::text FROM {table}"
            ),
        };
        let r = sqlx::query(&sql).fetch_one(&db.pg).await.unwrap();
        let cells: Vec<Option<String>> = (0..4).map(|i| r.get(i)).collect();
        check_column("postgres", c, ds.rows, &cells);
    }
}

async fn check_mysql(db: &Databases, ds: &DataSet) {
    let table = format!("`{}`.`{}`", db.database, ds.stream);
    let types: Vec<(String, String)> = sqlx::query(
        "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR) \
         FROM information_schema.columns \
         WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
    )
    .bind(&db.database)
    .bind(ds.stream)
    .fetch_all(&db.my)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let want: Vec<(String, String)> = ds
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.kind.mysql().to_string()))
        .collect();
    assert_eq!(sorted(types), sorted(want), "mysql column types");
    for c in &ds.columns {
        let q = format!("`{}`", c.name);
        let n = "CAST(count(*) AS CHAR)";
        let nn = format!("CAST(count({q}) AS CHAR)");
        let sql = match c.kind {
            Kind::Int | Kind::Float => {
                format!(
                    "SELECT {n}, {nn}, CAST(CAST(sum({q}) AS DOUBLE) AS CHAR), NULL FROM {table}"
                )
            }
            Kind::Text => {
                format!("SELECT {n}, {nn}, CAST(sum({q} = BINARY 'NA') AS CHAR), NULL FROM {table}")
            }
            Kind::Date | Kind::Timestamp => format!(
                "SELECT {n}, {nn}, CAST(min({q}) AS CHAR), CAST(max({q}) AS CHAR) FROM {table}"
            ),
        };
        let r = sqlx::query(&sql).fetch_one(&db.my).await.unwrap();
        let cells: Vec<Option<String>> = (0..4).map(|i| r.get(i)).collect();
        check_column("mysql", c, ds.rows, &cells);
    }
}

/// `cells`: row count, non-null count, then the sum, the count of "NA"
/// texts, or the first and last value.
fn check_column(engine: &str, c: &Expect, rows: u64, cells: &[Option<String>]) {
    let what = format!("{engine} column {:?}", c.name);
    let num = |i: usize| cells[i].as_deref().unwrap_or("0").parse::<f64>().unwrap();
    assert_eq!(num(0) as u64, rows, "{what}: rows");
    assert_eq!(rows - num(1) as u64, c.nulls, "{what}: NULLs");
    match c.kind {
        Kind::Int | Kind::Float => close(num(2), c.sum, &what),
        Kind::Text => assert_eq!(num(2) as u64, c.na_text, "{what}: \"NA\" texts"),
        Kind::Date | Kind::Timestamp => {
            let (lo, hi) = c.range.clone().unwrap();
            let got = |i: usize| cells[i].clone().unwrap();
            assert!(got(2).starts_with(&lo), "{what}: first {} vs {lo}", got(2));
            assert!(got(3).starts_with(&hi), "{what}: last {} vs {hi}", got(3));
        }
    }
}

/// Every parquet object under `dir`: per column, its type in each object
/// that holds a value of it, nulls, sums and ranges over all objects.
fn check_parquet(dir: &Path, ds: &DataSet) {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                files.push(p);
            }
        }
    }
    assert!(!files.is_empty(), "no parquet object in {}", dir.display());
    let mut rows = 0u64;
    let mut nulls: BTreeMap<String, u64> = BTreeMap::new();
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut ranges: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut na_text: BTreeMap<String, u64> = BTreeMap::new();
    for f in &files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for rb in reader {
            let rb = rb.unwrap();
            rows += rb.num_rows() as u64;
            let schema = rb.schema();
            for c in &ds.columns {
                let what = format!("parquet {} column {:?}", f.display(), c.name);
                // a column no row of the batch has a value for is absent or
                // all null: it says nothing of the type
                let Some((i, field)) = schema.column_with_name(&c.name) else {
                    *nulls.entry(c.name.clone()).or_default() += rb.num_rows() as u64;
                    continue;
                };
                let col = rb.column(i);
                *nulls.entry(c.name.clone()).or_default() += col.null_count() as u64;
                if col.null_count() == col.len() {
                    continue;
                }
                let ty = field.data_type().to_string();
                assert!(c.kind.parquet().contains(&ty.as_str()), "{what}: {ty}");
                let valid: Vec<usize> = (0..col.len()).filter(|k| col.is_valid(*k)).collect();
                match c.kind {
                    Kind::Int | Kind::Float => {
                        let s: f64 = if ty == "Int64" {
                            let a = col.as_primitive::<Int64Type>();
                            valid.iter().map(|k| a.value(*k) as f64).sum()
                        } else {
                            let a = col.as_primitive::<Float64Type>();
                            valid.iter().map(|k| a.value(*k)).sum()
                        };
                        *sums.entry(c.name.clone()).or_default() += s;
                    }
                    Kind::Date | Kind::Timestamp => {
                        let values: Vec<i64> = if c.kind == Kind::Date {
                            let a = col.as_primitive::<Date32Type>();
                            valid.iter().map(|k| i64::from(a.value(*k))).collect()
                        } else {
                            let a = col.as_primitive::<TimestampMicrosecondType>();
                            valid.iter().map(|k| a.value(*k)).collect()
                        };
                        let lo = *values.iter().min().unwrap();
                        let hi = *values.iter().max().unwrap();
                        let r = ranges.entry(c.name.clone()).or_insert((lo, hi));
                        *r = (r.0.min(lo), r.1.max(hi));
                    }
                    Kind::Text => {
                        let a = col.as_string::<i32>();
                        let n = valid.iter().filter(|k| a.value(**k) == "NA").count();
                        *na_text.entry(c.name.clone()).or_default() += n as u64;
                    }
                }
            }
        }
    }
    assert_eq!(rows, ds.rows, "parquet rows");
    for c in &ds.columns {
        let what = format!("parquet column {:?}", c.name);
        assert_eq!(nulls[&c.name], c.nulls, "{what}: nulls");
        match c.kind {
            Kind::Int | Kind::Float => close(sums[&c.name], c.sum, &what),
            Kind::Text => assert_eq!(
                na_text.get(&c.name).copied().unwrap_or(0),
                c.na_text,
                "{what}"
            ),
            Kind::Date | Kind::Timestamp => {
                let (lo, hi) = ranges[&c.name];
                let (want_lo, want_hi) = c.range.clone().unwrap();
                let unit = |text: &str| match c.kind {
                    Kind::Date => days(text),
                    _ => micros(text),
                };
                assert_eq!(
                    (lo, hi),
                    (unit(&want_lo), unit(&want_hi)),
                    "{what}: range {want_lo}..{want_hi}"
                );
            }
        }
    }
}

/// Days since 1970-01-01 of `YYYY-MM-DD` (the proleptic Gregorian count
/// date32 uses).
fn days(text: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| text[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Microseconds since the epoch of `YYYY-MM-DD HH:MM:SS`, read as UTC.
fn micros(text: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| text[r].parse::<i64>().unwrap();
    let secs = days(text) * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    secs * 1_000_000
}

#[test]
fn day_and_instant_counts() {
    assert_eq!(days("1970-01-01"), 0);
    assert_eq!(days("2024-02-29"), 19_782);
    assert_eq!(days("1969-12-31"), -1);
    assert_eq!(micros("1970-01-02 00:00:01"), 86_401_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn palmer_penguins_csv_with_r_na() {
    load(penguins()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vega_cars_as_ndjson_with_dates() {
    load(cars()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_readings_empty_for_5000_rows_then_filled() {
    load(readings()).await;
}
