//! The relay's config file (TOML).
//!
//! ```toml
//! listen = "127.0.0.1:7420"          # loopback unless a proxy fronts it
//! database_url = "host=127.0.0.1 port=5432 user=app dbname=app"
//! schema = "app.fbs"                 # relative to this file
//! relay_id = "relay-1"               # names this relay's replication slot
//! max_frame_bytes = 1048576          # larger frames get a typed `frame_too_large`
//! max_batch_ops = 1000
//! pool_size = 4                      # PostgreSQL connections for uploads and snapshots
//! log_format = "text"                # or "json"
//!
//! [auth]
//! hs256_secrets = ["a shared secret"]
//! jwks_file = "keys.json"            # RS256 and EdDSA public keys
//! issuer = "https://auth.example"    # optional `iss` check
//! audience = "keel"                  # optional `aud` check
//! leeway_seconds = 30
//!
//! [[scope]]
//! collection = "blog.Post"
//! filter = "owner == token.sub"
//! ```
//!
//! Relative paths resolve against the config file's folder. Unknown keys are an
//! error, so a misspelt setting is never silently ignored.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::Error;

/// The whole config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// libpq-style connection string or URL of the app's PostgreSQL.
    pub database_url: String,
    /// The `.fbs` file whose `(sync)` collections the relay serves.
    pub schema: PathBuf,
    /// This relay's name: its replication slot is `keel_relay_<relay_id>`.
    pub relay_id: String,
    /// The largest frame a client may send, in bytes.
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// The most operations one upload batch may hold.
    #[serde(default = "default_max_batch_ops")]
    pub max_batch_ops: usize,
    /// PostgreSQL connections kept for uploads and snapshots.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// `text` or `json` log lines.
    #[serde(default)]
    pub log_format: LogFormat,
    /// Token checking.
    pub auth: AuthConfig,
    /// What each client may see and write.
    #[serde(default, rename = "scope")]
    pub scopes: Vec<ScopeConfig>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `[auth]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Shared secrets for HS256 tokens (any one may have signed a token).
    #[serde(default)]
    pub hs256_secrets: Vec<String>,
    /// A JWKS file with RS256 and EdDSA (Ed25519) public keys.
    pub jwks_file: Option<PathBuf>,
    /// When set, a token's `iss` must equal it.
    pub issuer: Option<String>,
    /// When set, a token's `aud` must contain it.
    pub audience: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
}

/// One `[[scope]]`: a collection and a filter over its fields.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeConfig {
    /// The collection (fully qualified or bare name).
    pub collection: String,
    /// `field == token.claim && field == "literal"`; empty for the whole collection.
    #[serde(default)]
    pub filter: String,
}

fn default_listen() -> String {
    "127.0.0.1:7420".into()
}
fn default_max_frame_bytes() -> usize {
    1 << 20
}
fn default_max_batch_ops() -> usize {
    1000
}
fn default_pool_size() -> usize {
    4
}
fn default_leeway() -> u64 {
    30
}

impl Config {
    /// Reads and checks the config file; relative paths become relative to its folder.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Config::parse(&text, path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        config.schema = dir.join(&config.schema);
        if let Some(jwks) = &config.auth.jwks_file {
            config.auth.jwks_file = Some(dir.join(jwks));
        }
        Ok(config)
    }

    /// Parses config text (`path` names it in errors; paths are left as written).
    pub fn parse(text: &str, path: &Path) -> Result<Config, Error> {
        let config: Config = toml::from_str(text).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let problem = |message: &str| Error::Config {
            path: path.to_path_buf(),
            message: message.to_owned(),
        };
        if config.relay_id.is_empty()
            || !config
                .relay_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(problem(
                "relay_id must be letters, digits, '_' or '-' (it names a replication slot)",
            ));
        }
        if config.auth.hs256_secrets.is_empty() && config.auth.jwks_file.is_none() {
            return Err(problem(
                "[auth] needs hs256_secrets or jwks_file: the relay accepts no unsigned client",
            ));
        }
        if config.pool_size == 0 {
            return Err(problem("pool_size must be at least 1"));
        }
        Ok(config)
    }

    /// The replication slot this relay reads.
    pub fn slot_name(&self) -> String {
        format!(
            "keel_relay_{}",
            self.relay_id.replace('-', "_").to_lowercase()
        )
    }
}
