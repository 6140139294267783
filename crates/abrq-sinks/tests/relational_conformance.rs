//! One suite for both relational engines, against the real servers: bulk
//! delivery equals the source, a redelivered batch leaves one copy,
//! truncates land in order, types map, and a refused row is named.
//! The drift policies and upsert mode are in `relational_drift.rs`.

#[macro_use]
mod relational_support;

use abrq_core::{Disposition, Item, ReasonClass};
use relational_support::{batch, insert, Db, Engine};
use serde_json::json;

fn row(i: u64) -> Item {
    insert(json!({
        "id": i,
        "name": format!("row {i} ünïcødé"),
        "amount": i as f64 * 0.25,
        "flag": i.is_multiple_of(3),
    }))
}

async fn hundred_thousand_rows_equal_the_source(e: Engine) {
    let db = Db::new(e, "rel bulk").await;
    let dest = db.destination("bulk", "");
    let n = 100_000u64;
    for seq in 0..n / 1000 {
        let items = (seq * 1000..(seq + 1) * 1000).map(row).collect();
        dest.deliver(&batch(seq + 1, items)).await.unwrap();
    }
    let sql = format!(
        "SELECT {}, {}, {}, {} FROM {} ORDER BY id + 0",
        db.text("id"),
        db.text("name"),
        db.text("amount"),
        db.text(if e == Engine::Postgres {
            "flag"
        } else {
            "flag <> 0"
        }),
        db.table("bulk")
    );
    let rows = db.rows(&sql).await;
    assert_eq!(rows.len() as u64, n);
    for (i, r) in rows.iter().enumerate() {
        let i = i as u64;
        assert_eq!(r[0].as_deref(), Some(i.to_string().as_str()));
        assert_eq!(r[1].as_deref(), Some(format!("row {i} ünïcødé").as_str()));
        let amount: f64 = r[2].as_deref().unwrap().parse().unwrap();
        assert_eq!(amount, i as f64 * 0.25);
        let flag = matches!(r[3].as_deref(), Some("true" | "1"));
        assert_eq!(flag, i.is_multiple_of(3), "row {i}");
    }
    db.drop().await;
}
both_engines!(hundred_thousand_rows_equal_the_source);

async fn a_redelivered_batch_leaves_one_copy(e: Engine) {
    let db = Db::new(e, "rel ledger").await;
    let b = batch(7, (0..50).map(row).collect());
    let first = db.destination("t", "").deliver(&b).await.unwrap();
    assert!(first.bytes > 0);
    // the same destination, and a fresh one (a restarted process)
    let again = db.destination("t", "").deliver(&b).await.unwrap();
    assert_eq!(again, Default::default(), "a skipped batch reports nothing");
    assert_eq!(db.count("t").await, 50);
    // the ledger is per table: another table of the same stream still gets it
    db.destination("other", "").deliver(&b).await.unwrap();
    assert_eq!(db.count("other").await, 50);
    db.drop().await;
}
both_engines!(a_redelivered_batch_leaves_one_copy);

async fn truncates_apply_in_order_or_are_counted(e: Engine) {
    let db = Db::new(e, "rel truncate").await;
    let items = vec![row(1), row(2), Item::Truncate, row(3), row(4)];
    let r = db
        .destination("t", "")
        .deliver(&batch(1, items.clone()))
        .await
        .unwrap();
    assert_eq!(r.ignored_truncates, 0);
    let ids = db.column("t", "id").await;
    assert_eq!(ids, vec![Some("3".into()), Some("4".into())]);

    let r = db
        .destination("u", "truncate = \"ignore\"")
        .deliver(&batch(2, items))
        .await
        .unwrap();
    assert_eq!(r.ignored_truncates, 1);
    assert_eq!(db.count("u").await, 4);
    db.drop().await;
}
both_engines!(truncates_apply_in_order_or_are_counted);

