//! The in-memory copy of a vector field (`vector_cache.rs`): a nearest query
//! answered from it gives what the side table gives, after every kind of
//! writer — keel's writes, a rolled-back transaction, stock SQLite, a repair —
//! and a snapshot older than the copy never sees the copy's rows.

use std::path::Path;
use std::sync::Arc;

use keel_query::{inspect, Database, StoreOptions, Value};
use keel_schema::{Expr, FieldPath, Metric, Schema};
use proptest::prelude::*;

const DIM: usize = 4;

fn schema() -> Schema {
    Schema::parse(
        &format!(
            "namespace v; table Photo {{ id: int (primary); album: int (indexed); e: [float] (vector: {DIM}, metric: \"cosine\"); }} root_type Photo;"
        ),
        "v.fbs",
    )
    .unwrap()
}

fn encode(s: &Schema, id: i64, album: i64, e: &[f32]) -> Vec<u8> {
    s.reader("v.Photo")
        .unwrap()
        .encode_json(&serde_json::json!({"id": id, "album": album, "e": e}))
        .unwrap()
}

fn open(path: &Path, s: &Schema, cache: usize) -> Database {
    Database::open(
        path,
        s.clone(),
        StoreOptions::default().vector_cache_bytes(cache),
    )
    .unwrap()
}

fn path_e(s: &Schema) -> FieldPath {
    s.reader("v.Photo").unwrap().path("e").unwrap()
}

/// `(rowid, distance)` of the `k` nearest, optionally in one album.
fn nearest(db: &Database, s: &Schema, q: &[f32], k: usize, album: Option<i64>) -> Vec<(i64, f32)> {
    let mut query = db.query("v.Photo");
    if let Some(a) = album {
        query = query.filter(Expr::eq(
            s.reader("v.Photo").unwrap().path("album").unwrap(),
            a,
        ));
    }
    query
        .nearest(path_e(s), q, k)
        .all()
        .unwrap()
        .into_iter()
        .map(|n| (n.rowid, n.distance))
        .collect()
}

/// The model's answer: cosine distances by `(distance, rowid)`.
fn reference(
    rows: &[(i64, i64, Vec<f32>)],
    q: &[f32],
    k: usize,
    album: Option<i64>,
) -> Vec<(i64, f32)> {
    let qn = keel_schema::vector::norm(q);
    let mut all: Vec<(i64, f32)> = rows
        .iter()
        .filter(|(_, a, _)| album.is_none_or(|x| x == *a))
        .map(|(rowid, _, e)| (*rowid, Metric::Cosine.distance(q, qn, e)))
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn vec4() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec((-2i8..=2).prop_map(|x| x as f32 * 0.5), DIM)
}

