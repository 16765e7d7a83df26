//! `Database::write_txn`: a foreign write body run inside the transaction, driven
//! from Rust the way Swift and Kotlin drive it (a `WriteBody` callback that reads
//! and writes through its `Txn`).

use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use keel_ffi::{
    encode_json, open_blocking, CallbackError, Database, Expr, KeelError, OpenOptions, SyncPolicy,
    Txn, Value, WriteBody, WriteOp, WriteResult,
};

const FBS: &str = "namespace demo;
table Counter { id: string (primary); n: long; note: string; }
root_type Counter;";

fn opts() -> OpenOptions {
    OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        ..OpenOptions::default()
    }
}

fn open(dir: &tempfile::TempDir, fbs: &str) -> Arc<Database> {
    open_blocking(
        dir.path().join("t.db").display().to_string(),
        fbs.into(),
        opts(),
        None,
    )
    .unwrap()
}

fn text(s: &str) -> Value {
    Value::Text { v: s.into() }
}

fn json(db: &Database, collection: &str, bytes: impl Into<Vec<u8>>) -> serde_json::Value {
    serde_json::from_str(&db.decode_json(collection.into(), bytes.into()).unwrap()).unwrap()
}

/// A body made of a Rust closure, as a Swift closure or Kotlin lambda would be.
struct Body<F>(F);
impl<F: Fn(Arc<Txn>) -> Result<(), CallbackError> + Send + Sync> WriteBody for Body<F> {
    fn run(&self, txn: Arc<Txn>) -> Result<(), CallbackError> {
        (self.0)(txn)
    }
}

fn failed(e: KeelError) -> CallbackError {
    CallbackError::Failed {
        reason: e.to_string(),
    }
}

/// Read-modify-write of one counter inside the body: `get`, decode, `write` the
/// incremented value.
fn increment(db: &Arc<Database>) -> impl std::future::Future<Output = Result<(), KeelError>> {
    let d = Arc::clone(db);
    let db = Arc::clone(db);
    async move {
        db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
            let bytes = t
                .get("demo.Counter".into(), vec![text("c")])
                .map_err(failed)?
                .expect("the counter exists");
            let n = json(&d, "demo.Counter", bytes)["n"].as_i64().unwrap();
            let next = d
                .encode_json(
                    "demo.Counter".into(),
                    format!(r#"{{"id": "c", "n": {}}}"#, n + 1),
                )
                .map_err(failed)?;
            t.write(WriteOp::Update {
                collection: "demo.Counter".into(),
                bytes: next,
            })
            .map_err(failed)?;
            Ok(())
        })))
        .await
    }
}

