//! The client receiving frames it cannot use, through a fault-injecting proxy
//! between it and a real relay: text that is not JSON, a frame cut in half, a
//! frame header announcing 8 GiB, a binary frame, a `changes` frame with one
//! readable change and one without its key, one with a change of a collection
//! nobody subscribed to, and a frame cut mid-way with the connection. Each gets a
//! typed `SyncEvent::BadFrame` (the cut, a connection error), nothing of the frame
//! reaches the local rows — a live query never sees the readable change that
//! travelled beside the bad one — and the client reconnects: the next row
//! written by SQL arrives and the next local write is uploaded.

mod sync_support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use keel_query::SyncEvent;
use serde_json::json;
use sync_support::proxy::{Injection, Proxy};
use sync_support::{eventually, local, object, open, options, start, WAIT};

/// The code the client reports for each injection (`None`: a cut connection,
/// which is no frame at all).
fn code(kind: Injection) -> Option<&'static str> {
    match kind {
        Injection::Garbage | Injection::TruncatedJson | Injection::MalformedChange => {
            Some("malformed_frame")
        }
        Injection::Oversized => Some("frame_too_large"),
        Injection::Binary => Some("binary_frame"),
        Injection::UnknownCollection => Some("unknown_collection"),
        Injection::CutMidFrame => None,
    }
}

#[test]
fn bad_frames_from_the_network_get_typed_errors_apply_nothing_and_the_client_recovers() {
    let Some(net) = start() else { return };
    let proxy = Proxy::start(Some(net.relay.as_ref().unwrap().addr), 0xF7A3E);
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("frames.db"));
    let schema = Arc::clone(db.schema());
    let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    let _live = db
        .query("blog.Post")
        .subscribe(move |u| {
            let reader = schema.reader("blog.Post").unwrap();
            for o in u.objects.iter() {
                let j = reader.read(&o.bytes).unwrap().to_json().unwrap();
                s2.lock()
                    .unwrap()
                    .insert(j["id"].as_str().unwrap().to_owned());
            }
        })
        .unwrap();
    let handle = db.sync(options(&proxy.url(), "ann")).unwrap();
    let events = handle.events();
    assert!(eventually(|| handle.current_status().connected));
    for (i, kind) in Injection::ALL.into_iter().enumerate() {
        proxy.inject(kind);
        // A relay frame for the injection to precede: a row written by SQL.
        net.exec(&format!(
            "INSERT INTO posts (id, owner, title) VALUES ('sql-{i}', 'ann', 'row {i}')"
        ));
        assert!(
            eventually(|| !proxy.injection_pending()),
            "{kind:?}: injected"
        );
        if let Some(code) = code(kind) {
            // Snapshot progress events may come between (a reconnect's snapshot).
            let event = loop {
                match events.recv_timeout(WAIT).expect("an event") {
                    SyncEvent::Snapshot(_) => continue,
                    other => break other,
                }
            };
            assert!(
                matches!(&event, SyncEvent::BadFrame { code: c, .. } if c == code),
                "{kind:?}: {event:?}"
            );
        }
        // Recovered: the row arrives, a local write is uploaded.
        assert!(
            eventually(|| local(&db, "blog.Post", &format!("sql-{i}")).is_some()),
            "{kind:?}: the row written by SQL arrives"
        );
        let post = object(
            &db,
            "blog.Post",
            json!({"id": format!("local-{i}"), "owner": "ann", "title": "mine"}),
        );
        db.write_blocking(move |t| t.upsert_bytes("blog.Post", post).map(|_| ()))
            .unwrap();
        assert!(handle.wait_uploaded_for(WAIT).unwrap(), "{kind:?}: uploads");
        assert_eq!(
            net.int(&format!(
                "SELECT count(*) FROM posts WHERE id = 'local-{i}'"
            )),
            1
        );
        assert!(handle.current_status().last_error.is_none() || handle.current_status().connected);
    }
    // No other event than snapshot progress: each bad frame was reported once.
    while let Ok(event) = events.try_recv() {
        assert!(matches!(event, SyncEvent::Snapshot(_)), "{event:?}");
    }
    let seen = seen.lock().unwrap();
    assert!(
        !seen.contains("ghost-malformed") && !seen.contains("ghost-unknown"),
        "a readable change beside a bad one is never applied: {seen:?}"
    );
    assert!(local(&db, "blog.Post", "ghost-malformed").is_none());
    assert!(local(&db, "blog.Post", "ghost-unknown").is_none());
    assert_eq!(proxy.injected(), Injection::ALL.len() as u64);
}
