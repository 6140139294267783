//! Sources whose server stops answering, through the binary: a port that
//! accepts connections and never answers, and a PostgreSQL replication
//! session (with its catalog connection) frozen with the TCP connections
//! open. Each is a failure in status and `/readyz` within the documented
//! bound (30 s to connect; 15 s of silence, then a 30 s probe), and the
//! stream goes on by itself once the server answers again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A loopback proxy to `upstream` that passes bytes until frozen; frozen,
/// it holds every connection open and passes nothing.
struct Proxy {
    port: u16,
    frozen: Arc<AtomicBool>,
}

impl Proxy {
    async fn to(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pass(cr, sw, f.clone()));
                tokio::spawn(pass(sr, cw, f.clone()));
            }
        });
        Proxy { port, frozen }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }
}

async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // bytes read before a freeze wait with it
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn readyz(abrq: &Abrq) -> u16 {
    abrq.call(reqwest::Method::GET, "/readyz", None, &[])
        .await
        .0
}

#[tokio::test(flavor = "multi_thread")]
async fn a_port_that_never_answers_is_a_failure_within_the_connect_deadline() {
    // accepts, then says nothing
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            held.push(c);
        }
    });
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "silent",
            Source::postgres("cursor")
                .connection(&format!("postgres://postgres@127.0.0.1:{port}/test"))
                .table("public.nothing")
                .cursor("id"),
        )
        .destination(Destination::local("out", abrq.p("out"))),
    );
    abrq.write_config(&config.to_string());
    abrq.start_live().await;
    let started = std::time::Instant::now();
    let st = abrq
        .wait_status("silent", "the source failing", |st| {
            st["source"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("no answer"))
        })
        .await;
    assert!(started.elapsed() < Duration::from_secs(60), "{st}");
    assert_eq!(readyz(&abrq).await, 503);
    abrq.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_replication_session_fails_in_status_and_goes_on_when_it_answers() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let upstream = reqwest::Url::parse(&pg::cdc_url()).unwrap();
    let proxy = Proxy::to(format!(
        "{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap()
    ))
    .await;
    let tag = pg::tag();
    let (schema, slot) = (format!("cdc_stall_{tag}"), format!("abrq_stall_{tag}"));
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut through = upstream.clone();
    through.set_port(Some(proxy.port)).unwrap();
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "stall",
            Source::postgres("cdc")
                .connection(through.as_str())
                .table(&format!("{schema}.t"))
                .slot(&slot)
                .publication(&slot),
        )
        .max_wait("20ms")
        .destination(Destination::local("out", abrq.p("out")).format("jsonl")),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    let insert = |id: i32| format!("INSERT INTO {table} VALUES ({id})");
    sqlx::query(&insert(1)).execute(&src).await.unwrap();
    wait_until(LONG, "the first row", async || {
        read_dest(&abrq.path("out")).records().count() == 1
    })
    .await;

    proxy.freeze(true);
    let frozen = std::time::Instant::now();
    let st = abrq
        .wait_status("stall", "the stalled session failing", |st| {
            st["source"]["error"].is_string()
        })
        .await;
    let waited = frozen.elapsed();
    assert!(waited < Duration::from_secs(75), "{waited:?}: {st}");
    assert_eq!(readyz(&abrq).await, 503);

    proxy.freeze(false);
    sqlx::query(&insert(2)).execute(&src).await.unwrap();
    wait_until(LONG, "the row after the stall", async || {
        read_dest(&abrq.path("out"))
            .records()
            .any(|r| r.get("id").and_then(|v| v.as_i64()) == Some(2))
    })
    .await;
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