#[test]
fn write_txn_concurrent_read_modify_write_increments_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, FBS);
    let c = db
        .encode_json("demo.Counter".into(), r#"{"id": "c", "n": 0}"#.into())
        .unwrap();
    block_on(db.write(vec![WriteOp::Insert {
        collection: "demo.Counter".into(),
        bytes: c,
    }]))
    .unwrap();
    // 100 writes in flight at once, from 4 threads: each body reads the value the
    // group's earlier bodies wrote.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let futs: Vec<_> = (0..25).map(|_| increment(&db)).collect();
                for f in futs {
                    block_on(f).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let bytes = db
        .get("demo.Counter".into(), vec![text("c")])
        .unwrap()
        .unwrap();
    assert_eq!(json(&db, "demo.Counter", bytes)["n"], 100);
    block_on(db.close()).unwrap();
}

#[test]
fn write_txn_reads_see_earlier_writes_and_a_throw_rolls_back_only_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, FBS);
    let d = Arc::clone(&db);
    let seen = Arc::new(Mutex::new(None));
    let s = Arc::clone(&seen);
    block_on(db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        for id in ["a", "b", "c"] {
            let bytes = d
                .encode_json(
                    "demo.Counter".into(),
                    format!(r#"{{"id": "{id}", "n": 1}}"#),
                )
                .map_err(failed)?;
            t.write(WriteOp::Insert {
                collection: "demo.Counter".into(),
                bytes,
            })
            .map_err(failed)?;
        }
        let q = d
            .query("demo.Counter".into())
            .filter(Expr::ne("id".into(), text("b")));
        let all = t.all(q.clone()).map_err(failed)?;
        let packed = t.all_packed(q.clone()).map_err(failed)?;
        *s.lock().unwrap() = Some((
            t.count(d.query("demo.Counter".into())).map_err(failed)?,
            all.len(),
            packed.count,
            t.first(q).map_err(failed)?.is_some(),
        ));
        // A failing operation throws a typed error; the body catches it and goes on.
        let dup = d
            .encode_json("demo.Counter".into(), r#"{"id": "a"}"#.into())
            .map_err(failed)?;
        let e = t
            .write(WriteOp::Insert {
                collection: "demo.Counter".into(),
                bytes: dup,
            })
            .unwrap_err();
        assert!(matches!(e, KeelError::AlreadyExists { .. }), "{e:?}");
        Ok(())
    }))))
    .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some((3, 2, 2, true)));

    // Two bodies in flight; the second throws after writing: only its writes go.
    let d = Arc::clone(&db);
    let ok = db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        t.write(WriteOp::Delete {
            collection: "demo.Counter".into(),
            key: vec![text("a")],
        })
        .map_err(failed)?;
        let _ = &d;
        Ok(())
    })));
    let d = Arc::clone(&db);
    let bad = db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        t.write(WriteOp::Delete {
            collection: "demo.Counter".into(),
            key: vec![text("b")],
        })
        .map_err(failed)?;
        let _ = &d;
        Err(CallbackError::Failed {
            reason: "the app said no".into(),
        })
    })));
    let (ok, bad) = block_on(futures::future::join(ok, bad));
    ok.unwrap();
    match bad {
        Err(KeelError::Cancelled { message }) => assert!(message.contains("the app said no")),
        other => panic!("{other:?}"),
    }
    assert!(db
        .get("demo.Counter".into(), vec![text("a")])
        .unwrap()
        .is_none());
    assert!(db
        .get("demo.Counter".into(), vec![text("b")])
        .unwrap()
        .is_some());
    block_on(db.close()).unwrap();
}

#[test]
fn write_txn_transaction_kept_past_its_body_or_used_elsewhere_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, FBS);
    let kept: Arc<Mutex<Option<Arc<Txn>>>> = Arc::new(Mutex::new(None));
    let k = Arc::clone(&kept);
    let other_thread = Arc::new(Mutex::new(None));
    let o = Arc::clone(&other_thread);
    block_on(db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        assert!(t.is_active());
        let t2 = Arc::clone(&t);
        *o.lock().unwrap() = Some(
            std::thread::spawn(move || t2.get("demo.Counter".into(), vec![text("x")]))
                .join()
                .unwrap(),
        );
        *k.lock().unwrap() = Some(t);
        Ok(())
    }))))
    .unwrap();
    let elsewhere = other_thread.lock().unwrap().take().unwrap();
    assert!(
        matches!(elsewhere, Err(KeelError::InvalidArgument { .. })),
        "{elsewhere:?}"
    );
    let t = kept.lock().unwrap().take().unwrap();
    assert!(!t.is_active());
    let e = t.get("demo.Counter".into(), vec![text("x")]).unwrap_err();
    assert!(matches!(e, KeelError::InvalidArgument { .. }), "{e:?}");
    block_on(db.close()).unwrap();
}

const V1: &str = "namespace evo;
enum Mood : ubyte { Calm, Happy }
table Img { url: string; }
union Media { Img }
table Note { id: string (primary); stars: int = 3; mood: Mood; media: Media; }
root_type Note;";

const V2: &str = "namespace evo;
enum Mood : ubyte { Calm, Happy, Grumpy }
table Img { url: string; }
table Vid { secs: int; }
union Media { Img, Vid }
table Note { id: string (primary); stars: int = 3; mood: Mood; media: Media; views: uint = 10; tags: [string]; }
root_type Note;";

