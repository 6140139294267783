//! One destination of each kind a test asks for, made fresh on the real
//! services (bucket, container, directory, schema, database, topic), each
//! network one optionally behind its own [`Proxy`], so a test can cut or
//! stall it. Renders the destinations' TOML and reads each one back with
//! `sinks`.
//!
//! The object destinations between them write every format (local
//! `jsonl` with manifests, s3 `jsonl.gz` by date, azure `csv`, gcs
//! `parquet`, ftp `csv.gz`, ftps `jsonl`; ftp and ftps with their default
//! manifests), so a reader bug in one format cannot hide.

use std::path::PathBuf;

use abrq_testkit::{names, Azure, Ftps, Gcs, Kafka, Mysql, Postgres, ProxiedBroker, Proxy, S3};

use super::sinks::{self, Found};
use super::DestOutput;
use abrq_sinks::relational::sqlx;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Local,
    S3,
    AzureBlob,
    Gcs,
    Ftp,
    Ftps,
    Postgres,
    Mysql,
    Kafka,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Local,
        Kind::S3,
        Kind::AzureBlob,
        Kind::Gcs,
        Kind::Ftp,
        Kind::Ftps,
        Kind::Postgres,
        Kind::Mysql,
        Kind::Kafka,
    ];

    /// The engine name, also the destination's name in the config.
    pub fn engine(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::S3 => "s3",
            Kind::AzureBlob => "azure_blob",
            Kind::Gcs => "gcs",
            Kind::Ftp => "ftp",
            Kind::Ftps => "ftps",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
            Kind::Kafka => "kafka",
        }
    }
}

/// Where a destination writes.
enum Target {
    Local(PathBuf),
    S3(String),
    Azure(String),
    Gcs(String),
    Ftp(String),
    Ftps(String),
    Postgres { schema: String },
    Mysql { database: String },
    Kafka { brokers: String, topic: String },
}

pub struct Dest {
    pub kind: Kind,
    target: Target,
    /// The TOML lines that point abrq at it (through the proxy, if any).
    lines: String,
    proxy: Option<Proxy>,
    broker: Option<ProxiedBroker>,
}

impl Dest {
    pub fn name(&self) -> &'static str {
        self.kind.engine()
    }

    /// The proxy abrq reaches it through, if it has one.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy
            .as_ref()
            .or_else(|| self.broker.as_ref().map(|b| &b.proxy))
    }
}

pub struct Fleet {
    pub dests: Vec<Dest>,
    /// The relational destinations' table.
    pub table: String,
}

/// `host:port` of a URL, and its path.
fn split_url(url: &str) -> (String, String) {
    let u = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("bad url {url}: {e}"));
    let host = u.host_str().expect("a host");
    let port = u.port_or_known_default().expect("a port");
    (format!("{host}:{port}"), u.path().to_string())
}

/// A proxy to `upstream` when asked for; the `host:port` to use either way.
async fn maybe_proxy(upstream: &str, proxied: bool) -> (Option<Proxy>, String) {
    if !proxied {
        return (None, upstream.to_string());
    }
    let p = Proxy::start(upstream.to_string()).await;
    let addr = format!("127.0.0.1:{}", p.port());
    (Some(p), addr)
}

fn host_port(addr: &str) -> (&str, &str) {
    addr.rsplit_once(':').expect("host:port")
}

