//! Operator verbs: each one is a call to a running server's API.

use abrq_core::config::Config;
use anyhow::Context;
use serde_json::Value;

use crate::cli::{BreakerCmd, DeadLetterCmd, DestinationCmd, Remote, SourceCmd, Target};
use crate::report;

struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    fn new(remote: &Remote) -> anyhow::Result<Client> {
        let config = match &remote.config {
            Some(p) => Some(super::load_config(p)?),
            None => None,
        };
        let base = match (&remote.server, &config) {
            (Some(s), _) => s.trim_end_matches('/').to_string(),
            (None, Some(c)) => base_of(c),
            (None, None) => "http://127.0.0.1:8480".to_string(),
        };
        let token = remote.token.clone().or_else(|| {
            config
                .as_ref()
                .and_then(|c| c.server.admin_token.as_ref())
                .map(|t| t.expose().to_string())
        });
        let mut http = reqwest::Client::builder();
        if let Some(path) = &remote.ca_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read --ca-file {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--ca-file {}", path.display()))?;
            if certs.is_empty() {
                anyhow::bail!("--ca-file {}: no certificate in it", path.display());
            }
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        Ok(Client {
            base,
            token,
            http: http.build().context("http client")?,
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let actor = format!(
            "cli:{}",
            std::env::var("USER").unwrap_or_else(|_| "unknown".into())
        );
        let mut req = self
            .http
            .request(method, &url)
            .header("x-abrq-actor", actor);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach the abrq server at {}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let msg = body["error"].as_str().unwrap_or("no detail");
            anyhow::bail!("{status}: {msg}");
        }
        Ok(body)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path).await
    }

    async fn post(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path).await
    }
}

/// The server's URL from its config: https when it serves TLS; a wildcard
/// listen address is reached on loopback.
fn base_of(config: &Config) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let scheme = match config.server.tls_cert {
        Some(_) => "https",
        None => "http",
    };
    let listen = config.server.listen.as_str();
    let host = match listen.parse::<SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => {
            let ip: IpAddr = match a {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            };
            SocketAddr::new(ip, a.port()).to_string()
        }
        _ => listen.to_string(),
    };
    format!("{scheme}://{host}")
}

