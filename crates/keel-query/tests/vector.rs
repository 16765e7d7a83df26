//! Vector search: `(vector: N, metric: …)` fields checked on write
//! (dimension, NaN, infinity: typed errors, nothing stored), the packed
//! little-endian f32 table readable by stock SQLite and compared/repaired by
//! `inspect`, and exact k-NN equal to a naive reference in a property test (all
//! three metrics, filters on indexed and unindexed fields, k, ties), in
//! snapshots and inside write transactions.

use std::path::Path;

use keel_query::{inspect, Database, Error, StoreOptions, Value};
use keel_schema::{Expr, Metric, Schema, VectorProblem};
use proptest::prelude::*;

const DIM: usize = 4;

fn schema(metric: &str) -> Schema {
    Schema::parse(
        &format!(
            "namespace v; table Photo {{ id: int (primary); album: int (indexed); n: int; e: [float] (vector: {DIM}, metric: \"{metric}\"); }} root_type Photo;"
        ),
        "v.fbs",
    )
    .unwrap()
}

fn encode(s: &Schema, id: i64, album: i64, n: i64, e: Option<&[f32]>) -> Vec<u8> {
    let mut j = serde_json::json!({"id": id, "album": album, "n": n});
    if let Some(e) = e {
        // JSON has no NaN or infinity: keel's JSON takes them as strings.
        j["e"] = e
            .iter()
            .map(|x| {
                if x.is_finite() {
                    serde_json::json!(x)
                } else {
                    serde_json::json!(x.to_string().to_lowercase())
                }
            })
            .collect();
    }
    s.reader("v.Photo").unwrap().encode_json(&j).unwrap()
}

fn open(path: &Path, s: &Schema) -> Database {
    Database::open(path, s.clone(), StoreOptions::default()).unwrap()
}

fn count(path: &Path, table: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn vector_attribute_is_checked_at_parse_and_round_trips() {
    let s = schema("l2");
    let f = &s.table(s.collections[0].table).fields[3];
    assert_eq!(
        f.vector,
        Some(keel_schema::VectorSpec {
            dimensions: DIM as u32,
            metric: Metric::L2
        })
    );
    // The canonical text (stored in the file) parses back to the same schema.
    let again = Schema::parse(&s.to_fbs(), "c.fbs").unwrap();
    assert_eq!(again.fingerprint(), s.fingerprint());
    for (bad, msg) in [
        ("e: [int] (vector: 4)", "expects a [float] field"),
        ("e: [float] (vector: 0)", "dimension count"),
        (
            "e: [float] (vector: 4, metric: \"manhattan\")",
            "\"cosine\"",
        ),
        ("e: [float] (metric: \"l2\")", "needs (vector: N)"),
    ] {
        let e = Schema::parse(
            &format!("table T {{ id: int (primary); {bad}; }} root_type T;"),
            "t.fbs",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(msg), "{bad}: {e}");
    }
}

#[test]
fn wrong_dimension_nan_and_infinity_are_typed_errors_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let s = schema("cosine");
    let db = open(&path, &s);
    let good = encode(&s, 1, 0, 0, Some(&[1.0, 0.0, 0.0, 0.0]));
    db.write(move |t| t.insert_bytes("v.Photo", good).map(|_| ()))
        .wait()
        .unwrap();
    let cases: Vec<(Vec<f32>, VectorProblem)> = vec![
        (
            vec![1.0, 2.0, 3.0],
            VectorProblem::Dimensions {
                expected: 4,
                got: 3,
            },
        ),
        (
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
            VectorProblem::Dimensions {
                expected: 4,
                got: 5,
            },
        ),
        (
            vec![0.0, f32::INFINITY, 0.0, 0.0],
            VectorProblem::NotFinite {
                index: 1,
                value: f32::INFINITY,
            },
        ),
        (
            vec![0.0, 0.0, f32::NEG_INFINITY, 0.0],
            VectorProblem::NotFinite {
                index: 2,
                value: f32::NEG_INFINITY,
            },
        ),
    ];
    for (v, want) in cases {
        // An insert of a new object and an update of the existing one: both
        // refused, and the write closure's error rolls nothing in.
        for id in [2, 1] {
            let bytes = encode(&s, id, 0, 0, Some(&v));
            let got = db
                .write(move |t| {
                    let r = t.upsert_bytes("v.Photo", bytes.clone());
                    // The failed call itself stored nothing, even if the closure
                    // carries on.
                    assert_eq!(t.query("v.Photo").count()?, 1);
                    r.map(|_| ())
                })
                .wait()
                .unwrap_err();
            match got {
                Error::InvalidVector { field, problem, .. } => {
                    assert_eq!(field, "e");
                    assert_eq!(problem, want);
                }
                e => panic!("expected InvalidVector, got {e:?}"),
            }
        }
    }
    // NaN: compared apart (NaN != NaN).
    let bytes = encode(&s, 3, 0, 0, Some(&[f32::NAN, 0.0, 0.0, 0.0]));
    let e = db
        .write(move |t| t.insert_bytes("v.Photo", bytes).map(|_| ()))
        .wait()
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidVector { problem: VectorProblem::NotFinite { index: 0, value }, .. } if value.is_nan()),
        "{e:?}"
    );
    assert!(e.to_string().contains("\"e\""), "{e}");
    // A query vector is checked the same way.
    let p = s.reader("v.Photo").unwrap().path("e").unwrap();
    assert!(matches!(
        db.query("v.Photo").nearest(p.clone(), &[1.0], 1).all(),
        Err(Error::InvalidVector { .. })
    ));
    let n = s.reader("v.Photo").unwrap().path("n").unwrap();
    assert!(matches!(
        db.query("v.Photo").nearest(n, &[1.0; DIM], 1).all(),
        Err(Error::UnknownField { .. })
    ));
    db.close().wait().unwrap();
    assert_eq!(count(&path, "v.Photo"), 1);
    assert_eq!(count(&path, "v.Photo$vec"), 1);
    // The one stored vector is what the object holds.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let blob: Vec<u8> = conn
        .query_row("SELECT v3 FROM \"v.Photo$vec\" WHERE rowid = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(blob, keel_schema::vector::pack(&[1.0, 0.0, 0.0, 0.0]));
}

