//! Several destinations writing into one fresh schema (database) create
//! the ledger table at the same moment, and, when they share a table,
//! that table too; each one's first delivery must succeed. Plain `CREATE
//! TABLE IF NOT EXISTS` is not safe under concurrency in PostgreSQL (a
//! unique violation on `pg_type`), so the race is run in several rounds,
//! each on a fresh schema.

#[macro_use]
mod relational_support;

use std::sync::Arc;

use relational_support::{batch, insert, Db, Engine};
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
