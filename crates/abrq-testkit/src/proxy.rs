//! A loopback TCP proxy a test controls, for outage tests: put it between
//! a client and a service, then [`Proxy::cut`] the link (open connections
//! closed, the port refusing new ones) and [`Proxy::restore`] it.
//! [`Proxy::stall`] makes the service hang instead.
//! [`Proxy::bind_tls`] makes one that terminates TLS, like stunnel, for a
//! service that cannot serve TLS itself. [`Proxy::set_latency`] delays
//! every byte a client sends, as a distant region would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::AbortHandle;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

pub struct Proxy {
    addr: SocketAddr,
    target: Arc<Mutex<String>>,
    tls: Option<TlsAcceptor>,
    listener: Mutex<Option<AbortHandle>>,
    pipes: Arc<Mutex<Vec<AbortHandle>>>,
    stalled: Arc<AtomicBool>,
    /// Microseconds every client byte waits before it is forwarded.
    latency_us: Arc<AtomicU64>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target`
    /// (`host:port`). Needs a tokio runtime.
    pub async fn start(target: String) -> Proxy {
        let proxy = Proxy::bind();
        proxy.forward_to(target);
        proxy
    }

    /// Listens now and forwards to the target set later by
    /// [`Proxy::forward_to`]: for a service that must be told the proxy's
    /// port before it starts (a broker advertising it, say). Needs a tokio
    /// runtime.
    pub fn bind() -> Proxy {
        Proxy::bind_with(None)
    }

    /// [`Proxy::bind`] for clients speaking TLS: the proxy completes the
    /// handshake with the certificate chain and key in `cert` and `key`
    /// (PEM) and forwards the plaintext.
    pub fn bind_tls(cert: &Path, key: &Path) -> Proxy {
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .unwrap_or_else(|e| panic!("read certificates from {}: {e}", cert.display()));
        let key = PrivateKeyDer::from_pem_file(key)
            .unwrap_or_else(|e| panic!("read a private key from {}: {e}", key.display()));
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a usable certificate and key");
        Proxy::bind_with(Some(TlsAcceptor::from(Arc::new(config))))
    }

    fn bind_with(tls: Option<TlsAcceptor>) -> Proxy {
        let listener = listen("127.0.0.1:0".parse().expect("a socket address"));
        let proxy = Proxy {
            addr: listener.local_addr().expect("a bound socket"),
            target: Arc::default(),
            tls,
            listener: Mutex::new(None),
            pipes: Arc::default(),
            stalled: Arc::default(),
            latency_us: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    pub fn forward_to(&self, target: String) {
        *self.target.lock().expect("not poisoned") = target;
    }

    /// Delays what clients send by `latency` (a delay line: throughput is
    /// not capped), for connections made from now on. Plain TCP only.
    pub fn set_latency(&self, latency: Duration) {
        assert!(self.tls.is_none(), "latency is for plain TCP proxies");
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.store(us, Ordering::SeqCst);
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Closes every proxied connection; new ones are still accepted.
    pub fn drop_connections(&self) {
        for pipe in self.pipes.lock().expect("not poisoned").drain(..) {
            pipe.abort();
        }
    }

    /// The outage: connections closed, the port refusing new ones.
    pub fn cut(&self) {
        if let Some(l) = self.listener.lock().expect("not poisoned").take() {
            l.abort();
        }
        self.drop_connections();
    }

    /// A service that hangs: open connections are closed, new ones are
    /// accepted and then never answered, until [`Proxy::unstall`].
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
        self.drop_connections();
    }

    /// Forwards again; the connections held while stalled are closed.
    pub fn unstall(&self) {
        self.stalled.store(false, Ordering::SeqCst);
        self.drop_connections();
    }

    /// Listens on the same port again.
    pub fn restore(&self) {
        self.serve(listen(self.addr));
    }

    fn serve(&self, listener: TcpListener) {
        let pipes = self.pipes.clone();
        let target = self.target.clone();
        let tls = self.tls.clone();
        let stalled = self.stalled.clone();
        let latency_us = self.latency_us.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                if stalled.load(Ordering::SeqCst) {
                    // Held open, never read: the client waits for ever.
                    let hold = tokio::spawn(async move {
                        let _client = client;
                        std::future::pending::<()>().await
                    });
                    pipes
                        .lock()
                        .expect("not poisoned")
                        .push(hold.abort_handle());
                    continue;
                }
                let target = target.lock().expect("not poisoned").clone();
                let tls = tls.clone();
                let latency = Duration::from_micros(latency_us.load(Ordering::SeqCst));
                let pipe = tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    match tls {
                        None if !latency.is_zero() => delayed(client, server, latency).await,
                        None => {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                        // a failed handshake just closes the connection,
                        // which is what the client should see
                        Some(tls) => {
                            if let Ok(mut client) = tls.accept(client).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        }
                    }
                });
                pipes
                    .lock()
                    .expect("not poisoned")
                    .push(pipe.abort_handle());
            }
        });
        *self.listener.lock().expect("not poisoned") = Some(task.abort_handle());
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Forwards both ways, holding each chunk the client sent until `latency`
/// after it arrived.
async fn delayed(client: TcpStream, server: TcpStream, latency: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let (line, mut due) = tokio::sync::mpsc::unbounded_channel();
    let read = async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = client_rx.read(&mut buf).await {
            let at = tokio::time::Instant::now() + latency;
            if line.send((at, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if server_tx.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = server_tx.shutdown().await;
    };
    let back = async move {
        let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
        let _ = client_tx.shutdown().await;
    };
    tokio::join!(read, write, back);
}

/// SO_REUSEADDR, so `restore` can bind the port it had a moment ago; a
/// few tries, as the aborted listener is dropped asynchronously.
fn listen(addr: SocketAddr) -> TcpListener {
    for _ in 0..100 {
        let socket = TcpSocket::new_v4().expect("a tcp socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        if socket.bind(addr).is_ok() {
            return socket.listen(64).expect("listen");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("cannot listen on {addr} again");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An echo server's round trip through the proxy, in order and whole.
    async fn round_trip(proxy: &Proxy, bytes: &[u8]) -> Duration {
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        c.write_all(bytes).await.unwrap();
        let mut back = vec![0u8; bytes.len()];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(back, bytes);
        started.elapsed()
    }

    #[tokio::test]
    async fn latency_delays_each_request_without_capping_throughput() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxy = Proxy::start(target).await;
        assert!(round_trip(&proxy, b"ping").await < Duration::from_millis(40));
        proxy.set_latency(Duration::from_millis(40));
        assert!(round_trip(&proxy, b"ping").await >= Duration::from_millis(40));
        // 4 MiB in many chunks: one delay for the lot, not one per chunk
        let big: Vec<u8> = (0..4u32 << 20).map(|i| i as u8).collect();
        assert!(round_trip(&proxy, &big).await < Duration::from_millis(1_000));
    }
}
