//! The schema `abrq`, as numbered migrations tracked in
//! `abrq.schema_version`. Append a migration to change the schema; never
//! edit a released one.
//!
//! Numbers are BIGINT (seqs and counts are u64 in the API; a value past
//! i64::MAX is refused, never wrapped). Times are UTC milliseconds since the
//! epoch, as on SQLite: exact, and what `staged_at` promises.

use anyhow::{anyhow, Context as _};
use sqlx::postgres::PgConnection;
use sqlx::{Acquire as _, Executor as _, Row as _};

/// Migration `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2];

/// Held (for the migration's transaction) by whoever migrates, so two abrq
/// processes starting at once against a new database do not both create it.
/// Any constant works; this one is "abrq" in ASCII.
const MIGRATION_LOCK: i64 = 0x6162_7271;

const V1: &str = r#"
CREATE TABLE abrq.streams (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    uuid          UUID NOT NULL,
    last_seq      BIGINT NOT NULL DEFAULT 0,
    cursor        TEXT,
    -- Running totals of the spool, kept by stage and gc in their own
    -- transactions: spool_stats is polled for backpressure several times a
    -- second and must not count rows.
    spool_batches BIGINT NOT NULL DEFAULT 0,
    spool_records BIGINT NOT NULL DEFAULT 0,
    spool_bytes   BIGINT NOT NULL DEFAULT 0,
    created_at    BIGINT NOT NULL
);

