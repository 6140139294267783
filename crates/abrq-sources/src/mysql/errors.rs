//! mysql_async's errors into the source failure table, by the server's
//! error number: a number not listed is `Server` (retried).

use mysql_async::{DriverError, IoError};

use crate::error::{Classify, Failure};

/// ER_MASTER_FATAL_ERROR_READING_BINLOG: the binlog or GTID position asked
/// for is not on the server (purged).
pub const BINLOG_UNREADABLE: u16 = 1236;

impl Classify for mysql_async::Error {
    fn failure(&self) -> Failure {
        match self {
            mysql_async::Error::Server(e) => by_code(e.code),
            mysql_async::Error::Io(IoError::Io(_)) => Failure::Network,
            #[allow(unreachable_patterns)]
            mysql_async::Error::Io(_) => Failure::Network,
            mysql_async::Error::Driver(d) => driver(d),
            mysql_async::Error::Url(_) => Failure::Invalid,
            mysql_async::Error::Other(_) => Failure::Server,
        }
    }
}

fn by_code(code: u16) -> Failure {
    match code {
        // access denied: user, database, table, column, a privilege
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 | 1698 => Failure::Auth,
        BINLOG_UNREADABLE => Failure::PositionLost,
        // no such table, database or variable
        1049 | 1146 | 1193 => Failure::NotConfigured,
        // shutdown, connection killed or lost
        1053 | 1927 | 2006 | 2013 => Failure::Network,
        _ => Failure::Server,
    }
}

fn driver(e: &DriverError) -> Failure {
    match e {
        DriverError::ConnectionClosed
        | DriverError::PoolDisconnected
        | DriverError::PacketOutOfOrder
        | DriverError::BadCompressedPacketHeader
        | DriverError::UnexpectedPacket { .. } => Failure::Network,
        DriverError::UnknownAuthPlugin { .. }
        | DriverError::MysqlOldPasswordDisabled
        | DriverError::CleartextPluginDisabled
        | DriverError::InvalidParsecSalt
        | DriverError::NoClientSslFlagFromServer => Failure::Auth,
        DriverError::FromValue { .. } | DriverError::FromRow { .. } => Failure::Decode,
        DriverError::CantParseServerVersion { .. } | DriverError::PacketTooLarge => {
            Failure::Unsupported
        }
        DriverError::Params(_)
        | DriverError::MixedParams
        | DriverError::NestedTransaction
        | DriverError::ReadOnlyTransNotSupported
        | DriverError::StmtParamsMismatch { .. }
        | DriverError::StmtParamsNumberExceedsLimit { .. }
        | DriverError::NamedPipesDisabled
        | DriverError::LocalInfile(_)
        | DriverError::NoKeyFound
        | DriverError::BulkExecute(_) => Failure::Server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_numbers_name_their_failure() {
        assert_eq!(by_code(1045), Failure::Auth);
        assert_eq!(by_code(BINLOG_UNREADABLE), Failure::PositionLost);
        assert_eq!(by_code(1146), Failure::NotConfigured);
        assert_eq!(by_code(1213), Failure::Server);
    }
}
