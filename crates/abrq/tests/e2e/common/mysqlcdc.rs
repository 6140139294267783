//! The MariaDB server with a row binlog that `scripts/services.sh` starts
//! for the `mysql` cdc tests.

/// Its URL (`ABRQ_TEST_MYSQLCDC_URL`).
pub fn url() -> String {
    std::env::var("ABRQ_TEST_MYSQLCDC_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3316/test".into())
}
