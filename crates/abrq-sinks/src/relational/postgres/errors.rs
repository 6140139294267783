//! PostgreSQL's errors onto [`Failure`], by SQLSTATE (class first where
//! the whole class means one thing). The decision what to do with each
//! kind is made once, in `relational/errors.rs`.

use sqlx::postgres::PgDatabaseError;

use crate::relational::errors::{DbError, Failure};

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

pub fn classify(e: &sqlx::Error) -> (Failure, Option<String>) {
    match e {
        sqlx::Error::Database(db) => {
            let detail = db
                .try_downcast_ref::<PgDatabaseError>()
                .and_then(|p| p.detail())
                .map(str::to_string);
            (by_sqlstate(db.code().as_deref().unwrap_or("")), detail)
        }
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
            (Failure::ConnectionLost, None)
        }
        sqlx::Error::PoolTimedOut => (Failure::Timeout, None),
        sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => (Failure::Misconfigured, None),
        // an encode error is a value the driver cannot send
        sqlx::Error::Encode(_) => (Failure::InvalidInput, None),
        // sqlx::Error is #[non_exhaustive]; decoding and lookup errors only
        // come from abrq's own catalog queries
        _ => (Failure::Unclassified, None),
    }
}

pub fn by_sqlstate(code: &str) -> Failure {
    match code {
        "40001" => Failure::SerializationFailure,
        "40P01" => Failure::Deadlock,
        "55P03" => Failure::LockTimeout,
        "53300" => Failure::TooManyConnections,
        "25006" => Failure::ReadOnly,
        "57P01" | "57P02" | "57P03" => Failure::ShuttingDown,
        "57014" => Failure::Timeout,
        "53100" | "53200" | "53400" => Failure::ResourcesExhausted,
        "42501" => Failure::Unauthorized,
        // stale view of the table (dropped, renamed, retyped meanwhile)
        "3D000" | "3F000" | "42P01" | "42703" | "42704" | "42804" => Failure::MissingObject,
        "42P06" | "42P07" | "42701" | "42710" => Failure::ObjectExists,
        "0A000" => Failure::Misconfigured,
        "54000" | "54001" => Failure::RowTooLarge,
        "22001" => Failure::ValueTooLong,
        "22003" | "22008" | "22015" => Failure::OutOfRange,
        _ => match code.get(..2).unwrap_or("") {
            "08" => Failure::ConnectionLost,
            "28" => Failure::Unauthorized,
            "23" => Failure::ConstraintViolation,
            "22" => Failure::InvalidInput,
            "53" => Failure::ResourcesExhausted,
            "40" => Failure::SerializationFailure,
            _ => Failure::Unclassified,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_kinds() {
        let cases = [
            ("23505", Failure::ConstraintViolation),
            ("23502", Failure::ConstraintViolation),
            ("22001", Failure::ValueTooLong),
            ("22003", Failure::OutOfRange),
            ("22P02", Failure::InvalidInput),
            ("40P01", Failure::Deadlock),
            ("40001", Failure::SerializationFailure),
            ("53300", Failure::TooManyConnections),
            ("25006", Failure::ReadOnly),
            ("08006", Failure::ConnectionLost),
            ("57P01", Failure::ShuttingDown),
            ("28P01", Failure::Unauthorized),
            ("42P01", Failure::MissingObject),
            ("XX000", Failure::Unclassified),
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
