//! Several destinations writing into one fresh schema (database) create
//! the ledger table at the same moment, and, when they share a table,
//! that table too; each one's first delivery must succeed. Plain `CREATE
//! TABLE IF NOT EXISTS` is not safe under concurrency in PostgreSQL (a
//! unique violation on `pg_type`), so the race is run in several rounds,
//! each on a fresh schema. A schema that does not exist yet is created
//! the same way, by whichever destination comes first.

#[macro_use]
mod relational_support;

use std::sync::Arc;

use relational_support::{batch, build, insert, Db, Engine};
use serde_json::json;
use tokio::sync::Barrier;

const DESTINATIONS: usize = 8;
const ROUNDS: usize = 6;

/// `DESTINATIONS` destinations on a fresh schema deliver their first batch
/// at once, `ROUNDS` times; with `shared`, all into one table (which they
/// then race to create too), else each into its own.
async fn first_deliveries_race(e: Engine, shared: bool) {
    let table = |i: usize| {
        if shared {
            "t".to_string()
        } else {
            format!("t{i}")
        }
    };
    for round in 0..ROUNDS {
        let db = Db::new(e, "rel ledger race").await;
        let dests: Vec<_> = (0..DESTINATIONS)
            .map(|i| db.destination(&table(i), ""))
            .collect();
        let start = Arc::new(Barrier::new(DESTINATIONS));
        let tasks: Vec<_> = dests
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let start = start.clone();
                // a batch of its own: one seq each, so one ledger row each
                let b = batch(i as u64 + 1, vec![insert(json!({"id": i, "name": "x"}))]);
                tokio::spawn(async move {
                    start.wait().await;
                    d.deliver(&b).await.map_err(|e| e.describe())
                })
            })
            .collect();
        let mut failed = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            if let Err(why) = t.await.unwrap() {
                failed.push(format!("destination {i}: {why}"));
            }
        }
        assert!(
            failed.is_empty(),
            "round {round}: first deliveries failed:\n{}",
            failed.join("\n")
        );
        let rows: i64 = if shared {
            db.count("t").await
        } else {
            let mut n = 0;
            for i in 0..DESTINATIONS {
                n += db.count(&table(i)).await;
            }
            n
        };
        assert_eq!(rows, DESTINATIONS as i64);
        db.drop().await;
    }
}

async fn first_deliveries_race_on_the_ledger(e: Engine) {
    first_deliveries_race(e, false).await;
}
both_engines!(first_deliveries_race_on_the_ledger);

async fn first_deliveries_race_on_one_table(e: Engine) {
    first_deliveries_race(e, true).await;
}
both_engines!(first_deliveries_race_on_one_table);

/// Destinations whose schema (database) does not exist yet create it, all
/// at once, then their ledger and tables in it.
async fn a_missing_schema_is_created(e: Engine) {
    let db = Db::new(e, "rel schema").await;
    let fresh = format!("{}_made", db.name);
    let barrier = Arc::new(Barrier::new(DESTINATIONS));
    let mut tasks = Vec::new();
    for i in 0..DESTINATIONS {
        let d = build(&db.config_in(&fresh, &format!("t{i}")));
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let report = d.check().await.map_err(|e| e.describe())?;
            d.deliver(&batch(1, vec![insert(json!({"id": i}))]))
                .await
                .map_err(|e| e.describe())?;
            Ok::<_, String>(report.detail)
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for i in 0..DESTINATIONS {
        let q = |n: &str| match e {
            Engine::Postgres => format!("\"{n}\""),
            Engine::Mysql => format!("`{n}`"),
        };
        let sql = format!(
            "SELECT {} FROM {}.{}",
            db.text("id"),
            q(&fresh),
            q(&format!("t{i}"))
        );
        assert_eq!(db.rows(&sql).await, vec![vec![Some(i.to_string())]]);
    }
    let drop = match e {
        Engine::Postgres => format!("DROP SCHEMA \"{fresh}\" CASCADE"),
        Engine::Mysql => format!("DROP DATABASE `{fresh}`"),
    };
    db.exec(&drop).await;
    db.drop().await;
}
both_engines!(a_missing_schema_is_created);

/// A user who may not create the schema is told which schema is missing
/// and what was refused, at check and at delivery alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_missing_schema_the_user_may_not_create_is_named() {
    let db = Db::new(Engine::Postgres, "rel schema denied").await;
    let role = format!("{}_user", db.name);
    db.exec(&format!("CREATE ROLE {role} LOGIN")).await;
    let fresh = format!("{}_made", db.name);
    let text = db.config_in(&fresh, "t");
    let user = text
        .lines()
        .find(|l| l.starts_with("username = "))
        .unwrap()
        .to_string();
    let d = build(&text.replace(&user, &format!("username = \"{role}\"")));
    let check = d.check().await.unwrap_err().describe();
    let batch_error = d
        .deliver(&batch(1, vec![insert(json!({"id": 1}))]))
        .await
        .unwrap_err();
    for said in [check, batch_error.describe()] {
        assert!(
            said.contains(&format!("create the schema \"{fresh}\""))
                && said.contains("permission denied"),
            "{said}"
        );
    }
    assert!(batch_error.is_transient(), "an operator's grant fixes it");
    db.exec(&format!("DROP ROLE {role}")).await;
    db.drop().await;
}