#[derive(Debug, Clone)]
enum Op {
    /// Insert or replace the object with this id.
    Upsert(i64, i64, Vec<f32>),
    Delete(i64),
    /// An insert inside a write transaction that then fails: rolled back.
    RolledBack(i64, Vec<f32>),
    /// Stock SQLite rewrites the packed row, as another tool would (the
    /// object keeps its old vector: the query ranks by the packed column).
    Foreign(i64, Vec<f32>),
    /// `keel check --repair`'s rebuild of the side table.
    Rebuild,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..16, 0i64..2, vec4()).prop_map(|(id, a, e)| Op::Upsert(id, a, e)),
        1 => (1i64..16).prop_map(Op::Delete),
        1 => (100i64..104, vec4()).prop_map(|(id, e)| Op::RolledBack(id, e)),
        1 => (1i64..16, vec4()).prop_map(|(id, e)| Op::Foreign(id, e)),
        1 => Just(Op::Rebuild),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// After every write of a random sequence, by every kind of writer, the
    /// nearest query (answered from the copy whenever it is current) equals the
    /// model, unfiltered and filtered, with the copy on, off, and with budgets
    /// for the codes of 2 rows (the floats of none), and of 6 rows (the floats
    /// of 4): a copy that keeps codes alone reads its candidates' floats from
    /// the side table, and a field whose codes do not fit is not copied.
    #[test]
    fn nearest_from_the_copy_equals_the_rows_after_every_writer(
        ops in prop::collection::vec(op(), 1..30),
        q in vec4(),
        k in 1usize..6,
        budget in prop::sample::select(vec![64usize << 20, 0, 2 * (DIM + 28), 6 * (DIM + 28)]),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.db");
        let s = schema();
        let db = open(&path, &s, budget);
        // id → (rowid, album, packed vector): the rowids keel gives, tracked.
        let mut model: std::collections::BTreeMap<i64, (i64, i64, Vec<f32>)> = Default::default();
        // id → the vector in the object (a repair rebuilds the packed row from it).
        let mut bodies: std::collections::BTreeMap<i64, Vec<f32>> = Default::default();
        for o in &ops {
            match o.clone() {
                Op::Upsert(id, a, e) => {
                    let obj = encode(&s, id, a, &e);
                    let rowid = db.write(move |t| t.upsert_bytes("v.Photo", obj)).wait().unwrap();
                    model.insert(id, (rowid, a, e.clone()));
                    bodies.insert(id, e);
                }
                Op::Delete(id) => {
                    db.write(move |t| t.delete_key("v.Photo", &[Value::Int(id)]).map(|_| ())).wait().unwrap();
                    model.remove(&id);
                    bodies.remove(&id);
                }
                Op::RolledBack(id, e) => {
                    let obj = encode(&s, id, 0, &e);
                    let (s2, q2) = (s.clone(), q.clone());
                    let seen = db.write(move |t| {
                        let rowid = t.insert_bytes("v.Photo", obj)?;
                        // The transaction's own read sees the row (and must not
                        // leave it in the copy).
                        let inside = t.query("v.Photo").nearest(path_e(&s2), &q2, 32).all()?;
                        t.abort();
                        Ok(inside.iter().any(|n| n.rowid == rowid))
                    }).wait();
                    prop_assert!(matches!(seen, Ok(true) | Err(keel_query::Error::Aborted { .. })), "{:?}", seen);
                }
                Op::Foreign(id, e) => {
                    let Some((rowid, a, _)) = model.get(&id).cloned() else { continue };
                    let conn = rusqlite::Connection::open(&path).unwrap();
                    conn.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                    conn.execute(
                        "UPDATE \"v.Photo$vec\" SET v2 = ?1 WHERE rowid = ?2",
                        rusqlite::params![keel_schema::vector::pack(&e), rowid],
                    ).unwrap();
                    model.insert(id, (rowid, a, e));
                }
                Op::Rebuild => {
                    let conn = rusqlite::Connection::open(&path).unwrap();
                    conn.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                    inspect::rebuild_vectors(&conn, &Arc::new(s.clone())).unwrap();
                    for (id, e) in &bodies {
                        model.get_mut(id).unwrap().2 = e.clone();
                    }
                }
            }
            let rows: Vec<(i64, i64, Vec<f32>)> = model.values().cloned().collect();
            for album in [None, Some(0), Some(1)] {
                let want = reference(&rows, &q, k, album);
                prop_assert_eq!(nearest(&db, &s, &q, k, album), want.clone(), "after {:?}", o);
                // Twice: the second is answered from the copy the first made.
                prop_assert_eq!(nearest(&db, &s, &q, k, album), want, "again after {:?}", o);
            }
        }
    }
}

