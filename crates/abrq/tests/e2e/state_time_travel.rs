//! State that goes back in time: the data directory restored to an
//! earlier copy (as a backup, or a lagging standby of the state store
//! after a failover, would leave it) hands out seqs that batches already
//! delivered had. Their keys must still differ: a postgres ledger that
//! held the earlier batch's key would skip the new rows as applied, and
//! a local object named after it would be overwritten, losing the
//! earlier records.

use std::fs;
use std::path::Path;

use crate::common::*;
use abrq_sinks::relational::sqlx;

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

async fn deliver(abrq: &mut Abrq, body: &str, seq: u64) {
    abrq.start().await;
    abrq.ingest("s", body).await;
    abrq.wait_status("s", &format!("both destinations through seq {seq}"), |st| {
        ["files", "pg"]
            .iter()
            .all(|d| u(&dest_of(st, d)["high_water_mark"]) == seq)
    })
    .await;
    abrq.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn batches_staged_again_after_a_restore_are_all_delivered() {
    let url = pg::url();
    let schema = format!("abrq_tt_{}", pg::tag());
    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        "data_dir = \"{data}\"\n[server]\nlisten = \"{listen}\"\n\
         [[streams]]\nname = \"s\"\n[streams.source]\nengine = \"http\"\n\
         [[streams.destinations]]\nname = \"files\"\nengine = \"local\"\n\
         database = \"{out}\"\nformat = \"jsonl\"\n\
         [[streams.destinations]]\nname = \"pg\"\nengine = \"postgres\"\n{conn}\n\
         schema = \"{schema}\"\ntable = \"t\"\n",
        data = abrq.p("data"),
        listen = abrq.listen(),
        out = abrq.p("out"),
        conn = pg::connection_toml(&url),
    ));

    deliver(&mut abrq, "{\"id\":1}\n", 1).await;
    copy_dir(&abrq.path("data"), &abrq.path("data-at-seq-1"));
    deliver(&mut abrq, "{\"id\":2}\n", 2).await;
    // the restore: seq 2 is handed out again, to other records
    fs::remove_dir_all(abrq.path("data")).unwrap();
    copy_dir(&abrq.path("data-at-seq-1"), &abrq.path("data"));
    deliver(&mut abrq, "{\"id\":3}\n", 2).await;

    let out = read_dest(&abrq.path("out"));
    let mut ids: Vec<u64> = out.records().map(|r| u(&r["id"])).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3], "objects: {:?}", out.objects.keys());
    let pool = sqlx::PgPool::connect(&url).await.expect("postgres");
    let rows: Vec<i64> = sqlx::query_scalar(&format!("SELECT id FROM \"{schema}\".t ORDER BY id"))
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows, [1, 2, 3], "the ledger skipped a batch as applied");
    pg::drop_schemas(&pool, &[&schema]).await;
}
