//! The database goes away in the middle of a delivery: a loopback proxy the
//! test controls stands between the destination and the server. Cut it
//! while a batch is on the wire: the attempt fails as transient (retry, not
//! dead letter). Restore it: the same batch goes in, nothing is lost and
//! nothing doubled. And an attempt dropped mid-batch (the drain's attempt
//! timeout) hands nothing of its connection to the next attempt.

#[macro_use]
mod relational_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relational_support::{batch, insert, Db, Engine};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Forwards loopback connections to `upstream` until cut.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    /// Bytes sent towards the server so far.
    sent: Arc<AtomicU64>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (u, s, c) = (up.clone(), sent.clone(), conns.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !u.load(Ordering::SeqCst) {
                    continue; // refused: dropped at once
                }
                let (upstream, sent) = (upstream.clone(), s.clone());
                let task = tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        pipe(client, server, sent).await;
                    }
                });
                c.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy {
            port,
            up,
            sent,
            conns,
        }
    }

    /// Drops every open connection and refuses new ones.
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

async fn pipe(client: TcpStream, server: TcpStream, sent: Arc<AtomicU64>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            sent.fetch_add(n as u64, Ordering::SeqCst);
            if sw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = tokio::io::copy(&mut sr, &mut cw);
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

fn rows(from: u64, n: u64) -> Vec<abrq_core::Item> {
    (from..from + n)
        .map(|i| {
            insert(json!({"id": i, "text": format!("row {i} with some padding to make it wider")}))
        })
        .collect()
}

async fn a_cut_mid_delivery_is_transient_and_loses_nothing(e: Engine) {
    let db = Db::new(e, "rel outage").await;
    let upstream = {
        let probe = db.config("t", None, "");
        let host = probe
            .split("host = \"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string();
        let port = probe
            .split("port = ")
            .nth(1)
            .unwrap()
            .split('\n')
            .next()
            .unwrap()
            .to_string();
        format!("{host}:{port}")
    };
    let proxy = Proxy::start(upstream).await;
    let d = db.destination_via("t", Some(proxy.port), "");
    d.deliver(&batch(1, rows(0, 1000))).await.unwrap();

    // a big batch; cut once a good part of it has gone out
    let big = batch(2, rows(1000, 60_000));
    let before = proxy.sent.load(Ordering::SeqCst);
    let delivery = {
        let (d, big) = (d.clone(), big.clone());
        tokio::spawn(async move { d.deliver(&big).await })
    };
    while proxy.sent.load(Ordering::SeqCst) < before + (512 << 10) {
        assert!(
            !delivery.is_finished(),
            "the batch went through before the cut"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    proxy.cut();
    let err = delivery.await.unwrap().unwrap_err();
    assert!(err.is_transient(), "{}", err.describe());
    assert_eq!(db.count("t").await, 1000, "nothing of the cut batch landed");

    // still down: a new attempt fails fast and transient too
    let err = d.deliver(&big).await.unwrap_err();
    assert!(err.is_transient(), "{}", err.describe());

    proxy.restore();
    d.deliver(&big).await.unwrap();
    d.deliver(&big).await.unwrap(); // a redelivery after success is skipped
    assert_eq!(db.count("t").await, 61_000);
    let ids = db.column("t", "id").await;
    assert!(ids
        .iter()
        .enumerate()
        .all(|(i, id)| id.as_deref() == Some(i.to_string().as_str())));
    db.drop().await;
}
both_engines!(a_cut_mid_delivery_is_transient_and_loses_nothing);

/// The drain's attempt timeout drops a delivery wherever it is: here in the
/// middle of sending a big batch (a `COPY` under way on PostgreSQL). The
/// connection it held must never serve the next attempt, which would read
/// the answers meant for the dropped one: each small batch after a cut-off
/// goes in whole, and exactly once.
async fn an_attempt_dropped_mid_batch_leaves_nothing_to_the_next(e: Engine) {
    let db = Db::new(e, "rel dropped").await;
    let upstream = {
        let probe = db.config("t", None, "");
        let field = |k: &str| {
            let rest = probe.split(k).nth(1).unwrap();
            rest.trim_start_matches('"')
                .split(['"', '\n'])
                .next()
                .unwrap()
                .to_string()
        };
        format!("{}:{}", field("host = "), field("port = "))
    };
    let proxy = Proxy::start(upstream).await;
    let d = db.destination_via("t", Some(proxy.port), "");
    d.deliver(&batch(1, rows(0, 10))).await.unwrap();
    let mut expected = 10;
    for round in 0..4u64 {
        let big = batch(10 + round, rows(1_000_000 * (round + 1), 60_000));
        let before = proxy.sent.load(Ordering::SeqCst);
        let half_sent = async {
            while proxy.sent.load(Ordering::SeqCst) < before + (512 << 10) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            done = d.deliver(&big) => panic!("round {round}: the batch went through first: {done:?}"),
            () = half_sent => {} // the delivery is dropped here
        }
        let small = batch(100 + round, rows(100 * (round + 1), 5));
        d.deliver(&small)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {}", e.describe()));
        expected += 5;
        assert_eq!(db.count("t").await, expected, "round {round}");
    }
    db.drop().await;
}
both_engines!(an_attempt_dropped_mid_batch_leaves_nothing_to_the_next);
