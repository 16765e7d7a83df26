//! The down path against a real PostgreSQL: a subscriber gets a snapshot of its
//! scopes, then every upstream transaction (from plain SQL or another client's
//! upload) as one `changes` frame, filtered to its scopes; rows that leave its scope
//! arrive as deletes; checkpoints pass the LSN of its acknowledged uploads.

mod common;

use std::collections::HashMap;

use common::WsClient;
use keel_relay::protocol::parse_lsn;
use serde_json::{json, Value};

/// The versions a client holds, by (collection, key): what the documented rule
/// "apply a change only if it is newer than what you hold" needs.
type Held = HashMap<(String, String), i64>;

fn held_key(collection: &Value, key: &Value) -> (String, String) {
    (collection.as_str().unwrap().to_owned(), key.to_string())
}

/// Reads frames until a `changes` frame (checkpoints skipped).
async fn next_changes(client: &mut WsClient) -> Value {
    let frame = client.recv().await;
    assert_eq!(frame["type"], "changes", "{frame}");
    frame
}

/// The next `changes` frame with something newer than `held`, applying the
/// client's rule: a change at or below the held version is a re-delivery (the
/// snapshot and the live stream overlap by design) and is dropped.
async fn next_new_changes(client: &mut WsClient, held: &mut Held) -> Value {
    loop {
        let mut frame = next_changes(client).await;
        let changes: Vec<Value> = frame["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                let key = match c["op"].as_str().unwrap() {
                    "upsert" => json!({"id": c["row"]["id"]}),
                    "delete" => c["key"].clone(),
                    _ => return true,
                };
                let version = c["version"].as_i64().unwrap();
                let k = held_key(&c["collection"], &key);
                if held
                    .get(&k)
                    .is_some_and(|v| *v >= version && c["op"] == "upsert")
                {
                    return false;
                }
                held.insert(k, version);
                true
            })
            .cloned()
            .collect();
        if !changes.is_empty() {
            frame["changes"] = Value::Array(changes);
            return frame;
        }
    }
}

#[tokio::test]
async fn rows_written_with_plain_sql_reach_subscribers_within_their_scopes() {
    let Some(f) = common::fixture().await else {
        return;
    };
    f.sql
        .batch_execute(
            "INSERT INTO posts (id, owner, title, tags, cover) VALUES
               ('a1', 'ann', 'Ann''s', '{x,\"y z\"}', '\\x00ff'),
               ('b1', 'bob', 'Bob''s', NULL, NULL);
             INSERT INTO comment (id, post, owner, text) VALUES (1, 'b1', 'bob', 'hi');",
        )
        .await
        .unwrap();
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    ann.send(json!({"type": "subscribe"})).await;

    // The snapshot: Ann's post only, every comment (that scope has no filter).
    let mut snapshot: Vec<(String, Value)> = Vec::new();
    let done = loop {
        let frame = ann.recv().await;
        match frame["type"].as_str().unwrap() {
            "snapshot" => {
                for row in frame["rows"].as_array().unwrap() {
                    snapshot.push((
                        frame["collection"].as_str().unwrap().to_owned(),
                        row.clone(),
                    ));
                }
            }
            "snapshot_done" => break frame,
            other => panic!("unexpected {other}: {frame}"),
        }
    };
    assert!(parse_lsn(done["lsn"].as_str().unwrap()).is_some());
    let mut held = Held::new();
    for (collection, row) in &snapshot {
        held.insert(
            held_key(&json!(collection), &json!({"id": row["id"]})),
            row["keel_version"].as_i64().unwrap(),
        );
    }
    let ids: Vec<(&str, &Value)> = snapshot
        .iter()
        .map(|(c, r)| (c.as_str(), &r["id"]))
        .collect();
    assert_eq!(
        ids,
        [("blog.Post", &json!("a1")), ("blog.Comment", &json!(1))]
    );
    let a1 = &snapshot[0].1;
    assert_eq!(a1["tags"], json!(["x", "y z"]));
    assert_eq!(a1["cover"], json!([0, 255]), "bytea arrives as byte values");
    assert!(a1["keel_version"].as_i64().unwrap() > 0);
    assert!(a1.get("keel_created").is_none());

    // Bob's write first, then Ann's: Ann's is the next thing she receives.
    f.sql
        .batch_execute("INSERT INTO posts (id, owner, title) VALUES ('b2', 'bob', 'not for ann')")
        .await
        .unwrap();
    f.sql
        .batch_execute(
            "INSERT INTO posts (id, owner, title, tags, cover, likes) \
             VALUES ('a2', 'ann', 'from psql', '{p,q}', '\\x0a0b', 7)",
        )
        .await
        .unwrap();
    let frame = next_new_changes(&mut ann, &mut held).await;
    let changes = frame["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{frame}");
    assert_eq!(changes[0]["op"], "upsert");
    assert_eq!(changes[0]["collection"], "blog.Post");
    let row = &changes[0]["row"];
    assert_eq!(row["id"], "a2");
    assert_eq!(row["title"], "from psql");
    assert_eq!(row["likes"], 7);
    assert_eq!(row["pinned"], false);
    assert_eq!(row["tags"], json!(["p", "q"]));
    assert_eq!(row["cover"], json!([10, 11]));
    assert_eq!(row["rating"], Value::Null);
    let version: i64 = f
        .sql
        .query_one("SELECT keel_version FROM posts WHERE id = 'a2'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(changes[0]["version"], version);

    // One upstream transaction, one frame, in order; a row handed to Bob leaves
    // Ann's scope and reaches her as a delete.
    f.sql
        .batch_execute(
            "BEGIN;
             UPDATE posts SET title = 'edited' WHERE id = 'a1';
             UPDATE posts SET owner = 'bob' WHERE id = 'a2';
             INSERT INTO comment (id, post, owner, text) VALUES (2, 'a1', 'bob', 'nice');
             COMMIT;",
        )
        .await
        .unwrap();
    let frame = next_new_changes(&mut ann, &mut held).await;
    let changes = frame["changes"].as_array().unwrap();
    let summary: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| (c["op"].as_str().unwrap(), c["collection"].as_str().unwrap()))
        .collect();
    assert_eq!(
        summary,
        [
            ("upsert", "blog.Post"),
            ("delete", "blog.Post"),
            ("upsert", "blog.Comment")
        ],
        "{frame}"
    );
    assert_eq!(changes[0]["row"]["title"], "edited");
    assert_eq!(changes[1]["key"], json!({"id": "a2"}));

    f.sql
        .batch_execute("DELETE FROM posts WHERE id = 'a1'")
        .await
        .unwrap();
    let frame = next_new_changes(&mut ann, &mut held).await;
    assert_eq!(frame["changes"][0]["op"], "delete");
    assert_eq!(frame["changes"][0]["key"], json!({"id": "a1"}));

    f.sql.batch_execute("TRUNCATE comment").await.unwrap();
    let frame = next_new_changes(&mut ann, &mut held).await;
    assert_eq!(frame["changes"][0]["op"], "truncate", "{frame}");
}

