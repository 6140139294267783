//! The ftp and ftps engines against the pyftpdlib servers of
//! `scripts/services.sh` (endpoints from abrq-testkit): the shared object
//! suite for each, then building from config and the failures `check()`
//! must report. Listing, concurrency and outage tests are in
//! `tests/ftp_*.rs`. Every test writes under its own fresh directory.

// Without the `services` feature only the tests that need no server run;
// the helpers the others use are idle then.
#![cfg_attr(not(feature = "services"), allow(dead_code, unused_imports))]
use abrq_core::config::{Config, DestinationConfig};
use abrq_core::{Destination, Disposition};
use abrq_testkit::{names, Ftp, Ftps};

use super::{FtpSettings, FtpTransport};
use crate::object::conformance::{self, sample_batch};
use crate::object::{ObjectDestination, ObjectTransport};

/// A destination config as a user would write it.
pub(crate) fn config(
    engine: &str,
    host: &str,
    port: u16,
    base: &str,
    extra: &str,
) -> DestinationConfig {
    let lines = format!(
        "engine = \"{engine}\"\nhost = {host:?}\nport = {port}\ndatabase = {base:?}\n{extra}"
    );
    Config::destination("lake", &lines).unwrap()
}

fn login(user: &str, password: &str) -> String {
    format!("username = {user:?}\npassword = {password:?}\n")
}

/// A config for the test FTP server, in a fresh base directory; with the
/// right password unless another is given.
fn ftp_config(password: Option<&str>, extra: &str) -> DestinationConfig {
    let s = Ftp::from_env();
    let pw = password.unwrap_or(s.password.expose());
    let extra = format!("{}{extra}", login(&s.user, pw));
    config("ftp", &s.host, s.port, &names::dir("ftp-unit"), &extra)
}

/// The same for FTPS, trusting the server's self-signed certificate unless
/// another CA file is given; an absolute base directory this time.
fn ftps_config(password: Option<&str>, ca_file: Option<&str>, extra: &str) -> DestinationConfig {
    let s = Ftps::from_env();
    let pw = password.unwrap_or(s.ftp.password.expose());
    let ca = s.ca_file.display().to_string();
    let ca = ca_file.unwrap_or(&ca);
    let extra = format!("{}tls_ca_file = {ca:?}\n{extra}", login(&s.ftp.user, pw));
    let base = format!("/{}", names::dir("ftps-unit"));
    config("ftps", &s.ftp.host, s.port, &base, &extra)
}

fn transport(cfg: &DestinationConfig) -> FtpTransport {
    FtpTransport::new(FtpSettings::from_config(cfg).unwrap())
}

async fn suite(t: &FtpTransport) {
    conformance::transport_basics(t).await;
    conformance::every_format_round_trips(t).await;
    conformance::manifest_matches_object(t).await;
    conformance::replay_overwrites(t).await;
    conformance::group_matches_singles(t).await;
    conformance::check_succeeds(t).await;
    assert!(t.idle_sessions() >= 1, "sessions are pooled, not closed");
}

#[cfg(feature = "services")]
#[tokio::test]
async fn conformance_ftp() {
    suite(&transport(&ftp_config(None, ""))).await;
}

#[cfg(feature = "services")]
#[tokio::test]
async fn conformance_ftps() {
    suite(&transport(&ftps_config(None, None, ""))).await;
}

