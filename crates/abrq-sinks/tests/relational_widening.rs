//! Types over a stream, against both engines: whatever batch a value comes
//! in, the default policy widens a column to what one batch of every value
//! would have created (bigint to double precision for a fraction, date to
//! timestamp, anything to text only for text; nulls never), converting
//! the stored rows; `widen_strict` dead-letters the text instead. Days and
//! instants land as `date` and `timestamptz` / `datetime(6)`.

#[macro_use]
mod relational_support;

use abrq_core::{Disposition, ReasonClass};
use relational_support::{batch, insert, Db, Engine};
use serde_json::json;

/// `column -> type` as the catalog spells it, in table order.
async fn types(db: &Db, table: &str) -> Vec<(String, String)> {
    let sql = match db.engine {
        Engine::Postgres => format!(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = '{}' AND table_name = '{table}' ORDER BY ordinal_position",
            db.name
        ),
        Engine::Mysql => format!(
            "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR) \
             FROM information_schema.columns \
             WHERE table_schema = '{}' AND table_name = '{table}' ORDER BY ordinal_position",
            db.name
        ),
    };
    db.rows(&sql)
        .await
        .into_iter()
        .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
        .collect()
}

fn named(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

async fn later_values_widen_columns_and_nulls_never_do(e: Engine) {
    let db = Db::new(e, "rel widen stream").await;
    let d = db.destination("t", "");
    let first = vec![insert(json!({
        "id": 1, "n": 1, "x": 1.5, "day": "2024-01-02", "at": "2024-01-02 03:04:05",
        "ok": true, "gap": null,
    }))];
    d.deliver(&batch(1, first)).await.unwrap();
    let created = match e {
        Engine::Postgres => named(&[
            ("id", "bigint"),
            ("n", "bigint"),
            ("x", "double precision"),
            ("day", "date"),
            ("at", "timestamp with time zone"),
            ("ok", "boolean"),
        ]),
        Engine::Mysql => named(&[
            ("id", "bigint(20)"),
            ("n", "bigint(20)"),
            ("x", "double"),
            ("day", "date"),
            ("at", "datetime(6)"),
            ("ok", "tinyint(1)"),
        ]),
    };
    assert_eq!(types(&db, "t").await, created);

    // nulls change nothing; a column first seen later is added
    let nulls = vec![insert(
        json!({"id": 2, "n": null, "x": null, "day": null, "at": null, "ok": null, "gap": 4.5}),
    )];
    d.deliver(&batch(2, nulls)).await.unwrap();
    let mut want = created.clone();
    want.push(("gap".into(), want[2].1.clone()));
    assert_eq!(types(&db, "t").await, want);

    // a fraction, an instant in a date column, then text in a number column
    let later = vec![
        insert(json!({"id": 3, "n": 2.5, "day": "2024-01-03T04:05:06Z"})),
        insert(json!({"id": 4, "x": "calm"})),
    ];
    d.deliver(&batch(3, later)).await.unwrap();
    let widened = match e {
        Engine::Postgres => named(&[
            ("id", "bigint"),
            ("n", "double precision"),
            ("x", "text"),
            ("day", "timestamp with time zone"),
            ("at", "timestamp with time zone"),
            ("ok", "boolean"),
            ("gap", "double precision"),
        ]),
        Engine::Mysql => named(&[
            ("id", "bigint(20)"),
            ("n", "double"),
            ("x", "longtext"),
            ("day", "datetime(6)"),
            ("at", "datetime(6)"),
            ("ok", "tinyint(1)"),
            ("gap", "double"),
        ]),
    };
    assert_eq!(types(&db, "t").await, widened);
    let col = |c: &'static str| db.column("t", c);
    assert_eq!(
        col("n").await,
        [Some("1".into()), None, Some("2.5".into()), None]
    );
    assert_eq!(
        col("x").await,
        [Some("1.5".into()), None, None, Some("calm".into())]
    );
    // the stored day became its first instant, in UTC
    let days = col("day").await;
    assert!(
        days[0]
            .as_deref()
            .unwrap()
            .starts_with("2024-01-02 00:00:00"),
        "{days:?}"
    );
    assert!(
        days[2]
            .as_deref()
            .unwrap()
            .starts_with("2024-01-03 04:05:06"),
        "{days:?}"
    );
    let at = col("at").await;
    assert!(
        at[0].as_deref().unwrap().starts_with("2024-01-02 03:04:05"),
        "a zone-less time is UTC: {at:?}"
    );
    db.drop().await;
}
both_engines!(later_values_widen_columns_and_nulls_never_do);

async fn widen_strict_dead_letters_text_in_a_number_column(e: Engine) {
    let db = Db::new(e, "rel widen strict").await;
    let strict = "[streams.destinations.schema_drift]\ntypes = \"widen_strict\"";
    let d = db.destination("t", strict);
    d.deliver(&batch(1, vec![insert(json!({"id": 1, "x": 1.5}))]))
        .await
        .unwrap();
    let text = vec![
        insert(json!({"id": 2, "x": 2})),
        insert(json!({"id": 3, "x": "calm"})),
    ];
    let err = d.deliver(&batch(2, text)).await.unwrap_err();
    assert_eq!(
        err.disposition,
        Disposition::DeadLetter(ReasonClass::SchemaDrift)
    );
    assert_eq!(err.record_index, Some(1));
    assert!(
        err.describe()
            .contains(r#"value "calm" does not fit column "x""#),
        "{}",
        err.describe()
    );
    // within a kind it still widens, exactly: a fraction makes numeric
    d.deliver(&batch(3, vec![insert(json!({"id": 2.5}))]))
        .await
        .unwrap();
    let id = &types(&db, "t").await[0].1;
    assert!(
        id.starts_with("numeric") || id.starts_with("decimal"),
        "{id}"
    );
    assert_eq!(db.count("t").await, 2);
    db.drop().await;
}
both_engines!(widen_strict_dead_letters_text_in_a_number_column);

async fn a_widened_column_takes_the_next_batch_of_the_same_shape(e: Engine) {
    // the same fields every batch, through one destination: a statement
    // prepared for the narrower column must not be reused for the wider one
    let db = Db::new(e, "rel widen same").await;
    let d = db.destination("t", "");
    let values = [json!(1), json!(2.5), json!("calm"), json!(4)];
    for (seq, x) in values.iter().enumerate() {
        let seq = seq as u64 + 1;
        let rows = (0..3)
            .map(|i| insert(json!({"id": seq * 10 + i, "x": x})))
            .collect();
        d.deliver(&batch(seq, rows)).await.unwrap();
    }
    let x = db.column("t", "x").await;
    let want: Vec<Option<String>> = ["1", "2.5", "calm", "4"]
        .iter()
        .flat_map(|v| std::iter::repeat_n(Some(v.to_string()), 3))
        .collect();
    assert_eq!(x, want);
    db.drop().await;
}
both_engines!(a_widened_column_takes_the_next_batch_of_the_same_shape);
