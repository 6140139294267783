//! One destination of each kind a test asks for, made fresh on the real
//! services (bucket, container, directory, schema, database, topic), each
//! network one optionally behind its own [`Proxy`], so a test can cut or
//! stall it. Makes the destinations' config tables and reads each one back
//! with `sinks`.
//!
//! The object destinations between them write every format (local
//! `jsonl` with manifests, s3 `jsonl.gz` by date, azure `csv`, gcs
//! `parquet`, ftp `csv.gz`, ftps `jsonl`; ftp and ftps with their default
//! manifests), so a reader bug in one format cannot hide.

use std::path::PathBuf;

use abrq_testkit::{names, Azure, Ftps, Gcs, Kafka, Mysql, Postgres, ProxiedBroker, Proxy, S3};

use super::sinks::{self, Found};
use super::{DestOutput, Destination};
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
    /// Its table in the config: what points abrq at it (through the
    /// proxy, if any).
    config: Destination,
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

fn host_port(addr: &str) -> (&str, u16) {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    (host, port.parse().expect("a port"))
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
            let name = kind.engine();
            let (target, config, proxy, broker) = match kind {
                Kind::Local => (
                    Target::Local(local_root.clone()),
                    Destination::local(name, &local_root)
                        .format("jsonl")
                        .manifest(),
                    None,
                    None,
                ),
                Kind::S3 => {
                    let s3 = S3::from_env();
                    let bucket = names::bucket("e2e");
                    s3.create_bucket(&bucket).await.expect("s3 bucket");
                    let (up, _) = split_url(&s3.endpoint);
                    let (proxy, addr) = maybe_proxy(&up, proxied).await;
                    let config = Destination::s3(name)
                        .host(&format!("http://{addr}"))
                        .region(&s3.region)
                        .database(&bucket)
                        .username(&s3.access_key_id)
                        .password(s3.secret_access_key.expose())
                        .prefix("exports")
                        .format("jsonl.gz")
                        .date_partitioning();
                    (Target::S3(bucket), config, proxy, None)
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
                    let config = Destination::azure_blob(name)
                        .host(&format!("http://{addr}{path}"))
                        .database(&container)
                        .username(&azure.account)
                        .password(azure.key.expose())
                        .prefix("exports")
                        .format("csv");
                    (Target::Azure(container), config, proxy, None)
                }
                Kind::Gcs => {
                    let gcs = Gcs::from_env();
                    let bucket = names::bucket("e2e");
                    gcs.create_bucket(&bucket).await.expect("gcs bucket");
                    let (up, _) = split_url(&gcs.endpoint);
                    let (proxy, addr) = maybe_proxy(&up, proxied).await;
                    let config = Destination::gcs(name)
                        .host(&format!("http://{addr}"))
                        .database(&bucket)
                        .prefix("exports")
                        .format("parquet");
                    (Target::Gcs(bucket), config, proxy, None)
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
                    let config = match kind {
                        Kind::Ftp => Destination::ftp(name),
                        _ => Destination::ftps(name),
                    }
                    .host(host)
                    .port(port)
                    .database(format!("/{dir}"))
                    .username(&ftp.user)
                    .password(ftp.password.expose());
                    match kind {
                        Kind::Ftp => (Target::Ftp(dir), config.format("csv.gz"), proxy, None),
                        _ => {
                            let config = config.format("jsonl").tls_ca_file(&ftps.ca_file);
                            (Target::Ftps(dir), config, proxy, None)
                        }
                    }
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
                    let (config, proxy) =
                        relational(Destination::postgres(name), &pg.url, proxied, &table).await;
                    (
                        Target::Postgres {
                            schema: schema.clone(),
                        },
                        config.schema(&schema),
                        proxy,
                        None,
                    )
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
                    let (config, proxy) =
                        relational(Destination::mysql(name), &url, proxied, &table).await;
                    (Target::Mysql { database }, config, proxy, None)
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
                    let config = Destination::kafka(name).host(&brokers).database(&topic);
                    let config = match partition_key {
                        Some(k) => config.partition_key(k),
                        None => config,
                    };
                    (Target::Kafka { brokers, topic }, config, None, broker)
                }
            };
            dests.push(Dest {
                kind,
                target,
                config,
                proxy,
                broker,
            });
        }
        Fleet { dests, table }
    }

    /// Every destination's table, each passed through `adjust` (to add its
    /// retry and breaker tables, say).
    pub fn destinations(
        &self,
        adjust: impl Fn(&Dest, Destination) -> Destination,
    ) -> Vec<Destination> {
        self.dests
            .iter()
            .map(|d| adjust(d, d.config.clone()))
            .collect()
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

/// `config` pointed at the relational server and database of `url`
/// (through a proxy when asked for), writing to `table`.
async fn relational(
    config: Destination,
    url: &str,
    proxied: bool,
    table: &str,
) -> (Destination, Option<Proxy>) {
    let u = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("bad url {url}: {e}"));
    let (up, path) = split_url(url);
    let (proxy, addr) = maybe_proxy(&up, proxied).await;
    let (host, port) = host_port(&addr);
    let config = config
        .host(host)
        .port(port)
        .database(path.trim_start_matches('/'))
        .username(u.username())
        .table(table);
    let config = match u.password() {
        Some(p) => config.password(p),
        None => config,
    };
    (config, proxy)
}
