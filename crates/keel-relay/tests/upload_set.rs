//! The set-wise apply of a batch against a real PostgreSQL: mixed kinds and
//! collections in one batch, one row written many times in one batch (folded
//! counters, a server-wins patch after a write, delete then re-insert), constraint
//! failures in the middle of a batch named by the right operation — including one
//! that only an intermediate row of a folded run would break — and the ledger
//! pruned below the client's `unacked_from`.

mod common;

use common::{post, Fixture, WsClient};
use serde_json::{json, Value};

async fn count(f: &Fixture, sql: &str) -> i64 {
    f.sql.query_one(sql, &[]).await.unwrap().get(0)
}

fn insert(seq: i64, id: &str, fields: Value) -> Value {
    let mut fields = fields;
    fields["owner"] = "ann".into();
    json!({"seq": seq, "op": "insert", "collection": "blog.Post", "key": {"id": id}, "fields": fields})
}

fn patch(seq: i64, id: &str, fields: Value, deltas: Value, base: i64) -> Value {
    json!({"seq": seq, "op": "patch", "collection": "blog.Post", "key": {"id": id},
           "fields": fields, "deltas": deltas, "base_version": base})
}

fn delete(seq: i64, id: &str, base: i64) -> Value {
    json!({"seq": seq, "op": "delete", "collection": "blog.Post", "key": {"id": id},
           "base_version": base})
}

fn comment(seq: i64, id: i64, post: &str, text: &str) -> Value {
    json!({"seq": seq, "op": "insert", "collection": "blog.Comment", "key": {"id": id},
           "fields": {"post": post, "owner": "ann", "text": text}})
}

