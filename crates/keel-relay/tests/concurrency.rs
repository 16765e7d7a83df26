//! Many devices of one user incrementing one counter at once, through two relays,
//! with every third batch sent twice (as after a lost ack, the resend going through
//! the other relay): every increment counts exactly once.

mod common;

use common::{start_relay, WsClient};
use serde_json::{json, Value};

const DEVICES: i64 = 5;
const BATCHES: i64 = 20;
const OPS_PER_BATCH: i64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_with_resends_count_each_increment_once() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let (second, _) = start_relay(f.pg.url(), "second").await;
    f.sql
        .batch_execute("INSERT INTO posts (id, owner) VALUES ('p1', 'ann')")
        .await
        .unwrap();
    let addrs = [f.relay.addr, second.addr];
    let mut devices = Vec::new();
    for device in 0..DEVICES {
        devices.push(tokio::spawn(async move {
            let client_id = format!("device-{device}");
            let token = common::hs256("ann", 3600);
            let mut connections = Vec::new();
            for addr in addrs {
                connections.push(WsClient::connect_to(addr).await);
            }
            for c in &mut connections {
                assert_eq!(c.hello(&token, &client_id).await["type"], "welcome");
            }
            for batch in 0..BATCHES {
                let ops: Vec<Value> = (1..=OPS_PER_BATCH)
                    .map(|i| {
                        json!({"seq": batch * OPS_PER_BATCH + i, "op": "patch",
                               "collection": "blog.Post", "key": {"id": "p1"},
                               "deltas": {"likes": 1}})
                    })
                    .collect();
                let via = ((device + batch) % 2) as usize;
                let ack = connections[via].upload(Value::Array(ops.clone())).await;
                assert_eq!(ack["type"], "ack", "{ack}");
                if batch % 3 == 0 {
                    let replay = connections[1 - via].upload(Value::Array(ops)).await;
                    assert_eq!(replay["type"], "ack", "{replay}");
                    assert!(replay["results"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|r| r["replayed"] == true));
                }
            }
        }));
    }
    for device in devices {
        device.await.unwrap();
    }
    let likes: i64 = f
        .sql
        .query_one("SELECT likes FROM posts WHERE id = 'p1'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(likes, DEVICES * BATCHES * OPS_PER_BATCH);
    let ledger: i64 = f
        .sql
        .query_one("SELECT count(*) FROM keel_relay.op_ledger", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ledger, DEVICES * BATCHES * OPS_PER_BATCH);
    second.stop().await;
}
