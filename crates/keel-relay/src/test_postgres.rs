//! A throwaway PostgreSQL for tests: the relay is only ever tested against a real server.
//!
//! [`TestPostgres::start`] gives each caller a database of its own, on one of two servers:
//!
//! * the server named by the `KEEL_TEST_PG_URL` environment variable (a libpq
//!   connection string or URL of a superuser; the server must run with
//!   `wal_level=logical`), in which case a fresh database `keel_test_…` is created
//!   and dropped again; or
//! * a cluster of its own, made with the PostgreSQL binaries found on the machine
//!   (`KEEL_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`): `initdb` into a
//!   temporary folder, `pg_ctl start` on a free loopback port with
//!   `wal_level=logical`, replication slots and WAL senders enabled. Running as
//!   root (as CI does), the folder is handed to the `postgres` user and the
//!   binaries run through `runuser -u postgres --`, since PostgreSQL refuses to run
//!   as root. Dropping the value stops the cluster (`pg_ctl stop -m immediate`)
//!   and removes the folder.
//!
//! With neither, `start` prints `skipped: no PostgreSQL binaries` and returns
//! `Ok(None)`: the calling test then returns early and passes, saying so plainly.
//! Any other failure (initdb or the server refusing to start) is an error with the
//! server's log attached, never a silent skip.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable naming an existing server to test against.
pub const URL_VARIABLE: &str = "KEEL_TEST_PG_URL";
/// The environment variable naming a folder of PostgreSQL binaries.
pub const BIN_VARIABLE: &str = "KEEL_PG_BIN";
/// The line printed when a test cannot find PostgreSQL.
pub const SKIPPED: &str = "skipped: no PostgreSQL binaries";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A database on a running PostgreSQL, owned by one test.
#[derive(Debug)]
pub struct TestPostgres {
    url: String,
    database: String,
    /// The admin connection string used to drop the database again.
    admin_url: String,
    cluster: Option<Cluster>,
}

/// A cluster this process started (and stops on drop).
#[derive(Debug)]
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    as_postgres: bool,
}

impl TestPostgres {
    /// Starts (or connects to) PostgreSQL and creates a fresh database; `Ok(None)` when
    /// no PostgreSQL is available (after printing [`SKIPPED`]).
    pub fn start() -> Result<Option<TestPostgres>, String> {
        let database = unique_name("keel_test");
        if let Ok(admin_url) = std::env::var(URL_VARIABLE) {
            let url = with_database(&admin_url, &database);
            run_admin(&admin_url, &format!("CREATE DATABASE {database}"))?;
            return Ok(Some(TestPostgres {
                url,
                database,
                admin_url,
                cluster: None,
            }));
        }
        let Some(bin) = find_binaries() else {
            println!("{SKIPPED}");
            return Ok(None);
        };
        let cluster = Cluster::start(bin)?;
        let admin_url = cluster.url_for("postgres");
        run_admin(&admin_url, &format!("CREATE DATABASE {database}"))?;
        Ok(Some(TestPostgres {
            url: cluster.url_for(&database),
            database,
            admin_url,
            cluster: Some(cluster),
        }))
    }

    /// The connection string of this test's database (a superuser connection).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The name of this test's database.
    pub fn database(&self) -> &str {
        &self.database
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        if self.cluster.is_none() {
            // A shared server outlives the test: drop the database (and any slot
            // left on it, which would otherwise keep the drop from succeeding).
            let _ = run_admin(
                &self.admin_url,
                &format!(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                     WHERE database = '{}' AND NOT active",
                    self.database
                ),
            );
            let _ = run_admin(
                &self.admin_url,
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database),
            );
        }
        // `cluster` drops after this, stopping the server.
    }
}

impl Cluster {
    fn start(bin: PathBuf) -> Result<Cluster, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let dir = std::env::temp_dir().join(unique_name("keel-pg"));
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let cluster = Cluster {
            bin,
            dir,
            as_postgres,
        };
        if as_postgres {
            cluster.hand_to_postgres()?;
        }
        let data = cluster.data_dir();
        cluster.run(
            "initdb",
            &[
                "-D",
                &data.to_string_lossy(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        // A port taken between probing and binding is retried with another one.
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let options = format!(
                "-p {port} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical \
                 -c max_replication_slots=16 -c max_wal_senders=16 -c max_slot_wal_keep_size=1GB \
                 -c fsync=off -c full_page_writes=off -c max_connections=200",
                cluster.dir.display()
            );
            let log = cluster.dir.join("server.log");
            match cluster.run(
                "pg_ctl",
                &[
                    "-D",
                    &data.to_string_lossy(),
                    "-l",
                    &log.to_string_lossy(),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    &options,
                    "start",
                ],
            ) {
                Ok(_) => {
                    fs::write(cluster.dir.join("port"), port.to_string())
                        .map_err(|e| format!("writing the port file: {e}"))?;
                    return Ok(cluster);
                }
                Err(e) => {
                    let server_log = fs::read_to_string(&log).unwrap_or_default();
                    last_error = format!("{e}\nserver log:\n{server_log}");
                }
            }
        }
        Err(last_error)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn port(&self) -> u16 {
        fs::read_to_string(self.dir.join("port"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
    }

    fn url_for(&self, database: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={database}",
            self.port()
        )
    }

    /// Gives the cluster folder to the `postgres` user (PostgreSQL will not run as root).
    fn hand_to_postgres(&self) -> Result<(), String> {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&self.dir)
            .status()
            .map_err(|e| format!("running chown: {e}"))?;
        if !status.success() {
            return Err(format!(
                "chown postgres {} failed: {status}",
                self.dir.display()
            ));
        }
        Ok(())
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let output = command
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("running {}: {e}", path.display()))?;
        if output.status.success() {
            Ok(output)
        } else {
            Err(format!(
                "{program} failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        // Immediate: the cluster is thrown away, and a fast stop waits for each
        // replication client to confirm the last WAL, which a relay on a test's
        // runtime, blocked in this very drop, can no longer do.
        let _ = self.run(
            "pg_ctl",
            &[
                "-D",
                &data.to_string_lossy(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The folder holding `initdb`, `pg_ctl` and `postgres`, if any.
fn find_binaries() -> Option<PathBuf> {
    if let Ok(bin) = std::env::var(BIN_VARIABLE) {
        let bin = PathBuf::from(bin);
        return has_binaries(&bin).then_some(bin);
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_binaries(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn has_binaries(bin: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|p| bin.join(p).is_file())
}

fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The same connection string, on another database.
fn with_database(url: &str, database: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let authority_end = base
            .find("://")
            .map(|i| i + 3)
            .and_then(|start| base[start..].find('/').map(|j| start + j))
            .unwrap_or(base.len());
        let mut out = format!("{}/{database}", &base[..authority_end]);
        if let Some(q) = query {
            out.push('?');
            out.push_str(q);
        }
        out
    } else {
        format!("{url} dbname={database}")
    }
}

/// Runs one statement on a fresh connection, from synchronous code (on a thread of its
/// own, so that it works inside a test's async runtime too).
fn run_admin(url: &str, sql: &str) -> Result<(), String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("starting a runtime: {e}"))?;
                runtime.block_on(async {
                    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                        .await
                        .map_err(|e| format!("connecting to {url}: {e}"))?;
                    let driver = tokio::spawn(connection);
                    let result = client
                        .batch_execute(sql)
                        .await
                        .map_err(|e| format!("{sql}: {e}"));
                    drop(client);
                    let _ = driver.await;
                    result
                })
            })
            .join()
            .unwrap_or_else(|_| Err(format!("{sql}: the admin thread panicked")))
    })
}
