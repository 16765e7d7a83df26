//! A schema change that alters what an index column holds: the
//! column is rebuilt in the background, and queries through it are right before,
//! during and after the rebuild (they read the field out of the bytes until the
//! column is complete).

use std::path::Path;

use keel_query::{Database, StoreOptions, Value};
use keel_schema::{CmpOp, Expr, Schema, SortKey};

fn schema(default: i64) -> Schema {
    Schema::parse(
        &format!(
            "namespace r; table T {{ id: int (primary); n: int = {default} (indexed); m: int (indexed); }} root_type T;"
        ),
        "r.fbs",
    )
    .unwrap()
}

/// Object `i`: every even one omits `n` (it reads the schema's default), and so
/// does every one whose `n` equals v1's default (FlatBuffers does not write it).
fn stored_n(i: i64) -> Option<i64> {
    (i % 2 == 1 && i % 7 != 1).then_some(i % 7)
}

fn fill(path: &Path, n: i64) {
    let s = schema(1);
    let db = Database::open(path, s.clone(), StoreOptions::default()).unwrap();
    let r = s.reader("r.T").unwrap();
    let objs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut j = serde_json::json!({"id": i, "m": i % 3});
            if let Some(v) = stored_n(i) {
                j["n"] = v.into();
            }
            r.encode_json(&j).unwrap()
        })
        .collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes("r.T", o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
}

/// The ids matching `n <op> v` and the ids in `n` order, evaluated in memory with
/// `default` for the objects that omit `n`.
fn expected(count: i64, default: i64, op: CmpOp, v: i64) -> (Vec<i64>, Vec<i64>) {
    let n = |i: i64| stored_n(i).unwrap_or(default);
    let hit: Vec<i64> = (0..count)
        .filter(|i| match op {
            CmpOp::Eq => n(*i) == v,
            CmpOp::Lt => n(*i) < v,
            CmpOp::Ge => n(*i) >= v,
            _ => unreachable!(),
        })
        .collect();
    let mut order: Vec<i64> = (0..count).collect();
    order.sort_by_key(|i| (n(*i), *i));
    (hit, order)
}

fn id_of(s: &Schema, bytes: &[u8]) -> i64 {
    let t = s.reader("r.T").unwrap();
    match t.read(bytes).unwrap().get(&t.path("id").unwrap()) {
        Value::Int(i) => i,
        v => panic!("id {v:?}"),
    }
}

fn check(db: &Database, s: &Schema, count: i64, default: i64, when: &str) {
    let p = s.reader("r.T").unwrap().path("n").unwrap();
    for (op, v) in [
        (CmpOp::Eq, default),
        (CmpOp::Eq, 1),
        (CmpOp::Lt, 3),
        (CmpOp::Ge, 5),
    ] {
        let (want, order) = expected(count, default, op, v);
        let got: Vec<i64> = db
            .query("r.T")
            .filter(Expr::Cmp {
                path: p.clone(),
                op,
                value: v.into(),
            })
            .order_by(SortKey::asc(s.reader("r.T").unwrap().path("id").unwrap()))
            .all()
            .unwrap()
            .iter()
            .map(|o| id_of(s, &o.bytes))
            .collect();
        assert!(
            got == want,
            "{when}: n {op:?} {v}: {} found, {} expected",
            got.len(),
            want.len()
        );
        let sorted: Vec<i64> = db
            .query("r.T")
            .order_by(SortKey::asc(p.clone()))
            .all()
            .unwrap()
            .iter()
            .map(|o| id_of(s, &o.bytes))
            .collect();
        assert!(sorted == order, "{when}: sorted by n");
    }
}

#[test]
fn a_new_default_rebuilds_the_index_column_and_queries_stay_right_throughout() {
    let count = 3000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    fill(&path, count);

    // Reopen with a new default: objects that omitted `n` now read 5.
    let v2 = schema(5);
    let db = Database::open(&path, v2.clone(), StoreOptions::default()).unwrap();
    // During the rebuild (queued on the writer at open; with this many objects
    // it is usually still running): right answers, by a scan of the bytes.
    check(&db, &v2, count, 5, "during the rebuild");
    db.wait_for_indexes().unwrap();
    let states = db.index_states().unwrap();
    assert!(
        states.iter().all(|(_, s)| s == "ready"),
        "after the rebuild: {states:?}"
    );
    check(&db, &v2, count, 5, "after the rebuild");
    // Through the index now.
    let plan = db
        .query("r.T")
        .filter(Expr::eq(v2.reader("r.T").unwrap().path("n").unwrap(), 5))
        .explain()
        .unwrap()
        .join("\n");
    assert!(plan.contains("r.T#1"), "{plan}");
    // The untouched index was not rebuilt, and a plain reopen rebuilds nothing.
    db.close().wait().unwrap();
    let db = Database::open(&path, v2.clone(), StoreOptions::default()).unwrap();
    assert!(db.index_states().unwrap().iter().all(|(_, s)| s == "ready"));
    check(&db, &v2, count, 5, "after a reopen");
    db.close().wait().unwrap();

    // What the column holds, read with plain SQLite: the new default.
    let c = rusqlite::Connection::open(&path).unwrap();
    let fives: i64 = c
        .query_row("SELECT count(*) FROM \"r.T\" WHERE f1 = 5", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fives, expected(count, 5, CmpOp::Eq, 5).0.len() as i64);
}

/// A snapshot whose view predates the end of a rebuild keeps reading the field out
/// of the bytes even after the rebuild commits: in its view the column is stale.
#[test]
fn a_snapshot_taken_during_a_rebuild_never_reads_the_stale_column() {
    let count = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    fill(&path, count);
    let v2 = schema(5);
    let db = Database::open(&path, v2.clone(), StoreOptions::default()).unwrap();
    let p = v2.reader("r.T").unwrap().path("n").unwrap();
    let want = expected(count, 5, CmpOp::Eq, 5).0.len() as u64;
    let (before, after) = db
        .snapshot(|s| {
            // The view starts with this read, most likely before the build commits.
            let before = s.query("r.T").filter(Expr::eq(p.clone(), 5)).count()?;
            db.wait_for_indexes()?;
            let after = s.query("r.T").filter(Expr::eq(p.clone(), 5)).count()?;
            Ok((before, after))
        })
        .unwrap();
    assert_eq!((before, after), (want, want));
    // Outside the snapshot the finished column is used, with the same answer.
    assert_eq!(
        db.query("r.T")
            .filter(Expr::eq(p.clone(), 5))
            .count()
            .unwrap(),
        want
    );
    db.close().wait().unwrap();
}
