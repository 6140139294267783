//! Every destination engine, registered once. [`entry`] is the one match
//! over [`DestinationEngine`]: exhaustive, with no catch-all arm, so an
//! engine added to the config model does not compile until it is entered
//! here with all it has. Building, checking, describing the connection
//! and reading object settings all go through this table.

use std::sync::Arc;

use abrq_core::config::{DestinationConfig, DestinationEngine};
use abrq_core::Destination;

use crate::cloud::azure::{self, AzureSettings};
use crate::cloud::gcs::{self, GcsSettings};
use crate::cloud::s3::{self, S3Settings};
use crate::ftp;
use crate::kafka::{self, KafkaSettings};
use crate::keys::{BuildError, Connection};
use crate::local::{self, LocalSettings};
use crate::object::ObjectOptions;
use crate::relational::{self, RelationalSettings};

/// Builds the destination of a stream (the first argument), validated,
/// without I/O.
pub type Build = fn(&str, &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError>;

/// Checks an engine's keys for a stream, without I/O.
pub type Check = fn(&str, &DestinationConfig) -> Result<(), String>;

/// Reads an object or file engine's object keys, as its config does.
pub type ObjectKeys = fn(&DestinationConfig) -> Result<ObjectOptions, String>;

/// What one engine (or a pair sharing a folder: ftp and ftps, postgres
/// and mysql) brings.
pub struct Engine {
    pub build: Build,
    pub check: Check,
    /// What the engine takes the five connection fields to mean.
    pub connection: Connection,
    /// `None` for an engine that writes no objects.
    pub object: Option<ObjectKeys>,
}

/// The entry of `engine`.
pub fn entry(engine: DestinationEngine) -> &'static Engine {
    match engine {
        DestinationEngine::Local => &LOCAL,
        DestinationEngine::S3 => &S3,
        DestinationEngine::AzureBlob => &AZURE_BLOB,
        DestinationEngine::Gcs => &GCS,
        DestinationEngine::Ftp | DestinationEngine::Ftps => &FTP,
        DestinationEngine::Kafka => &KAFKA,
        DestinationEngine::Postgres | DestinationEngine::Mysql => &RELATIONAL,
    }
}

static LOCAL: Engine = Engine {
    build: local::build,
    check: |_, cfg| LocalSettings::from_config(cfg).map(drop),
    connection: local::config::CONNECTION,
    object: Some(|cfg| Ok(LocalSettings::from_config(cfg)?.object)),
};

static S3: Engine = Engine {
    build: s3::build,
    check: |_, cfg| S3Settings::from_config(cfg).map(drop),
    connection: s3::config::CONNECTION,
    object: Some(|cfg| Ok(S3Settings::from_config(cfg)?.object)),
};

static AZURE_BLOB: Engine = Engine {
    build: azure::build,
    check: |_, cfg| AzureSettings::from_config(cfg).map(drop),
    connection: azure::config::CONNECTION,
    object: Some(|cfg| Ok(AzureSettings::from_config(cfg)?.object)),
};

static GCS: Engine = Engine {
    build: gcs::build,
    check: |_, cfg| GcsSettings::from_config(cfg).map(drop),
    connection: gcs::config::CONNECTION,
    object: Some(|cfg| Ok(GcsSettings::from_config(cfg)?.object)),
};

static FTP: Engine = Engine {
    build: ftp::build,
    check: |_, cfg| ftp::config::settings(cfg).map(drop),
    connection: ftp::config::CONNECTION,
    object: Some(|cfg| Ok(ftp::config::settings(cfg)?.1)),
};

static KAFKA: Engine = Engine {
    build: kafka::build,
    check: |stream, cfg| KafkaSettings::from_config(stream, cfg).map(drop),
    connection: kafka::config::CONNECTION,
    object: None,
};

static RELATIONAL: Engine = Engine {
    build: relational::build,
    check: |stream, cfg| RelationalSettings::from_config(stream, cfg).map(drop),
    connection: relational::config::CONNECTION,
    object: None,
};
