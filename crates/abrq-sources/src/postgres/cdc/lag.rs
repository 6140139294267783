//! `abrq_source_lag_bytes`: the WAL the slot holds back, measured by a
//! task of its own every few seconds, so the figure stays current while
//! backpressure keeps the stream from reading (that is when the slot
//! grows).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;

use super::setup;

/// How often the slot's retained WAL is measured.
const EVERY: Duration = Duration::from_secs(5);

/// The last figure; the task stops when this is dropped.
pub struct LagBytes {
    last: Arc<Mutex<Option<i64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LagBytes {
    pub fn start(options: PgConnectOptions, slot: String) -> LagBytes {
        let last = Arc::new(Mutex::new(None));
        let shared = last.clone();
        let task = tokio::spawn(async move {
            let mut conn: Option<PgConnection> = None;
            loop {
                if conn.is_none() {
                    conn = PgConnection::connect_with(&options).await.ok();
                }
                if let Some(c) = conn.as_mut() {
                    match setup::retained_bytes(c, &slot).await {
                        Ok(b) => *shared.lock().unwrap_or_else(|p| p.into_inner()) = b,
                        Err(e) => {
                            // status keeps the last figure; the stream
                            // itself reports a broken server
                            tracing::debug!(error = %e, "cannot measure the slot's WAL");
                            conn = None;
                        }
                    }
                }
                tokio::time::sleep(EVERY).await;
            }
        });
        LagBytes { last, task }
    }

    pub fn get(&self) -> Option<i64> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for LagBytes {
    fn drop(&mut self) {
        self.task.abort();
    }
}
