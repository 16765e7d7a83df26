//! The sync client against a real PostgreSQL and a real relay (in this process):
//! rows written by SQL reach live queries as row diffs, two clients converge,
//! offline writes upload once, counters from two clients sum, an out-of-scope
//! write is refused and rolled back with a typed event, a delete racing a
//! re-insert keeps the re-inserted row, and a reconnect's fresh snapshot diffs
//! only what changed. Without PostgreSQL binaries each test prints the skipped
//! line and passes.

mod sync_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel::storage::rusqlite;
use keel_query::{QueryUpdate, SyncEvent};
use serde_json::json;
use sync_support::{eventually, insert, like, local, object, open, start, sync};

/// The outbox of the file at `path`, read by a connection of its own: how many
/// operations it holds, and the highest number among them.
fn outbox(path: &std::path::Path) -> (i64, Option<i64>) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*), max(seq) FROM keel_sync_outbox", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

#[test]
fn a_row_written_by_sql_reaches_a_live_query_as_a_row_diff() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("a.db"));
    let updates: Arc<Mutex<Vec<QueryUpdate>>> = Arc::default();
    let u2 = Arc::clone(&updates);
    let _live = db
        .query("blog.Post")
        .subscribe(move |u| u2.lock().unwrap().push(u))
        .unwrap();
    let handle = sync(&db, &net.url(), "ann");
    assert!(eventually(|| handle.current_status().connected));
    net.exec("INSERT INTO posts (id, owner, title) VALUES ('s1', 'ann', 'from SQL')");
    // Bob's row is outside ann's scope: it never arrives.
    net.exec("INSERT INTO posts (id, owner, title) VALUES ('s2', 'bob', 'not yours')");
    assert!(eventually(|| updates.lock().unwrap().iter().any(|u| !u
        .diff
        .inserted
        .is_empty()
        && u.objects.len() == 1)));
    assert_eq!(local(&db, "blog.Post", "s1").unwrap()["title"], "from SQL");
    assert!(local(&db, "blog.Post", "s2").is_none());
    // An update by SQL arrives as an update of that row, not a new list.
    net.exec("UPDATE posts SET title = 'edited' WHERE id = 's1'");
    assert!(eventually(|| updates.lock().unwrap().last().is_some_and(
        |u| u.diff.updated.to_vec() == vec![0] && u.diff.inserted.is_empty()
    )));
    assert_eq!(local(&db, "blog.Post", "s1").unwrap()["title"], "edited");
    assert!(handle.current_status().last_synced_lsn.is_some());
}

#[test]
fn two_clients_converge() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let a = open(&dir.path().join("a.db"));
    let b = open(&dir.path().join("b.db"));
    let ha = sync(&a, &net.url(), "ann");
    let _hb = sync(&b, &net.url(), "ann");
    insert(
        &a,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "by A", "tags": ["x"]}),
    );
    ha.wait_uploaded().unwrap();
    assert!(eventually(
        || local(&b, "blog.Post", "p1").is_some_and(|p| p["title"] == "by A")
    ));
    assert_eq!(local(&b, "blog.Post", "p1").unwrap()["tags"], json!(["x"]));
    // B edits one field, A edits another: both win.
    b.write_blocking(|t| {
        t.change_values(
            "blog.Post",
            &["p1".into()],
            &[("title".into(), "by B".into())],
        )
        .map(|_| ())
    })
    .unwrap();
    a.write_blocking(|t| {
        t.change_values(
            "blog.Post",
            &["p1".into()],
            &[("rating".into(), 4.5.into())],
        )
        .map(|_| ())
    })
    .unwrap();
    let converged = |db: &keel_query::Database| {
        local(db, "blog.Post", "p1").is_some_and(|p| p["title"] == "by B" && p["rating"] == 4.5)
    };
    assert!(eventually(|| converged(&a) && converged(&b)));
    assert_eq!(net.int("SELECT count(*) FROM posts"), 1);
}

/// Needs no server: nothing listens at the URL, so the client only retries.
#[test]
fn a_write_right_after_a_pause_is_counted_in_pending_operations() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("a.db"));
    let handle = sync(&db, &format!("ws://127.0.0.1:{port}/sync"), "ann");
    handle.pause();
    // At once: the paused client counts at most every 50 ms, and a commit in
    // the first 50 ms must be counted too, later, not dropped.
    insert(
        &db,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "paused"}),
    );
    assert!(eventually(|| handle.current_status().pending_ops == 1));
}

