//! Several postgres destinations of one stream, each its own table in one
//! fresh schema, start together: their first batches all create tables and
//! the shared ledger at the same moment. Every first attempt must land
//! (PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe against a
//! concurrent one; abrq takes an advisory lock for it), so no attempt
//! fails and nothing is retried.

use crate::common::*;
use abrq_sinks::relational::sqlx;
use rand::Rng;

const DESTINATIONS: usize = 8;

#[tokio::test(flavor = "multi_thread")]
async fn destinations_racing_on_a_fresh_schema_all_land_their_first_batch() {
    let url = abrq_testkit::Postgres::from_env().url;
    let pg = reqwest::Url::parse(&url).expect("postgres url");
    for round in 0..3 {
        let n: u64 = rand::rng().random();
        let schema = format!("abrq_race_{:012x}", n & 0xffff_ffff_ffff);
        let pool = sqlx::PgPool::connect(&url).await.expect("postgres");
        sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
            .execute(&pool)
            .await
            .unwrap();

        let mut abrq = Abrq::new();
        let mut dests = String::new();
        for i in 0..DESTINATIONS {
            dests.push_str(&format!(
                "\n[[streams.destinations]]\nname = \"pg{i}\"\nengine = \"postgres\"\n\
                 host = \"{host}\"\nport = {port}\ndatabase = \"{db}\"\nusername = \"{user}\"\n\
                 schema = \"{schema}\"\ntable = \"t{i}\"\n",
                host = pg.host_str().unwrap_or("127.0.0.1"),
                port = pg.port().unwrap_or(5432),
                db = pg.path().trim_start_matches('/'),
                user = pg.username(),
            ));
        }
        abrq.write_config(&format!(
            "data_dir = \"{data}\"\n[server]\nlisten = \"{listen}\"\n\
             [[streams]]\nname = \"s\"\n[streams.source]\nengine = \"http\"\n{dests}",
            data = abrq.p("data"),
            listen = abrq.listen(),
        ));
        abrq.start().await;
        abrq.ingest(
            "s",
            "{\"id\":1,\"name\":\"first\"}\n{\"id\":2,\"name\":\"second\"}\n",
        )
        .await;
        abrq.wait_status("s", "every destination through seq 1", |st| {
            (0..DESTINATIONS).all(|i| u(&dest_of(st, &format!("pg{i}"))["high_water_mark"]) == 1)
        })
        .await;
        let failed = abrq
            .metric(
                "abrq_stream_fanout_attempts_total",
                &[("outcome", "failure")],
            )
            .await;
        assert_eq!(
            failed,
            0.0,
            "round {round}: first attempts failed:\n{}",
            abrq.log()
        );
        let ledger: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM \"{schema}\".abrq_applied_batches"
        ))
        .fetch_one(&pool)
        .await
        .expect("the ledger");
        assert_eq!(
            ledger, DESTINATIONS as i64,
            "one ledger row per destination"
        );
        abrq.kill();
        sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}