/// Insert `objs` (encoded `v.Photo`s) in one write.
fn insert_all(db: &Database, objs: Vec<Vec<u8>>) {
    db.write(move |t| {
        for o in objs {
            t.insert_bytes("v.Photo", o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
}

/// Photo 1 on the first axis, photo 2 on the second.
fn two_photos(db: &Database, s: &Schema) {
    let objs = vec![
        encode(s, 1, 0, &[1.0, 0.0, 0.0, 0.0]),
        encode(s, 2, 0, &[0.0, 1.0, 0.0, 0.0]),
    ];
    insert_all(db, objs);
}

/// A snapshot taken before a write keeps its rows even when a query outside it
/// made a copy of the newer rows in between.
#[test]
fn a_snapshot_older_than_the_copy_reads_its_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("v.db"), &s, 64 << 20);
    let q = [1.0, 0.0, 0.0, 0.0];
    two_photos(&db, &s);
    let before = nearest(&db, &s, &q, 1, None);
    assert_eq!(before[0].0, 1);
    let s2 = s.clone();
    db.snapshot(|sn| {
        let in_snap = |sn: &keel_query::Snapshot<'_>| -> Vec<i64> {
            sn.query("v.Photo")
                .nearest(path_e(&s2), &q, 1)
                .all()
                .unwrap()
                .into_iter()
                .map(|n| n.rowid)
                .collect()
        };
        assert_eq!(in_snap(sn), [1]);
        // Move object 1 away and object 2 onto the query point, then let a
        // query outside the snapshot copy the new rows.
        let (a, b) = (
            encode(&s2, 1, 0, &[0.0, 0.0, 1.0, 0.0]),
            encode(&s2, 2, 0, &[1.0, 0.0, 0.0, 0.0]),
        );
        db.write(move |t| {
            t.upsert_bytes("v.Photo", a)?;
            t.upsert_bytes("v.Photo", b).map(|_| ())
        })
        .wait()
        .unwrap();
        assert_eq!(nearest(&db, &s2, &q, 1, None)[0].0, 2);
        assert_eq!(in_snap(sn), [1], "the snapshot reads its own rows");
        Ok(())
    })
    .unwrap();
}

/// A table whose generation triggers were dropped (an older build, another
/// tool) is never answered from a stale copy: the schema change invalidates
/// the copy, and without triggers no copy is made; the next open puts them
/// back.
#[test]
fn dropped_triggers_turn_the_copy_off_until_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let s = schema();
    let db = open(&path, &s, 64 << 20);
    let q = [1.0, 0.0, 0.0, 0.0];
    two_photos(&db, &s);
    assert_eq!(nearest(&db, &s, &q, 1, None)[0].0, 1);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let triggers = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'v.Photo$vec'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(triggers(&conn), 3);
    for ev in ["insert", "update", "delete"] {
        conn.execute_batch(&format!("DROP TRIGGER \"v.Photo$vec$count_{ev}\""))
            .unwrap();
    }
    // Without triggers the generation stays put while the rows change.
    conn.execute(
        "UPDATE \"v.Photo$vec\" SET v2 = ?1 WHERE rowid = 2",
        [keel_schema::vector::pack(&[1.0, 0.0, 0.0, 0.0])],
    )
    .unwrap();
    conn.execute(
        "UPDATE \"v.Photo$vec\" SET v2 = ?1 WHERE rowid = 1",
        [keel_schema::vector::pack(&[0.0, 0.0, 1.0, 0.0])],
    )
    .unwrap();
    for _ in 0..2 {
        assert_eq!(nearest(&db, &s, &q, 1, None)[0].0, 2);
    }
    db.close().wait().unwrap();
    let db = open(&path, &s, 64 << 20);
    assert_eq!(triggers(&conn), 3, "the open puts the triggers back");
    assert_eq!(nearest(&db, &s, &q, 1, None)[0].0, 2);
}