#[test]
fn change_diff_from_an_old_schema_keeps_unknown_fields_enum_values_and_union_members() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = open(&dir, V2);
    let written = encode_json(
        V2.into(),
        "evo.Note".into(),
        r#"{"id": "n1", "stars": 5, "mood": "Grumpy", "media_type": "Vid", "media": {"secs": 42},
            "views": 1234, "tags": ["new"]}"#
            .into(),
    )
    .unwrap();
    block_on(v2.write(vec![WriteOp::Insert {
        collection: "evo.Note".into(),
        bytes: written.clone(),
    }]))
    .unwrap();
    block_on(v2.close()).unwrap();

    // An older build: its types know neither `views`, `tags`, `Grumpy` nor `Vid`.
    // It decodes the stored object into what it knows (the body sees the stored
    // version), edits `stars`, and sends both encodings.
    let v1 = open(&dir, V1);
    let d = Arc::clone(&v1);
    let rowid = Arc::new(Mutex::new(0));
    let r = Arc::clone(&rowid);
    block_on(v1.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        assert!(t
            .get("evo.Note".into(), vec![text("n1")])
            .map_err(failed)?
            .is_some());
        // What v1 types make of it: the unknown enum value kept as a number, the
        // unknown union member dropped, the unknown fields gone.
        let before = encode_json(
            V1.into(),
            "evo.Note".into(),
            r#"{"id": "n1", "stars": 5, "mood": 2}"#.into(),
        )
        .map_err(failed)?;
        let after = encode_json(
            V1.into(),
            "evo.Note".into(),
            r#"{"id": "n1", "stars": 15, "mood": 2}"#.into(),
        )
        .map_err(failed)?;
        *r.lock().unwrap() = t
            .change_diff("evo.Note".into(), vec![text("n1")], before, after)
            .map_err(failed)?;
        let _ = &d;
        Ok(())
    }))))
    .unwrap();
    assert!(*rowid.lock().unwrap() > 0);
    block_on(v1.close()).unwrap();

    let v2 = open(&dir, V2);
    let now = json(
        &v2,
        "evo.Note",
        v2.get("evo.Note".into(), vec![text("n1")])
            .unwrap()
            .unwrap(),
    );
    let mut expected = json(&v2, "evo.Note", written);
    expected["stars"] = 15.into();
    assert_eq!(now, expected);
    block_on(v2.close()).unwrap();
}

#[test]
fn change_diff_of_a_missing_object_or_bad_bytes_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, FBS);
    let d = Arc::clone(&db);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e2 = Arc::clone(&errors);
    block_on(db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        let a = d
            .encode_json("demo.Counter".into(), r#"{"id": "z", "n": 1}"#.into())
            .map_err(failed)?;
        let b = d
            .encode_json("demo.Counter".into(), r#"{"id": "z", "n": 2}"#.into())
            .map_err(failed)?;
        let mut e = e2.lock().unwrap();
        e.push(
            t.change_diff("demo.Counter".into(), vec![text("z")], a.clone(), b)
                .unwrap_err(),
        );
        e.push(
            t.change_diff("demo.Counter".into(), vec![text("z")], a, vec![1, 2, 3])
                .unwrap_err(),
        );
        Ok(())
    }))))
    .unwrap();
    let e = errors.lock().unwrap();
    assert!(matches!(e[0], KeelError::NotFound { .. }), "{:?}", e[0]);
    assert!(
        matches!(e[1], KeelError::InvalidObject { .. }),
        "{:?}",
        e[1]
    );
    block_on(db.close()).unwrap();
}