async fn types_map_and_declarations_win(e: Engine) {
    let db = Db::new(e, "rel types").await;
    let items = vec![
        Item::Schema {
            columns: match json!({"id": "bigint", "code": "varchar(8)"}) {
                serde_json::Value::Object(m) => m,
                _ => unreachable!(),
            },
        },
        insert(json!({
            "id": 1, "code": "abc", "ok": true, "n": 9_007_199_254_740_993i64,
            "x": 0.5, "big": u64::MAX, "at": "2024-02-03T04:05:06.123456+02:00",
            "doc": {"k": [1, "two", null]}, "s": "it's \"quoted\"",
        })),
    ];
    db.destination("t", "")
        .deliver(&batch(1, items))
        .await
        .unwrap();
    let check = db.destination("t", "").check().await.unwrap().detail;
    let expect: &[&str] = match e {
        Engine::Postgres => &[
            "id bigint",
            "code varchar(8)",
            "ok boolean",
            "n bigint",
            "x double precision",
            "big numeric",
            "at timestamptz",
            "doc jsonb",
            "s text",
        ],
        Engine::Mysql => &[
            "id bigint",
            "code varchar(8)",
            "ok boolean",
            "n bigint",
            "x double",
            "big decimal(65,30)",
            "at datetime(6)",
            "s longtext",
        ],
    };
    for col in expect {
        assert!(check.contains(col), "{col} in {check}");
    }
    let v = |c: &'static str| db.column("t", c);
    assert_eq!(v("n").await[0].as_deref(), Some("9007199254740993"));
    assert!(v("big").await[0]
        .as_deref()
        .unwrap()
        .starts_with("18446744073709551615"));
    let at = v("at").await[0].clone().unwrap();
    assert!(at.starts_with("2024-02-03 02:05:06.123456"), "{at}");
    let doc: serde_json::Value = serde_json::from_str(&v("doc").await[0].clone().unwrap()).unwrap();
    assert_eq!(doc, json!({"k": [1, "two", null]}));
    assert_eq!(v("s").await[0].as_deref(), Some("it's \"quoted\""));
    db.drop().await;
}
both_engines!(types_map_and_declarations_win);

/// Many rows at once (PostgreSQL appends them with COPY): text with the
/// characters a bulk format escapes, nulls, JSON and instants come back as
/// they went in.
async fn bulk_values_round_trip(e: Engine) {
    let db = Db::new(e, "rel bulk values").await;
    let texts = [
        "tab\there",
        "line\nbreak",
        "carriage\rreturn",
        "back\\slash",
        "\\N",
        "\\.",
        "",
        "ünïcødé ✓",
    ];
    let items = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.to_string();
            insert(json!({
                "id": i,
                "s": t,
                "maybe": if i % 2 == 0 { serde_json::Value::Null } else { json!(i) },
                "x": i as f64 / 3.0,
                "at": "2024-02-03T04:05:06.5Z",
                "doc": {"k": t},
            }))
        })
        .collect();
    db.destination("t", "")
        .deliver(&batch(1, items))
        .await
        .unwrap();
    let want: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
    let got: Vec<String> = db
        .column("t", "s")
        .await
        .into_iter()
        .map(|v| v.unwrap_or_default())
        .collect();
    assert_eq!(got, want);
    let maybe = db.column("t", "maybe").await;
    for (i, m) in maybe.iter().enumerate() {
        assert_eq!(m.is_none(), i % 2 == 0, "row {i}: {m:?}");
    }
    if e == Engine::Postgres {
        for (i, v) in db.column("t", "x").await.iter().enumerate() {
            let v: f64 = v.as_deref().unwrap().parse().unwrap();
            assert_eq!(v, i as f64 / 3.0);
        }
        for (i, d) in db.column("t", "doc").await.iter().enumerate() {
            let d: serde_json::Value = serde_json::from_str(d.as_deref().unwrap()).unwrap();
            assert_eq!(d, json!({"k": want[i]}));
        }
        let at = db.column("t", "at").await[0].clone().unwrap();
        assert!(at.starts_with("2024-02-03 04:05:06.5"), "{at}");
    }
    db.drop().await;
}
both_engines!(bulk_values_round_trip);