/// A file whose triggers an earlier build made (they stored `random()` for
/// every row, which gave each keel insert a statement journal) gets today's
/// counting triggers at open, and another writer's rows still move the
/// generation: the copy never answers with the rows it replaced.
#[test]
fn an_earlier_builds_triggers_are_replaced_at_open_and_still_catch_other_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let s = schema();
    let db = open(&path, &s, 64 << 20);
    two_photos(&db, &s);
    db.close().wait().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    for ev in ["insert", "update", "delete"] {
        conn.execute_batch(&format!(
            "DROP TRIGGER \"v.Photo$vec$count_{ev}\";
             CREATE TRIGGER \"v.Photo$vec$foreign_{ev}\" AFTER {ev} ON \"v.Photo$vec\"
             WHEN NOT EXISTS (SELECT 1 FROM keel_meta WHERE key = 'vector-writing') BEGIN
             UPDATE keel_meta SET value = random() WHERE key = 'vector-gen:v.Photo'; END;"
        ))
        .unwrap();
    }
    let names = |conn: &rusqlite::Connection| -> Vec<String> {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'v.Photo$vec' ORDER BY name")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let db = open(&path, &s, 64 << 20);
    assert_eq!(
        names(&conn),
        [
            "v.Photo$vec$count_delete",
            "v.Photo$vec$count_insert",
            "v.Photo$vec$count_update"
        ]
    );
    let q = [1.0, 0.0, 0.0, 0.0];
    assert_eq!(nearest(&db, &s, &q, 1, None)[0].0, 1, "the copy is read");
    // Another writer swaps the two photos' vectors: the counted generation
    // moves, so the copy is stale and the answer follows the rows.
    conn.execute(
        "UPDATE \"v.Photo$vec\" SET v2 = ?1 WHERE rowid = 2",
        [keel_schema::vector::pack(&[1.0, 0.0, 0.0, 0.0])],
    )
    .unwrap();
    conn.execute(
        "UPDATE \"v.Photo$vec\" SET v2 = ?1 WHERE rowid = 1",
        [keel_schema::vector::pack(&[0.0, 0.0, 1.0, 0.0])],
    )
    .unwrap();
    for _ in 0..2 {
        assert_eq!(nearest(&db, &s, &q, 1, None)[0].0, 2);
    }
    db.close().wait().unwrap();
}

/// A nearest query reads in one read transaction on one pooled connection:
/// with a single reader, a filter keel evaluates on the bodies (a field
/// without a column) must not wait for a second connection, and the winners'
/// bodies come from the same snapshot as their distances.
#[test]
fn a_nearest_query_reads_one_snapshot_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let s = Schema::parse(
        "namespace v; table Photo { id: int (primary); album: int (indexed); note: string; e: [float] (vector: 4, metric: \"cosine\"); } root_type Photo;",
        "v.fbs",
    )
    .unwrap();
    let opts = StoreOptions::default()
        .readers(1)
        .reader_wait(std::time::Duration::from_millis(500));
    let db = Database::open(dir.path().join("v.db"), s.clone(), opts).unwrap();
    let r = s.reader("v.Photo").unwrap();
    let objs: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            r.encode_json(&serde_json::json!({"id": i, "album": 0, "note": if i % 2 == 0 { "keep" } else { "drop" }, "e": [1.0, i as f32 * 0.1, 0.0, 0.0]}))
                .unwrap()
        })
        .collect();
    insert_all(&db, objs);
    let got = db
        .query("v.Photo")
        .filter(Expr::eq(r.path("note").unwrap(), "keep"))
        .nearest(r.path("e").unwrap(), &[1.0, 0.0, 0.0, 0.0], 2)
        .all()
        .expect("a body-evaluated filter on the only reader");
    assert_eq!(got.iter().map(|n| n.rowid).collect::<Vec<_>>(), [1, 3]);

    // Churn the nearest objects (delete and put back, two commits each) while
    // queries run: at least five of the six exist at every moment, so every
    // answer has k = 4 objects — a winner deleted between the scan and the
    // body read would leave a hole.
    let db = Database::open(
        dir.path().join("churn.db"),
        s.clone(),
        StoreOptions::default(),
    )
    .unwrap();
    let all: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            r.encode_json(&serde_json::json!({"id": i, "album": 0, "note": "x", "e": [1.0, i as f32 * 0.01, 0.0, 0.0]}))
                .unwrap()
        })
        .collect();
    let objs = all.clone();
    insert_all(&db, objs);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop, all) = (db.clone(), Arc::clone(&stop), all.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = (i % 3) as i64;
                let o = all[id as usize].clone();
                db.write(move |t| t.delete_key("v.Photo", &[Value::Int(id)]).map(|_| ()))
                    .wait()
                    .unwrap();
                db.write(move |t| t.insert_bytes("v.Photo", o).map(|_| ()))
                    .wait()
                    .unwrap();
                i += 1;
            }
        })
    };
    let e = r.path("e").unwrap();
    for _ in 0..1500 {
        let got = db
            .query("v.Photo")
            .nearest(e.clone(), &[1.0, 0.0, 0.0, 0.0], 4)
            .all()
            .unwrap();
        assert_eq!(
            got.len(),
            4,
            "a winner vanished between the scan and its body"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

/// A commit that lands while a live k-NN is being set up is never lost, even
/// one whose write closure started before the subscription existed (and so
/// recorded nothing): the last delivery equals a fresh query once the writes
/// are done.
#[test]
fn a_commit_during_subscribe_reaches_the_live_knn() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("v.db"), &s, 64 << 20);
    two_photos(&db, &s);
    let q = [1.0, 0.0, 0.0, 0.0];
    for round in 0..300i64 {
        let writer = {
            let (db, s) = (db.clone(), s.clone());
            std::thread::spawn(move || {
                // Each round's photo is nearer than every earlier one.
                let d = 1.0 / (round as f32 + 2.0);
                let o = encode(&s, 100 + round, 0, &[1.0, d, 0.0, 0.0]);
                db.write(move |t| t.insert_bytes("v.Photo", o).map(|_| ()))
                    .wait()
                    .unwrap();
            })
        };
        let last: Arc<std::sync::Mutex<Vec<i64>>> = Arc::default();
        let l2 = Arc::clone(&last);
        let sub = db
            .query("v.Photo")
            .filter(Expr::ne(
                s.reader("v.Photo").unwrap().path("id").unwrap(),
                1,
            ))
            .nearest(path_e(&s), &q, 1)
            .subscribe(move |u| *l2.lock().unwrap() = u.neighbors.iter().map(|n| n.rowid).collect())
            .unwrap();
        writer.join().unwrap();
        // A write outside the query's filter: when it resolves, every earlier
        // commit's hooks have run.
        let o = encode(&s, 1, 0, &[1.0, 0.0, 0.0, 0.0]);
        db.write(move |t| t.upsert_bytes("v.Photo", o).map(|_| ()))
            .wait()
            .unwrap();
        let fresh: Vec<i64> = db
            .query("v.Photo")
            .filter(Expr::ne(
                s.reader("v.Photo").unwrap().path("id").unwrap(),
                1,
            ))
            .nearest(path_e(&s), &q, 1)
            .all()
            .unwrap()
            .iter()
            .map(|n| n.rowid)
            .collect();
        assert_eq!(
            *last.lock().unwrap(),
            fresh,
            "round {round}: a commit was lost"
        );
        drop(sub);
    }
}

