//! tansu brokers of a test's own: the binary scripts/services.sh built,
//! and a broker behind a [`Proxy`] for outage tests. The shared broker of
//! scripts/services.sh advertises its own address, so a client
//! bootstrapped through a proxy would reconnect around it; a
//! [`ProxiedBroker`] advertises the proxy's port, so cutting the proxy cuts
//! the client off.

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::{sleep, Instant};

use crate::proxy::Proxy;

/// A memory-backed broker reachable only through its proxy.
pub struct ProxiedBroker {
    pub proxy: Proxy,
    _broker: Child,
}

impl ProxiedBroker {
    pub async fn start() -> ProxiedBroker {
        let tansu = tansu();
        let proxy = Proxy::bind();
        let port = free_port();
        let broker = Command::new(&tansu)
            .arg("broker")
            .arg("--listener-url")
            .arg(format!("tcp://127.0.0.1:{port}"))
            .arg("--advertised-listener-url")
            .arg(format!("tcp://127.0.0.1:{}", proxy.port()))
            .arg("--storage-engine")
            .arg("memory://tansu/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("start {tansu} (scripts/services.sh up kafka installs it): {e}")
            });
        let target = format!("127.0.0.1:{port}");
        wait_listening(&target).await;
        proxy.forward_to(target);
        ProxiedBroker {
            proxy,
            _broker: broker,
        }
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.proxy.port())
    }
}

/// `ABRQ_TEST_TANSU` or the binary scripts/services.sh installed.
pub fn tansu() -> String {
    std::env::var("ABRQ_TEST_TANSU").unwrap_or_else(|_| {
        crate::env::cache_dir()
            .join("tansu/bin/tansu")
            .display()
            .to_string()
    })
}

/// Waits until something listens on `addr`.
pub async fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "tansu did not listen on {addr}");
        sleep(Duration::from_millis(100)).await;
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
