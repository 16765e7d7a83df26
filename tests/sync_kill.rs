//! A client killed with SIGKILL mid-upload loses nothing and doubles nothing: a
//! real child process (this test binary, run as `sync_kill_child`) increments a
//! counter in a loop while syncing; it is killed while batches are in flight,
//! three times, restarting each time on the same file; then the parent syncs the
//! file to the end. The server's counter equals the number of increments the
//! child committed locally — every one arrived, none twice.

mod sync_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use sync_support::{eventually, like, local, object, open, start, sync};

const DB: &str = "KEEL_SYNC_KILL_DB";
const URL: &str = "KEEL_SYNC_KILL_URL";

/// The child's body: does nothing unless the parent started it.
#[test]
fn sync_kill_child() {
    let (Ok(path), Ok(url)) = (std::env::var(DB), std::env::var(URL)) else {
        return;
    };
    let db = open(std::path::Path::new(&path));
    if local(&db, "blog.Post", "p1").is_none() {
        let post = object(&db, "blog.Post", json!({"id": "p1", "owner": "ann"}));
        db.write_blocking(move |t| t.upsert_bytes("blog.Post", post).map(|_| ()))
            .unwrap();
    }
    let _handle = sync(&db, &url, "ann");
    loop {
        like(&db, "p1", 1);
        std::thread::sleep(Duration::from_micros(300));
    }
}

#[test]
fn a_client_killed_mid_upload_loses_nothing_and_doubles_nothing() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    let likes = || {
        let rows = net.rows("SELECT likes FROM posts WHERE id = 'p1'");
        rows.first().and_then(|r| r["likes"].as_i64()).unwrap_or(0)
    };
    for round in 1..=3 {
        let before = likes();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sync_kill_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DB, &path)
            .env(URL, net.url())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Killed once uploads are flowing: batches are in flight, acks on their way.
        assert!(
            eventually(|| likes() > before + 20 * round),
            "round {round}: uploads flow"
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let db = open(&path);
    let committed = local(&db, "blog.Post", "p1").unwrap()["likes"]
        .as_i64()
        .unwrap();
    let handle = sync(&db, &net.url(), "ann");
    handle.wait_uploaded().unwrap();
    assert_eq!(
        likes(),
        committed,
        "every committed increment once on the server"
    );
    assert!(eventually(
        || local(&db, "blog.Post", "p1").is_some_and(|p| p["likes"] == committed)
    ));
    // One sequence number per increment (after the insert's 1), the last one
    // applied; the ledger rows below the client's last `unacked_from` are pruned.
    assert_eq!(
        net.int("SELECT max(seq) FROM keel_relay.op_ledger"),
        committed + 1,
        "one operation per increment"
    );
}