/// Packed values another tool wrote that keel cannot read as vectors — text,
/// a number, a blob of another length — get one verdict on every path: the
/// row is skipped (`keel check` reports it), whether the query reads the copy,
/// the copy of codes alone, the side table, or runs inside a write transaction.
#[test]
fn unreadable_packed_values_are_skipped_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let s = schema();
    let objs: Vec<Vec<u8>> = (1..=6)
        .map(|i| encode(&s, i, 0, &[1.0, i as f32, 0.0, 0.0]))
        .collect();
    {
        let db = open(&path, &s, 0);
        insert_all(&db, objs);
        db.close().wait().unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "UPDATE \"v.Photo$vec\" SET v2 = 'not a vector' WHERE rowid = 1;
         UPDATE \"v.Photo$vec\" SET v2 = 42 WHERE rowid = 2;
         UPDATE \"v.Photo$vec\" SET v2 = x'0000803f' WHERE rowid = 3;",
    )
    .unwrap();
    let q = [1.0, 0.0, 0.0, 0.0];
    let want: Vec<i64> = vec![4, 5, 6];
    // Copy with floats, codes alone (3 rows' codes, no floats), none.
    for budget in [64usize << 20, 3 * (DIM + 28), 0] {
        let db = open(&path, &s, budget);
        for _ in 0..2 {
            let got: Vec<i64> = nearest(&db, &s, &q, 6, None).iter().map(|n| n.0).collect();
            assert_eq!(got, want, "budget {budget}");
        }
        let path_e = path_e(&s);
        let in_txn = db
            .write(move |t| {
                Ok(t.query("v.Photo")
                    .nearest(path_e, &q, 6)
                    .all()?
                    .iter()
                    .map(|n| n.rowid)
                    .collect::<Vec<i64>>())
            })
            .wait()
            .unwrap();
        assert_eq!(in_txn, want, "inside a write, budget {budget}");
        db.close().wait().unwrap();
    }
    // And `keel check` names each of them, then repairs them.
    let stored = Arc::new(s.clone());
    let drift: Vec<(i64, String)> = inspect::vector_drift(&conn, &stored, 10)
        .unwrap()
        .into_iter()
        .map(|d| (d.rowid, d.problem))
        .collect();
    let stale = |r: i64| (r, "stale e".to_string());
    assert_eq!(drift, [stale(1), stale(2), stale(3)]);
    assert_eq!(inspect::rebuild_vectors(&conn, &stored).unwrap(), 6);
    assert!(inspect::vector_drift(&conn, &stored, 10)
        .unwrap()
        .is_empty());
}

