//! The MariaDB server with a row binlog that `scripts/services.sh` starts
//! for the `mysql` cdc tests.

/// Its URL (`ABRQ_TEST_MYSQLCDC_URL`).
pub fn url() -> String {
    std::env::var("ABRQ_TEST_MYSQLCDC_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3316/test".into())
}

/// Held by a test that needs `binlog_row_metadata` to stay as it sets it
/// while it writes: the setting is global to the server the tests share.
pub static ROW_METADATA: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