#[tokio::test]
async fn a_batch_with_every_kind_and_repeated_rows_applies_as_one_by_one_would() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let ack = ann
        .upload(json!([
            insert(1, "old", json!({"title": "old", "likes": 1})),
            insert(2, "gone", json!({})),
        ]))
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let old_v = ack["results"][0]["version"].as_i64().unwrap();
    let gone_v = ack["results"][1]["version"].as_i64().unwrap();

    // Kinds and collections interleaved; p1 written five times, `old` three.
    let ack = ann
        .upload(json!([
            insert(10, "p1", json!({"title": "a", "likes": 2})),
            insert(11, "p2", json!({"title": "b"})),
            comment(12, 1, "p1", "first"),
            patch(13, "p1", json!({}), json!({"likes": 3}), 0),
            patch(
                14,
                "old",
                json!({"title": "old 2"}),
                json!({"likes": 10}),
                old_v
            ),
            patch(15, "p1", json!({"title": "a2"}), json!({"likes": 4}), 0),
            patch(16, "old", json!({}), json!({"likes": -1}), old_v),
            // A server-wins patch based on the version before this batch: `old`
            // was written since, so the server keeps its value.
            patch(17, "old", json!({"pinned": true}), json!({}), old_v),
            delete(18, "gone", gone_v),
            // A patch of the row deleted just before: gone, never resurrected.
            patch(19, "gone", json!({"title": "late"}), json!({}), gone_v),
            comment(20, 2, "p2", "second"),
            delete(21, "p2", 1_000_000),
            patch(22, "p1", json!({}), json!({"likes": 5}), 0),
            // Deleted and inserted again in one batch: a new incarnation.
            delete(23, "old", 1_000_000),
            insert(24, "old", json!({"title": "reborn", "likes": 7})),
            patch(25, "old", json!({}), json!({"likes": 1}), 0),
        ]))
        .await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let results = ack["results"].as_array().unwrap();
    assert_eq!(results.len(), 16);
    let seqs: Vec<i64> = results.iter().map(|r| r["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (10..=25).collect::<Vec<_>>(),
        "results in batch order"
    );
    let by_seq = |seq: i64| &results[(seq - 10) as usize];

    let (_, title, likes, _, p1_v, _) = post(&f, "p1").await.unwrap();
    assert_eq!((title.as_deref(), likes), (Some("a2"), 2 + 3 + 4 + 5));
    assert_eq!(
        by_seq(22)["version"].as_i64(),
        Some(p1_v),
        "the last write's version"
    );
    assert!(by_seq(10)["version"].as_i64().unwrap() <= p1_v);

    assert_eq!(by_seq(17)["outcome"], "applied");
    assert_eq!(by_seq(17)["ignored_fields"], json!(["pinned"]), "{ack}");
    assert_eq!(by_seq(18)["outcome"], "applied");
    assert_eq!(by_seq(19)["outcome"], "skipped");
    assert_eq!(by_seq(19)["reason"], "row_gone");
    assert!(post(&f, "gone").await.is_none());
    assert!(post(&f, "p2").await.is_none());
    assert_eq!(by_seq(21)["outcome"], "applied");

    let (_, title, likes, pinned, old_now, created) = post(&f, "old").await.unwrap();
    assert_eq!(
        (title.as_deref(), likes, pinned),
        (Some("reborn"), 8, false)
    );
    assert!(created > old_v, "a new incarnation");
    assert_eq!(by_seq(25)["version"].as_i64(), Some(old_now));
    assert_eq!(
        count(&f, "SELECT count(*) FROM comment").await,
        2,
        "both comments"
    );
    assert_eq!(
        count(&f, "SELECT count(*) FROM keel_relay.op_ledger").await,
        18
    );

    // Sent again (a lost ack): answered from the ledger, nothing applied twice.
    let again = ann
        .upload(json!([
            insert(10, "p1", json!({"title": "a", "likes": 2})),
            patch(13, "p1", json!({}), json!({"likes": 3}), 0),
        ]))
        .await;
    assert_eq!(again["results"][1]["replayed"], true, "{again}");
    assert_eq!(again["results"][1]["version"], by_seq(13)["version"]);
    assert_eq!(post(&f, "p1").await.unwrap().2, 14);

    // A constraint failure in the middle of a long batch names its operation,
    // and nothing of the batch applies.
    f.sql
        .batch_execute(
            "ALTER TABLE posts ADD CONSTRAINT polite CHECK (title IS DISTINCT FROM 'rude')",
        )
        .await
        .unwrap();
    let mut ops: Vec<Value> = (0..20)
        .map(|i| insert(100 + i, &format!("m{i}"), json!({"title": "fine"})))
        .collect();
    ops[13] = insert(113, "m13", json!({"title": "rude"}));
    ops.push(patch(120, "p1", json!({}), json!({"likes": 1}), 0));
    let refused = ann.upload(Value::Array(ops)).await;
    assert_eq!(refused["type"], "upload_refused", "{refused}");
    assert_eq!(refused["ops"].as_array().unwrap().len(), 1, "{refused}");
    assert_eq!(refused["ops"][0]["index"], 13);
    assert_eq!(refused["ops"][0]["seq"], 113);
    assert_eq!(refused["ops"][0]["reason"], "rejected_by_database");
    assert!(refused["ops"][0]["message"]
        .as_str()
        .unwrap()
        .contains("23514"));
    assert_eq!(
        count(&f, "SELECT count(*) FROM posts WHERE id LIKE 'm%'").await,
        0
    );
    assert_eq!(post(&f, "p1").await.unwrap().2, 14);

    // The same in a run of patches of one row: the failing one is named.
    let refused = ann
        .upload(json!([
            patch(130, "p1", json!({"title": "ok"}), json!({"likes": 1}), 0),
            patch(131, "p1", json!({"title": "rude"}), json!({}), 0),
            patch(132, "p1", json!({"title": "fine"}), json!({}), 0),
        ]))
        .await;
    assert_eq!(refused["ops"][0]["seq"], 131, "{refused}");
    assert_eq!(post(&f, "p1").await.unwrap().1.as_deref(), Some("a2"));

    // A check on a counter: one increment after another could never break it
    // on the final row, but the intermediate row breaks it, as one by one.
    f.sql
        .batch_execute("ALTER TABLE posts ADD CONSTRAINT positive CHECK (likes >= 0)")
        .await
        .unwrap();
    let refused = ann
        .upload(json!([
            patch(140, "p1", json!({}), json!({"likes": -20}), 0),
            patch(141, "p1", json!({}), json!({"likes": 20}), 0),
        ]))
        .await;
    assert_eq!(refused["type"], "upload_refused", "{refused}");
    assert_eq!(refused["ops"][0]["seq"], 140, "{refused}");
    assert_eq!(post(&f, "p1").await.unwrap().2, 14);

    // Moving a row out of the scope and back in one batch: refused at the move.
    let refused = ann
        .upload(json!([
            patch(150, "p1", json!({"owner": "bob"}), json!({}), 0),
            patch(151, "p1", json!({"owner": "ann"}), json!({}), 0),
        ]))
        .await;
    assert_eq!(refused["type"], "upload_refused", "{refused}");
    assert_eq!(refused["ops"][0]["seq"], 150, "{refused}");
    assert_eq!(refused["ops"][0]["reason"], "out_of_scope");
    assert_eq!(post(&f, "p1").await.unwrap().0, "ann");
}