/// A collection of 16-d photos, for the patch tests: vectors with no ties.
fn schema16() -> Schema {
    Schema::parse(
        "namespace v; table Photo { id: int (primary); album: int (indexed); e: [float] (vector: 16, metric: \"cosine\"); } root_type Photo;",
        "v16.fbs",
    )
    .unwrap()
}

/// A pseudo-random 16-d vector for `seed`.
fn vec16(seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..16)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// The `k` nearest `(rowid, distance)` by cosine computed in f64, by
/// `(distance, rowid)`: the reference every answer must equal (same rowids,
/// distances within f32 rounding).
fn reference_f64(
    rows: &std::collections::BTreeMap<i64, (i64, i64, Vec<f32>)>,
    q: &[f32],
    k: usize,
    album: Option<i64>,
) -> Vec<(i64, f64)> {
    let dot = |a: &[f32], b: &[f32]| -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum()
    };
    let mut all: Vec<(i64, f64)> = rows
        .values()
        .filter(|(_, a, _)| album.is_none_or(|x| x == *a))
        .map(|(rowid, _, e)| (*rowid, 1.0 - dot(q, e) / (dot(q, q) * dot(e, e)).sqrt()))
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// `nearest` on the 16-d photos equals the f64 reference.
fn assert_matches_reference(
    db: &Database,
    s: &Schema,
    model: &std::collections::BTreeMap<i64, (i64, i64, Vec<f32>)>,
    step: &str,
) {
    for (seed, album) in [(7, None), (8, Some(1)), (9, None)] {
        let q = vec16(1000 + seed);
        let got = nearest(db, s, &q, 5, album);
        let want = reference_f64(model, &q, 5, album);
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            "{step}: rowids"
        );
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (f64::from(g.1) - w.1).abs() < 1e-5,
                "{step}: {g:?} vs {w:?}"
            );
        }
    }
}