#[test]
fn offline_writes_queue_and_upload_exactly_once_after_reconnect() {
    let Some(mut net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let db = open(&path);
    // Written before any sync ran: the outbox holds them.
    insert(
        &db,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "offline"}),
    );
    for _ in 0..10 {
        like(&db, "p1", 1);
    }
    // The relay is down: the client keeps retrying.
    let url = net.url();
    net.stop_relay();
    let handle = sync(&db, &url, "ann");
    assert!(eventually(|| handle.current_status().last_error.is_some()));
    assert_eq!(handle.current_status().pending_ops, 11);
    drop(handle);
    net.start_relay();
    let handle = sync(&db, &net.url(), "ann");
    handle.wait_uploaded().unwrap();
    assert_eq!(net.int("SELECT likes FROM posts WHERE id = 'p1'"), 10);
    // A second session (a restart) sends nothing again.
    drop(handle);
    let handle = sync(&db, &net.url(), "ann");
    assert!(eventually(|| handle.current_status().connected));
    like(&db, "p1", 1);
    handle.wait_uploaded().unwrap();
    assert_eq!(net.int("SELECT likes FROM posts WHERE id = 'p1'"), 11);
    // Twelve operations, numbered 1..=12; the last upload said every one below
    // 12 was answered, so the relay's ledger kept only that one.
    assert_eq!(net.int("SELECT max(seq) FROM keel_relay.op_ledger"), 12);
    assert_eq!(
        net.int("SELECT count(*) FROM keel_relay.op_ledger"),
        1,
        "the ledger is pruned below the client's unacked_from"
    );
    assert!(eventually(
        || local(&db, "blog.Post", "p1").is_some_and(|p| p["likes"] == 11)
    ));
    assert_eq!(handle.current_status().pending_ops, 0);
}

#[test]
fn counter_increments_from_two_clients_sum() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let a = open(&dir.path().join("a.db"));
    let b = open(&dir.path().join("b.db"));
    let ha = sync(&a, &net.url(), "ann");
    let hb = sync(&b, &net.url(), "ann");
    insert(&a, "blog.Post", json!({"id": "p1", "owner": "ann"}));
    ha.wait_uploaded().unwrap();
    assert!(eventually(|| local(&b, "blog.Post", "p1").is_some()));
    let ta = std::thread::spawn({
        let a = a.clone();
        move || (0..50).for_each(|_| like(&a, "p1", 1))
    });
    let tb = std::thread::spawn({
        let b = b.clone();
        move || (0..50).for_each(|_| like(&b, "p1", 2))
    });
    ta.join().unwrap();
    tb.join().unwrap();
    ha.wait_uploaded().unwrap();
    hb.wait_uploaded().unwrap();
    assert_eq!(net.int("SELECT likes FROM posts WHERE id = 'p1'"), 150);
    assert!(eventually(|| {
        local(&a, "blog.Post", "p1").is_some_and(|p| p["likes"] == 150)
            && local(&b, "blog.Post", "p1").is_some_and(|p| p["likes"] == 150)
    }));
}

#[test]
fn an_out_of_scope_upload_is_refused_rolled_back_and_named() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("a.db"));
    let handle = sync(&db, &net.url(), "ann");
    let events = handle.events();
    let mine = object(&db, "blog.Post", json!({"id": "ok", "owner": "ann"}));
    let theirs = object(&db, "blog.Post", json!({"id": "bad", "owner": "bob"}));
    db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", mine)?;
        t.insert_bytes("blog.Post", theirs).map(|_| ())
    })
    .unwrap();
    // Snapshot progress comes first (an empty snapshot: its start and end).
    let event = loop {
        match events.recv_timeout(sync_support::WAIT).expect("an event") {
            SyncEvent::Snapshot(_) => continue,
            other => break other,
        }
    };
    let SyncEvent::Refused { ops } = event else {
        panic!("expected a refusal, got {event:?}")
    };
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(
        (
            ops[0].collection.as_str(),
            ops[0].key.as_str(),
            ops[0].op.as_str(),
            ops[0].reason.as_str()
        ),
        ("blog.Post", r#"{"id":"bad"}"#, "insert", "out_of_scope")
    );
    // Rolled back locally; the rest went up alone.
    assert!(local(&db, "blog.Post", "bad").is_none());
    handle.wait_uploaded().unwrap();
    assert_eq!(net.int("SELECT count(*) FROM posts WHERE id = 'ok'"), 1);
    assert_eq!(net.int("SELECT count(*) FROM posts WHERE id = 'bad'"), 0);
    assert!(local(&db, "blog.Post", "ok").is_some());
}

