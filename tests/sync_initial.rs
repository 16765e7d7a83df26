//! Initial sync against a real PostgreSQL and a real relay (in this process):
//! the snapshot arrives in key-ordered pages that a live query sees grow, one
//! local transaction each; a snapshot cut off by a restart continues after its
//! last applied page and ends equal to the server, changes made meanwhile
//! included; and a relay that lost its replication slot re-snapshots its clients,
//! which keep their pending operations and see diffs of the differing rows only.
//! Without PostgreSQL binaries each test prints the skipped line and passes.

mod sync_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_query::{Database, FieldPath, QueryUpdate, SnapshotProgress, SortKey, SyncEvent};
use serde_json::json;
use sync_support::{eventually, local, object, open, start, sync, Net, WAIT};

/// How long a test waits for the next page: a liveness bound, far above what a
/// page takes, since a debug build on a loaded machine applies pages slowly.
const PAGE_WAIT: Duration = Duration::from_secs(300);

/// Inserts `n` posts of `owner` by SQL, ids `{prefix}00001`… (text order is
/// number order).
fn load(net: &Net, prefix: &str, owner: &str, n: usize) {
    net.exec(&format!(
        "INSERT INTO posts (id, owner, title) SELECT '{prefix}' || lpad(i::text, 5, '0'), \
         '{owner}', 'title ' || i FROM generate_series(1, {n}) i"
    ));
}

/// Every post of `owner` on the server: id → title.
fn server_posts(net: &Net, owner: &str) -> BTreeMap<String, String> {
    net.rows(&format!(
        "SELECT id, title FROM posts WHERE owner = '{owner}'"
    ))
    .into_iter()
    .map(|r| {
        (
            r["id"].as_str().unwrap().to_owned(),
            r["title"].as_str().unwrap_or("").to_owned(),
        )
    })
    .collect()
}