fn dest_path(t: &Target) -> String {
    format!("/v1/streams/{}/destinations/{}", t.stream, t.destination)
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

pub async fn status(remote: &Remote, json: bool) -> anyhow::Result<()> {
    let client = Client::new(remote)?;
    let body = client.get("/v1/streams").await?;
    if json {
        print_json(&body);
    } else {
        // Shared state: which processes take part, before who holds what.
        let cluster = client.get("/v1/cluster").await?;
        if cluster["shared"] == true {
            println!("{}", report::nodes_table(&cluster));
        }
        println!("{}", report::source_table(&body));
        println!("{}", report::status_table(&body, None));
    }
    Ok(())
}

/// Redraws the status every `interval` until Ctrl-C; a failed read is
/// shown and tried again, as a live view should.
pub async fn top(remote: &Remote, interval: std::time::Duration) -> anyhow::Result<()> {
    let client = Client::new(remote)?;
    let mut rates = report::Rates::default();
    loop {
        let view = match client.get("/v1/streams").await {
            Ok(body) => format!(
                "{}\n{}",
                report::source_table(&body),
                report::status_table(&body, Some(&mut rates))
            ),
            Err(e) => format!("{e:#}"),
        };
        // clear the screen, cursor home
        print!("\x1b[2J\x1b[H");
        println!(
            "abrq top: {} every {}s (Ctrl-C to quit), {}",
            client.base,
            interval.as_secs_f32(),
            chrono::Local::now().format("%H:%M:%S")
        );
        println!("{view}");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

pub async fn dead_letters(cmd: DeadLetterCmd) -> anyhow::Result<()> {
    match cmd {
        DeadLetterCmd::List {
            target,
            state,
            remote,
        } => {
            let path = format!("{}/dead-letters?state={state}", dest_path(&target));
            let body = Client::new(&remote)?.get(&path).await?;
            println!("{}", report::dead_letter_table(&body));
        }
        DeadLetterCmd::Show { id, target, remote } => {
            let path = format!("{}/dead-letters/{id}", dest_path(&target));
            print_json(&Client::new(&remote)?.get(&path).await?);
        }
        DeadLetterCmd::Replay {
            id,
            all,
            target,
            remote,
        } => {
            let path = one_or_all(&target, id, all, "replay")?;
            let body = Client::new(&remote)?.post(&path).await?;
            println!("replay requested for {} dead letter(s)", body["requested"]);
        }
        DeadLetterCmd::Discard {
            id,
            all,
            target,
            remote,
        } => {
            let path = one_or_all(&target, id, all, "discard")?;
            let body = Client::new(&remote)?.post(&path).await?;
            let n = body["discarded"].as_array().map_or(0, Vec::len);
            println!("discarded {n} dead letter(s); recorded as data loss");
        }
    }
    Ok(())
}

fn one_or_all(t: &Target, id: Option<i64>, all: bool, verb: &str) -> anyhow::Result<String> {
    match (id, all) {
        (Some(id), false) => Ok(format!("{}/dead-letters/{id}/{verb}", dest_path(t))),
        (None, true) => Ok(format!("{}/dead-letters/{verb}-all", dest_path(t))),
        _ => anyhow::bail!("give a dead letter id or --all"),
    }
}

pub async fn backfill(
    remote: &Remote,
    stream: &str,
    table: Option<&str>,
    filter: Option<&str>,
) -> anyhow::Result<()> {
    let mut path = format!("/v1/streams/{stream}/backfill");
    let mut u = reqwest::Url::parse("http://query/").expect("a fixed url");
    for (k, v) in [("table", table), ("where", filter)] {
        if let Some(v) = v {
            u.query_pairs_mut().append_pair(k, v);
        }
    }
    if let Some(q) = u.query() {
        path.push('?');
        path.push_str(q);
    }
    Client::new(remote)?.post(&path).await?;
    println!(
        "backfill of {} asked for; `abrq status` shows its progress",
        table.unwrap_or("every table")
    );
    Ok(())
}

/// Starts a verification on the server, waits for it and prints the
/// result; an error when the replica differs, so scripts can tell.
pub async fn verify(
    remote: &Remote,
    target: &Target,
    table: Option<&str>,
    repair: bool,
    json: bool,
) -> anyhow::Result<()> {
    let client = Client::new(remote)?;
    let path = format!("{}/verify", dest_path(target));
    let mut u = reqwest::Url::parse("http://query/").expect("a fixed url");
    if let Some(t) = table {
        u.query_pairs_mut().append_pair("table", t);
    }
    if repair {
        u.query_pairs_mut().append_pair("repair", "true");
    }
    let start = match u.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    client.post(&start).await?;
    let body = loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let body = client.get(&path).await?;
        if body["state"] != "running" {
            break body;
        }
    };
    if json {
        print_json(&body);
    } else {
        println!("{}", report::verify_tables(&body));
        println!("{}s", body["seconds"]);
    }
    if let Some(e) = body["error"].as_str() {
        anyhow::bail!("verification failed: {e}");
    }
    if body["equal"] != true {
        anyhow::bail!(
            "{}/{} differs from its source",
            target.stream,
            target.destination
        );
    }
    Ok(())
}

pub async fn source(cmd: SourceCmd) -> anyhow::Result<()> {
    match cmd {
        SourceCmd::Restart { stream, remote } => {
            let path = format!("/v1/streams/{stream}/source/restart");
            let answer = Client::new(&remote)?.post(&path).await?;
            match answer["stopped"].as_bool() {
                Some(true) => {
                    println!("source of {stream} starts again; `abrq status` shows whether it runs")
                }
                Some(false) => println!("source of {stream} had not stopped; nothing changed"),
                None => println!(
                    "restart of the source of {stream} asked for; the process reading it starts it again if it stopped"
                ),
            }
            Ok(())
        }
    }
}

pub async fn breaker(cmd: BreakerCmd) -> anyhow::Result<()> {
    match cmd {
        BreakerCmd::Reset { target, remote } => {
            Client::new(&remote)?
                .post(&format!("{}/breaker/reset", dest_path(&target)))
                .await?;
            println!("breaker of {}/{} closed", target.stream, target.destination);
        }
    }
    Ok(())
}

pub async fn destination(cmd: DestinationCmd) -> anyhow::Result<()> {
    let (verb, args) = match cmd {
        DestinationCmd::Enable(a) => ("enable", a),
        DestinationCmd::Disable(a) => ("disable", a),
        DestinationCmd::Pause(a) => ("pause", a),
        DestinationCmd::Resume(a) => ("resume", a),
    };
    let body = Client::new(&args.remote)?
        .post(&format!("{}/{verb}", dest_path(&args.target)))
        .await?;
    println!(
        "{}/{}: {verb}d",
        args.target.stream, args.target.destination
    );
    if let Some(s) = body["skipped"].as_object() {
        println!(
            "warning: batches {}..={} were removed by the spool GC while disabled and will not be delivered",
            s["from_seq"], s["to_seq"]
        );
    }
    Ok(())
}