impl Fleet {
    /// Makes one destination per kind; `local_root` is where the local one
    /// writes, `partition_key` the field Kafka keys messages by.
    pub async fn provision(
        kinds: &[Kind],
        local_root: PathBuf,
        proxied: bool,
        partition_key: Option<&str>,
    ) -> Fleet {
        let table = "records".to_string();
        let mut dests = Vec::new();
        for &kind in kinds {
            let (target, lines, proxy, broker) = match kind {
                Kind::Local => (
                    Target::Local(local_root.clone()),
                    format!(
                        "database = \"{}\"\nformat = \"jsonl\"\nmanifest = true\n",
                        local_root.display()
                    ),
                    None,
                    None,
                ),
                Kind::S3 => {
                    let s3 = S3::from_env();
                    let bucket = names::bucket("e2e");
                    s3.create_bucket(&bucket).await.expect("s3 bucket");
                    let (up, _) = split_url(&s3.endpoint);
                    let (proxy, addr) = maybe_proxy(&up, proxied).await;
                    let lines = format!(
                        "host = \"http://{addr}\"\nregion = \"{}\"\ndatabase = \"{bucket}\"\n\
                         username = \"{}\"\npassword = \"{}\"\nprefix = \"exports\"\n\
                         format = \"jsonl.gz\"\ndate_partitioning = true\n",
                        s3.region,
                        s3.access_key_id,
                        s3.secret_access_key.expose()
                    );
                    (Target::S3(bucket), lines, proxy, None)
                }
                Kind::AzureBlob => {
                    let azure = Azure::from_env();
                    let container = names::container("e2e");
                    azure
                        .create_container(&container)
                        .await
                        .expect("azure container");
                    let (up, path) = split_url(&azure.endpoint);
                    let (proxy, addr) = maybe_proxy(&up, proxied).await;
                    let lines = format!(
                        "host = \"http://{addr}{path}\"\ndatabase = \"{container}\"\n\
                         username = \"{}\"\npassword = \"{}\"\nprefix = \"exports\"\n\
                         format = \"csv\"\n",
                        azure.account,
                        azure.key.expose()
                    );
                    (Target::Azure(container), lines, proxy, None)
                }
                Kind::Gcs => {
                    let gcs = Gcs::from_env();
                    let bucket = names::bucket("e2e");
                    gcs.create_bucket(&bucket).await.expect("gcs bucket");
                    let (up, _) = split_url(&gcs.endpoint);
                    let (proxy, addr) = maybe_proxy(&up, proxied).await;
                    let lines = format!(
                        "host = \"http://{addr}\"\ndatabase = \"{bucket}\"\n\
                         prefix = \"exports\"\nformat = \"parquet\"\n"
                    );
                    (Target::Gcs(bucket), lines, proxy, None)
                }
                Kind::Ftp | Kind::Ftps => {
                    let ftps = Ftps::from_env();
                    let ftp = &ftps.ftp;
                    let dir = names::dir("e2e");
                    let up = match kind {
                        Kind::Ftp => ftp.addr(),
                        _ => ftps.addr(),
                    };
                    // Only the control connection crosses the proxy:
                    // passive data connections go to the server's port.
                    let (proxy, addr) = maybe_proxy(&up, proxied).await;
                    let (host, port) = host_port(&addr);
                    let mut lines = format!(
                        "host = \"{host}\"\nport = {port}\ndatabase = \"/{dir}\"\n\
                         username = \"{}\"\npassword = \"{}\"\n",
                        ftp.user,
                        ftp.password.expose()
                    );
                    let target = if kind == Kind::Ftp {
                        lines.push_str("format = \"csv.gz\"\n");
                        Target::Ftp(dir)
                    } else {
                        lines.push_str(&format!(
                            "format = \"jsonl\"\ntls_ca_file = \"{}\"\n",
                            ftps.ca_file.display()
                        ));
                        Target::Ftps(dir)
                    };
                    (target, lines, proxy, None)
                }
                Kind::Postgres => {
                    let pg = Postgres::from_env();
                    let schema = names::database("e2e");
                    let pool = sqlx::PgPool::connect(&pg.url).await.expect("postgres");
                    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
                        .execute(&pool)
                        .await
                        .expect("create schema");
                    pool.close().await;
                    let lines = relational_lines(&pg.url, proxied, &table)
                        .await
                        .map(|(l, p)| (format!("{l}schema = \"{schema}\"\n"), p));
                    let (lines, proxy) = lines.expect("postgres url");
                    (Target::Postgres { schema }, lines, proxy, None)
                }
                Kind::Mysql => {
                    let my = Mysql::from_env();
                    let database = names::database("e2e");
                    let pool = sqlx::MySqlPool::connect(&my.url).await.expect("mysql");
                    sqlx::query(&format!("CREATE DATABASE `{database}`"))
                        .execute(&pool)
                        .await
                        .expect("create database");
                    pool.close().await;
                    let url = my.url_for(&database).expect("mysql url");
                    let (lines, proxy) = relational_lines(&url, proxied, &table)
                        .await
                        .expect("mysql url");
                    (Target::Mysql { database }, lines, proxy, None)
                }
                Kind::Kafka => {
                    let broker = match proxied {
                        true => Some(ProxiedBroker::start().await),
                        false => None,
                    };
                    let brokers = broker
                        .as_ref()
                        .map_or_else(|| Kafka::from_env().brokers, |b| b.brokers());
                    let topic = sinks::create_topic(&brokers, "e2e", 4).await;
                    let mut lines = format!("host = \"{brokers}\"\ndatabase = \"{topic}\"\n");
                    if let Some(k) = partition_key {
                        lines.push_str(&format!("partition_key = \"{k}\"\n"));
                    }
                    (Target::Kafka { brokers, topic }, lines, None, broker)
                }
            };
            dests.push(Dest {
                kind,
                target,
                lines,
                proxy,
                broker,
            });
        }
        Fleet { dests, table }
    }

    /// Every destination's `[[streams.destinations]]` table; `extra(d)` is
    /// appended to each (retry and breaker tables, say).
    pub fn toml(&self, extra: impl Fn(&Dest) -> String) -> String {
        let mut out = String::new();
        for d in &self.dests {
            out.push_str(&format!(
                "\n[[streams.destinations]]\nname = \"{0}\"\nengine = \"{0}\"\n{1}{2}",
                d.name(),
                d.lines,
                extra(d)
            ));
        }
        out
    }

