//! What the relay's test files share: the fixture schema, a database connection.
#![allow(dead_code)]

use std::path::PathBuf;

use keel_relay::sync_schema::SyncSchema;
use tokio_postgres::{Client, NoTls};

/// The fixture `.fbs`.
pub fn blog_fbs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blog.fbs")
}

/// The fixture's synced collections.
pub fn blog_schema() -> SyncSchema {
    SyncSchema::from_file(blog_fbs()).expect("the fixture schema maps")
}

/// A connection to `url`, its driver spawned on the current runtime.
pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connects to the test database");
    tokio::spawn(connection);
    client
}
