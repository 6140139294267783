//! MySQL and MariaDB errors onto [`Kind`], by server error number (the
//! SQLSTATE is too coarse there: most errors are `HY000`), then by SQLSTATE
//! class for numbers not listed. The decision what to do with each kind is
//! made once, in `relational/errors.rs`.

use sqlx::mysql::MySqlDatabaseError;

use crate::relational::errors::{DbError, Kind};

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

pub fn classify(e: &sqlx::Error) -> Kind {
    match e {
        sqlx::Error::Database(db) => match number(e) {
            Some(n) => by_number(n, db.code().as_deref().unwrap_or("")),
            None => Kind::Unclassified,
        },
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
            Kind::ConnectionLost
        }
        sqlx::Error::PoolTimedOut => Kind::Timeout,
        sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => Kind::Misconfigured,
        sqlx::Error::Encode(_) => Kind::InvalidInput,
        // sqlx::Error is #[non_exhaustive]; decoding and lookup errors only
        // come from abrq's own catalog queries
        _ => Kind::Unclassified,
    }
}

pub fn by_number(n: u16, sqlstate: &str) -> Kind {
    match n {
        1213 => Kind::Deadlock,
        1205 => Kind::LockTimeout,
        1040 | 1203 | 1226 => Kind::TooManyConnections,
        // --read-only, a read-only transaction, super_read_only
        1290 | 1792 | 1836 => Kind::ReadOnly,
        1053 | 1077 => Kind::ShuttingDown,
        1927 | 2006 | 2013 => Kind::ConnectionLost,
        1317 | 1969 | 3024 => Kind::Timeout,
        1021 | 1037 | 1038 | 1041 | 1114 => Kind::ResourcesExhausted,
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 => Kind::Unauthorized,
        1049 | 1054 | 1109 | 1146 => Kind::MissingObject,
        1050 | 1061 => Kind::ObjectExists,
        // the table's own name is checked with the config
        1102 | 1103 => Kind::Misconfigured,
        // duplicate column name, ignoring case (also what a concurrent ADD
        // COLUMN meets: mysql/mod.rs tells the two apart), too long, a
        // column listed twice, trailing space, outside utf8mb3
        1059 | 1060 | 1110 | 1166 | 1300 => Kind::BadName,
        1048 | 1062 | 1169 | 1364 | 1451 | 1452 | 1557 | 1586 | 3819 | 4025 => {
            Kind::ConstraintViolation
        }
        1406 => Kind::ValueTooLong,
        1264 | 1690 => Kind::OutOfRange,
        1265 | 1292 | 1366 | 1367 | 1411 | 3140 => Kind::InvalidInput,
        1118 | 1153 | 1162 => Kind::RowTooLarge,
        _ => match sqlstate.get(..2).unwrap_or("") {
            "08" => Kind::ConnectionLost,
            "23" => Kind::ConstraintViolation,
            "22" => Kind::InvalidInput,
            "40" => Kind::SerializationFailure,
            "28" => Kind::Unauthorized,
            _ => Kind::Unclassified,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_map_to_kinds() {
        let cases = [
            (1062, Kind::ConstraintViolation),
            (4025, Kind::ConstraintViolation),
            (1406, Kind::ValueTooLong),
            (1264, Kind::OutOfRange),
            (1366, Kind::InvalidInput),
            (1213, Kind::Deadlock),
            (1040, Kind::TooManyConnections),
            (1290, Kind::ReadOnly),
            (1146, Kind::MissingObject),
            (1045, Kind::Unauthorized),
            (1060, Kind::BadName),
            (1166, Kind::BadName),
            (1300, Kind::BadName),
            (1059, Kind::BadName),
            (1103, Kind::Misconfigured),
        ];
        for (n, kind) in cases {
            assert_eq!(by_number(n, "HY000"), kind, "{n}");
        }
        assert_eq!(by_number(9999, "23000"), Kind::ConstraintViolation);
        assert_eq!(by_number(9999, "HY000"), Kind::Unclassified);
    }
}
