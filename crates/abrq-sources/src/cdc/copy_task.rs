//! A table's snapshot copy read by tasks of its own into pages, a few
//! ahead of the one the engine stages, so the server, the page's
//! rendering and the spool all work at once. A table copied in parts has
//! a reader for each part, each on a connection of its own, all handing
//! pages into one queue. Each reader owns its snapshot connection and
//! gives it back when its last page is handed on, for the next table;
//! dropping the copy stops every reader.

use std::future::Future;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::{Failure, SourceError};

/// Pages read ahead of the one the engine stages, per reader.
const AHEAD: usize = 2;

/// A page that knows whether its reader ends with it.
pub trait Last {
    fn is_last(&self) -> bool;
}

/// Where a reader hands its pages.
pub struct Pages<P>(mpsc::Sender<Result<P, SourceError>>);

impl<P> Pages<P> {
    /// Hands `page` on; fails once the copy was dropped.
    pub async fn send(&self, page: P) -> Result<(), SourceError> {
        self.0.send(Ok(page)).await.map_err(|_| stopped())
    }
}

/// A table's copy in flight.
pub struct CopyTask<C, P> {
    pages: mpsc::Receiver<Result<P, SourceError>>,
    /// Each reader, until its connection is taken back.
    tasks: Vec<JoinHandle<Option<C>>>,
    /// Readers whose last page is not handed on yet.
    left: usize,
}

impl<C: Send + 'static, P: Last + Send + 'static> CopyTask<C, P> {
    /// Runs `read`, which sends its pages (the last one marked) and
    /// returns the connection.
    pub fn spawn<F>(read: impl FnOnce(Pages<P>) -> F) -> Self
    where
        F: Future<Output = Result<C, SourceError>> + Send + 'static,
    {
        Self::spawn_all(vec![read])
    }

    /// Runs every reader at once, their pages in one queue in the order
    /// they come.
    pub fn spawn_all<R, F>(reads: Vec<R>) -> Self
    where
        R: FnOnce(Pages<P>) -> F,
        F: Future<Output = Result<C, SourceError>> + Send + 'static,
    {
        let (tx, pages) = mpsc::channel(AHEAD * reads.len().max(1));
        let left = reads.len();
        let tasks = reads
            .into_iter()
            .map(|read| {
                let failed = tx.clone();
                let run = read(Pages(tx.clone()));
                tokio::spawn(async move {
                    match run.await {
                        Ok(conn) => Some(conn),
                        Err(e) => {
                            // the copy's failure, in the queue: the pages
                            // before it are staged, none after
                            let _ = failed.send(Err(e)).await;
                            None
                        }
                    }
                })
            })
            .collect();
        CopyTask { pages, tasks, left }
    }

    /// Every reader's last page was handed on.
    pub fn is_done(&self) -> bool {
        self.left == 0
    }

    /// The next page of any reader: `None` once every reader's last page
    /// was handed on.
    pub async fn next(&mut self) -> Result<Option<P>, SourceError> {
        if self.left == 0 {
            return Ok(None);
        }
        match self.pages.recv().await {
            Some(Ok(page)) => {
                if page.is_last() {
                    self.left -= 1;
                }
                Ok(Some(page))
            }
            Some(Err(e)) => Err(e),
            // every reader is gone and one stopped before its last page
            None => Err(self.lost().await),
        }
    }

    /// The connections back once every reader's last page was handed on.
    pub async fn into_connections(mut self) -> Result<Vec<C>, SourceError> {
        let mut conns = Vec::with_capacity(self.tasks.len());
        for task in std::mem::take(&mut self.tasks) {
            match task.await {
                Ok(Some(conn)) => conns.push(conn),
                Ok(None) => return Err(self.failure().await),
                Err(e) => return Err(panicked(e)),
            }
        }
        Ok(conns)
    }

    /// The one reader's connection back (a copy of one reader).
    pub async fn into_connection(self) -> Result<C, SourceError> {
        let mut conns = self.into_connections().await?;
        conns
            .pop()
            .ok_or_else(|| SourceError::new(Failure::Server, "snapshot: the copy had no reader"))
    }

    /// Why a reader stopped: its failure in the queue.
    async fn failure(&mut self) -> SourceError {
        loop {
            match self.pages.recv().await {
                Some(Err(e)) => return e,
                Some(Ok(_)) => continue,
                None => {
                    return SourceError::new(Failure::Server, "snapshot: the copy stopped early")
                }
            }
        }
    }

    /// Why the queue closed before every last page: a reader that
    /// panicked says so.
    async fn lost(&mut self) -> SourceError {
        for task in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.await {
                return panicked(e);
            }
        }
        SourceError::new(Failure::Server, "snapshot: the copy stopped early")
    }
}

fn panicked(e: tokio::task::JoinError) -> SourceError {
    SourceError::new(
        Failure::Server,
        format!("snapshot: the copy's reader failed: {e}"),
    )
}

impl<C, P> Drop for CopyTask<C, P> {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The copy's pages are not read any more (the copy was dropped).
pub fn stopped() -> SourceError {
    SourceError::new(Failure::Server, "snapshot: the copy was stopped")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct P(u32, bool);
    impl Last for P {
        fn is_last(&self) -> bool {
            self.1
        }
    }

    #[tokio::test]
    async fn every_reader_hands_its_pages_and_its_connection_back() {
        let reads: Vec<_> = (0..3u32)
            .map(|r| {
                move |pages: Pages<P>| async move {
                    for i in 0..5 {
                        pages.send(P(r * 10 + i, i == 4)).await?;
                    }
                    Ok::<u32, SourceError>(r)
                }
            })
            .collect();
        let mut copy = CopyTask::spawn_all(reads);
        let mut seen = Vec::new();
        while let Some(p) = copy.next().await.unwrap() {
            seen.push(p.0);
        }
        assert!(copy.is_done());
        seen.sort();
        assert_eq!(
            seen,
            vec![0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24]
        );
        let mut conns = copy.into_connections().await.unwrap();
        conns.sort();
        assert_eq!(conns, vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn a_reader_that_fails_fails_the_copy() {
        // the one that fails, and one that never ends
        let reads: Vec<_> = [true, false]
            .into_iter()
            .map(|fails| {
                move |pages: Pages<P>| async move {
                    pages.send(P(1, false)).await?;
                    if fails {
                        return Err(SourceError::new(Failure::Server, "the server went away"));
                    }
                    std::future::pending::<()>().await;
                    Ok::<u32, SourceError>(1)
                }
            })
            .collect();
        let mut copy = CopyTask::spawn_all(reads);
        let mut failed = None;
        for _ in 0..3 {
            if let Err(e) = copy.next().await {
                failed = Some(e);
                break;
            }
        }
        assert!(failed.unwrap().to_string().contains("went away"));
    }
}