#[test]
fn a_delete_racing_a_reinsert_of_the_same_key_keeps_the_new_row() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let a = open(&dir.path().join("a.db"));
    let b = open(&dir.path().join("b.db"));
    let ha = sync(&a, &net.url(), "ann");
    let hb = sync(&b, &net.url(), "ann");
    insert(
        &a,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "first"}),
    );
    ha.wait_uploaded().unwrap();
    assert!(eventually(|| local(&b, "blog.Post", "p1").is_some()));
    assert!(eventually(
        || local(&a, "blog.Post", "p1").is_some() && a.query("blog.Post").count().unwrap() == 1
    ));
    // A goes offline and deletes the row it saw.
    ha.pause();
    assert!(eventually(|| !ha.current_status().connected));
    a.write_blocking(|t| t.delete_key("blog.Post", &["p1".into()]).map(|_| ()))
        .unwrap();
    // Meanwhile B deletes it and inserts the key again: a new incarnation.
    b.write_blocking(|t| t.delete_key("blog.Post", &["p1".into()]).map(|_| ()))
        .unwrap();
    hb.wait_uploaded().unwrap();
    let again = object(
        &b,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "second"}),
    );
    b.write_blocking(move |t| t.insert_bytes("blog.Post", again).map(|_| ()))
        .unwrap();
    hb.wait_uploaded().unwrap();
    ha.resume();
    ha.wait_uploaded().unwrap();
    // A's delete named the incarnation it had seen: the re-inserted row survives
    // (`stale_delete`), and both devices show it.
    assert_eq!(net.int("SELECT count(*) FROM posts WHERE id = 'p1'"), 1);
    let on = |db: &keel_query::Database| {
        local(db, "blog.Post", "p1").is_some_and(|p| p["title"] == "second")
    };
    assert!(eventually(|| on(&a) && on(&b)));
}

#[test]
fn a_reconnect_snapshot_diffs_only_changed_rows_and_keeps_pending_writes() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("a.db"));
    for i in 0..5 {
        net.exec(&format!(
            "INSERT INTO posts (id, owner, title) VALUES ('p{i}', 'ann', 't{i}')"
        ));
    }
    let handle = sync(&db, &net.url(), "ann");
    assert!(eventually(|| db.query("blog.Post").count().unwrap() == 5));
    assert!(eventually(|| !handle.current_status().downloading));
    handle.pause();
    assert!(eventually(|| !handle.current_status().connected));
    // Offline: the server changes one row and deletes one; the client writes one.
    net.exec("UPDATE posts SET title = 'changed' WHERE id = 'p1'");
    net.exec("DELETE FROM posts WHERE id = 'p2'");
    let mine = object(
        &db,
        "blog.Post",
        json!({"id": "mine", "owner": "ann", "title": "local"}),
    );
    db.write_blocking(move |t| t.insert_bytes("blog.Post", mine).map(|_| ()))
        .unwrap();
    let updates: Arc<Mutex<Vec<QueryUpdate>>> = Arc::default();
    let u2 = Arc::clone(&updates);
    let _live = db
        .query("blog.Post")
        .subscribe(move |u| u2.lock().unwrap().push(u))
        .unwrap();
    updates.lock().unwrap().clear();
    handle.resume();
    handle.wait_uploaded().unwrap();
    assert!(eventually(|| {
        local(&db, "blog.Post", "p1").is_some_and(|p| p["title"] == "changed")
            && local(&db, "blog.Post", "p2").is_none()
    }));
    std::thread::sleep(Duration::from_millis(200));
    let updates = updates.lock().unwrap();
    let updated: usize = updates.iter().map(|u| u.diff.updated.len()).sum();
    let removed: usize = updates.iter().map(|u| u.diff.removed.len()).sum();
    let inserted: usize = updates.iter().map(|u| u.diff.inserted.len()).sum();
    assert_eq!(
        (updated, removed, inserted),
        (1, 1, 0),
        "one row changed, one went, the pending one never flickered: {updates:?}"
    );
    assert_eq!(local(&db, "blog.Post", "mine").unwrap()["title"], "local");
    assert_eq!(net.int("SELECT count(*) FROM posts WHERE id = 'mine'"), 1);
}

