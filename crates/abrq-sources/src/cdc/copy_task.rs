//! A table's snapshot copy read by a task of its own into pages, a few
//! ahead of the one the engine stages, so the server, the page's
//! rendering and the spool all work at once. The task owns the snapshot's
//! connection and gives it back when the table's last page is handed on,
//! for the next table; dropping the copy stops it.

use std::future::Future;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::{Failure, SourceError};

/// Pages read ahead of the one the engine stages.
const AHEAD: usize = 2;

/// A page that knows whether the table ends with it.
pub trait Last {
    fn is_last(&self) -> bool;
}

/// A table's copy in flight.
pub struct CopyTask<C, P> {
    pages: mpsc::Receiver<P>,
    task: Option<JoinHandle<Result<C, SourceError>>>,
    ended: bool,
}

impl<C: Send + 'static, P: Last + Send + 'static> CopyTask<C, P> {
    /// Runs `read`, which sends its pages (the last one marked) and
    /// returns the connection.
    pub fn spawn<F>(read: impl FnOnce(mpsc::Sender<P>) -> F) -> Self
    where
        F: Future<Output = Result<C, SourceError>> + Send + 'static,
    {
        let (tx, pages) = mpsc::channel(AHEAD);
        CopyTask {
            pages,
            task: Some(tokio::spawn(read(tx))),
            ended: false,
        }
    }

    /// The next page: `None` once the table's last page was handed on.
    pub async fn next(&mut self) -> Result<Option<P>, SourceError> {
        if self.ended {
            return Ok(None);
        }
        let Some(page) = self.pages.recv().await else {
            // the reader stopped before its last page: its failure says why
            return Err(match self.finish().await {
                Err(e) => e,
                Ok(_) => SourceError::new(Failure::Server, "snapshot: the copy stopped early"),
            });
        };
        self.ended = page.is_last();
        Ok(Some(page))
    }

    /// The connection back once the last page was handed on.
    pub async fn into_connection(mut self) -> Result<C, SourceError> {
        self.finish().await
    }

    async fn finish(&mut self) -> Result<C, SourceError> {
        let task = self.task.take().expect("the reader is awaited once");
        match task.await {
            Ok(done) => done,
            Err(e) => Err(SourceError::new(
                Failure::Server,
                format!("snapshot: the copy's reader failed: {e}"),
            )),
        }
    }
}

impl<C, P> Drop for CopyTask<C, P> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The copy's pages are not read any more (the copy was dropped).
pub fn stopped() -> SourceError {
    SourceError::new(Failure::Server, "snapshot: the copy was stopped")
}