#[cfg(feature = "services")]
#[tokio::test]
async fn built_from_config_with_manifest_on_by_default() {
    for cfg in [
        ftp_config(
            None,
            "prefix = \"/exports/orders/\"\nformat = \"csv.gz\"\ndate_partitioning = true",
        ),
        ftps_config(
            None,
            None,
            "prefix = \"exports\"\nformat = \"jsonl\"\ndate_partitioning = true",
        ),
    ] {
        let dest = crate::build("orders", &cfg).unwrap();
        let engine = cfg.engine.as_str();
        assert_eq!(dest.kind(), engine);
        let batch = sample_batch(9);
        let report = dest.deliver(&batch).await.unwrap();
        assert_eq!((report.ignored_truncates, report.ignored_schemas), (2, 2));
        // read it back through a transport of the same config
        let t = transport(&cfg);
        let settings = object_settings(&cfg);
        let format = settings.format;
        let od = ObjectDestination::new(t.clone(), settings);
        let key = od.object_key(&batch).unwrap();
        let data = t.get(&key).await.unwrap();
        assert_eq!(report.bytes, data.len() as u64);
        conformance::assert_holds(format, &data, &batch);
        let manifest = t.get(&crate::object::naming::manifest_key(&key)).await;
        assert!(manifest.is_ok(), "{engine}: manifest is on by default");
        let detail = dest.check().await.unwrap().detail;
        assert!(
            detail.starts_with(engine) && detail.contains("\"lake\""),
            "{detail}"
        );
    }
}

// Two tests, not one loop: pyftpdlib answers a failed login after 3 s.
#[cfg(feature = "services")]
#[tokio::test]
async fn wrong_password_is_transient_and_check_says_login_ftp() {
    wrong_password(ftp_config(Some("not-the-password"), "")).await;
}

#[cfg(feature = "services")]
#[tokio::test]
async fn wrong_password_is_transient_and_check_says_login_ftps() {
    wrong_password(ftps_config(Some("not-the-password"), None, "")).await;
}

async fn wrong_password(cfg: DestinationConfig) {
    let dest = crate::build("orders", &cfg).unwrap();
    let batch = sample_batch(1);
    let (delivered, checked) = tokio::join!(dest.deliver(&batch), dest.check());
    let e = delivered.unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());
    let e = checked.unwrap_err();
    assert!(e.is_transient());
    let d = e.describe();
    assert!(d.contains("cannot log in as "), "{d}");
    assert!(d.contains("530"), "{d}");
    assert!(!d.contains("not-the-password"), "{d}");
}

#[cfg(feature = "services")]
#[tokio::test]
async fn an_untrusted_certificate_or_bad_ca_file_is_transient() {
    let s = Ftps::from_env();
    // no tls_ca_file: public roots only, which do not include the test CA
    let cfg = config(
        "ftps",
        &s.ftp.host,
        s.port,
        "/x",
        &login(&s.ftp.user, s.ftp.password.expose()),
    );
    let e = transport(&cfg).get("a").await.unwrap_err();
    assert_eq!(e.disposition, Disposition::Retry);
    assert!(e.describe().contains("Secure error"), "{}", e.describe());

    let cfg = ftps_config(None, Some("/nonexistent/ca.pem"), "");
    let e = transport(&cfg).get("a").await.unwrap_err();
    assert!(e.is_transient());
    assert!(
        e.describe().contains("/nonexistent/ca.pem"),
        "{}",
        e.describe()
    );
}

#[tokio::test]
async fn nothing_listening_is_transient() {
    // a port that was free a moment ago
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = config("ftp", "127.0.0.1", port, "d", "");
    let dest = ObjectDestination::new(transport(&cfg), object_settings(&cfg));
    let e = dest.deliver(&sample_batch(1)).await.unwrap_err();
    assert!(e.is_transient());
    assert!(e.describe().contains("refused"), "{}", e.describe());
}

#[test]
fn build_refuses_a_prefix_that_leaves_the_base_directory() {
    let cfg = config("ftp", "h", 21, "d", "prefix = \"a/../..\"");
    let e = crate::build("orders", &cfg).err().unwrap().to_string();
    assert!(e.contains("prefix"), "{e}");
    let cfg = config("ftps", "h", 21, "d", "prefix = \"/a/b/\"\nformat = \"csv\"");
    assert!(crate::build("orders", &cfg).is_ok());
    let settings = object_settings(&cfg);
    assert_eq!(crate::object::ObjectFormat::Csv, settings.format);
}

/// The object settings `cfg` gives destinations of stream "orders".
fn object_settings(cfg: &DestinationConfig) -> crate::object::ObjectSettings {
    let (_, object) = super::config::settings(cfg).unwrap();
    object.settings("orders", cfg)
}
