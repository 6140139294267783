//! The schema, as numbered migrations tracked in `PRAGMA user_version`.
//! Append a migration to change the schema; never edit a released one.

use anyhow::{anyhow, Context as _};
use rusqlite::{Connection, TransactionBehavior};

/// Migration `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2];

const V1: &str = r#"
CREATE TABLE streams (
    id            INTEGER PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    uuid          TEXT NOT NULL,
    last_seq      INTEGER NOT NULL DEFAULT 0,
    cursor        TEXT,
    -- Running totals of the spool, kept by stage and gc in their own
    -- transactions: spool_stats is polled for backpressure several times a
    -- second and must not count rows.
    spool_batches INTEGER NOT NULL DEFAULT 0,
    spool_records INTEGER NOT NULL DEFAULT 0,
    spool_bytes   INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);

-- The payload is the last column so reading the metadata never touches the
-- payload's overflow pages.
CREATE TABLE spool (
    stream_id       INTEGER NOT NULL REFERENCES streams (id),
    seq             INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    staged_at       INTEGER NOT NULL,
    records         INTEGER NOT NULL,
    bytes           INTEGER NOT NULL,
    payload         BLOB NOT NULL,
    PRIMARY KEY (stream_id, seq)
);

CREATE TABLE destinations (
    id         INTEGER PRIMARY KEY,
    stream_id  INTEGER NOT NULL REFERENCES streams (id),
    name       TEXT NOT NULL,
    kind       TEXT NOT NULL,
    enabled    INTEGER NOT NULL,
    paused     INTEGER NOT NULL DEFAULT 0,
    hwm        INTEGER NOT NULL,
    breaker    TEXT NOT NULL,
    last_error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (stream_id, name)
);

-- HTTP Idempotency-Key values already staged, with the seqs they got. Kept
-- (not expired) so a client retrying much later still gets Duplicate.
CREATE TABLE ingest_requests (
    stream_id INTEGER NOT NULL REFERENCES streams (id),
    key       TEXT NOT NULL,
    first_seq INTEGER,
    last_seq  INTEGER,
    at        INTEGER NOT NULL,
    PRIMARY KEY (stream_id, key)
) WITHOUT ROWID;

-- Each dead letter owns a copy of its batch, so spool GC never takes what a
-- replay needs. AUTOINCREMENT: ids are shown to operators, never reuse one.
CREATE TABLE dead_letters (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    destination_id      INTEGER NOT NULL REFERENCES destinations (id),
    seq                 INTEGER NOT NULL,
    idempotency_key     TEXT NOT NULL,
    staged_at           INTEGER NOT NULL,
    records             INTEGER NOT NULL,
    bytes               INTEGER NOT NULL,
    reason_class        TEXT NOT NULL,
    error               TEXT NOT NULL,
    attempts            INTEGER NOT NULL,
    state               TEXT NOT NULL
                        CHECK (state IN ('pending', 'replayed', 'discarded')),
    replay_requested    INTEGER NOT NULL DEFAULT 0,
    replay_requested_by TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    payload             BLOB NOT NULL,
    -- A mark passes a seq once, so a batch is dead-lettered once per
    -- destination; a failed replay updates the row instead.
    UNIQUE (destination_id, seq)
);
CREATE INDEX dead_letters_by_state ON dead_letters (destination_id, state, id);

-- Stream and destination by name: the log outlives renames and typos.
CREATE TABLE audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    stream      TEXT NOT NULL,
    destination TEXT,
    detail      TEXT NOT NULL
);
CREATE INDEX audit_by_stream ON audit (stream, id);

CREATE TABLE skipped_ranges (
    id             INTEGER PRIMARY KEY,
    destination_id INTEGER NOT NULL REFERENCES destinations (id),
    from_seq       INTEGER NOT NULL,
    to_seq         INTEGER NOT NULL,
    at             INTEGER NOT NULL
);
CREATE INDEX skipped_ranges_by_destination ON skipped_ranges (destination_id, from_seq);
"#;

/// Ingest request keys remember a digest of their body (a reused key with
/// another body is a conflict) and expire by age.
const V2: &str = r#"
ALTER TABLE ingest_requests ADD COLUMN digest TEXT;
CREATE INDEX ingest_requests_by_age ON ingest_requests (at);
"#;

/// Applies the missing migrations and the version bump in one transaction,
/// so a crash never leaves a half-migrated file. Refuses a file written by a
/// newer abrq.
pub(crate) fn migrate(conn: &mut Connection) -> anyhow::Result<()> {
    let latest = MIGRATIONS.len();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let current =
        usize::try_from(current).map_err(|_| anyhow!("negative user_version {current}"))?;
    if current > latest {
        return Err(anyhow!(
            "state schema version {current} is newer than this abrq supports ({latest}); \
             upgrade abrq or point it at another state file"
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        tx.execute_batch(sql)
            .with_context(|| format!("applying state schema migration {}", i + 1))?;
        tx.pragma_update(None, "user_version", i + 1)?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_newer_files() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);

        conn.pragma_update(None, "user_version", 99).unwrap();
        let err = migrate(&mut conn).unwrap_err().to_string();
        assert!(err.contains("newer"), "{err}");
    }
}
