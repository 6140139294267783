//! The schema drift policies and upsert mode, against both engines. Each
//! drift case starts from an operator's table `(id bigint, name
//! varchar(5), n integer)` and delivers one row that brings a new field,
//! a name too long for varchar(5) and a number too big for integer.

#[macro_use]
mod relational_support;

use std::collections::BTreeMap;

use abrq_core::{Disposition, Item, Op, ReasonClass};
use rand::{Rng, SeedableRng};
use relational_support::{batch, insert, record, Db, Engine};
use serde_json::json;

const BIG: i64 = 1 << 40;

async fn drifting(
    db: &Db,
    policy: &str,
) -> Result<abrq_core::DeliveryReport, abrq_core::DeliveryError> {
    db.exec(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY, name varchar(5), n integer)",
        db.table("t")
    ))
    .await;
    let items = vec![
        insert(json!({"id": 1, "name": "ok", "n": 1})),
        insert(json!({"id": 2, "name": "much too long", "n": BIG, "extra": "x"})),
    ];
    db.destination("t", policy).deliver(&batch(1, items)).await
}

async fn evolve_and_widen(e: Engine) {
    let db = Db::new(e, "rel evolve").await;
    let r = drifting(&db, "").await.unwrap();
    assert_eq!((r.dropped_rows, r.dropped_values), (0, 0));
    assert_eq!(
        db.column("t", "name").await[1].as_deref(),
        Some("much too long")
    );
    assert_eq!(
        db.column("t", "n").await[1].as_deref(),
        Some(BIG.to_string().as_str())
    );
    assert_eq!(db.column("t", "extra").await, vec![None, Some("x".into())]);
    db.drop().await;
}
both_engines!(evolve_and_widen);

async fn discard_values(e: Engine) {
    let db = Db::new(e, "rel discard values").await;
    let policy = "[streams.destinations.schema_drift]\ncolumns = \"discard_values\"\ntypes = \"discard_values\"";
    let r = drifting(&db, policy).await.unwrap();
    assert_eq!((r.dropped_rows, r.dropped_values), (0, 3));
    assert_eq!(db.column("t", "name").await, vec![Some("ok".into()), None]);
    assert_eq!(db.column("t", "n").await, vec![Some("1".into()), None]);
    db.drop().await;
}
both_engines!(discard_values);

async fn discard_rows(e: Engine) {
    let db = Db::new(e, "rel discard rows").await;
    let policy =
        "[streams.destinations.schema_drift]\ncolumns = \"discard_rows\"\ntypes = \"discard_rows\"";
    let r = drifting(&db, policy).await.unwrap();
    assert_eq!((r.dropped_rows, r.dropped_values), (1, 0));
    assert_eq!(db.column("t", "id").await, vec![Some("1".into())]);
    db.drop().await;
}
both_engines!(discard_rows);

async fn freeze_then_operator_fixes(e: Engine) {
    let db = Db::new(e, "rel freeze").await;
    let err = drifting(
        &db,
        "[streams.destinations.schema_drift]\ncolumns = \"freeze\"",
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::SchemaDrift)
    );
    assert_eq!(err.record_index, Some(1));
    assert_eq!(db.count("t").await, 0, "nothing of a blocked batch lands");
    db.exec(&format!(
        "ALTER TABLE {} ADD COLUMN extra text",
        db.table("t")
    ))
    .await;

    // now with the column there, the types are frozen
    let d = db.destination(
        "t",
        "[streams.destinations.schema_drift]\ntypes = \"freeze\"",
    );
    let items = vec![
        insert(json!({"id": 1, "name": "ok", "n": 1})),
        insert(json!({"id": 2, "name": "much too long", "n": BIG, "extra": "x"})),
    ];
    let err = d.deliver(&batch(1, items.clone())).await.unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::SchemaDrift)
    );
    assert_eq!(err.record_index, Some(1));
    // the operator widens the columns, then replays the dead letter
    let widen = match e {
        Engine::Postgres => {
            "ALTER TABLE {t} ALTER COLUMN name TYPE text, ALTER COLUMN n TYPE bigint"
        }
        Engine::Mysql => "ALTER TABLE {t} MODIFY COLUMN name text, MODIFY COLUMN n bigint",
    };
    db.exec(&widen.replace("{t}", &db.table("t"))).await;
    d.deliver(&batch(1, items)).await.unwrap();
    assert_eq!(db.count("t").await, 2);
    db.drop().await;
}
both_engines!(freeze_then_operator_fixes);

