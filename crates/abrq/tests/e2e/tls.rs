//! HTTPS on the listener: a certificate from a private CA made here, the
//! admin API and probes over it, the CLI trusting that CA, a new
//! certificate served after SIGHUP (a broken one is not), and the refusal
//! to serve plain HTTP off loopback unless the config allows it. Without
//! TLS, SIGHUP is logged and the process serves on.

use std::time::Duration;

use crate::common::*;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;

const TOKEN: &str = "admin-t0ken";

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A leaf certificate: PEM of the certificate and key, and its DER.
struct Leaf {
    cert: String,
    key: String,
    der: Vec<u8>,
}

impl Ca {
    fn new() -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "abrq test CA");
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn leaf(&self, name: &str) -> Leaf {
        let mut p = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

fn config(abrq: &Abrq) -> Config {
    Config::new(abrq)
        .listen(&format!("0.0.0.0:{}", abrq.port))
        .admin_token(TOKEN)
        .stream(
            Stream::new("s", Source::http())
                .destination(Destination::local("lake", abrq.p("out/lake"))),
        )
}

fn install(abrq: &Abrq, leaf: &Leaf) {
    std::fs::write(abrq.path("cert.pem"), &leaf.cert).unwrap();
    std::fs::write(abrq.path("key.pem"), &leaf.key).unwrap();
}

fn hangup(abrq: &Abrq) {
    let pid = abrq.pid().expect("a running server").to_string();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -HUP {pid}");
}

/// A client that trusts only the test CA, a new connection per request.
fn https_client(ca: &Ca) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert.pem().as_bytes()).unwrap())
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// GET over https with a client of its own, so no TLS session is resumed:
/// (status, the certificate the server presented).
async fn get(ca: &Ca, url: &str) -> Result<(u16, Vec<u8>), reqwest::Error> {
    let resp = https_client(ca).get(url).bearer_auth(TOKEN).send().await?;
    let peer = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("the server's certificate")
        .to_vec();
    Ok((resp.status().as_u16(), peer))
}

#[tokio::test(flavor = "multi_thread")]
async fn https_serves_the_api_reloads_its_certificate_on_sighup_and_the_cli_trusts_a_ca() {
    let mut abrq = Abrq::new();
    let ca = Ca::new();
    std::fs::write(abrq.path("ca.pem"), ca.cert.pem()).unwrap();
    let first = ca.leaf("first");
    install(&abrq, &first);
    abrq.write_config(
        &config(&abrq)
            .tls_cert(abrq.path("cert.pem"))
            .tls_key(abrq.path("key.pem"))
            .to_string(),
    );
    let cfg = abrq.config_path().display().to_string();
    let (status, stdout, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
    assert!(status.success(), "check: {stdout}{stderr}");
    assert!(stdout.contains("ok    tls certificate and key"), "{stdout}");

    abrq.spawn(&["run", "--config", &cfg]);
    let client = https_client(&ca);
    let base = format!("https://127.0.0.1:{}", abrq.port);
    abrq.wait_for("abrq to answer /readyz over https", async || {
        matches!(get(&ca, &format!("{base}/readyz")).await, Ok((200, _)))
    })
    .await;

    // Probes and the admin API over https, with the first certificate.
    let (code, peer) = get(&ca, &format!("{base}/healthz")).await.unwrap();
    assert_eq!((code, peer == first.der), (200, true));
    let body: Value = client
        .get(format!("{base}/v1/streams"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["streams"][0]["name"], "s", "{body}");
    // The certificate is really checked: a client without the CA refuses.
    let public_roots = reqwest::Client::new();
    assert!(public_roots
        .get(format!("{base}/healthz"))
        .send()
        .await
        .is_err());
    // Plain HTTP to the TLS port gets no answer.
    let plain = abrq
        .http
        .get(format!("http://127.0.0.1:{}/healthz", abrq.port))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");

    // The CLI: the URL (https) and token from the config, the CA from
    // --ca-file; without it the server is not trusted.
    let (status, stdout, stderr) = abrq
        .cli(&["status", "--config", &cfg, "--ca-file", &abrq.p("ca.pem")])
        .await;
    assert!(status.success(), "status over https: {stderr}");
    assert!(stdout.contains("lake"), "{stdout}");
    let (status, _, _) = abrq.cli(&["status", "--config", &cfg]).await;
    assert!(
        !status.success(),
        "the CLI trusted a private CA it was not given"
    );

    // A broken pair on SIGHUP: logged, and the old one stays in service.
    std::fs::write(abrq.path("cert.pem"), "not a certificate\n").unwrap();
    hangup(&abrq);
    abrq.wait_for("the failed reload in the log", async || {
        abrq.log().contains("tls certificate reload failed")
    })
    .await;
    let (code, peer) = get(&ca, &format!("{base}/healthz")).await.unwrap();
    assert_eq!(
        (code, peer == first.der),
        (200, true),
        "a broken reload changed the certificate"
    );

    // A new pair on SIGHUP is served without a restart.
    let second = ca.leaf("second");
    install(&abrq, &second);
    let pid = abrq.pid();
    hangup(&abrq);
    abrq.wait_for("the second certificate to be served", async || {
        matches!(get(&ca, &format!("{base}/healthz")).await, Ok((200, p)) if p == second.der)
    })
    .await;
    assert_eq!(abrq.pid(), pid, "the server restarted");
    // A client that held a session of the old certificate cannot resume it.
    let resp = client.get(format!("{base}/healthz")).send().await.unwrap();
    let peer = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate());
    assert_eq!(
        peer,
        Some(&second.der[..]),
        "a session of the first certificate was resumed"
    );
    assert!(
        abrq.log().contains("tls certificate reloaded"),
        "{}",
        abrq.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn off_loopback_needs_tls_or_allow_plaintext() {
    let abrq = Abrq::new();
    abrq.write_config(&config(&abrq).to_string());
    let cfg = abrq.config_path().display().to_string();
    for verb in ["check", "run"] {
        let (status, _, stderr) = abrq.cli(&[verb, "--config", &cfg]).await;
        assert!(!status.success(), "{verb} accepted plain HTTP off loopback");
        for key in ["tls_cert", "allow_plaintext"] {
            assert!(stderr.contains(key), "{verb} does not name {key}: {stderr}");
        }
    }
    // Nothing listened meanwhile: the port is still free.
    std::net::TcpListener::bind(("0.0.0.0", abrq.port)).expect("port was left free");

    // One key without the other is named too.
    abrq.write_config(&config(&abrq).tls_cert(abrq.path("cert.pem")).to_string());
    let (status, _, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
    assert!(!status.success() && stderr.contains("tls_key"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_without_tls_is_logged_and_the_process_serves_on() {
    let mut abrq = Abrq::new();
    abrq.write_config(
        &Config::new(&abrq)
            .stream(
                Stream::new("s", Source::http())
                    .destination(Destination::local("lake", abrq.p("out/lake"))),
            )
            .to_string(),
    );
    abrq.start().await;
    let pid = abrq.pid();
    hangup(&abrq);
    abrq.wait_for("the hangup in the log", async || {
        abrq.log().contains("SIGHUP: nothing to reload")
    })
    .await;
    // its default action would have ended the process
    abrq.ingest("s", "{\"a\":1}\n").await;
    abrq.wait_status("s", "the record delivered", |st| {
        dest_of(st, "lake")["high_water_mark"] == 1
    })
    .await;
    assert_eq!(abrq.pid(), pid, "the server restarted");
}