#[test]
fn packed_table_is_plain_sqlite_and_check_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let s = schema("dot");
    let db = open(&path, &s);
    let objs: Vec<Vec<u8>> = (0..5)
        .map(|i| {
            let e = [i as f32, 1.0, -0.5, 0.25];
            encode(&s, i, i % 2, i, (i != 3).then_some(&e[..]))
        })
        .collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes("v.Photo", o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.write(|t| t.delete_key("v.Photo", &[Value::Int(4)]).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    // Stock SQLite reads the floats back: little-endian f32.
    let rows: Vec<(i64, Option<Vec<u8>>)> = conn
        .prepare("SELECT rowid, v3 FROM \"v.Photo$vec\" ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3], (4, None)); // id 3 has no vector
    let b = rows[2].1.as_ref().unwrap();
    assert_eq!(f32::from_le_bytes([b[0], b[1], b[2], b[3]]), 2.0);
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let stored = std::sync::Arc::new(s.clone());
    assert!(inspect::vector_drift(&conn, &stored, 10)
        .unwrap()
        .is_empty());
    // Another tool changes the table behind keel's back.
    conn.execute_batch(
        "UPDATE \"v.Photo$vec\" SET v3 = x'00000000000000000000000000000000' WHERE rowid = 1;
         DELETE FROM \"v.Photo$vec\" WHERE rowid = 2;
         INSERT INTO \"v.Photo$vec\"(rowid, v3) VALUES (99, NULL);",
    )
    .unwrap();
    let drift = inspect::vector_drift(&conn, &stored, 10).unwrap();
    let got: Vec<(i64, &str)> = drift
        .iter()
        .map(|d| (d.rowid, d.problem.as_str()))
        .collect();
    assert_eq!(got, [(1, "stale e"), (2, "missing"), (99, "extra")]);
    assert_eq!(inspect::rebuild_vectors(&conn, &stored).unwrap(), 4);
    assert!(inspect::vector_drift(&conn, &stored, 10)
        .unwrap()
        .is_empty());
}

/// The naive reference: every candidate's distance (f64 sums, to check the
/// fast loops) and the order by `(distance, rowid)`.
fn reference(
    metric: Metric,
    q: &[f32],
    rows: &[(i64, i64, i64, Option<Vec<f32>>)],
    keep: &dyn Fn(i64, i64) -> bool,
    k: usize,
) -> Vec<(i64, f32)> {
    let qn = keel_schema::vector::norm(q);
    let mut all: Vec<(i64, f32)> = rows
        .iter()
        .filter(|(_, album, n, e)| e.is_some() && keep(*album, *n))
        .map(|(rowid, _, _, e)| {
            let e = e.as_ref().unwrap();
            let d = metric.distance(q, qn, e);
            // The fast loops against plain f64 arithmetic.
            let dot: f64 = q.iter().zip(e).map(|(a, b)| *a as f64 * *b as f64).sum();
            let want = match metric {
                Metric::Dot => -dot,
                Metric::L2 => q
                    .iter()
                    .zip(e)
                    .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                    .sum::<f64>()
                    .sqrt(),
                Metric::Cosine => {
                    let en: f64 = e.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                    let qn: f64 = q.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                    if qn * en > 0.0 {
                        1.0 - dot / (qn * en)
                    } else {
                        1.0
                    }
                }
            };
            assert!((d as f64 - want).abs() < 1e-3, "{metric}: {d} vs {want}");
            (*rowid, d)
        })
        .collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn small_vec() -> impl Strategy<Value = Option<Vec<f32>>> {
    // Few distinct small values: many exact ties.
    prop::option::weighted(
        0.9,
        prop::collection::vec((-2i8..=2).prop_map(|x| x as f32 * 0.5), DIM),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// k-NN through keel (no filter, a filter SQLite answers on an index
    /// column, a filter on an unindexed field evaluated on the bodies), in a
    /// snapshot and inside a write transaction, equals the naive reference.
    #[test]
    fn knn_equals_naive_reference(
        metric in prop::sample::select(vec!["cosine", "l2", "dot"]),
        vecs in prop::collection::vec((0i64..3, 0i64..10, small_vec()), 0..40),
        q in prop::collection::vec((-2i8..=2).prop_map(|x| x as f32 * 0.5), DIM),
        k in 0usize..12,
        album in 0i64..3,
        nmax in 0i64..10,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = schema(metric);
        let db = open(&dir.path().join("v.db"), &s);
        let rows: Vec<(i64, i64, i64, Option<Vec<f32>>)> = vecs
            .iter()
            .enumerate()
            .map(|(i, (a, n, e))| (i as i64 + 1, *a, *n, e.clone()))
            .collect();
        let objs: Vec<Vec<u8>> = rows.iter().map(|(id, a, n, e)| encode(&s, *id, *a, *n, e.as_deref())).collect();
        db.write(move |t| { for o in objs { t.insert_bytes("v.Photo", o)?; } Ok(()) }).wait().unwrap();
        let m = Metric::parse(metric).unwrap();
        let r = s.reader("v.Photo").unwrap();
        let (e, a, n) = (r.path("e").unwrap(), r.path("album").unwrap(), r.path("n").unwrap());
        let ids = |v: Vec<keel_query::Neighbor<keel_query::StoredObject>>| -> Vec<(i64, f32)> {
            v.into_iter().map(|x| (x.rowid, x.distance)).collect()
        };
        let want_all = reference(m, &q, &rows, &|_, _| true, k);
        prop_assert_eq!(ids(db.query("v.Photo").nearest(e.clone(), &q, k).all().unwrap()), want_all.clone());
        let want_album = reference(m, &q, &rows, &|x, _| x == album, k);
        prop_assert_eq!(ids(db.query("v.Photo").filter(Expr::eq(a.clone(), album)).nearest(e.clone(), &q, k).all().unwrap()), want_album.clone());
        let want_both = reference(m, &q, &rows, &|x, y| x == album && y < nmax, k);
        let both = Expr::eq(a.clone(), album).and(Expr::lt(n.clone(), nmax));
        prop_assert_eq!(ids(db.query("v.Photo").filter(both.clone()).nearest(e.clone(), &q, k).all().unwrap()), want_both.clone());
        // In a snapshot.
        let snap = db.snapshot(|sn| Ok(ids(sn.query("v.Photo").filter(both.clone()).nearest(e.clone(), &q, k).all()?))).unwrap();
        prop_assert_eq!(snap, want_both);
        // Inside a write transaction, seeing its own (uncommitted) writes: the
        // nearest object is a new one at the query point itself.
        let extra = encode(&s, 1000, album, 0, Some(&q));
        let (q2, e2) = (q.clone(), e.clone());
        let inside = db.write(move |t| {
            let id = t.insert_bytes("v.Photo", extra)?;
            let got = t.query("v.Photo").nearest(e2, &q2, 1).all()?;
            t.delete_key("v.Photo", &[Value::Int(1000)])?;
            Ok((id, got.first().map(|x| x.rowid)))
        }).wait();
        {
            let (id, first) = inside.unwrap();
            // Unless the query point is the zero vector under cosine (distance 1
            // to everything), or another object ties at the best distance with a
            // lower rowid, the new object is nearest.
            if k > 0 && !(m == Metric::Cosine && q.iter().all(|x| *x == 0.0)) {
                let best = want_all.first().map(|b| b.1);
                let new_d = m.distance(&q, keel_schema::vector::norm(&q), &q);
                if best.is_none_or(|b| new_d < b) {
                    prop_assert_eq!(first, Some(id));
                }
            }
        }
        prop_assert_eq!(ids(db.query("v.Photo").nearest(e.clone(), &q, k).all().unwrap()), want_all);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Upsert(i64, i64, Option<Vec<f32>>),
    Delete(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0i64..30, 0i64..3, small_vec()).prop_map(|(id, a, e)| Op::Upsert(id, a, e)),
        1 => (0i64..30).prop_map(Op::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// A live k-NN (filtered and not) equals a fresh query after every write of
    /// a random sequence of inserts, updates (moving vectors in, out and within
    /// the result, or dropping them) and deletes; its diffs say what entered and
    /// left; it scans again only when members left with no spare.
    #[test]
    fn live_knn_equals_fresh_query_after_every_write(
        metric in prop::sample::select(vec!["cosine", "l2", "dot"]),
        ops in prop::collection::vec(op(), 1..60),
        q in prop::collection::vec((-2i8..=2).prop_map(|x| x as f32 * 0.5), DIM),
        k in 1usize..5,
        album in 0i64..3,
    ) {
        use std::sync::{Arc, Mutex};
        let dir = tempfile::tempdir().unwrap();
        let s = schema(metric);
        let db = open(&dir.path().join("v.db"), &s);
        let r = s.reader("v.Photo").unwrap();
        let (e, a) = (r.path("e").unwrap(), r.path("album").unwrap());
        let filters = [None, Some(Expr::eq(a.clone(), album))];
        let mut subs = Vec::new();
        for f in &filters {
            let last: Arc<Mutex<Vec<keel_query::NearestUpdate>>> = Arc::default();
            let l2 = last.clone();
            let mut qy = db.query("v.Photo");
            if let Some(f) = f {
                qy = qy.filter(f.clone());
            }
            let sub = qy.nearest(e.clone(), &q, k).subscribe(move |u| l2.lock().unwrap().push(u)).unwrap();
            subs.push((f.clone(), last, sub));
        }
        let mut writes = 0u64;
        for o in &ops {
            let s2 = s.clone();
            let o2 = o.clone();
            db.write(move |t| match o2 {
                Op::Upsert(id, a, e) => t.upsert_bytes("v.Photo", encode(&s2, id, a, 0, e.as_deref())).map(|_| ()),
                Op::Delete(id) => t.delete_key("v.Photo", &[Value::Int(id)]).map(|_| ()),
            }).wait().unwrap();
            writes += 1;
            for (f, last, _) in &subs {
                let mut fresh = db.query("v.Photo");
                if let Some(f) = f {
                    fresh = fresh.filter(f.clone());
                }
                let fresh: Vec<(i64, f32, Vec<u8>)> = fresh.nearest(e.clone(), &q, k).all().unwrap()
                    .into_iter().map(|n| (n.rowid, n.distance, n.object.bytes)).collect();
                let ups = last.lock().unwrap();
                let live: Vec<(i64, f32, Vec<u8>)> = ups.last().unwrap().neighbors.iter()
                    .map(|n| (n.rowid, n.distance, n.object.bytes.clone())).collect();
                prop_assert_eq!(&live, &fresh, "after {:?}", o);
                // The diffs replayed from the first delivery give the same set.
                let mut set = std::collections::BTreeSet::new();
                for u in ups.iter() {
                    for r in &u.removed { set.remove(r); }
                    for r in &u.inserted { set.insert(*r); }
                }
                prop_assert_eq!(set, fresh.iter().map(|x| x.0).collect());
            }
        }
        for (_, _, sub) in &subs {
            let st = sub.stats();
            // One distance per changed row at most (a write changes one row).
            prop_assert!(st.distances <= writes);
            prop_assert!(st.scans <= 1 + writes);
        }
    }
}

/// Insert photo `i` for each `i` of `ids`, its vector `[i, 0, 0, 0]` (so its
/// distance to the origin is `i`), in one transaction.
fn insert_on_axis(db: &Database, s: &Schema, ids: std::ops::Range<i64>) {
    let objs: Vec<Vec<u8>> = ids
        .map(|i| encode(s, i, 0, 0, Some(&[i as f32, 0.0, 0.0, 0.0])))
        .collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes("v.Photo", o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
}

#[test]
fn live_knn_scans_again_only_when_no_spare_is_left() {
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let s = schema("l2");
    let db = open(&dir.path().join("v.db"), &s);
    insert_on_axis(&db, &s, 0..40);
    let e = s.reader("v.Photo").unwrap().path("e").unwrap();
    let last = Arc::new(Mutex::new(None));
    let l2 = last.clone();
    let sub = db
        .query("v.Photo")
        .nearest(e, &[0.0; DIM], 2)
        .subscribe(move |u| *l2.lock().unwrap() = Some(u))
        .unwrap();
    assert_eq!(sub.stats().scans, 1);
    // Inserts far away: one distance each, no delivery, no scan.
    for i in 100..120 {
        let b = encode(&s, i, 0, 0, Some(&[i as f32, 0.0, 0.0, 0.0]));
        db.write(move |t| t.insert_bytes("v.Photo", b).map(|_| ()))
            .wait()
            .unwrap();
    }
    let st = sub.stats();
    assert_eq!((st.scans, st.distances, st.deliveries), (1, 20, 1));
    // Deleting the nearest one by one: the spares take over (k = 2, 8 spares),
    // then one scan when fewer than k candidates remain.
    for id in 0..9 {
        db.write(move |t| t.delete_key("v.Photo", &[Value::Int(id)]).map(|_| ()))
            .wait()
            .unwrap();
        let u = last.lock().unwrap().clone().unwrap();
        assert_eq!(u.removed, vec![id + 1]); // rowid = id + 1
        assert_eq!(u.neighbors[0].rowid, id + 2);
    }
    assert_eq!(sub.stats().scans, 2);
}

/// A live k-NN result follows commits of another connection to the file (here
/// a second handle, as another process would be): with the change feed once the
/// catch-up reads them, without it at this handle's next read.
#[test]
fn live_knn_follows_another_connections_commits() {
    use std::sync::{Arc, Mutex};
    for share in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.db");
        let s = schema("l2");
        let opts = || StoreOptions::default().share_changes(share);
        let a = Database::open(&path, s.clone(), opts()).unwrap();
        let b = Database::open(&path, s.clone(), opts()).unwrap();
        insert_on_axis(&a, &s, 1..6);
        let e = s.reader("v.Photo").unwrap().path("e").unwrap();
        let nearest = Arc::new(Mutex::new(Vec::new()));
        let n2 = nearest.clone();
        let sub = a
            .query("v.Photo")
            .nearest(e, &[0.0; DIM], 2)
            .subscribe(move |u| {
                *n2.lock().unwrap() = u.neighbors.iter().map(|x| x.rowid).collect::<Vec<_>>()
            })
            .unwrap();
        assert_eq!(*nearest.lock().unwrap(), vec![1, 2]);
        // The other handle inserts the nearest photo of all.
        let o = encode(&s, 100, 0, 0, Some(&[0.5, 0.0, 0.0, 0.0]));
        let rowid = b
            .write(move |t| t.insert_bytes("v.Photo", o))
            .wait()
            .unwrap();
        let start = std::time::Instant::now();
        while *nearest.lock().unwrap() != vec![rowid, 1] {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "share_changes {share}: the live k-NN never saw the other handle's insert: {:?}",
                nearest.lock().unwrap()
            );
            // Without the feed: noticed at this handle's next read.
            a.query("v.Photo").count().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(sub);
    }
}