/// One write after the copy was read patches it in place — the next query
/// reads no table — and every answer equals the f64 reference: after an
/// insert, an update, a vector removed, a key change (the object moves to
/// another rowid), a delete, and a rolled-back write (which leaves the copy
/// as it was).
#[test]
fn a_single_write_patches_the_copy_instead_of_reading_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema16();
    let db = open(&dir.path().join("v.db"), &s, 64 << 20);
    let r = s.reader("v.Photo").unwrap();
    let obj = |id: i64, album: i64, e: Option<&[f32]>| match e {
        Some(e) => r
            .encode_json(&serde_json::json!({"id": id, "album": album, "e": e}))
            .unwrap(),
        None => r
            .encode_json(&serde_json::json!({"id": id, "album": album}))
            .unwrap(),
    };
    let mut model = std::collections::BTreeMap::new();
    let objs: Vec<Vec<u8>> = (0..40)
        .map(|i| obj(i, i % 2, Some(&vec16(i as u64))))
        .collect();
    insert_all(&db, objs);
    for i in 0..40 {
        model.insert(i, (i + 1, i % 2, vec16(i as u64)));
    }
    assert_matches_reference(&db, &s, &model, "first");
    let read = db.vector_copy_stats();
    assert_eq!(
        (read.reads, read.patches),
        (1, 0),
        "the first query reads the table once"
    );

    let mut patches = 0;
    type Model = std::collections::BTreeMap<i64, (i64, i64, Vec<f32>)>;
    let mut step = |db: &Database, model: &Model, name: &str, patched: bool| {
        patches += u64::from(patched);
        assert_matches_reference(db, &s, model, name);
        let st = db.vector_copy_stats();
        assert_eq!(
            (st.reads, st.patches),
            (1, patches),
            "{name}: patched, not read again"
        );
    };

    // Insert.
    let o = obj(100, 1, Some(&vec16(100)));
    let rowid = db
        .write(move |t| t.insert_bytes("v.Photo", o))
        .wait()
        .unwrap();
    model.insert(100, (rowid, 1, vec16(100)));
    step(&db, &model, "insert", true);

    // Update: the nearest query's own neighbour moves elsewhere.
    let o = obj(3, 1, Some(&vec16(1007)));
    db.write(move |t| t.upsert_bytes("v.Photo", o).map(|_| ()))
        .wait()
        .unwrap();
    model.insert(3, (4, 1, vec16(1007)));
    step(&db, &model, "update", true);

    // The vector removed from an object: no longer a candidate.
    let o = obj(5, 1, None);
    db.write(move |t| t.upsert_bytes("v.Photo", o).map(|_| ()))
        .wait()
        .unwrap();
    model.remove(&5);
    step(&db, &model, "vector removed", true);

    // A key change: delete and insert, the object gets a rowid of its own.
    let moved = db
        .write(|t| {
            t.change_values(
                "v.Photo",
                &[Value::Int(8)],
                &[("id".into(), Value::Int(200))],
            )
        })
        .wait()
        .unwrap();
    let (_, a, e) = model.remove(&8).unwrap();
    model.insert(200, (moved, a, e));
    step(&db, &model, "key change", true);

    // Delete.
    db.write(|t| t.delete_key("v.Photo", &[Value::Int(11)]).map(|_| ()))
        .wait()
        .unwrap();
    model.remove(&11);
    step(&db, &model, "delete", true);

    // Several writes in one closure, the same row twice among them.
    let (a, b, c) = (
        obj(300, 0, Some(&vec16(300))),
        obj(300, 0, Some(&vec16(1009))),
        obj(301, 1, Some(&vec16(301))),
    );
    let (r300, r301) = db
        .write(move |t| {
            t.insert_bytes("v.Photo", a)?;
            let r300 = t.upsert_bytes("v.Photo", b)?;
            let r301 = t.insert_bytes("v.Photo", c)?;
            t.delete_key("v.Photo", &[Value::Int(12)])?;
            Ok((r300, r301))
        })
        .wait()
        .unwrap();
    model.insert(300, (r300, 0, vec16(1009)));
    model.insert(301, (r301, 1, vec16(301)));
    model.remove(&12);
    step(&db, &model, "several writes", true);

    // Rolled back: nothing committed, the copy stays current as it is.
    let o = obj(400, 0, Some(&vec16(1007)));
    let r = db
        .write(move |t| {
            t.insert_bytes("v.Photo", o)?;
            t.abort();
            Ok(())
        })
        .wait();
    assert!(matches!(r, Err(keel_query::Error::Aborted { .. })));
    step(&db, &model, "rollback", false);
}

const WRITER_ROLE: &str = "KEEL_VECTOR_CACHE_WRITER_DB";