async fn upsert_converges_to_the_source(e: Engine) {
    let db = Db::new(e, "rel upsert").await;
    db.exec(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY, name text, qty bigint)",
        db.table("t")
    ))
    .await;
    let d = db.destination("t", "mode = \"upsert\"");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut source: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    for seq in 1..=20 {
        let mut items = Vec::new();
        for _ in 0..200 {
            let id = rng.random_range(0..60i64);
            match rng.random_range(0..10) {
                0..=1 => {
                    source.remove(&id);
                    items.push(record(Op::Delete, json!({"id": id})));
                }
                2 if source.contains_key(&id) => {
                    // a partial update: only qty changes
                    let qty = rng.random_range(0..1000);
                    source.get_mut(&id).unwrap().1 = qty;
                    items.push(record(Op::Update, json!({"id": id, "qty": qty})));
                }
                _ => {
                    let (name, qty) = (
                        format!("n{}", rng.random_range(0..1000)),
                        rng.random_range(0..1000),
                    );
                    source.insert(id, (name.clone(), qty));
                    let op = if rng.random_bool(0.5) {
                        Op::Insert
                    } else {
                        Op::Update
                    };
                    items.push(record(op, json!({"id": id, "name": name, "qty": qty})));
                }
            }
            if rng.random_range(0..100) == 0 {
                source.clear();
                items.push(Item::Truncate);
            }
        }
        d.deliver(&batch(seq, items)).await.unwrap();
    }
    let sql = format!(
        "SELECT {}, {}, {} FROM {} ORDER BY id + 0",
        db.text("id"),
        db.text("name"),
        db.text("qty"),
        db.table("t")
    );
    let got: BTreeMap<i64, (String, i64)> = db
        .rows(&sql)
        .await
        .into_iter()
        .map(|r| {
            let f = |i: usize| r[i].clone().unwrap();
            (f(0).parse().unwrap(), (f(1), f(2).parse().unwrap()))
        })
        .collect();
    assert_eq!(got, source);
    db.drop().await;
}
both_engines!(upsert_converges_to_the_source);

async fn upsert_without_a_key_appends_and_deletes_one_equal_row(e: Engine) {
    let db = Db::new(e, "rel upsert nokey").await;
    db.exec(&format!(
        "CREATE TABLE {} (id bigint, name text)",
        db.table("t")
    ))
    .await;
    let d = db.destination("t", "mode = \"upsert\"");
    let report = d.check().await.unwrap();
    assert!(
        report.detail.contains("no primary key"),
        "{}",
        report.detail
    );
    let rows = vec![
        insert(json!({"id": 1, "name": "a"})),
        insert(json!({"id": 1, "name": "a"})),
        insert(json!({"id": 2, "name": null})),
        insert(json!({"id": 3, "name": "c"})),
    ];
    d.deliver(&batch(1, rows)).await.unwrap();
    assert_eq!(db.count("t").await, 4);
    // one of two equal rows goes; NULL equals NULL; a field the table
    // lacks does not stop the match
    let deletes = vec![
        record(Op::Delete, json!({"id": 1, "name": "a"})),
        record(Op::Delete, json!({"id": 2, "name": null, "gone": 7})),
        record(Op::Delete, json!({"id": 9, "name": "nobody"})),
    ];
    d.deliver(&batch(2, deletes)).await.unwrap();
    let sql = format!(
        "SELECT {}, {} FROM {} ORDER BY 1",
        db.text("id"),
        db.text("name"),
        db.table("t")
    );
    let left = db.rows(&sql).await;
    let want = |id: &str, name: &str| vec![Some(id.to_string()), Some(name.to_string())];
    assert_eq!(left, vec![want("1", "a"), want("3", "c")]);
    // an update cannot say which row it changes: a dead letter, not a guess
    let update = vec![record(Op::Update, json!({"id": 3, "name": "d"}))];
    let err = d.deliver(&batch(3, update)).await.unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::Rejected),
        "{}",
        err.describe()
    );
    assert_eq!(db.rows(&sql).await, vec![want("1", "a"), want("3", "c")]);
    db.drop().await;
}
both_engines!(upsert_without_a_key_appends_and_deletes_one_equal_row);
