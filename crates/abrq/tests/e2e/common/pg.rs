//! PostgreSQL for the database-source tests: the machine's server (a
//! destination, or a source without logical decoding) and the `pgcdc`
//! cluster `scripts/services.sh` starts with `wal_level = logical`.

use abrq_sinks::relational::sqlx::{self, PgPool};
use rand::Rng;

use super::{wait_until, LONG};

/// The logical-decoding cluster.
pub fn cdc_url() -> String {
    std::env::var("ABRQ_TEST_PGCDC_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5442/test".into())
}

/// The machine's own server.
pub fn url() -> String {
    abrq_testkit::Postgres::from_env().url
}

/// The connection fields of a config table for `url`.
pub fn connection_toml(url: &str) -> String {
    let u = reqwest::Url::parse(url).expect("a postgres url");
    format!(
        "host = \"{}\"\nport = {}\ndatabase = \"{}\"\nusername = \"{}\"",
        u.host_str().unwrap_or("127.0.0.1"),
        u.port().unwrap_or(5432),
        u.path().trim_start_matches('/'),
        u.username()
    )
}

/// Ten hex digits for names no other run uses.
pub fn tag() -> String {
    let n: u64 = rand::rng().random();
    format!("{:010x}", n & 0xff_ffff_ffff)
}

/// Waits until the slot has reached its consistent point: a transaction
/// that begins after this is decoded. The slot is listed while it is
/// still being built, and a transaction that commits before its
/// consistent point is in the snapshot instead of the change stream.
pub async fn wait_slot_ready(pool: &PgPool, slot: &str) {
    wait_until(LONG, "the slot reaches its consistent point", async || {
        sqlx::query(
            "SELECT 1 FROM pg_replication_slots
             WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL",
        )
        .bind(slot)
        .fetch_optional(pool)
        .await
        .unwrap()
        .is_some()
    })
    .await;
}

/// Drops a test's slot and publication (the slot once the server has let
/// go of a killed client's session) and its schemas.
pub async fn drop_cdc(pool: &PgPool, slot: &str, schemas: &[&str]) {
    // abrq is gone; a walsender busy with a large transaction notices only
    // at its next write or at wal_sender_timeout, so end it rather than wait
    wait_until(LONG, "the slot is released", async || {
        sqlx::query_scalar::<_, bool>(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = $1 AND active",
        )
        .bind(slot)
        .fetch_optional(pool)
        .await
        .unwrap()
        .is_none()
    })
    .await;
    sqlx::query(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(&format!("DROP PUBLICATION IF EXISTS \"{slot}\""))
        .execute(pool)
        .await
        .unwrap();
    drop_schemas(pool, schemas).await;
}

pub async fn drop_schemas(pool: &PgPool, schemas: &[&str]) {
    for s in schemas {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{s}\" CASCADE"))
            .execute(pool)
            .await
            .unwrap();
    }
}

/// Runs `sql`, naming it when it fails.
pub async fn exec(pool: &PgPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}