#[tokio::test]
async fn the_ledger_forgets_what_the_client_has_had_answered() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut ann = WsClient::signed_in(&f.relay, "ann", "ann-phone").await;
    let mut tablet = WsClient::signed_in(&f.relay, "ann", "ann-tablet").await;
    let ledger = |client: &'static str| {
        format!("SELECT count(*) FROM keel_relay.op_ledger WHERE client_id = '{client}'")
    };
    let upload = |ops: Value, unacked_from: Option<i64>| {
        let mut frame = json!({"type": "upload", "ops": ops});
        if let Some(u) = unacked_from {
            frame["unacked_from"] = u.into();
        }
        frame
    };
    ann.send(upload(
        json!([
            insert(1, "p1", json!({})),
            insert(2, "p2", json!({})),
            insert(3, "p3", json!({}))
        ]),
        None,
    ))
    .await;
    assert_eq!(ann.recv().await["type"], "ack");
    tablet
        .send(upload(json!([insert(1, "t1", json!({}))]), Some(1)))
        .await;
    assert_eq!(tablet.recv().await["type"], "ack");
    assert_eq!(count(&f, &ledger("ann-phone")).await, 3, "no claim: kept");

    // The next batch says every seq below 4 was answered: those rows go.
    ann.send(upload(
        json!([
            patch(4, "p1", json!({"title": "x"}), json!({}), 0),
            patch(5, "p2", json!({"title": "y"}), json!({}), 0)
        ]),
        Some(4),
    ))
    .await;
    assert_eq!(ann.recv().await["type"], "ack");
    let seqs: Vec<i64> = f
        .sql
        .query(
            "SELECT seq FROM keel_relay.op_ledger WHERE client_id = 'ann-phone' ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(seqs, vec![4, 5]);
    assert_eq!(
        count(&f, &ledger("ann-tablet")).await,
        1,
        "another client's rows stay"
    );

    // What is still in the ledger replays; a pruned seq sent again is refused,
    // never applied twice.
    ann.send(upload(
        json!([patch(5, "p2", json!({"title": "y"}), json!({}), 0)]),
        Some(5),
    ))
    .await;
    let replay = ann.recv().await;
    assert_eq!(replay["results"][0]["replayed"], true, "{replay}");
    let regressed = ann.upload(json!([insert(2, "p2", json!({}))])).await;
    assert_eq!(
        regressed["ops"][0]["reason"], "sequence_regressed",
        "{regressed}"
    );

    // A claim past the batch's own operations never drops their rows.
    ann.send(upload(
        json!([patch(6, "p3", json!({"title": "z"}), json!({}), 0)]),
        Some(100),
    ))
    .await;
    assert_eq!(ann.recv().await["type"], "ack");
    let seqs: Vec<i64> = f
        .sql
        .query(
            "SELECT seq FROM keel_relay.op_ledger WHERE client_id = 'ann-phone' ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(seqs, vec![6]);
    assert_eq!(post(&f, "p3").await.unwrap().1.as_deref(), Some("z"));
}