#[test]
fn write_txn_keeps_group_commit_results() {
    // A recorded-ops batch and a body in the same group both land.
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, FBS);
    let bytes = db
        .encode_json("demo.Counter".into(), r#"{"id": "r"}"#.into())
        .unwrap();
    let a = db.write(vec![WriteOp::Insert {
        collection: "demo.Counter".into(),
        bytes,
    }]);
    let d = Arc::clone(&db);
    let b = db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        let bytes = d
            .encode_json("demo.Counter".into(), r#"{"id": "s"}"#.into())
            .map_err(failed)?;
        match t
            .write(WriteOp::Upsert {
                collection: "demo.Counter".into(),
                bytes,
            })
            .map_err(failed)?
        {
            WriteResult::Written { rowid } => assert!(rowid > 0),
            other => panic!("{other:?}"),
        }
        Ok(())
    })));
    let (a, b) = block_on(futures::future::join(a, b));
    a.unwrap();
    b.unwrap();
    assert_eq!(db.count("demo.Counter".into()).unwrap(), 2);
    block_on(db.close()).unwrap();
}

/// `Txn::write_all` runs its operations in order as consecutive `write`
/// calls would: the first failure throws, the operations before it stay written
/// and the ones after it are not run.
#[test]
fn write_all_applies_in_order_and_stops_at_the_first_failure() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, FBS);
    let insert = |id: &str, n: i64| WriteOp::Insert {
        collection: "demo.Counter".into(),
        bytes: db
            .encode_json(
                "demo.Counter".into(),
                format!(r#"{{"id": "{id}", "n": {n}}}"#),
            )
            .unwrap(),
    };
    let first = vec![insert("a", 1), insert("b", 2)];
    // "d" is written, "a" again fails, "c" is not run.
    let second = vec![insert("d", 5), insert("a", 3), insert("c", 4)];
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = Arc::clone(&seen);
    let d = Arc::clone(&db);
    block_on(db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        let results = t.write_all(first.clone()).map_err(failed)?;
        s.lock().unwrap().push(format!("{}", results.len()));
        let e = t.write_all(second.clone()).unwrap_err();
        s.lock().unwrap().push(format!("{e:?}"));
        let n = t.count(d.query("demo.Counter".into())).map_err(failed)?;
        s.lock().unwrap().push(n.to_string());
        Ok(())
    }))))
    .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0], "2", "{seen:?}");
    assert!(seen[1].contains("AlreadyExists"), "{seen:?}");
    assert_eq!(seen[2], "3", "a, b and d: {seen:?}");
    assert!(db
        .get("demo.Counter".into(), vec![text("d")])
        .unwrap()
        .is_some());
    assert!(db
        .get("demo.Counter".into(), vec![text("c")])
        .unwrap()
        .is_none());
}

#[test]
fn write_txn_nearest_sees_the_bodys_own_writes() {
    const VEC: &str = "namespace demo;
        table Photo { id: string (primary); e: [float] (vector: 2, metric: \"l2\"); }
        root_type Photo;";
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, VEC);
    let insert = |id: &str, e: [f32; 2]| WriteOp::Insert {
        collection: "demo.Photo".into(),
        bytes: encode_json(
            VEC.into(),
            "demo.Photo".into(),
            serde_json::json!({"id": id, "e": e}).to_string(),
        )
        .unwrap(),
    };
    block_on(db.write(vec![insert("far", [5.0, 5.0])])).unwrap();
    let d = Arc::clone(&db);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let near = insert("near", [1.0, 0.0]);
    block_on(db.write_txn(Box::new(Body(move |t: Arc<Txn>| {
        let q = || d.query("demo.Photo".into());
        let before = t
            .nearest(q(), "e".into(), vec![0.0, 0.0], 1)
            .map_err(failed)?;
        t.write(near.clone()).map_err(failed)?;
        let after = t
            .nearest(q(), "e".into(), vec![0.0, 0.0], 1)
            .map_err(failed)?;
        let bad = t.nearest(q(), "e".into(), vec![0.0], 1).unwrap_err();
        assert!(matches!(bad, KeelError::InvalidArgument { .. }), "{bad:?}");
        s.lock().unwrap().extend([before[0].rowid, after[0].rowid]);
        Ok(())
    }))))
    .unwrap();
    // "far" is rowid 1; "near", written inside the body, is rowid 2.
    assert_eq!(*seen.lock().unwrap(), vec![1, 2]);
    block_on(db.close()).unwrap();
}
