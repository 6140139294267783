//! A tansu broker of the test's own that requires SASL authentication,
//! reachable only over TLS, with one SCRAM user (SHA-256 and SHA-512) and
//! one topic made beforehand.
//!
//! tansu keeps SCRAM credentials in its storage, and with authentication
//! on it refuses the request that creates them, so the broker starts twice
//! on the same sqlite file: first open, to create the user and the topic,
//! then locked down. tansu 0.6's command line cannot turn its own TLS on
//! (`--cert` and `--key` are declared mutually exclusive), so TLS ends at
//! a proxy of the test's, like stunnel, whose port the broker advertises;
//! the certificate is the one scripts/services.sh made for FTPS (SAN
//! 127.0.0.1 and localhost).

use std::path::PathBuf;
use std::process::Stdio;

use abrq_testkit::Proxy;
use rdkafka::config::ClientConfig;
use tokio::process::{Child, Command};

use abrq_testkit::tansu::{free_port, tansu, wait_listening};

pub struct SecuredBroker {
    pub addr: String,
    pub ca_file: PathBuf,
    pub user: String,
    pub password: String,
    pub topic: String,
    _dir: tempfile::TempDir,
    _broker: Child,
    _tls: Proxy,
}

impl SecuredBroker {
    pub async fn start() -> SecuredBroker {
        let ca_file = abrq_testkit::Ftps::from_env().ca_file;
        let key_file = ca_file.with_extension("key");
        assert!(
            key_file.is_file(),
            "{} is missing (scripts/services.sh up ftps makes it)",
            key_file.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let setup = format!("127.0.0.1:{}", free_port());
        let (user, password) = ("abrq-writer".to_string(), "s3cret-scram".to_string());

        let mut open = spawn(&dir, &setup);
        wait_listening(&setup).await;
        // the same user and password under both SCRAM mechanisms
        for mechanism in ["scram256", "scram512"] {
            let created = Command::new(tansu())
                .args(["user", "create", "--broker", &format!("tcp://{setup}")])
                .args(["--mechanism", mechanism, &user, &password])
                .output()
                .await
                .expect("run tansu user create");
            assert!(
                created.status.success(),
                "tansu user create --mechanism {mechanism}: {}",
                String::from_utf8_lossy(&created.stderr)
            );
        }
        let topic = super::create_topic(&setup, "secured").await;
        open.kill().await.unwrap();
        open.wait().await.unwrap();

        let tls = Proxy::bind_tls(&ca_file, &key_file);
        let addr = format!("127.0.0.1:{}", tls.port());
        // A new port: the old one may linger in TIME_WAIT.
        let plain = format!("127.0.0.1:{}", free_port());
        let broker = spawn_advertising(&dir, &plain, &addr, &["--authentication"]);
        wait_listening(&plain).await;
        tls.forward_to(plain);
        SecuredBroker {
            addr,
            ca_file,
            user,
            password,
            topic,
            _dir: dir,
            _broker: broker,
            _tls: tls,
        }
    }

    /// A client that can read and administer the broker (SCRAM over TLS).
    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.addr)
            .set("security.protocol", "sasl_ssl")
            .set("ssl.ca.location", self.ca_file.display().to_string())
            .set("sasl.mechanisms", "SCRAM-SHA-256")
            .set("sasl.username", &self.user)
            .set("sasl.password", &self.password);
        c
    }
}

fn spawn(dir: &tempfile::TempDir, addr: &str) -> Child {
    spawn_advertising(dir, addr, addr, &[])
}

fn spawn_advertising(
    dir: &tempfile::TempDir,
    listen: &str,
    advertise: &str,
    extra: &[&str],
) -> Child {
    Command::new(tansu())
        .current_dir(dir.path())
        .args(["broker", "--listener-url", &format!("tcp://{listen}")])
        .args(["--advertised-listener-url", &format!("tcp://{advertise}")])
        // relative to the working directory: the test's own
        .args(["--storage-engine", "sqlite://tansu.db"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "start {} (scripts/services.sh up kafka installs it): {e}",
                tansu()
            )
        })
}
