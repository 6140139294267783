//! A one-trick HTTP server for classification tests: it answers every
//! request with the same canned response, so a test can show what a real
//! client makes of a 413, a 503 with `Retry-After`, a 403.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Fake {
    pub url: String,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Fake {
    /// Requests answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `status` (e.g. `"503 Service Unavailable"`) with `headers`
/// (`"Name: value"` lines) and `body`, closing each connection after.
pub async fn serve(status: &str, headers: &[&str], body: &str) -> Fake {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let response: Arc<[u8]> = [head.as_bytes(), body.as_bytes()].concat().into();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let response = response.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                if answer(sock, &response).await.is_ok() {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    Fake { url, hits, task }
}

/// Reads one request (head, then `Content-Length` bytes of body) and
/// writes the response.
async fn answer(mut sock: TcpStream, response: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let body_len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < body_len {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        have += n;
    }
    sock.write_all(response).await?;
    sock.shutdown().await
}

/// A loopback URL that refuses connections, and the socket that keeps it
/// so: bound, never listening, so no other test's listener can take the
/// port while this one uses it (a port merely freed can be handed out to
/// the next `bind` at once, and then it answers).
pub async fn refused_url() -> (String, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://{}", socket.local_addr().unwrap());
    (url, socket)
}