#[tokio::test]
async fn one_clients_upload_reaches_another_and_checkpoints_pass_the_ack() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut tablet = WsClient::signed_in(&f.relay, "ann", "ann-tablet").await;
    tablet
        .send(json!({"type": "subscribe", "collections": ["blog.Post"]}))
        .await;
    assert_eq!(
        tablet.recv().await["type"],
        "snapshot_done",
        "nothing to snapshot yet"
    );
    let mut bob = WsClient::signed_in(&f.relay, "bob", "bob-phone").await;
    bob.send(json!({"type": "subscribe"})).await;
    assert_eq!(bob.recv().await["type"], "snapshot_done");

    let mut phone = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let ack = phone
        .upload(
            json!([{"seq": 1, "op": "insert", "collection": "blog.Post", "key": {"id": "p1"},
                        "fields": {"owner": "ann", "title": "from the phone"}}]),
        )
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let acked = parse_lsn(ack["lsn"].as_str().unwrap()).unwrap();

    let frame = next_changes(&mut tablet).await;
    assert_eq!(frame["changes"][0]["row"]["title"], "from the phone");
    assert_eq!(frame["changes"][0]["version"], ack["results"][0]["version"]);
    assert!(parse_lsn(frame["lsn"].as_str().unwrap()).unwrap() <= acked);
    // A checkpoint at or past the ack's LSN follows: the tablet knows it has
    // everything up to the phone's write.
    loop {
        let frame = tablet.recv_any().await;
        if frame["type"] == "checkpoint" {
            if parse_lsn(frame["lsn"].as_str().unwrap()).unwrap() >= acked {
                break;
            }
        } else {
            panic!("unexpected {frame}");
        }
    }
    // Bob never sees Ann's post: his next frames are checkpoints only, then his own row.
    f.sql
        .batch_execute("INSERT INTO posts (id, owner, title) VALUES ('b1', 'bob', 'bob''s')")
        .await
        .unwrap();
    let frame = next_changes(&mut bob).await;
    assert_eq!(frame["changes"].as_array().unwrap().len(), 1);
    assert_eq!(frame["changes"][0]["row"]["id"], "b1", "{frame}");
}
