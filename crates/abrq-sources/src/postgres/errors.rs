//! PostgreSQL's errors (sqlx for queries, pgwire-replication for the
//! replication session) into the source failure table, by SQLSTATE: a
//! code not listed falls to its class, then to `Server`.

use crate::error::{Classify, Failure};

impl Classify for sqlx::Error {
    fn failure(&self) -> Failure {
        match self {
            sqlx::Error::Database(db) => db.code().map_or(Failure::Server, |c| by_sqlstate(&c)),
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Failure::Network,
            sqlx::Error::PoolTimedOut => Failure::Timeout,
            sqlx::Error::Configuration(_)
            | sqlx::Error::InvalidArgument(_)
            | sqlx::Error::Encode(_) => Failure::Invalid,
            sqlx::Error::TypeNotFound { .. } => Failure::Unsupported,
            sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_) => Failure::Decode,
            sqlx::Error::RowNotFound
            | sqlx::Error::AnyDriverError(_)
            | sqlx::Error::InvalidSavePointStatement
            | sqlx::Error::BeginFailed => Failure::Server,
            // sqlx::Error is non_exhaustive: a new variant is retried
            _ => Failure::Server,
        }
    }
}

impl Classify for pgwire_replication::PgWireError {
    fn failure(&self) -> Failure {
        use pgwire_replication::PgWireError as E;
        match self {
            E::Io(_) | E::Protocol(_) | E::Tls(_) | E::Task(_) => Failure::Network,
            E::Auth(_) => Failure::Auth,
            E::Server(text) => sqlstate_of(text).map_or(Failure::Server, by_sqlstate),
            E::Internal(_) => Failure::Server,
            E::MessageTooLarge { .. } => Failure::Unsupported,
            // non_exhaustive: a new variant is retried
            _ => Failure::Server,
        }
    }
}

/// The code pgwire-replication appends to a server's error text:
/// `message (SQLSTATE 42704)`.
fn sqlstate_of(text: &str) -> Option<&str> {
    let (_, tail) = text.rsplit_once("(SQLSTATE ")?;
    tail.strip_suffix(')')
}

fn by_sqlstate(code: &str) -> Failure {
    match code {
        "42501" => Failure::Auth,
        "57014" => Failure::Timeout,
        "0A000" => Failure::Unsupported,
        "55006" | "55P03" => Failure::Server,
        "57P01" | "57P02" | "57P03" => Failure::Network,
        "42704" | "42P01" | "3D000" | "3F000" | "55000" => Failure::NotConfigured,
        _ => match code.get(..2) {
            Some("08") => Failure::Network,
            Some("28") => Failure::Auth,
            Some("22") => Failure::Decode,
            Some("53" | "40" | "57" | "58" | "XX") => Failure::Server,
            _ => Failure::Server,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_codes_fall_to_their_class() {
        assert_eq!(by_sqlstate("28P01"), Failure::Auth);
        assert_eq!(by_sqlstate("42501"), Failure::Auth);
        assert_eq!(by_sqlstate("08006"), Failure::Network);
        assert_eq!(by_sqlstate("53300"), Failure::Server);
        assert_eq!(by_sqlstate("55000"), Failure::NotConfigured);
        assert_eq!(by_sqlstate("99999"), Failure::Server);
    }

    #[test]
    fn a_replication_error_is_read_by_its_code() {
        let e = pgwire_replication::PgWireError::Server(
            "replication slot \"x\" does not exist (SQLSTATE 42704)".into(),
        );
        assert_eq!(e.failure(), Failure::NotConfigured);
        let e = pgwire_replication::PgWireError::Server("no code".into());
        assert_eq!(e.failure(), Failure::Server);
    }
}
