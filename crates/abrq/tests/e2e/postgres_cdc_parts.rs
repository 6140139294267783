//! The `postgres` cdc source's snapshot copy in parts, through the binary:
//! with `snapshot_connections = 3`, a large table is read as ranges of
//! its key on three connections sharing the slot's snapshot. abrq is
//! SIGKILLed while the parts are under way; what each part had not staged
//! is then read as a backfill of its range, after its last staged row. A
//! local `jsonl` destination, read back from its files, holds every row of
//! the source (read back through PostgreSQL) exactly once, with its
//! values; the small table copied after the large one is whole too.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

const ROWS: i64 = 100_000;
/// The small table's ids, apart from the large one's.
const SMALL: std::ops::RangeInclusive<i64> = 1_000_001..=1_001_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_table_copied_in_parts_lands_every_row_once_even_cut_short() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("cdc_parts_{tag}"), format!("abrq_parts_{tag}"));
    pg::exec(&src, &format!("CREATE SCHEMA \"{schema}\"")).await;
    for t in ["a_large", "b_small"] {
        pg::exec(
            &src,
            &format!("CREATE TABLE \"{schema}\".{t} (id bigint PRIMARY KEY, n int, pad text)"),
        )
        .await;
    }
    // about 32 MB: three parts of at least 8 MiB
    pg::exec(
        &src,
        &format!(
            "INSERT INTO \"{schema}\".a_large SELECT g, g % 1000, repeat('x', 260) \
             FROM generate_series(1, {ROWS}) g"
        ),
    )
    .await;
    pg::exec(
        &src,
        &format!(
            "INSERT INTO \"{schema}\".b_small SELECT g, g % 1000, 'small' \
             FROM generate_series({}, {}) g",
            SMALL.start(),
            SMALL.end()
        ),
    )
    .await;
    pg::exec(&src, &format!("ANALYZE \"{schema}\".a_large")).await;

    let mut abrq = Abrq::new();
    let out = std::path::PathBuf::from(abrq.p("out"));
    let config = Config::new(&abrq).stream(
        Stream::new(
            "parts",
            Source::postgres("cdc")
                .connection(&pg::cdc_url())
                .tables(&[&format!("{schema}.a_large"), &format!("{schema}.b_small")])
                .slot(&slot)
                .publication(&slot)
                .snapshot_connections(3),
        )
        .max_records(200)
        .max_wait("20ms")
        .destination(Destination::local("lake", &out)),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    let st = abrq
        .wait_status("parts", "the parts of the copy under way", |st| {
            st["source"]["position"]["snapshot"]["parts"].as_u64() >= Some(2)
                && u(&st["spool"]["last_seq"]) > 5
        })
        .await;
    let copy = &st["source"]["position"]["snapshot"];
    assert_eq!(copy["table"], format!("{schema}.a_large"), "{st}");
    assert!(
        copy["parts_done"].as_u64() < copy["parts"].as_u64(),
        "the parts ended before the kill: {st}"
    );
    abrq.note(&format!("killed during the copy: {copy}"));
    abrq.kill();

    abrq.start().await;
    abrq.wait_status("parts", "the rest read as a backfill", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
            && st["source"]["position"]["backfill"]["state"] == "idle"
    })
    .await;
    let want = (ROWS + SMALL.count() as i64) as usize;
    wait_until(LONG, "every row delivered", async || {
        read_dest(&out).record_count() >= want
    })
    .await;
    abrq.kill();

    // each row once, as the source holds it
    let files = read_dest(&out);
    let found = by_id(&files, "id");
    let source: Vec<(i64, i32, String)> = sqlx::query_as(&format!(
        "SELECT id, n, pad FROM \"{schema}\".a_large UNION ALL \
         SELECT id, n, pad FROM \"{schema}\".b_small ORDER BY id"
    ))
    .fetch_all(&src)
    .await
    .unwrap();
    assert_eq!(found.len(), source.len(), "rows delivered");
    for (id, n, pad) in &source {
        let r = found
            .get(&(*id as u64))
            .unwrap_or_else(|| panic!("row {id} is missing"));
        assert_eq!(r["n"], *n, "row {id}");
        assert_eq!(r["pad"], pad.as_str(), "row {id}");
    }

    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
