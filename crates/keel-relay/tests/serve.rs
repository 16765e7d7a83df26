//! The `keel-relay serve` process: it reads its TOML config, logs JSON lines, serves
//! `/health`, stops cleanly on SIGINT, and refuses to start (naming why) on a bad
//! config or a database that does not match the schema.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use keel_relay::ddl;
use keel_relay::test_postgres::TestPostgres;

fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    std::fs::copy(common::blog_fbs(), dir.join("app.fbs")).unwrap();
    let path = dir.join("relay.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn config(url: &str) -> String {
    // Relative paths: the schema beside the config file.
    format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"{url}\"\nschema = \"app.fbs\"\n\
         relay_id = \"proc\"\nlog_format = \"json\"\n\n[auth]\nhs256_secrets = [\"{}\"]\n",
        common::SECRET
    )
}

#[tokio::test]
async fn the_relay_process_serves_logs_json_and_stops_on_sigint() {
    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    let sql = common::connect(pg.url()).await;
    sql.batch_execute(&ddl::ddl(&common::blog_schema()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(pg.url()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel-relay"))
        .args(["serve", "--config"])
        .arg(&path)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the relay exited early"
        );
        let entry: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        if entry["fields"]["message"] == "relay listening" {
            assert_eq!(entry["level"], "INFO");
            assert_eq!(entry["fields"]["relay_id"], "proc");
            break entry["fields"]["addr"].as_str().unwrap().to_owned();
        }
    };
    let mut http = std::net::TcpStream::connect(&addr).unwrap();
    http.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    http.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    // SAFETY: kill with a pid this test spawned and has not reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_relay_refuses_a_bad_config_or_a_mismatched_database() {
    let dir = tempfile::tempdir().unwrap();
    let run = |path: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_keel-relay"))
            .args(["serve", "--config"])
            .arg(path)
            .output()
            .unwrap()
    };
    let misspelt = write_config(
        dir.path(),
        &format!("{}\nmax_frame_byte = 10\n", config("host=127.0.0.1")),
    );
    let out = run(&misspelt);
    assert_eq!(out.status.code(), Some(2));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("max_frame_byte"), "{message}");

    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    // The database has no synced tables yet: the relay says so and does not start.
    let path = write_config(dir.path(), &config(pg.url()));
    let out = run(&path);
    assert_eq!(out.status.code(), Some(2));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("table posts: missing"), "{message}");
}
