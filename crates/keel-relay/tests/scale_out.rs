//! Several relays on one database: each has its own slot, they share the op ledger
//! and checkpoints in PostgreSQL, so a client may move between them and a write
//! through one reaches subscribers of the other. A relay restarted under the same
//! id resumes its slot. An idle relay writes nothing.

mod common;

use common::{start_relay, WsClient};
use keel_relay::protocol::parse_lsn;
use serde_json::json;

#[tokio::test]
async fn two_relays_share_the_ledger_and_each_streams_every_write() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let (second, _) = start_relay(f.pg.url(), "second").await;
    let mut watcher = WsClient::signed_in(&second, "ann", "ann-tablet").await;
    watcher.send(json!({"type": "subscribe"})).await;
    assert_eq!(watcher.recv().await["type"], "snapshot_done");

    let batch = json!([
        {"seq": 1, "op": "insert", "collection": "blog.Post", "key": {"id": "p1"},
         "fields": {"owner": "ann", "likes": 1}},
        {"seq": 2, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
         "deltas": {"likes": 1}},
    ]);
    let mut phone = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let ack = phone.upload(batch.clone()).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    // The phone reconnects through the other relay and resends (its ack was lost).
    let mut phone_again = WsClient::signed_in(&second, "ann", "ann-phone").await;
    let replay = phone_again.upload(batch).await;
    assert_eq!(replay["results"][1]["replayed"], true, "{replay}");
    let likes: i64 = f
        .sql
        .query_one("SELECT likes FROM posts WHERE id = 'p1'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(likes, 2, "applied once across relays");

    // The write made through the first relay reaches the second relay's subscriber.
    let frame = watcher.recv().await;
    assert_eq!(frame["type"], "changes", "{frame}");
    // One frame for the batch's transaction: its insert, then its patch.
    let likes: Vec<&serde_json::Value> = frame["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["row"]["likes"])
        .collect();
    assert_eq!(likes, [&json!(1), &json!(2)], "{frame}");

    let slots: Vec<String> = f
        .sql
        .query(
            "SELECT slot_name::text FROM pg_replication_slots ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(slots, ["keel_relay_second", "keel_relay_test"]);
    second.stop().await;
}

/// An idle relay writes nothing and sends nothing: recording each checkpoint it
/// learns of would be a commit that moves the WAL, which is a new checkpoint to
/// record, forever, with a checkpoint frame to every subscriber each time: an idle
/// phone would never sleep.
#[tokio::test]
async fn an_idle_relay_commits_nothing_and_sends_nothing() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    ann.send(json!({"type": "subscribe"})).await;
    assert_eq!(ann.recv().await["type"], "snapshot_done");
    // One streamed write, then wait until the relay has recorded it.
    f.sql
        .batch_execute("INSERT INTO posts (id, owner, title) VALUES ('one', 'ann', 'once')")
        .await
        .unwrap();
    let changes = ann.recv().await;
    assert_eq!(changes["type"], "changes");
    let written = parse_lsn(changes["lsn"].as_str().unwrap()).unwrap();
    let deadline = std::time::Instant::now() + common::FRAME_WAIT;
    while streamed(&f.sql).await < written {
        assert!(
            std::time::Instant::now() < deadline,
            "the relay records its checkpoint"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The record moved the WAL once: at most its own checkpoint may still come.
    let _ = ann.frames_within(idle_window()).await;

    let version = relay_row_version(&f.sql).await;
    let frames = ann.frames_within(idle_window()).await;
    assert_eq!(
        relay_row_version(&f.sql).await,
        version,
        "an idle relay updated its own row"
    );
    // PostgreSQL's own background records (a running-transactions snapshot every
    // 15 s, autovacuum) may move the WAL once or twice; a relay that wrote its
    // own row on every read of the slot sent a frame for each.
    assert!(
        frames.len() <= 3,
        "an idle relay sent {} frames",
        frames.len()
    );
    assert!(
        frames.iter().all(|f| f["type"] == "checkpoint"),
        "{frames:?}"
    );
}

/// More than the relay waits between two records of its checkpoint.
fn idle_window() -> std::time::Duration {
    keel_relay::replication::RECORD_EVERY * 3 / 2
}

/// The transaction that last wrote the relay `test`'s row.
async fn relay_row_version(sql: &tokio_postgres::Client) -> String {
    sql.query_one(
        "SELECT xmin::text FROM keel_relay.relays WHERE relay_id = 'test'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// How far the relay `test` has streamed, by its row in `keel_relay.relays`.
async fn streamed(sql: &tokio_postgres::Client) -> u64 {
    let row = sql
        .query_one(
            "SELECT coalesce(streamed_lsn::text, '0/0') FROM keel_relay.relays WHERE relay_id = 'test'",
            &[],
        )
        .await
        .unwrap();
    parse_lsn(&row.get::<_, String>(0)).unwrap()
}

#[tokio::test]
async fn a_restarted_relay_resumes_its_slot() {
    let Some(f) = common::fixture().await else {
        return;
    };
    // Stop the relay, write while it is down, start it again under the same id.
    f.relay.stop().await;
    f.sql
        .batch_execute(
            "INSERT INTO posts (id, owner, title) VALUES ('down1', 'ann', 'while down');
             INSERT INTO posts (id, owner, title) VALUES ('down2', 'bob', 'while down');",
        )
        .await
        .unwrap();
    let written: String = f
        .sql
        .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let written = parse_lsn(&written).unwrap();
    let (relay, _) = start_relay(f.pg.url(), "test").await;

    let mut ann = WsClient::signed_in(&relay, "ann", "ann-phone").await;
    ann.send(json!({"type": "subscribe"})).await;
    let mut snapshot_ids = Vec::new();
    loop {
        let frame = ann.recv().await;
        if frame["type"] == "snapshot_done" {
            break;
        }
        for row in frame["rows"].as_array().into_iter().flatten() {
            snapshot_ids.push(row["id"].clone());
        }
    }
    assert_eq!(snapshot_ids, [json!("down1")], "her rows, not Bob's");
    // The slot kept its place while the relay was down: the restarted relay streams
    // past everything written meanwhile and leaves nothing behind in the slot.
    let deadline = std::time::Instant::now() + common::FRAME_WAIT;
    while streamed(&f.sql).await < written {
        assert!(std::time::Instant::now() < deadline, "the slot resumes");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // And a live write after the restart reaches the subscriber.
    f.sql
        .batch_execute("INSERT INTO posts (id, owner, title) VALUES ('after', 'ann', 'live')")
        .await
        .unwrap();
    loop {
        let frame = ann.recv().await;
        assert_eq!(frame["type"], "changes", "{frame}");
        let ids: Vec<&serde_json::Value> = frame["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["row"]["id"])
            .collect();
        // The overlap with the snapshot (down1) may come first; Bob's row never does.
        assert!(!ids.contains(&&json!("down2")), "{frame}");
        if ids.contains(&&json!("after")) {
            break;
        }
    }
    relay.stop().await;
}
