//! The listener against clients that stall: connections that send nothing
//! or half a head are closed within header_timeout, a kept-alive one within
//! idle_timeout (and no sooner), a trickled body is answered 408, and a
//! flood of idle connections beyond max_connections neither exhausts the
//! process's descriptors nor keeps /healthz down for longer than the
//! timeouts take to reap them. A flood that the timeouts do not reap in
//! time (a long header_timeout, the default limit) still lets probes and
//! operators in: idle connections give up their places, longest idle first.

use std::time::{Duration, Instant};

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_CONNECTIONS: usize = 64;
const HEADER: Duration = Duration::from_secs(1);
const IDLE: Duration = Duration::from_secs(4);
const BODY: Duration = Duration::from_secs(2);
/// Room for a loaded CI machine on top of any timeout.
const SLACK: Duration = Duration::from_secs(3);

/// An HTTP-fed stream behind a listener whose `[server]` table holds
/// `server` besides `listen`.
fn config(abrq: &Abrq, server: &str) -> String {
    format!(
        r#"data_dir = "{data}"

[server]
listen = "{listen}"
{server}

[[streams]]
name = "s"
[streams.source]
engine = "http"

[[streams.destinations]]
name = "lake"
engine = "local"
database = "{lake}"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        lake = abrq.p("out/lake"),
    )
}

async fn start() -> Abrq {
    let mut abrq = Abrq::new();
    let server = format!(
        "max_connections = {MAX_CONNECTIONS}\nheader_timeout = \"{}ms\"\n\
         idle_timeout = \"{}ms\"\nbody_timeout = \"{}ms\"",
        HEADER.as_millis(),
        IDLE.as_millis(),
        BODY.as_millis()
    );
    abrq.write_config(&config(&abrq, &server));
    abrq.start().await;
    abrq
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the server's fd table")
        .count()
}

/// Reads until the server closes the connection (EOF or a reset), or
/// `within` passes; returns what was read and whether it closed.
async fn read_to_close(s: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (got, false),
            Ok(Ok(0)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Ok(Err(e)) => panic!("reading from the server: {e}"),
        }
    }
}