/// Several batches in one attempt (PostgreSQL: one transaction, one
/// ledger row each): a group that overlaps batches applied before skips
/// them, a later batch may add a column an earlier one created the table
/// without, and a group with a refused row writes nothing at all.
async fn grouped_batches_apply_once_and_all_or_nothing(e: Engine) {
    let db = Db::new(e, "rel group").await;
    let dest = db.destination("t", "");
    if e == Engine::Postgres {
        assert!(dest.group_limit() > 1);
    }
    let b = |seq: u64| {
        let items = (seq * 10..seq * 10 + 10)
            .map(|i| {
                if seq >= 3 {
                    insert(json!({"id": i, "name": format!("row {i}"), "extra": seq}))
                } else {
                    insert(json!({"id": i, "name": format!("row {i}")}))
                }
            })
            .collect();
        batch(seq, items)
    };
    let reports = dest.deliver_group(&[b(1), b(2)]).await.unwrap();
    assert_eq!(reports.len(), 2);
    assert!(reports.iter().all(|r| r.bytes > 0), "{reports:?}");
    // 1 and 2 are in the ledger: only 3 and 4 are written
    let reports = dest.deliver_group(&[b(1), b(2), b(3), b(4)]).await.unwrap();
    assert_eq!(reports[0].bytes + reports[1].bytes, 0, "{reports:?}");
    assert!(reports[2].bytes > 0 && reports[3].bytes > 0, "{reports:?}");
    assert_eq!(db.count("t").await, 40);
    let extra = db.column("t", "extra").await;
    assert_eq!(extra.iter().filter(|v| v.is_some()).count(), 20);
    // a refused row (a duplicate key in a keyed table) fails the group
    db.exec(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY, name text)",
        db.table("keyed")
    ))
    .await;
    let keyed = db.destination("keyed", "");
    let good = batch(10, vec![insert(json!({"id": 1, "name": "a"}))]);
    let bad = batch(
        11,
        vec![
            insert(json!({"id": 2, "name": "b"})),
            insert(json!({"id": 2, "name": "again"})),
        ],
    );
    assert!(keyed.deliver_group(&[good.clone(), bad]).await.is_err());
    if e == Engine::Postgres {
        assert_eq!(db.count("keyed").await, 0, "all or nothing");
    }
    keyed.deliver(&good).await.unwrap();
    assert_eq!(db.count("keyed").await, 1);
    db.drop().await;
}
both_engines!(grouped_batches_apply_once_and_all_or_nothing);

async fn a_constraint_violation_names_the_record(e: Engine) {
    let db = Db::new(e, "rel reject").await;
    db.exec(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY, name text)",
        db.table("t")
    ))
    .await;
    let mut items: Vec<Item> = (0..100).map(row).collect();
    items[37] = insert(json!({"id": 10, "name": "duplicate"}));
    let err = db
        .destination("t", "")
        .deliver(&batch(1, items))
        .await
        .unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::Rejected)
    );
    assert_eq!(err.record_index, Some(37));
    let text = err.describe().to_lowercase();
    assert!(
        text.contains("record 37") && text.contains("duplicate"),
        "{text}"
    );
    assert_eq!(db.count("t").await, 0, "the batch is all or nothing");
    db.drop().await;
}
both_engines!(a_constraint_violation_names_the_record);

async fn check_reports_the_table(e: Engine) {
    let db = Db::new(e, "rel check").await;
    let d = db.destination("t", "");
    let before = d.check().await.unwrap().detail;
    assert!(before.contains("does not exist"), "{before}");
    d.deliver(&batch(1, vec![row(1)])).await.unwrap();
    let after = d.check().await.unwrap().detail;
    assert!(after.contains("exists: id bigint"), "{after}");
    db.drop().await;
}
both_engines!(check_reports_the_table);
