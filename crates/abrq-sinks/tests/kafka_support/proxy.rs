//! A loopback TCP proxy the test controls, in front of a broker that
//! advertises the proxy's address (see `broker.rs`), so every connection
//! the client makes, bootstrap and leader alike, goes through it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::AbortHandle;

pub struct Proxy {
    addr: SocketAddr,
    target: Arc<Mutex<String>>,
    listener: Mutex<Option<AbortHandle>>,
    pipes: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    /// Listens now; forwards to the target set by [`Proxy::forward_to`].
    pub fn bind() -> Proxy {
        let listener = listen("127.0.0.1:0".parse().unwrap());
        let proxy = Proxy {
            addr: listener.local_addr().unwrap(),
            target: Arc::default(),
            listener: Mutex::new(None),
            pipes: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn forward_to(&self, target: String) {
        *self.target.lock().unwrap() = target;
    }

    /// The outage: connections closed, the port refusing new ones.
    pub fn cut(&self) {
        if let Some(l) = self.listener.lock().unwrap().take() {
            l.abort();
        }
        for pipe in self.pipes.lock().unwrap().drain(..) {
            pipe.abort();
        }
    }

    /// Listens on the same port again.
    pub fn restore(&self) {
        self.serve(listen(self.addr));
    }

    fn serve(&self, listener: TcpListener) {
        let pipes = self.pipes.clone();
        let target = self.target.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let target = target.lock().unwrap().clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                pipes.lock().unwrap().push(pipe.abort_handle());
            }
        });
        *self.listener.lock().unwrap() = Some(task.abort_handle());
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// SO_REUSEADDR, so `restore` can bind the port it had a moment ago; a
/// few tries, as the aborted listener is dropped asynchronously.
fn listen(addr: SocketAddr) -> TcpListener {
    for _ in 0..100 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        if socket.bind(addr).is_ok() {
            return socket.listen(64).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("cannot listen on {addr} again");
}