/// Another process's write: opens the file named by
/// `KEEL_VECTOR_CACHE_WRITER_DB` and upserts photo 1 onto `vec16(2001)`.
/// Without the variable it does nothing.
#[test]
fn vector_writer_process() {
    let Ok(path) = std::env::var(WRITER_ROLE) else {
        return;
    };
    let s = schema16();
    let db = open(Path::new(&path), &s, 64 << 20);
    let o = s
        .reader("v.Photo")
        .unwrap()
        .encode_json(&serde_json::json!({"id": 1, "album": 0, "e": vec16(2001)}))
        .unwrap();
    db.write(move |t| t.upsert_bytes("v.Photo", o).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
}

/// The generation is how other writers make a copy stale: a write through
/// another handle on the file, and one by another process, each make the
/// next query read the table again, and it answers with their rows.
#[test]
fn another_connections_and_another_processes_writes_make_the_copy_stale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let s = schema16();
    let db = open(&path, &s, 64 << 20);
    let r = s.reader("v.Photo").unwrap();
    let objs: Vec<Vec<u8>> = (0..20)
        .map(|i| {
            r.encode_json(&serde_json::json!({"id": i, "album": i % 2, "e": vec16(i as u64)}))
                .unwrap()
        })
        .collect();
    insert_all(&db, objs);
    let mut model = std::collections::BTreeMap::new();
    for i in 0..20 {
        model.insert(i, (i + 1, i % 2, vec16(i as u64)));
    }
    assert_matches_reference(&db, &s, &model, "first");
    assert_eq!(db.vector_copy_stats().reads, 1);

    // Another handle on the file: its write moves photo 0 next to the query.
    let other = open(&path, &s, 64 << 20);
    let o = r
        .encode_json(&serde_json::json!({"id": 0, "album": 0, "e": vec16(1007)}))
        .unwrap();
    other
        .write(move |t| t.upsert_bytes("v.Photo", o).map(|_| ()))
        .wait()
        .unwrap();
    other.close().wait().unwrap();
    model.insert(0, (1, 0, vec16(1007)));
    assert_matches_reference(&db, &s, &model, "after another connection's write");
    assert_eq!(db.vector_copy_stats().reads, 2, "read again");

    // Another process.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "vector_writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_ROLE, &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    model.insert(1, (2, 0, vec16(2001)));
    assert_matches_reference(&db, &s, &model, "after another process's write");
    assert_eq!(db.vector_copy_stats().reads, 3, "read again");
}

/// Writers on several threads at once (their closures share group commits,
/// each moving the generation in its own savepoint, some rolled back) while
/// queries run: once they are done, the copy — patched commit after commit
/// or read again — answers what the f64 reference over the final rows says.
#[test]
fn concurrent_writers_leave_the_copy_equal_to_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema16();
    let db = open(&dir.path().join("v.db"), &s, 64 << 20);
    let r = s.reader("v.Photo").unwrap();
    let enc = |id: i64, seed: u64| {
        r.encode_json(&serde_json::json!({"id": id, "album": id % 2, "e": vec16(seed)}))
            .unwrap()
    };
    insert_all(&db, (0..30).map(|i| enc(i, i as u64)).collect());
    nearest(&db, &s, &vec16(1007), 5, None);
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let db = db.clone();
            let objs: Vec<(i64, Vec<u8>)> = (0..40u64)
                .map(|i| {
                    let id = ((w * 40 + i) % 37) as i64;
                    (id, enc(id, 5000 + w * 100 + i))
                })
                .collect();
            std::thread::spawn(move || {
                for (i, (id, o)) in objs.into_iter().enumerate() {
                    let res = db
                        .write(move |t| {
                            match i % 5 {
                                3 => {
                                    t.delete_key("v.Photo", &[Value::Int(id)])?;
                                }
                                4 => {
                                    t.upsert_bytes("v.Photo", o)?;
                                    t.abort();
                                }
                                _ => {
                                    t.upsert_bytes("v.Photo", o)?;
                                }
                            }
                            Ok(())
                        })
                        .wait();
                    assert!(matches!(
                        res,
                        Ok(()) | Err(keel_query::Error::Aborted { .. })
                    ));
                }
            })
        })
        .collect();
    let reader = {
        let (db, s) = (db.clone(), s.clone());
        std::thread::spawn(move || {
            for i in 0..60 {
                nearest(&db, &s, &vec16(1000 + i % 3), 5, None);
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    // The final rows, read from the objects themselves.
    let mut model = std::collections::BTreeMap::new();
    for o in db.query("v.Photo").all().unwrap() {
        let v = r.read(&o.bytes).unwrap().to_json().unwrap();
        let id = v["id"].as_i64().unwrap();
        let e: Vec<f32> = v["e"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        model.insert(id, (o.rowid, id % 2, e));
    }
    assert_matches_reference(&db, &s, &model, "after the concurrent writers");
    assert!(
        db.vector_copy_stats().patches > 0,
        "{:?}",
        db.vector_copy_stats()
    );
}
