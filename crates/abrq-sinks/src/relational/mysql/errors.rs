//! MySQL and MariaDB errors onto [`Failure`], by server error number (the
//! SQLSTATE is too coarse there: most errors are `HY000`), then by SQLSTATE
//! class for numbers not listed. The decision what to do with each kind is
//! made once, in `relational/errors.rs`.

use sqlx::mysql::MySqlDatabaseError;

use crate::relational::errors::{DbError, Failure};

/// The ledger's primary key already holds the batch.
pub const DUPLICATE_ENTRY: u16 = 1062;
/// A column name the table has (ignoring case) or that a statement lists
/// twice.
pub const DUPLICATE_COLUMN: u16 = 1060;

pub fn db_error(op: impl Into<String>, source: sqlx::Error) -> DbError {
    DbError {
        op: op.into(),
        kind: classify(&source),
        detail: None,
        source,
    }
}

/// The server's error number, when the server sent the error.
pub fn number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    }
}

pub fn classify(e: &sqlx::Error) -> Failure {
    match e {
        sqlx::Error::Database(db) => match number(e) {
            Some(n) => by_number(n, db.code().as_deref().unwrap_or("")),
            None => Failure::Unclassified,
        },
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
            Failure::ConnectionLost
        }
        sqlx::Error::PoolTimedOut => Failure::Timeout,
        sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => Failure::Misconfigured,
        sqlx::Error::Encode(_) => Failure::InvalidInput,
        // sqlx::Error is #[non_exhaustive]; decoding and lookup errors only
        // come from abrq's own catalog queries
        _ => Failure::Unclassified,
    }
}

pub fn by_number(n: u16, sqlstate: &str) -> Failure {
    match n {
        1213 => Failure::Deadlock,
        1205 => Failure::LockTimeout,
        1040 | 1203 | 1226 => Failure::TooManyConnections,
        // --read-only, a read-only transaction, super_read_only
        1290 | 1792 | 1836 => Failure::ReadOnly,
        1053 | 1077 => Failure::ShuttingDown,
        1927 | 2006 | 2013 => Failure::ConnectionLost,
        1317 | 1969 | 3024 => Failure::Timeout,
        1021 | 1037 | 1038 | 1041 | 1114 => Failure::ResourcesExhausted,
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 => Failure::Unauthorized,
        1049 | 1054 | 1109 | 1146 => Failure::MissingObject,
        1050 | 1061 => Failure::ObjectExists,
        // the table's own name is checked with the config
        1102 | 1103 => Failure::Misconfigured,
        // duplicate column name, ignoring case (also what a concurrent ADD
        // COLUMN meets: mysql/mod.rs tells the two apart), too long, a
        // column listed twice, trailing space, outside utf8mb3
        1059 | 1060 | 1110 | 1166 | 1300 => Failure::BadName,
        1048 | 1062 | 1169 | 1364 | 1451 | 1452 | 1557 | 1586 | 3819 | 4025 => {
            Failure::ConstraintViolation
        }
        1406 => Failure::ValueTooLong,
        1264 | 1690 => Failure::OutOfRange,
        1265 | 1292 | 1366 | 1367 | 1411 | 3140 => Failure::InvalidInput,
        1118 | 1153 | 1162 => Failure::RowTooLarge,
        _ => match sqlstate.get(..2).unwrap_or("") {
            "08" => Failure::ConnectionLost,
            "23" => Failure::ConstraintViolation,
            "22" => Failure::InvalidInput,
            "40" => Failure::SerializationFailure,
            "28" => Failure::Unauthorized,
            _ => Failure::Unclassified,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_map_to_kinds() {
        let cases = [
            (1062, Failure::ConstraintViolation),
            (4025, Failure::ConstraintViolation),
            (1406, Failure::ValueTooLong),
            (1264, Failure::OutOfRange),
            (1366, Failure::InvalidInput),
            (1213, Failure::Deadlock),
            (1040, Failure::TooManyConnections),
            (1290, Failure::ReadOnly),
            (1146, Failure::MissingObject),
            (1045, Failure::Unauthorized),
            (1060, Failure::BadName),
            (1166, Failure::BadName),
            (1300, Failure::BadName),
            (1059, Failure::BadName),
            (1103, Failure::Misconfigured),
        ];
        for (n, kind) in cases {
            assert_eq!(by_number(n, "HY000"), kind, "{n}");
        }
        assert_eq!(by_number(9999, "23000"), Failure::ConstraintViolation);
        assert_eq!(by_number(9999, "HY000"), Failure::Unclassified);
    }
}