    /// An object destination's files, read straight from the service.
    pub async fn read_objects(&self, d: &Dest) -> Option<DestOutput> {
        Some(match &d.target {
            Target::Local(root) => super::read_dest(root),
            Target::S3(bucket) => sinks::s3(&S3::from_env(), bucket).await,
            Target::Azure(container) => sinks::azure(&Azure::from_env(), container).await,
            Target::Gcs(bucket) => sinks::gcs(&Gcs::from_env(), bucket).await,
            Target::Ftp(dir) => sinks::ftp(&Ftps::from_env().ftp, dir).await,
            Target::Ftps(dir) => sinks::ftps(&Ftps::from_env(), dir).await,
            Target::Postgres { .. } | Target::Mysql { .. } | Target::Kafka { .. } => return None,
        })
    }

    /// Every record the destination holds, read straight from the service.
    pub async fn read(&self, d: &Dest) -> Vec<Found> {
        if let Some(out) = self.read_objects(d).await {
            return sinks::found_in_objects(&out);
        }
        match &d.target {
            Target::Postgres { schema } => {
                let url = Postgres::from_env().url;
                sinks::found_in_rows(sinks::postgres(&url, schema, &self.table).await)
            }
            Target::Mysql { database } => {
                let url = Mysql::from_env().url;
                sinks::found_in_rows(sinks::mysql(&url, database, &self.table).await)
            }
            Target::Kafka { brokers, topic } => {
                sinks::found_in_kafka(&sinks::kafka(brokers, topic).await)
            }
            _ => unreachable!("object destinations are read above"),
        }
    }

    /// Creates the relational destinations' table before abrq sees it,
    /// with the column types a user declared (`columns`: one SQL column
    /// list that both dialects take).
    pub async fn declare_table(&self, columns: &str) {
        for d in &self.dests {
            match &d.target {
                Target::Postgres { schema } => {
                    let pool = sqlx::PgPool::connect(&Postgres::from_env().url)
                        .await
                        .expect("postgres");
                    let sql = format!("CREATE TABLE \"{schema}\".\"{}\" ({columns})", self.table);
                    sqlx::query(&sql)
                        .execute(&pool)
                        .await
                        .expect("declare table");
                    pool.close().await;
                }
                Target::Mysql { database } => {
                    let pool = sqlx::MySqlPool::connect(&Mysql::from_env().url)
                        .await
                        .expect("mysql");
                    let sql = format!("CREATE TABLE `{database}`.`{}` ({columns})", self.table);
                    sqlx::query(&sql)
                        .execute(&pool)
                        .await
                        .expect("declare table");
                    pool.close().await;
                }
                _ => {}
            }
        }
    }

    /// Removes what the destinations wrote, as far as the services allow
    /// (best effort: a failed cleanup fails no test).
    pub async fn cleanup(&self) {
        for d in &self.dests {
            match &d.target {
                Target::Local(_) | Target::Gcs(_) | Target::Kafka { .. } => {}
                Target::S3(bucket) => {
                    let s3 = S3::from_env();
                    let store = sinks::s3_store(&s3, bucket);
                    for key in sinks::list_store(&store).await {
                        use object_store::ObjectStoreExt;
                        let _ = store.delete(&key.as_str().into()).await;
                    }
                    let _ = s3.delete_bucket(bucket).await;
                }
                Target::Azure(container) => {
                    let _ = Azure::from_env().delete_container(container).await;
                }
                Target::Ftp(dir) => {
                    sinks::ftp_remove_tree(&Ftps::from_env().ftp, None, dir).await;
                }
                Target::Ftps(dir) => {
                    let ftps = Ftps::from_env();
                    sinks::ftp_remove_tree(&ftps.ftp, Some(&ftps), dir).await;
                }
                Target::Postgres { schema } => {
                    if let Ok(pool) = sqlx::PgPool::connect(&Postgres::from_env().url).await {
                        let sql = format!("DROP SCHEMA \"{schema}\" CASCADE");
                        let _ = sqlx::query(&sql).execute(&pool).await;
                        pool.close().await;
                    }
                }
                Target::Mysql { database } => {
                    if let Ok(pool) = sqlx::MySqlPool::connect(&Mysql::from_env().url).await {
                        let sql = format!("DROP DATABASE `{database}`");
                        let _ = sqlx::query(&sql).execute(&pool).await;
                        pool.close().await;
                    }
                }
            }
        }
    }
}

/// host, port, database, username (and password) of a relational URL,
/// through a proxy when asked for.
async fn relational_lines(
    url: &str,
    proxied: bool,
    table: &str,
) -> Result<(String, Option<Proxy>), String> {
    let u = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    let (up, path) = split_url(url);
    let (proxy, addr) = maybe_proxy(&up, proxied).await;
    let (host, port) = host_port(&addr);
    let mut lines = format!(
        "host = \"{host}\"\nport = {port}\ndatabase = \"{}\"\nusername = \"{}\"\n\
         table = \"{table}\"\n",
        path.trim_start_matches('/'),
        u.username()
    );
    if let Some(p) = u.password() {
        lines.push_str(&format!("password = \"{p}\"\n"));
    }
    Ok((lines, proxy))
}
