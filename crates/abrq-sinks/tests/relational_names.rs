//! Field names MySQL cannot take as column names (a case twin of another
//! field or of a column, a trailing space, a character outside the Basic
//! Multilingual Plane) reject the batch at once, whole, naming every bad
//! record; PostgreSQL takes the same names as columns of their own.

#[macro_use]
mod relational_support;

use std::sync::Arc;

use abrq_core::{Disposition, Item, ReasonClass};
use relational_support::{batch, insert, Db, Engine};
use serde_json::json;
use tokio::sync::Barrier;

fn awkward() -> Vec<Item> {
    vec![
        insert(json!({"id": 0, "name": "a"})),
        insert(json!({"id": 1, "Name": "b"})),
        insert(json!({"id": 2, "trail ": "c"})),
        insert(json!({"id": 3, "smile😀": "d"})),
        insert(json!({"id": 4})),
    ]
}

async fn awkward_names(e: Engine) {
    let db = Db::new(e, "rel names").await;
    let d = db.destination("t", "");
    let result = d.deliver(&batch(1, awkward())).await;
    match e {
        Engine::Postgres => {
            result.unwrap();
            let sql = format!(
                "SELECT {}, {}, {} FROM {} WHERE id = 1 OR id = 2 OR id = 3 ORDER BY id",
                db.text("\"Name\""),
                db.text("\"trail \""),
                db.text("\"smile😀\""),
                db.table("t")
            );
            let rows = db.rows(&sql).await;
            assert_eq!(rows[0][0].as_deref(), Some("b"));
            assert_eq!(rows[1][1].as_deref(), Some("c"));
            assert_eq!(rows[2][2].as_deref(), Some("d"));
        }
        Engine::Mysql => {
            let err = result.unwrap_err();
            assert_eq!(
                err.disposition,
                Disposition::DeadLetter(ReasonClass::Rejected),
                "{}",
                err.describe()
            );
            let text = err.describe();
            for part in [
                r#"record 1: field "Name" collides with "name" (MySQL column names are case-insensitive)"#,
                r#"record 2: field "trail ": the name ends with ' '"#,
                r#"record 3: field "smile😀": the name contains '😀'"#,
            ] {
                assert!(text.contains(part), "{part:?} not in {text}");
            }
            assert!(!text.contains("record 0"), "{text}");
            assert!(!text.contains("record 4"), "{text}");
            // whole or nothing: not even the table was made
            assert!(db.rows(&table_exists(&db)).await.is_empty());
        }
    }
    db.drop().await;
}
both_engines!(awkward_names);

fn table_exists(db: &Db) -> String {
    format!(
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = '{}' AND table_name = 't'",
        db.name
    )
}

/// A field that differs from an existing column only in case cannot be
/// added; once the operator renames the column to the field's spelling,
/// the same batch (a replay) lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_case_twin_of_a_column_lands_after_a_rename() {
    let db = Db::new(Engine::Mysql, "rel names twin").await;
    let d = db.destination("t", "");
    d.deliver(&batch(1, vec![insert(json!({"id": 1, "name": "a"}))]))
        .await
        .unwrap();
    let twin = batch(
        2,
        vec![
            insert(json!({"id": 2, "Name": "b"})),
            insert(json!({"id": 3, "Name": "c"})),
        ],
    );
    let err = d.deliver(&twin).await.unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::Rejected)
    );
    let text = err.describe();
    let cause = r#"field "Name" collides with column "name" of the table"#;
    for part in [format!("record 0: {cause}"), format!("record 1: {cause}")] {
        assert!(text.contains(&part), "{part:?} not in {text}");
    }
    assert_eq!(db.count("t").await, 1);

    db.exec(&format!(
        "ALTER TABLE {} RENAME COLUMN `name` TO `Name`",
        db.table("t")
    ))
    .await;
    d.deliver(&twin).await.unwrap();
    assert_eq!(
        db.column("t", "Name").await,
        vec![Some("a".into()), Some("b".into()), Some("c".into())]
    );
    db.drop().await;
}

/// Every bad record counts; the message spells out the first 20.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_many_bad_records_are_counted() {
    let db = Db::new(Engine::Mysql, "rel names many").await;
    let items = (0..50)
        .map(|i| {
            if i % 2 == 1 {
                insert(json!({"id": i, "v ": i}))
            } else {
                insert(json!({"id": i}))
            }
        })
        .collect();
    let err = db
        .destination("t", "")
        .deliver(&batch(1, items))
        .await
        .unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::Rejected)
    );
    let text = err.describe();
    assert!(text.starts_with("record 1: field \"v \""), "{text}");
    assert!(text.contains("record 39: "), "{text}");
    assert!(!text.contains("record 41: "), "{text}");
    assert!(text.ends_with("; and 5 more records"), "{text}");
    db.drop().await;
}

/// Several writers adding the same new column to one table at once: the
/// ones that lose the race meet the server's duplicate column error, which
/// is theirs to retry, never a dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_concurrent_added_columns_are_retried_not_rejected() {
    const WRITERS: usize = 8;
    let db = Db::new(Engine::Mysql, "rel names race").await;
    let dests: Vec<_> = (0..WRITERS).map(|_| db.destination("t", "")).collect();
    // every writer has seen the table before the race
    for (i, d) in dests.iter().enumerate() {
        let b = batch(i as u64 + 1, vec![insert(json!({"id": i}))]);
        d.deliver(&b).await.unwrap();
    }
    let mut seq = WRITERS as u64;
    let mut lost = 0;
    for round in 0..5 {
        let start = Arc::new(Barrier::new(WRITERS));
        let tasks: Vec<_> = dests
            .iter()
            .map(|d| {
                seq += 1;
                let (d, start) = (d.clone(), start.clone());
                let b = batch(
                    seq,
                    vec![insert(json!({"id": seq, format!("f{round}"): 1}))],
                );
                tokio::spawn(async move {
                    start.wait().await;
                    let first = d.deliver(&b).await;
                    (d, b, first)
                })
            })
            .collect();
        for t in tasks {
            let (d, b, first) = t.await.unwrap();
            if let Err(e) = first {
                assert!(e.is_transient(), "round {round}: {}", e.describe());
                lost += 1;
                d.deliver(&b).await.unwrap();
            }
        }
    }
    println!("{lost} attempts lost the race");
    assert_eq!(db.count("t").await, WRITERS as i64 * 6);
    db.drop().await;
}
