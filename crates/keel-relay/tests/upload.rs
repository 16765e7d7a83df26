//! The up path over a real WebSocket into a real PostgreSQL: batches apply in one
//! transaction, exactly once per (client id, sequence), acknowledged with an LSN;
//! counters add deltas; server-wins fields and deletes follow their documented
//! rules; anything outside the scopes, malformed or refused by the database applies
//! nothing of its batch, and the connection stays usable.

mod common;

use std::time::Duration;

use common::{post, Fixture, WsClient};
use keel_relay::protocol::parse_lsn;
use serde_json::{json, Value};

async fn count(f: &Fixture, table: &str) -> i64 {
    f.sql
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

fn insert(seq: i64, id: &str, owner: &str, fields: Value) -> Value {
    let mut fields = fields;
    fields["owner"] = owner.into();
    json!({"seq": seq, "op": "insert", "collection": "blog.Post", "key": {"id": id}, "fields": fields})
}

#[tokio::test]
async fn a_batch_applies_once_and_is_acknowledged_with_its_lsn() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let before: String = f
        .sql
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let batch = json!([
        insert(1, "p1", "ann", json!({"title": "Hi", "likes": 2, "tags": ["a", "b"],
            "cover": [0, 255], "status": "Published", "location": {"x": 1.5, "y": 2.0}})),
        {"seq": 2, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
         "fields": {"title": "Hello"}, "deltas": {"likes": 3}, "base_version": 0},
        insert(3, "p2", "ann", json!({"title": "Second"})),
        {"seq": 4, "op": "delete", "collection": "blog.Post", "key": {"id": "p2"}, "base_version": 1_000_000_000},
    ]);
    let ack = ann.upload(batch.clone()).await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let lsn = parse_lsn(ack["lsn"].as_str().unwrap()).unwrap();
    assert!(
        lsn > parse_lsn(&before).unwrap(),
        "the ack's LSN is after the commit"
    );
    let outcomes: Vec<&str> = ack["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["applied"; 4]);
    let (owner, title, likes, _, version, _) = post(&f, "p1").await.unwrap();
    assert_eq!(
        (owner.as_str(), title.as_deref(), likes),
        ("ann", Some("Hello"), 5)
    );
    assert_eq!(ack["results"][1]["version"], version);
    assert!(post(&f, "p2").await.is_none());
    let row = f
        .sql
        .query_one(
            "SELECT tags, cover, status, location FROM posts WHERE id = 'p1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Vec<String>>(0), ["a", "b"]);
    assert_eq!(row.get::<_, Vec<u8>>(1), [0, 255]);
    assert_eq!(
        row.get::<_, i16>(2),
        1,
        "an enum name is stored as its value"
    );
    assert_eq!(row.get::<_, Value>(3), json!({"x": 1.5, "y": 2.0}));

    // The same batch again (the ack was lost, say): the ledger answers, nothing
    // applies twice — the counter still reads 5.
    let replay = ann.upload(batch).await;
    assert_eq!(replay["type"], "ack", "{replay}");
    assert!(replay["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["replayed"] == true));
    assert_eq!(
        replay["results"][1]["version"],
        ack["results"][1]["version"]
    );
    assert_eq!(post(&f, "p1").await.unwrap().2, 5);
    assert_eq!(count(&f, "keel_relay.op_ledger").await, 4);

    // Through another relay connection (as after a reconnect to another relay):
    // still exactly once, since the ledger is in PostgreSQL.
    let mut again = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let replay = again
        .upload(
            json!([{"seq": 2, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
                        "deltas": {"likes": 3}}]),
        )
        .await;
    assert_eq!(replay["results"][0]["replayed"], true, "{replay}");
    assert_eq!(post(&f, "p1").await.unwrap().2, 5);
    // Sequences may skip (a client drops a refused op), but never go back: below the
    // highest applied one and not in the ledger is refused, and nothing applies.
    let ahead = again
        .upload(json!([insert(10, "p10", "ann", json!({}))]))
        .await;
    assert_eq!(ahead["type"], "ack", "{ahead}");
    let regressed = again
        .upload(
            json!([{"seq": 7, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
                        "deltas": {"likes": 1}}]),
        )
        .await;
    assert_eq!(
        regressed["ops"][0]["reason"], "sequence_regressed",
        "{regressed}"
    );
    assert_eq!(post(&f, "p1").await.unwrap().2, 5);
}

#[tokio::test]
async fn counters_sum_server_wins_and_deletes_follow_their_rules() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut a = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let mut b = WsClient::signed_in(&f.relay, "ann", "ann-tablet").await;
    let ack = a
        .upload(json!([insert(1, "p1", "ann", json!({"likes": 0}))]))
        .await;
    let v1 = ack["results"][0]["version"].as_i64().unwrap();
    // Two devices increment offline and upload their deltas: they add up.
    for (client, seq) in [(&mut a, 2), (&mut b, 1)] {
        let ops: Vec<Value> = (0..10)
            .map(|i| {
                json!({"seq": seq * 100 + i, "op": "patch", "collection": "blog.Post",
                            "key": {"id": "p1"}, "deltas": {"likes": 1}, "base_version": v1})
            })
            .collect();
        assert_eq!(client.upload(Value::Array(ops)).await["type"], "ack");
    }
    assert_eq!(post(&f, "p1").await.unwrap().2, 20);
    // A counter patched with a value is refused: it would lose increments.
    let refused = a
        .upload(
            json!([{"seq": 300, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
                        "fields": {"likes": 99}}]),
        )
        .await;
    assert_eq!(
        refused["ops"][0]["reason"], "counter_needs_delta",
        "{refused}"
    );

    // Two devices both create p9 offline: the second insert merges, counters add.
    a.upload(json!([insert(
        301,
        "p9",
        "ann",
        json!({"likes": 2, "title": "A"})
    )]))
    .await;
    let ack = b
        .upload(json!([insert(
            201,
            "p9",
            "ann",
            json!({"likes": 3, "title": "B"})
        )]))
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let (_, title, likes, ..) = post(&f, "p9").await.unwrap();
    assert_eq!((title.as_deref(), likes), (Some("B"), 5));

    // server_wins: a patch based on a stale version keeps the server's value.
    let current = post(&f, "p1").await.unwrap().4;
    let stale = b
        .upload(
            json!([{"seq": 202, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
                        "fields": {"pinned": true, "title": "t"}, "base_version": v1}]),
        )
        .await;
    assert_eq!(
        stale["results"][0]["ignored_fields"],
        json!(["pinned"]),
        "{stale}"
    );
    assert!(!post(&f, "p1").await.unwrap().3);
    let current_after = post(&f, "p1").await.unwrap().4;
    assert!(current_after > current);
    let fresh = b
        .upload(
            json!([{"seq": 203, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
                        "fields": {"pinned": true}, "base_version": current_after}]),
        )
        .await;
    assert_eq!(fresh["results"][0]["outcome"], "applied", "{fresh}");
    assert!(post(&f, "p1").await.unwrap().3);

    // Delete, then re-insert the same key: a delete based on the old incarnation
    // does not remove the new one; a patch of a deleted row does not resurrect it.
    let seen = post(&f, "p1").await.unwrap().4;
    let gone = a
        .upload(
            json!([{"seq": 302, "op": "delete", "collection": "blog.Post", "key": {"id": "p1"},
                        "base_version": seen}]),
        )
        .await;
    assert_eq!(gone["results"][0]["outcome"], "applied");
    let patch_gone = b
        .upload(
            json!([{"seq": 204, "op": "patch", "collection": "blog.Post", "key": {"id": "p1"},
                        "fields": {"title": "late"}, "base_version": seen}]),
        )
        .await;
    assert_eq!(
        patch_gone["results"][0]["reason"], "row_gone",
        "{patch_gone}"
    );
    assert!(post(&f, "p1").await.is_none(), "no resurrection");
    a.upload(json!([insert(
        303,
        "p1",
        "ann",
        json!({"title": "reborn"})
    )]))
    .await;
    let stale_delete = b
        .upload(
            json!([{"seq": 205, "op": "delete", "collection": "blog.Post", "key": {"id": "p1"},
                        "base_version": seen}]),
        )
        .await;
    assert_eq!(
        stale_delete["results"][0]["reason"], "stale_delete",
        "{stale_delete}"
    );
    assert_eq!(
        post(&f, "p1").await.unwrap().1.as_deref(),
        Some("reborn"),
        "no loss"
    );
}

#[tokio::test]
async fn out_of_scope_and_rejected_ops_refuse_the_whole_batch() {
    let Some(f) = common::fixture().await else {
        return;
    };
    f.sql
        .batch_execute("INSERT INTO posts (id, owner, title) VALUES ('bobs', 'bob', 'Bob''s')")
        .await
        .unwrap();
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let cases = [
        (
            "another user's row",
            json!({"seq": 2, "op": "patch", "collection": "blog.Post",
            "key": {"id": "bobs"}, "fields": {"title": "mine now"}}),
            "out_of_scope",
        ),
        (
            "a row made for another user",
            insert(2, "p2", "bob", json!({})),
            "out_of_scope",
        ),
        (
            "moving a row out of the scope",
            json!({"seq": 2, "op": "patch", "collection": "blog.Post",
            "key": {"id": "p1"}, "fields": {"owner": "bob"}}),
            "out_of_scope",
        ),
        (
            "deleting another user's row",
            json!({"seq": 2, "op": "delete", "collection": "blog.Post",
            "key": {"id": "bobs"}, "base_version": 1_000_000}),
            "out_of_scope",
        ),
    ];
    for (what, op, reason) in cases {
        let answer = ann
            .upload(json!([
                insert(1, "p1", "ann", json!({"title": "fine"})),
                op
            ]))
            .await;
        assert_eq!(answer["type"], "upload_refused", "{what}: {answer}");
        assert_eq!(
            answer["ops"].as_array().unwrap().len(),
            1,
            "{what}: {answer}"
        );
        assert_eq!(answer["ops"][0]["index"], 1, "{what}");
        assert_eq!(answer["ops"][0]["reason"], reason, "{what}: {answer}");
        assert!(
            post(&f, "p1").await.is_none(),
            "{what}: nothing of the batch applied"
        );
        assert_eq!(post(&f, "bobs").await.unwrap().1.as_deref(), Some("Bob's"));
    }
    assert_eq!(count(&f, "keel_relay.op_ledger").await, 0);

    // A validation hook in PostgreSQL (a CHECK constraint) refuses one op: typed,
    // named, and nothing of the batch applied.
    f.sql
        .batch_execute(
            "ALTER TABLE posts ADD CONSTRAINT polite CHECK (title IS DISTINCT FROM 'rude')",
        )
        .await
        .unwrap();
    let answer = ann
        .upload(json!([
            insert(1, "p1", "ann", json!({"title": "fine"})),
            insert(2, "p2", "ann", json!({"title": "rude"}))
        ]))
        .await;
    assert_eq!(answer["type"], "upload_refused", "{answer}");
    assert_eq!(answer["ops"][0]["reason"], "rejected_by_database");
    assert_eq!(answer["ops"][0]["seq"], 2);
    assert!(
        answer["ops"][0]["message"]
            .as_str()
            .unwrap()
            .contains("23514"),
        "{answer}"
    );
    assert!(post(&f, "p1").await.is_none());

    // Another user cannot take over this client id's ledger.
    let ack = ann.upload(json!([insert(1, "p1", "ann", json!({}))])).await;
    assert_eq!(ack["type"], "ack");
    let mut bob = WsClient::signed_in(&f.relay, "bob", "ann-phone").await;
    let answer = bob.upload(json!([insert(9, "b9", "bob", json!({}))])).await;
    assert_eq!(answer["ops"][0]["reason"], "client_id_taken", "{answer}");
}

#[tokio::test]
async fn bad_frames_and_ops_get_typed_errors_and_the_connection_recovers() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut ann = WsClient::connect(&f.relay).await;
    // Before hello.
    let answer = ann.upload(json!([insert(1, "p1", "ann", json!({}))])).await;
    assert_eq!(answer["code"], "not_authenticated");
    let welcome = ann.hello(&common::hs256("ann", 600), "ann-phone").await;
    assert_eq!(welcome["type"], "welcome");

    let good = json!({"type": "upload", "ops": [insert(1, "p1", "ann", json!({"title": "x"}))]})
        .to_string();
    // Truncated: the first half of a valid frame.
    ann.send_text(good[..good.len() / 2].to_owned()).await;
    assert_eq!(ann.recv().await["code"], "malformed_frame");
    // Not a known frame type; not JSON at all; binary.
    ann.send(json!({"type": "explode"})).await;
    assert_eq!(ann.recv().await["code"], "malformed_frame");
    ann.send_text("\u{0}\u{1}garbage".into()).await;
    assert_eq!(ann.recv().await["code"], "malformed_frame");
    ann.send_binary(vec![1, 2, 3]).await;
    assert_eq!(ann.recv().await["code"], "binary_frame");
    // Larger than max_frame_bytes (64 KiB in the fixture).
    let big = json!({"type": "upload", "ops": [insert(1, "p1", "ann",
        json!({"title": "x".repeat(100_000)}))]});
    ann.send(big).await;
    assert_eq!(ann.recv().await["code"], "frame_too_large");
    // More ops than max_batch_ops.
    let many: Vec<Value> = (1..=101)
        .map(|i| insert(i, &format!("p{i}"), "ann", json!({})))
        .collect();
    assert_eq!(
        ann.upload(Value::Array(many)).await["code"],
        "batch_too_large"
    );

    let op_cases = [
        (json!({"op": "insert"}), "malformed_op"),
        (
            json!({"seq": 1, "op": "upsert", "collection": "blog.Post", "key": {"id": "p1"}}),
            "malformed_op",
        ),
        (
            json!({"seq": 1, "op": "insert", "collection": "blog.Post", "key": {}}),
            "malformed_op",
        ),
        (
            json!({"seq": 1, "op": "insert", "collection": "blog.Nope", "key": {"id": "p1"}}),
            "unknown_collection",
        ),
        (
            json!({"seq": 1, "op": "insert", "collection": "blog.Note", "key": {"id": "p1"}}),
            "unknown_collection",
        ),
        (
            insert(1, "p1", "ann", json!({"colour": "red"})),
            "unknown_field",
        ),
        (
            insert(1, "p1", "ann", json!({"likes": "many"})),
            "invalid_value",
        ),
        (
            insert(1, "p1", "ann", json!({"status": 300})),
            "invalid_value",
        ),
        (
            insert(1, "p1", "ann", json!({"status": "Lost"})),
            "invalid_value",
        ),
        (
            insert(1, "p1", "ann", json!({"cover": [256]})),
            "invalid_value",
        ),
        (
            insert(1, "p1", "ann", json!({"pinned": null})),
            "invalid_value",
        ),
        (
            insert(1, "p1", "ann", json!({"scores": [1, 2.5]})),
            "invalid_value",
        ),
        (
            json!({"seq": 1, "op": "insert", "collection": "blog.Post", "key": {"id": null}}),
            "invalid_value",
        ),
    ];
    for (op, reason) in op_cases {
        let answer = ann.upload(json!([op])).await;
        assert_eq!(answer["type"], "upload_refused", "{op}: {answer}");
        assert_eq!(answer["ops"][0]["reason"], reason, "{op}: {answer}");
    }
    assert_eq!(count(&f, "posts").await, 0, "nothing applied");

    // The same connection still works.
    ann.send_text(good).await;
    let ack = ann.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    assert_eq!(post(&f, "p1").await.unwrap().1.as_deref(), Some("x"));
}

fn patch_title(seq: i64, id: &str, title: &str) -> Value {
    json!({"seq": seq, "op": "patch", "collection": "blog.Post", "key": {"id": id},
        "fields": {"title": title}, "base_version": 0})
}

#[tokio::test]
async fn a_batch_that_loses_a_deadlock_is_applied_again_not_refused() {
    // Two writers locking the same rows in opposite orders deadlock, and
    // PostgreSQL rolls one of them back, to be run again. When that is the
    // relay's batch, the relay runs it again itself rather than telling the
    // client to come back later.
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let ack = ann
        .upload(json!([
            insert(1, "p1", "ann", json!({"title": "a"})),
            insert(2, "p2", "ann", json!({"title": "b"})),
        ]))
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    // Another backend holds p2, and never looks for the deadlock itself, so
    // the relay's backend is the one rolled back.
    let other = common::connect(f.pg.url()).await;
    other
        .batch_execute(
            "SET deadlock_timeout = '1h'; BEGIN; UPDATE posts SET title = 'other' WHERE id = 'p2'",
        )
        .await
        .unwrap();
    let upload = tokio::spawn(async move {
        ann.upload(json!([
            patch_title(3, "p1", "mine"),
            patch_title(4, "p2", "mine")
        ]))
        .await
    });
    // Once the batch holds p1 and waits for p2, the other backend asks for p1.
    loop {
        let waiting: i64 = f
            .sql
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other_done = tokio::spawn(async move {
        other
            .batch_execute("UPDATE posts SET title = 'other' WHERE id = 'p1'; COMMIT")
            .await
    });
    let answer = upload.await.unwrap();
    other_done.await.unwrap().unwrap();
    assert_eq!(answer["type"], "ack", "{answer}");
    // The other backend committed first; the batch applied after it.
    for id in ["p1", "p2"] {
        let (_, title, ..) = post(&f, id).await.unwrap();
        assert_eq!(title.as_deref(), Some("mine"), "{id}");
    }
}
