//! PostgreSQL's errors onto [`Kind`], by SQLSTATE (class first where
//! the whole class means one thing). The decision what to do with each
//! kind is made once, in `relational/errors.rs`.

use sqlx::postgres::PgDatabaseError;

use crate::relational::errors::{DbError, Kind};

/// Wraps a driver error with what was being done, classified.
pub fn db_error(op: impl Into<String>, source: sqlx::Error) -> DbError {
    let (kind, detail) = classify(&source);
    DbError {
        op: op.into(),
        kind,
        detail,
        source,
    }
}

pub fn classify(e: &sqlx::Error) -> (Kind, Option<String>) {
    match e {
        sqlx::Error::Database(db) => {
            let detail = db
                .try_downcast_ref::<PgDatabaseError>()
                .and_then(|p| p.detail())
                .map(str::to_string);
            (by_sqlstate(db.code().as_deref().unwrap_or("")), detail)
        }
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
            (Kind::ConnectionLost, None)
        }
        sqlx::Error::PoolTimedOut => (Kind::Timeout, None),
        sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => (Kind::Misconfigured, None),
        // an encode error is a value the driver cannot send
        sqlx::Error::Encode(_) => (Kind::InvalidInput, None),
        // sqlx::Error is #[non_exhaustive]; decoding and lookup errors only
        // come from abrq's own catalog queries
        _ => (Kind::Unclassified, None),
    }
}

pub fn by_sqlstate(code: &str) -> Kind {
    match code {
        "40001" => Kind::SerializationFailure,
        "40P01" => Kind::Deadlock,
        "55P03" => Kind::LockTimeout,
        "53300" => Kind::TooManyConnections,
        "25006" => Kind::ReadOnly,
        "57P01" | "57P02" | "57P03" => Kind::ShuttingDown,
        "57014" => Kind::Timeout,
        "53100" | "53200" | "53400" => Kind::ResourcesExhausted,
        "42501" => Kind::Unauthorized,
        // stale view of the table (dropped, renamed, retyped meanwhile)
        "3D000" | "3F000" | "42P01" | "42703" | "42704" | "42804" => Kind::MissingObject,
        "42P06" | "42P07" | "42701" | "42710" => Kind::ObjectExists,
        "0A000" => Kind::Misconfigured,
        "54000" | "54001" => Kind::RowTooLarge,
        "22001" => Kind::ValueTooLong,
        "22003" | "22008" | "22015" => Kind::OutOfRange,
        _ => match code.get(..2).unwrap_or("") {
            "08" => Kind::ConnectionLost,
            "28" => Kind::Unauthorized,
            "23" => Kind::ConstraintViolation,
            "22" => Kind::InvalidInput,
            "53" => Kind::ResourcesExhausted,
            "40" => Kind::SerializationFailure,
            _ => Kind::Unclassified,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_kinds() {
        let cases = [
            ("23505", Kind::ConstraintViolation),
            ("23502", Kind::ConstraintViolation),
            ("22001", Kind::ValueTooLong),
            ("22003", Kind::OutOfRange),
            ("22P02", Kind::InvalidInput),
            ("40P01", Kind::Deadlock),
            ("40001", Kind::SerializationFailure),
            ("53300", Kind::TooManyConnections),
            ("25006", Kind::ReadOnly),
            ("08006", Kind::ConnectionLost),
            ("57P01", Kind::ShuttingDown),
            ("28P01", Kind::Unauthorized),
            ("42P01", Kind::MissingObject),
            ("XX000", Kind::Unclassified),
        ];
        for (code, kind) in cases {
            assert_eq!(by_sqlstate(code), kind, "{code}");
        }
    }

    #[test]
    fn a_cut_connection_is_transient() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let e = db_error("insert rows", io).into_delivery();
        assert!(e.is_transient());
        assert!(
            e.describe().starts_with("cannot insert rows"),
            "{}",
            e.describe()
        );
    }
}
