//! A loopback proxy that delays what a client sends, as a distant server
//! would.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A loopback TCP proxy that holds every chunk a client sends for `delay`
/// before forwarding it, as a distant server would: a delay line (each
/// chunk leaves `delay` after it arrived, whatever is queued before it), so
/// it adds latency and caps no throughput. The server's answers pass at
/// once. It counts the client's turns: chunks sent after the server
/// answered, the round trips a client waited for.
pub(super) struct DelayProxy {
    pub(super) port: u16,
    round_trips: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    pub(super) async fn start(target: String, delay: Duration) -> anyhow::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let trips = round_trips.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, trips) = (target.clone(), trips.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, delay, trips).await;
                    }
                });
            }
        });
        Ok(DelayProxy {
            port,
            round_trips,
            accept,
        })
    }

    pub(super) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, delay: Duration, trips: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let (queue, mut queued) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    // the server spoke since the client's last chunk: the next one is a
    // new turn (the first chunk of a connection is one too)
    let answered = Arc::new(AtomicBool::new(true));
    let heard = answered.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = client_rx.read(&mut buf).await {
            if heard.swap(false, Ordering::Relaxed) {
                trips.fetch_add(1, Ordering::Relaxed);
            }
            let due = tokio::time::Instant::now() + delay;
            if queue.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // the queue closes: the sender below ends after the last chunk
    };
    let send = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if server_tx.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = server_rx.read(&mut buf).await {
            answered.store(true, Ordering::Relaxed);
            if client_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_tx.shutdown().await;
    };
    tokio::join!(up, send, down);
}