/// Every local post: id → title.
fn local_posts(db: &Database) -> BTreeMap<String, String> {
    let reader = db.schema().reader("blog.Post").unwrap();
    db.query("blog.Post")
        .all()
        .unwrap()
        .into_iter()
        .map(|o| {
            let j = reader.read(&o.bytes).unwrap().to_json().unwrap();
            (
                j["id"].as_str().unwrap().to_owned(),
                j["title"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The ids a live query delivered, per delivery.
fn ids(db: &Database, u: &QueryUpdate) -> Vec<String> {
    let reader = db.schema().reader("blog.Post").unwrap();
    u.objects
        .iter()
        .map(|o| {
            reader.read(&o.bytes).unwrap().to_json().unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn an_initial_sync_arrives_in_pages_a_live_query_sees_grow_in_key_order() {
    let Some(net) = start() else { return };
    load(&net, "p", "ann", 5000);
    load(&net, "b", "bob", 10);
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("a.db"));
    let updates: Arc<Mutex<Vec<QueryUpdate>>> = Arc::default();
    let u2 = Arc::clone(&updates);
    let _live = db
        .query("blog.Post")
        .order_by(SortKey::asc(FieldPath::field(0, "id")))
        .subscribe(move |u| u2.lock().unwrap().push(u))
        .unwrap();
    let handle = sync(&db, &net.url(), "ann");
    let events = handle.events();
    let mut progress: Vec<SnapshotProgress> = Vec::new();
    while !progress.last().is_some_and(|p| p.done) {
        match events.recv_timeout(PAGE_WAIT) {
            Ok(SyncEvent::Snapshot(p)) => progress.push(p),
            Ok(_) => {}
            Err(e) => panic!("no finished snapshot: {e}; progress so far {progress:?}"),
        }
    }
    // Progress: counted up to the whole, in more than one step.
    let last = progress.last().unwrap();
    assert_eq!((last.rows_applied, last.rows_total), (5000, 5000));
    assert!(
        progress.len() > 2,
        "more than a start and an end: {progress:?}"
    );
    assert!(progress
        .windows(2)
        .all(|w| w[0].rows_applied <= w[1].rows_applied));
    assert!(progress.iter().all(|p| p.rows_total == 5000 && !p.resumed));
    assert!(eventually(|| handle.current_status().snapshot.is_none()));
    assert_eq!(local_posts(&db), server_posts(&net, "ann"));

    // The live query saw the snapshot grow: several deliveries, each a longer
    // prefix of the rows in key order, every row as the server holds it.
    let all: Vec<String> = server_posts(&net, "ann").into_keys().collect();
    let updates = updates.lock().unwrap();
    let sizes: Vec<usize> = updates.iter().map(|u| u.objects.len()).collect();
    let grown: Vec<usize> = sizes.iter().copied().filter(|&n| n > 0).collect();
    assert!(grown.len() > 2, "the snapshot arrived in pages: {sizes:?}");
    assert!(
        grown.windows(2).all(|w| w[0] < w[1]),
        "it only grew: {sizes:?}"
    );
    assert_eq!(*grown.last().unwrap(), 5000);
    for u in updates.iter() {
        let seen = ids(&db, u);
        assert_eq!(
            seen,
            all[..seen.len()],
            "a delivery is a prefix in key order"
        );
        assert!(
            u.diff.removed.is_empty() && u.diff.updated.is_empty(),
            "a first sync only inserts"
        );
    }
}

#[test]
fn a_snapshot_cut_off_by_a_restart_resumes_after_its_last_page() {
    let Some(net) = start() else { return };
    const N: u64 = 8_000;
    load(&net, "p", "ann", N as usize);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let db = open(&path);
    let handle = sync(&db, &net.url(), "ann");
    let events = handle.events();
    // Cut off after the first page: the handle is closed as soon as one lands.
    loop {
        match events.recv_timeout(PAGE_WAIT).expect("a page arrives") {
            SyncEvent::Snapshot(p) if p.rows_applied > 0 => break,
            _ => {}
        }
    }
    handle.close();
    let before = db.query("blog.Post").count().unwrap() as u64;
    assert!(before > 0 && before < N, "cut off midway: {before} of {N}");
    drop(db);

    // Meanwhile the server changes rows on both sides of the resume point.
    net.exec(
        "UPDATE posts SET title = 'changed before' WHERE id = 'p00001';
         DELETE FROM posts WHERE id = 'p00002';
         INSERT INTO posts (id, owner, title) VALUES ('p00001x', 'ann', 'new before');
         UPDATE posts SET title = 'changed after' WHERE id = 'p07999';
         DELETE FROM posts WHERE id = 'p08000';
         INSERT INTO posts (id, owner, title) VALUES ('p99999', 'ann', 'new after');",
    );

    let db = open(&path);
    let updates: Arc<Mutex<Vec<QueryUpdate>>> = Arc::default();
    let u2 = Arc::clone(&updates);
    let _live = db
        .query("blog.Post")
        .subscribe(move |u| u2.lock().unwrap().push(u))
        .unwrap();
    updates.lock().unwrap().clear();
    let handle = sync(&db, &net.url(), "ann");
    let events = handle.events();
    let mut progress: Vec<SnapshotProgress> = Vec::new();
    while !progress.last().is_some_and(|p| p.done) {
        if let SyncEvent::Snapshot(p) = events
            .recv_timeout(PAGE_WAIT)
            .expect("the snapshot goes on")
        {
            progress.push(p);
        }
    }
    // It continued: the rows applied before count, and were not sent again.
    assert!(progress.iter().all(|p| p.resumed), "{progress:?}");
    assert!(progress[0].rows_applied >= before, "{progress:?}");
    // The first event is the snapshot's start (the rows applied before it),
    // then one per page, then the one that says done.
    let pages_after = progress.iter().filter(|p| !p.done).count() as u64 - 1;
    let pages_all = progress
        .windows(2)
        .map(|w| w[1].rows_applied - w[0].rows_applied)
        .max()
        .map_or(N, |page| N.div_ceil(page.max(1)));
    assert!(
        pages_after <= pages_all,
        "{pages_after} pages after the resume, {pages_all} for all"
    );
    // And it ends equal to the server, the changes of the gap included.
    assert_eq!(local_posts(&db), server_posts(&net, "ann"));
    let removed: usize = updates
        .lock()
        .unwrap()
        .iter()
        .map(|u| u.diff.removed.len())
        .sum();
    // p00002 went; p08000 went too, but beyond the resume point: this file
    // never held it.
    assert_eq!(removed, 1, "only p00002 went");
    drop(handle);
}

#[test]
fn a_lost_slot_re_snapshots_clients_which_keep_pending_ops_and_diff_only_what_differs() {
    let Some(net) = start() else { return };
    load(&net, "p", "ann", 6);
    let dir = tempfile::tempdir().unwrap();
    // A goes offline with pending operations; B stays online throughout.
    let a = open(&dir.path().join("a.db"));
    let b = open(&dir.path().join("b.db"));
    let ha = sync(&a, &net.url(), "ann");
    let hb = sync(&b, &net.url(), "ann");
    for (db, h) in [(&a, &ha), (&b, &hb)] {
        assert!(eventually(|| db.query("blog.Post").count().unwrap() == 6));
        assert!(eventually(|| !h.current_status().downloading));
    }
    ha.pause();
    assert!(eventually(|| !ha.current_status().connected));
    let mine = object(
        &a,
        "blog.Post",
        json!({"id": "mine", "owner": "ann", "title": "offline"}),
    );
    a.write_blocking(move |t| {
        t.insert_bytes("blog.Post", mine)?;
        t.change_values(
            "blog.Post",
            &["p00001".into()],
            &[("title".into(), "edited offline".into())],
        )
        .map(|_| ())
    })
    .unwrap();
    assert!(eventually(|| ha.current_status().pending_ops == 2));

    let live = |db: &Database| {
        let updates: Arc<Mutex<Vec<QueryUpdate>>> = Arc::default();
        let u2 = Arc::clone(&updates);
        let sub = db
            .query("blog.Post")
            .subscribe(move |u| u2.lock().unwrap().push(u))
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        updates.lock().unwrap().clear();
        (sub, updates)
    };
    let (_sa, ua) = live(&a);
    let (_sb, ub) = live(&b);

    // The relay's slot goes, as an operator would drop it: end the relay's
    // stream (the slot is in use while it streams), then drop the slot before
    // the relay is back. The server changes rows while there is none: no stream
    // will ever carry them.
    let slot = format!("keel_relay_{}", net.config.relay_id);
    let deadline = Instant::now() + WAIT;
    loop {
        let dropped = net.rt.block_on(net.sql.batch_execute(&format!(
            "SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots \
             WHERE slot_name = '{slot}' AND active_pid IS NOT NULL;
             SELECT pg_drop_replication_slot('{slot}')"
        )));
        if dropped.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the slot drops: {dropped:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    net.exec(
        "UPDATE posts SET title = 'changed in the gap' WHERE id = 'p00002';
         DELETE FROM posts WHERE id = 'p00003';",
    );

    // B, online, is re-snapshotted by the relay once it has a slot again.
    assert!(eventually(|| local_posts(&b) == server_posts(&net, "ann")));
    // A reconnects: its pending operations upload once, the rest is the server's.
    ha.resume();
    ha.wait_uploaded().unwrap();
    assert!(eventually(|| {
        let server = server_posts(&net, "ann");
        server.get("mine").map(String::as_str) == Some("offline")
            && local_posts(&a) == server
            && local_posts(&b) == server
    }));
    assert_eq!(net.int("SELECT count(*) FROM posts WHERE id = 'mine'"), 1);
    assert_eq!(
        server_posts(&net, "ann")["p00001"],
        "edited offline",
        "the offline edit reached the server"
    );
    std::thread::sleep(Duration::from_millis(200));
    // The diffs name only the rows that differ: for A, p00002 changed and
    // p00003 went (its own two rows never flickered); for B also its two
    // rows from A.
    let totals = |u: &Mutex<Vec<QueryUpdate>>| {
        let u = u.lock().unwrap();
        (
            u.iter().map(|u| u.diff.inserted.len()).sum::<usize>(),
            u.iter().map(|u| u.diff.updated.len()).sum::<usize>(),
            u.iter().map(|u| u.diff.removed.len()).sum::<usize>(),
        )
    };
    assert_eq!(totals(&ua), (0, 1, 1), "A: {:?}", ua.lock().unwrap());
    assert_eq!(totals(&ub), (1, 2, 1), "B: {:?}", ub.lock().unwrap());
    assert_eq!(
        local(&a, "blog.Post", "p00001").unwrap()["title"],
        "edited offline"
    );
}