/// One whole response to a GET on a kept-alive connection.
async fn get_keep_alive(s: &mut TcpStream, port: u16) {
    let req = format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok") {
        let n = tokio::time::timeout(SLACK, s.read(&mut buf))
            .await
            .expect("a response to /healthz")
            .unwrap();
        assert!(n > 0, "closed before the response: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_idle_connections_is_reaped_and_holds_few_descriptors() {
    let abrq = start().await;
    let pid = abrq.pid().expect("server pid");
    let baseline = open_fds(pid);

    // Ten times the limit: half send nothing, half half a request head.
    let n = MAX_CONNECTIONS * 10;
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(abrq.listen()).await.expect("connect");
        if i % 2 == 1 {
            // The server may already have closed a connection over the limit.
            let _ = s
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
                .await;
        }
        conns.push(s);
    }
    let flooded = Instant::now();
    let held = open_fds(pid);
    println!("server fds: {baseline} before, {held} with {n} idle connections open");
    assert!(
        held <= baseline + MAX_CONNECTIONS + 8,
        "{held} fds held with {n} idle connections (baseline {baseline}, limit {MAX_CONNECTIONS})"
    );

    // Probes succeed again once the timeouts have reaped the idle ones.
    let url = format!("{}/healthz", abrq.base());
    let mut answered = None;
    while flooded.elapsed() < HEADER + SLACK {
        if let Ok(r) = abrq.http.get(&url).timeout(SLACK).send().await {
            if r.status().is_success() {
                answered = Some(flooded.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answered = answered.unwrap_or_else(|| {
        panic!(
            "/healthz did not answer 200 within {:?} of the flood",
            HEADER + SLACK
        )
    });
    println!("/healthz answered 200 {answered:?} after the flood");

    // Every idle connection is closed by the server within the timeouts.
    let within = (HEADER + SLACK).saturating_sub(flooded.elapsed());
    let closed =
        futures::future::join_all(conns.iter_mut().map(|s| read_to_close(s, within))).await;
    let open = closed.iter().filter(|(_, c)| !c).count();
    assert_eq!(
        open,
        0,
        "{open} of {n} idle connections still open after {:?}",
        flooded.elapsed()
    );
    for (bytes, _) in &closed {
        assert!(
            bytes.is_empty(),
            "an idle connection got {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    let after = open_fds(pid);
    println!("server fds: {after} once the idle connections were reaped");
    assert!(
        after <= baseline + 8,
        "{after} fds after the flood (baseline {baseline})"
    );
    abrq.assert_alive();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_alive_connection_waits_idle_timeout_and_a_started_head_header_timeout() {
    let abrq = start().await;

    // Idle after a response: still open past header_timeout, closed by
    // idle_timeout.
    let mut s = TcpStream::connect(abrq.listen()).await.unwrap();
    get_keep_alive(&mut s, abrq.port).await;
    let idle_from = Instant::now();
    let (bytes, closed) = read_to_close(&mut s, HEADER * 2).await;
    assert!(
        !closed && bytes.is_empty(),
        "closed after {:?}: shorter than idle_timeout",
        idle_from.elapsed()
    );
    let (_, closed) = read_to_close(&mut s, IDLE + SLACK - HEADER * 2).await;
    let idle_for = idle_from.elapsed();
    assert!(closed, "still open {idle_for:?} after its last response");
    assert!(
        idle_for >= IDLE - Duration::from_millis(200),
        "closed after {idle_for:?}"
    );
    println!("kept-alive connection closed {idle_for:?} after its last response");

    // The next request's first bytes start the header clock.
    let mut s = TcpStream::connect(abrq.listen()).await.unwrap();
    get_keep_alive(&mut s, abrq.port).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.write_all(b"GET /heal").await.unwrap();
    let started = Instant::now();
    let (_, closed) = read_to_close(&mut s, IDLE).await;
    let took = started.elapsed();
    assert!(
        closed && took < IDLE - Duration::from_millis(300),
        "a half head stayed open {took:?}"
    );
    println!("half a head closed {took:?} after its first bytes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trickled_body_is_answered_408_and_nothing_is_staged() {
    let abrq = start().await;
    let mut s = TcpStream::connect(abrq.listen()).await.unwrap();
    let head = format!(
        "POST /v1/streams/s/records HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-ndjson\r\n\
         Content-Length: 4000\r\n\r\n",
        abrq.listen()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let started = Instant::now();
    // A record's worth of bytes every 200 ms: never idle, never done.
    let trickle = tokio::spawn(async move {
        while wr.write_all(b"{\"a\":1}\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(BODY + SLACK, rd.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    };
    let took = started.elapsed();
    trickle.abort();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "after {took:?}: {text:?}");
    assert!(text.contains("body_timeout"), "{text}");
    assert!(closed, "the connection stayed open after the 408");
    assert!(
        took >= BODY - Duration::from_millis(100) && took < BODY + SLACK,
        "{took:?}"
    );
    let st = abrq.status("s").await;
    assert_eq!(
        st["spool"]["last_seq"], 0,
        "a cut-off body was staged: {st}"
    );
}

/// 3,000 idle connections and 500 that dribble a header byte every 5 s,
/// against the default `max_connections` (1,024) and a header_timeout
/// long enough that none is reaped meanwhile: `/healthz` answers within
/// 1 s ten times in a row, an authenticated `GET /v1/streams` too, and
/// the server's descriptors and memory stay bounded.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_idle_connections_cannot_lock_out_probes_or_operators() {
    const IDLE_FLOOD: usize = 3_000;
    const DRIBBLERS: usize = 500;
    const LIMIT: usize = 1_024;
    let mut abrq = Abrq::new();
    let server = "admin_token = \"flood-t0ken\"\nheader_timeout = \"120s\"";
    abrq.write_config(&config(&abrq, server));
    abrq.admin_token = Some("flood-t0ken".into());
    abrq.start().await;
    let pid = abrq.pid().expect("server pid");
    let (fds_before, rss_before) = (open_fds(pid), memory_kib(pid, "VmRSS:"));

    let mut idle = Vec::with_capacity(IDLE_FLOOD);
    for _ in 0..IDLE_FLOOD {
        idle.push(TcpStream::connect(abrq.listen()).await.expect("connect"));
    }
    let mut dribblers = Vec::with_capacity(DRIBBLERS);
    for _ in 0..DRIBBLERS {
        let mut s = TcpStream::connect(abrq.listen()).await.expect("connect");
        let _ = s.write_all(b"G").await;
        dribblers.push(s);
    }
    let dribbling = tokio::spawn(async move {
        let head = b"ET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaa";
        for byte in head.iter().cycle() {
            tokio::time::sleep(Duration::from_secs(5)).await;
            for s in &mut dribblers {
                // the server may have closed it to admit another
                let _ = s.write_all(&[*byte]).await;
            }
        }
    });

    // Each probe on a new connection, as an orchestrator's.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut latencies = Vec::new();
    for i in 0..10 {
        let started = Instant::now();
        let r = fresh
            .get(format!("{}/healthz", abrq.base()))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .unwrap_or_else(|e| panic!("/healthz #{} under the flood: {e}", i + 1));
        assert!(
            r.status().is_success(),
            "/healthz #{}: {}",
            i + 1,
            r.status()
        );
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let started = Instant::now();
    let r = fresh
        .get(format!("{}/v1/streams", abrq.base()))
        .bearer_auth("flood-t0ken")
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .expect("GET /v1/streams under the flood");
    assert_eq!(r.status().as_u16(), 200, "GET /v1/streams under the flood");
    let api = started.elapsed();
    let (fds, rss) = (open_fds(pid), memory_kib(pid, "VmRSS:"));
    println!(
        "flood of {IDLE_FLOOD} idle + {DRIBBLERS} dribbling connections: /healthz {latencies:?}, \
         max {:?}; GET /v1/streams {api:?}; server fds {fds_before} -> {fds}; \
         RSS {rss_before} KiB -> {rss} KiB",
        latencies.iter().max().unwrap()
    );
    assert!(
        fds <= fds_before + LIMIT + 8,
        "{fds} fds under the flood (before {fds_before}, limit {LIMIT})"
    );
    assert!(
        rss <= rss_before + 128 * 1024,
        "RSS grew from {rss_before} KiB to {rss} KiB under the flood"
    );
    dribbling.abort();
    drop(idle);
    abrq.assert_alive();
}