#[test]
fn an_expired_token_is_replaced_from_the_provider_and_the_stream_goes_on() {
    let Some(net) = sync_support::start_with(100, 0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("a.db"));
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a2 = Arc::clone(&asked);
    // The first token expires two seconds in; the provider then gives good ones.
    let provider: keel_query::TokenProvider = Arc::new(move || {
        let n = a2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(if n == 0 {
            sync_support::token_for("ann", 2)
        } else {
            sync_support::token("ann")
        })
    });
    let mut options = sync_support::options(&net.url(), "ann");
    options.token_provider = provider;
    let handle = db.sync(options).unwrap();
    // The status stream reports the connection.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut statuses = handle.status();
    std::thread::spawn(move || {
        let connected = statuses.any(|s| s.connected);
        let _ = tx.send(connected);
    });
    assert_eq!(rx.recv_timeout(sync_support::WAIT), Ok(true));
    assert!(eventually(|| asked
        .load(std::sync::atomic::Ordering::SeqCst)
        >= 2));
    net.exec("INSERT INTO posts (id, owner, title) VALUES ('late', 'ann', 'after expiry')");
    assert!(eventually(|| local(&db, "blog.Post", "late").is_some()));
    assert!(handle.current_status().connected);
}

#[test]
fn fields_an_older_app_does_not_know_survive_its_edits() {
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    // An older build: its schema lacks `rating`, which the server has.
    let text = std::fs::read_to_string(sync_support::fixture_fbs()).unwrap();
    let older =
        keel_query::Schema::parse(&text.replace("  rating: double = null;\n", ""), "old.fbs")
            .unwrap();
    assert!(older
        .table(older.collection("blog.Post").unwrap().table)
        .field("rating")
        .is_none());
    let db =
        keel_query::Database::open(dir.path().join("old.db"), older, Default::default()).unwrap();
    net.exec("INSERT INTO posts (id, owner, title, rating) VALUES ('p1', 'ann', 'old title', 4.5)");
    let handle = sync(&db, &net.url(), "ann");
    assert!(eventually(|| local(&db, "blog.Post", "p1").is_some()));
    db.write_blocking(|t| {
        t.change_values(
            "blog.Post",
            &["p1".into()],
            &[("title".into(), "new title".into())],
        )
        .map(|_| ())
    })
    .unwrap();
    handle.wait_uploaded().unwrap();
    let rows = net.rows("SELECT title, rating FROM posts WHERE id = 'p1'");
    assert_eq!(rows, vec![json!({"title": "new title", "rating": 4.5})]);
}

#[test]
fn an_ack_followed_by_an_older_checkpoint_still_leaves_the_outbox_with_nothing_else_written() {
    // The seed transaction's changes and checkpoint wait in the relay behind the
    // snapshot, so the upload's ack arrives before that older checkpoint, which
    // covers nothing of it. The upload's own checkpoint follows and must cover
    // it: nothing is written after it, so no later one comes.
    let Some(net) = start() else { return };
    net.exec(
        "INSERT INTO posts (id, owner, title) SELECT 'seed' || lpad(i::text, 5, '0'), 'ann', \
         'title ' || i FROM generate_series(1, 5000) i",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let db = open(&path);
    insert(
        &db,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "t"}),
    );
    like(&db, "p1", 1);
    let handle = sync(&db, &net.url(), "ann");
    handle.wait_uploaded().unwrap();
    assert!(eventually(|| handle.current_status().snapshot.is_none()
        && local(&db, "blog.Post", "seed05000").is_some()));
    assert!(eventually(|| outbox(&path).0 == 0), "{:?}", outbox(&path));
    assert_eq!(net.int("SELECT likes FROM posts WHERE id = 'p1'"), 1);
}

#[test]
fn writes_after_the_outbox_emptied_get_new_numbers_and_reach_the_server() {
    // The relay answers a (client, seq) it has seen without applying it again:
    // a number handed out twice would be a write silently dropped.
    let Some(net) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let db = open(&path);
    insert(
        &db,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "t"}),
    );
    like(&db, "p1", 1);
    like(&db, "p1", 1);
    let handle = sync(&db, &net.url(), "ann");
    handle.wait_uploaded().unwrap();
    // Acked, then gone once the download has caught up with them.
    assert!(eventually(|| outbox(&path).0 == 0), "{:?}", outbox(&path));
    drop(handle);
    like(&db, "p1", 1);
    assert_eq!(
        outbox(&path),
        (1, Some(4)),
        "numbers 1..=3 went to the relay"
    );
    let handle = sync(&db, &net.url(), "ann");
    handle.wait_uploaded().unwrap();
    assert_eq!(net.int("SELECT likes FROM posts WHERE id = 'p1'"), 3);
    assert!(eventually(|| outbox(&path).0 == 0), "{:?}", outbox(&path));
    // Closed and opened again with an empty outbox: still above every number.
    drop(handle);
    drop(db);
    let db = open(&path);
    like(&db, "p1", 1);
    assert_eq!(outbox(&path), (1, Some(5)));
    let handle = sync(&db, &net.url(), "ann");
    handle.wait_uploaded().unwrap();
    assert_eq!(net.int("SELECT likes FROM posts WHERE id = 'p1'"), 4);
}
