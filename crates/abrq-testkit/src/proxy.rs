//! A loopback TCP proxy a test controls, for outage tests: put it between
//! a client and a service, then [`Proxy::cut`] the link (open connections
//! closed, the port refusing new ones) and [`Proxy::restore`] it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::AbortHandle;

pub struct Proxy {
    addr: SocketAddr,
    target: String,
    listener: Mutex<Option<AbortHandle>>,
    pipes: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target`
    /// (`host:port`). Needs a tokio runtime.
    pub async fn start(target: String) -> Proxy {
        let listener = listen("127.0.0.1:0".parse().expect("a socket address"));
        let proxy = Proxy {
            addr: listener.local_addr().expect("a bound socket"),
            target,
            listener: Mutex::new(None),
            pipes: Arc::default(),
        };
        proxy.serve(listener);
        proxy
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
                let target = target.clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
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

/// SO_REUSEADDR, so `restore` can bind the port it had a moment ago.
fn listen(addr: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().expect("a tcp socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket.bind(addr).expect("the proxy's port is free");
    socket.listen(64).expect("listen")
}