CREATE TABLE abrq.spool (
    stream_id       BIGINT NOT NULL REFERENCES abrq.streams (id),
    seq             BIGINT NOT NULL,
    idempotency_key TEXT NOT NULL,
    staged_at       BIGINT NOT NULL,
    records         BIGINT NOT NULL,
    bytes           BIGINT NOT NULL,
    payload         BYTEA NOT NULL,
    PRIMARY KEY (stream_id, seq)
);
-- A batch is written once and read once or twice: compressing it on every
-- write (TOAST's default) costs the server more than the disk it saves.
ALTER TABLE abrq.spool ALTER COLUMN payload SET STORAGE EXTERNAL;

CREATE TABLE abrq.destinations (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id  BIGINT NOT NULL REFERENCES abrq.streams (id),
    name       TEXT NOT NULL,
    kind       TEXT NOT NULL,
    enabled    BOOLEAN NOT NULL,
    paused     BOOLEAN NOT NULL DEFAULT false,
    hwm        BIGINT NOT NULL,
    breaker    JSON NOT NULL,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (stream_id, name)
);

-- HTTP Idempotency-Key values already staged, with the seqs they got and a
-- digest of the body (the same key with another body is a conflict).
CREATE TABLE abrq.ingest_requests (
    stream_id BIGINT NOT NULL REFERENCES abrq.streams (id),
    key       TEXT NOT NULL,
    digest    TEXT NOT NULL,
    first_seq BIGINT,
    last_seq  BIGINT,
    at        BIGINT NOT NULL,
    PRIMARY KEY (stream_id, key)
);
CREATE INDEX ingest_requests_by_age ON abrq.ingest_requests (at);

-- Each dead letter owns a copy of its batch, so spool GC never takes what a
-- replay needs. Identity ids come from a sequence: never reused.
CREATE TABLE abrq.dead_letters (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination_id      BIGINT NOT NULL REFERENCES abrq.destinations (id),
    seq                 BIGINT NOT NULL,
    idempotency_key     TEXT NOT NULL,
    staged_at           BIGINT NOT NULL,
    records             BIGINT NOT NULL,
    bytes               BIGINT NOT NULL,
    reason_class        TEXT NOT NULL,
    error               TEXT NOT NULL,
    attempts            BIGINT NOT NULL,
    state               TEXT NOT NULL
                        CHECK (state IN ('pending', 'replayed', 'discarded')),
    replay_requested    BOOLEAN NOT NULL DEFAULT false,
    replay_requested_by TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    payload             BYTEA NOT NULL,
    -- A mark passes a seq once, so a batch is dead-lettered once per
    -- destination; a failed replay updates the row instead.
    UNIQUE (destination_id, seq)
);
CREATE INDEX dead_letters_by_state ON abrq.dead_letters (destination_id, state, id);

-- Stream and destination by name: the log outlives renames and typos. JSON
-- (not JSONB) keeps the detail as written, key order included.
CREATE TABLE abrq.audit (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          BIGINT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    stream      TEXT NOT NULL,
    destination TEXT,
    detail      JSON NOT NULL
);
CREATE INDEX audit_by_stream ON abrq.audit (stream, id);

CREATE TABLE abrq.skipped_ranges (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination_id BIGINT NOT NULL REFERENCES abrq.destinations (id),
    from_seq       BIGINT NOT NULL,
    to_seq         BIGINT NOT NULL,
    at             BIGINT NOT NULL
);
CREATE INDEX skipped_ranges_by_destination ON abrq.skipped_ranges (destination_id, from_seq);
"#;

/// Leases (see `lease.rs`). Their times come from the database's clock, the
/// one clock every process shares: `abrq.clock_ms()`.
const V2: &str = r#"
CREATE FUNCTION abrq.clock_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

-- One row per running process, keyed by the instance it made at start:
-- node_id is a label two processes may share.
CREATE TABLE abrq.nodes (
    instance     TEXT PRIMARY KEY,
    node_id      TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);

-- One row per resource ever held. The epoch only grows: each claim takes
-- the next one, and a holder's writes carry theirs.
CREATE TABLE abrq.leases (
    resource    TEXT PRIMARY KEY,
    node_id     TEXT,
    instance    TEXT,
    epoch       BIGINT NOT NULL,
    acquired_at BIGINT,
    expires_at  BIGINT
);
"#;

/// Creates the schema if needed and applies the missing migrations and the
/// version bump in one transaction, so a crash never leaves a half-migrated
/// database. Refuses a database written by a newer abrq.
pub(super) async fn migrate(conn: &mut PgConnection) -> anyhow::Result<()> {
    let latest = MIGRATIONS.len();
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .context("waiting for the schema migration lock")?;
    // Created only when missing: CREATE ... IF NOT EXISTS would still need
    // the CREATE privilege, which a role given a ready schema may not have.
    let (has_schema, has_version): (bool, bool) = sqlx::query_as(
        "SELECT to_regnamespace('abrq') IS NOT NULL,
                to_regclass('abrq.schema_version') IS NOT NULL",
    )
    .fetch_one(&mut *tx)
    .await?;
    if !has_schema {
        sqlx::query("CREATE SCHEMA abrq")
            .execute(&mut *tx)
            .await
            .context("creating schema abrq")?;
    }
    if !has_version {
        // One row at most: `one` can only be true and is the key.
        sqlx::query(
            "CREATE TABLE abrq.schema_version (
                 one     BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
                 version BIGINT NOT NULL
             )",
        )
        .execute(&mut *tx)
        .await
        .context("creating abrq.schema_version")?;
    }
    let current = sqlx::query("SELECT version FROM abrq.schema_version")
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| r.try_get::<i64, _>(0))
        .transpose()?
        .unwrap_or(0);
    let current =
        usize::try_from(current).map_err(|_| anyhow!("negative state schema version {current}"))?;
    if current > latest {
        return Err(anyhow!(
            "state schema version {current} is newer than this abrq supports ({latest}); \
             upgrade abrq or point it at another database"
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        // Text alone goes by the simple protocol, which runs several
        // statements at once.
        (&mut *tx)
            .execute(*sql)
            .await
            .with_context(|| format!("applying state schema migration {}", i + 1))?;
        sqlx::query(
            "INSERT INTO abrq.schema_version (version) VALUES ($1)
             ON CONFLICT (one) DO UPDATE SET version = excluded.version",
        )
        .bind(i as i64 + 1)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
