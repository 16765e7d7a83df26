//! The exported API driven from Rust, the way the foreign bindings drive it: bytes
//! in, bytes out, typed errors for bad input, listeners on keel threads.

use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use keel_ffi::{
    check_schema, encode_json, open_async, open_blocking, CallbackError, DictValue, Expr,
    KeelError, NearestListener, NearestUpdate, ObjectEvent, ObjectListener, OpenOptions,
    OpenProgress, OpenProgressListener, QueryListener, QueryUpdate, SyncPolicy, Value, WriteOp,
    WriteResult,
};

const FBS: &str = "namespace demo;
table Post { id: string (primary); title: string; priority: int = 1 (indexed); }
root_type Post;";

fn post(id: &str, priority: i32) -> Vec<u8> {
    encode_json(
        FBS.into(),
        "demo.Post".into(),
        format!(r#"{{"id": "{id}", "priority": {priority}}}"#),
    )
    .unwrap()
}

fn text(s: &str) -> Value {
    Value::Text { v: s.into() }
}

struct Progress(Arc<Mutex<Vec<OpenProgress>>>);
impl OpenProgressListener for Progress {
    fn on_progress(&self, p: OpenProgress) -> Result<(), CallbackError> {
        self.0.lock().unwrap().push(p);
        Ok(())
    }
}

struct Updates(Arc<Mutex<Vec<QueryUpdate>>>);
impl QueryListener for Updates {
    fn on_update(&self, u: QueryUpdate) -> Result<(), CallbackError> {
        self.0.lock().unwrap().push(u);
        Ok(())
    }
}

struct Events(Arc<Mutex<Vec<ObjectEvent>>>);
impl ObjectListener for Events {
    fn on_event(&self, e: ObjectEvent) -> Result<(), CallbackError> {
        self.0.lock().unwrap().push(e);
        Ok(())
    }
}

#[test]
fn open_write_query_subscribe_dictionary_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db").display().to_string();
    let progress = Arc::new(Mutex::new(Vec::new()));
    let opts = OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        ..OpenOptions::default()
    };
    let db = block_on(open_async(
        path.clone(),
        FBS.into(),
        opts,
        Some(Box::new(Progress(Arc::clone(&progress)))),
    ))
    .unwrap();
    assert!(progress.lock().unwrap().last().unwrap().done);

    let updates = Arc::new(Mutex::new(Vec::new()));
    let sub = db
        .query("demo.Post".into())
        .filter(Expr::ge("priority".into(), Value::Integer { v: 5 }))
        .order_by("priority".into(), true)
        .subscribe(Box::new(Updates(Arc::clone(&updates))))
        .unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let osub = db
        .subscribe_object(
            "demo.Post".into(),
            vec![text("p7")],
            Box::new(Events(Arc::clone(&events))),
        )
        .unwrap();

    let ops = (0..10)
        .map(|i| WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: post(&format!("p{i}"), i),
        })
        .collect();
    let res = block_on(db.write(ops)).unwrap();
    assert!(res.iter().all(|r| matches!(r, WriteResult::Written { .. })));
    // Delivered before the write resolved.
    {
        let u = updates.lock().unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[1].objects.len(), 5);
        assert_eq!(u[1].diff.inserted, vec![0, 1, 2, 3, 4]);
    }
    assert!(matches!(events.lock().unwrap()[..], [ObjectEvent::Deleted]));
    assert!(!osub.is_active());

    let q = db
        .query("Post".into())
        .filter(Expr::ge("priority".into(), Value::Integer { v: 5 }))
        .limit(3);
    assert_eq!(q.count().unwrap(), 3);
    assert_eq!(block_on(q.all_async()).unwrap().len(), 3);
    assert!(db
        .get("demo.Post".into(), vec![text("p3")])
        .unwrap()
        .is_some());

    sub.cancel();
    sub.cancel();
    block_on(db.write(vec![WriteOp::Delete {
        collection: "demo.Post".into(),
        key: vec![text("p9")],
    }]))
    .unwrap();
    assert_eq!(
        updates.lock().unwrap().len(),
        2,
        "cancelled subscription was called"
    );

    let d = db.dictionary();
    d.set_string("theme".into(), "dark".into()).unwrap();
    d.set("n".into(), DictValue::Integer { v: 3 }).unwrap();
    assert_eq!(
        d.get_string("theme".into()).unwrap().as_deref(),
        Some("dark")
    );
    assert!(matches!(
        d.get_int("theme".into()),
        Err(KeelError::TypeMismatch { .. })
    ));
    assert_eq!(
        d.keys().unwrap(),
        vec!["n".to_string(), "theme".to_string()]
    );
    block_on(d.sync()).unwrap();

    assert!(db.open_report().text.contains("sync_wal"));
    block_on(db.close()).unwrap();
    assert!(matches!(
        db.get("demo.Post".into(), vec![text("p1")]),
        Err(KeelError::Closed { .. })
    ));

    let again = open_blocking(path, FBS.into(), OpenOptions::default(), None).unwrap();
    assert_eq!(
        again
            .dictionary()
            .get_string("theme".into())
            .unwrap()
            .as_deref(),
        Some("dark")
    );
    assert_eq!(again.count("demo.Post".into()).unwrap(), 9);
    block_on(again.close()).unwrap();
}

#[test]
fn bad_input_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db").display().to_string();
    assert!(matches!(
        check_schema("table { nope".into()),
        Err(KeelError::InvalidSchema { .. })
    ));
    assert!(matches!(
        block_on(open_async(
            path.clone(),
            "table T { x: nosuch; } root_type T;".into(),
            OpenOptions::default(),
            None
        )),
        Err(KeelError::InvalidSchema { .. })
    ));
    let db = open_blocking(path, FBS.into(), OpenOptions::default(), None).unwrap();
    let write = |op| block_on(db.write(vec![op]));
    assert!(matches!(
        write(WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: vec![1, 2, 3]
        }),
        Err(KeelError::InvalidObject { .. })
    ));
    assert!(matches!(
        write(WriteOp::Insert {
            collection: "Nope".into(),
            bytes: post("a", 1)
        }),
        Err(KeelError::UnknownCollection { .. })
    ));
    assert!(matches!(
        db.get("demo.Post".into(), vec![Value::Integer { v: 1 }]),
        Err(KeelError::TypeMismatch { .. })
    ));
    assert!(matches!(
        db.query("demo.Post".into())
            .filter(Expr::gt("priority".into(), text("high")))
            .all(),
        Err(KeelError::TypeMismatch { .. })
    ));
    assert!(matches!(
        db.query("demo.Post".into())
            .order_by("nope".into(), false)
            .all(),
        Err(KeelError::UnknownField { .. })
    ));
    write(WriteOp::Insert {
        collection: "demo.Post".into(),
        bytes: post("a", 1),
    })
    .unwrap();
    assert!(matches!(
        write(WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: post("a", 1)
        }),
        Err(KeelError::AlreadyExists { .. })
    ));
    assert!(matches!(
        write(WriteOp::Update {
            collection: "demo.Post".into(),
            bytes: post("zz", 1)
        }),
        Err(KeelError::NotFound { .. })
    ));
    // A failed op rolls the whole batch back.
    assert!(block_on(db.write(vec![
        WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: post("b", 1)
        },
        WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: vec![0; 9]
        },
    ]))
    .is_err());
    assert!(db
        .get("demo.Post".into(), vec![text("b")])
        .unwrap()
        .is_none());
    block_on(db.close()).unwrap();
}

/// `WriteOp::Change` / `ChangeFrom` write only the fields they name, on top of the
/// stored version: a change built from a stale copy keeps what was committed since.
#[test]
fn change_ops_write_only_their_fields() {
    use keel_ffi::FieldValue;
    let dir = tempfile::tempdir().unwrap();
    let db = open_blocking(
        dir.path().join("c.db").display().to_string(),
        FBS.into(),
        OpenOptions::default(),
        None,
    )
    .unwrap();
    block_on(db.write(vec![WriteOp::Insert {
        collection: "demo.Post".into(),
        bytes: post("a", 1),
    }]))
    .unwrap();
    // Another writer sets the title.
    block_on(db.write(vec![WriteOp::Change {
        collection: "demo.Post".into(),
        key: vec![text("a")],
        values: vec![FieldValue {
            field: "title".into(),
            value: text("T"),
        }],
    }]))
    .unwrap();
    // A stale copy (no title) changes only the priority.
    block_on(db.write(vec![WriteOp::ChangeFrom {
        collection: "demo.Post".into(),
        key: vec![text("a")],
        bytes: post("a", 9),
        fields: vec!["priority".into()],
    }]))
    .unwrap();
    let schema = keel_schema::Schema::parse(FBS, "demo.fbs").unwrap();
    let r = schema.reader("demo.Post").unwrap();
    let bytes = db
        .get("demo.Post".into(), vec![text("a")])
        .unwrap()
        .unwrap();
    let obj = r.read(&bytes).unwrap();
    assert_eq!(obj.get(&r.path("title").unwrap()), "T".into());
    assert_eq!(obj.get(&r.path("priority").unwrap()), 9.into());
    // Bad input: typed errors, nothing written.
    let err = block_on(db.write(vec![WriteOp::Change {
        collection: "demo.Post".into(),
        key: vec![text("a")],
        values: vec![FieldValue {
            field: "priority".into(),
            value: text("high"),
        }],
    }]))
    .unwrap_err();
    assert!(matches!(err, KeelError::TypeMismatch { .. }), "{err:?}");
    let err = block_on(db.write(vec![WriteOp::ChangeFrom {
        collection: "demo.Post".into(),
        key: vec![text("nobody")],
        bytes: post("nobody", 2),
        fields: vec!["priority".into()],
    }]))
    .unwrap_err();
    assert!(matches!(err, KeelError::NotFound { .. }), "{err:?}");
    block_on(db.close()).unwrap();
}

/// Arithmetic terms, null tests on any expression and order by a list, through the
/// exported API.
#[test]
fn terms_null_tests_and_list_order() {
    use keel_ffi::Term;
    let dir = tempfile::tempdir().unwrap();
    let db = open_blocking(
        dir.path().join("t.db").display().to_string(),
        FBS.into(),
        OpenOptions::default(),
        None,
    )
    .unwrap();
    let ops = (1..=9)
        .map(|i| WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: post(&format!("p{i}"), i),
        })
        .collect();
    block_on(db.write(ops)).unwrap();
    let int = |v| Term::constant(Value::Integer { v });
    let q = db
        .query("demo.Post".into())
        .filter(Term::field("priority".into()).modulo(int(3)).eq(int(0)));
    assert_eq!(q.count().unwrap(), 3);
    let q = db.query("demo.Post".into()).filter(
        Term::field("priority".into())
            .times(int(2))
            .plus(int(1))
            .gt(int(15)),
    );
    assert_eq!(q.count().unwrap(), 2);
    // `title` is absent everywhere: the comparison is unknown, its null test true.
    let unknown = Expr::eq("title".into(), text("x")).is_unknown();
    assert_eq!(
        db.query("demo.Post".into())
            .filter(unknown)
            .count()
            .unwrap(),
        9
    );
    let by_zero = Term::field("priority".into()).divided_by(int(0)).is_null();
    assert_eq!(
        db.query("demo.Post".into())
            .filter(by_zero)
            .count()
            .unwrap(),
        9
    );
    let ordered = db
        .query("demo.Post".into())
        .order_by_list(
            "priority".into(),
            vec![Value::Integer { v: 5 }, Value::Integer { v: 2 }],
            false,
            false,
        )
        .order_by("priority".into(), false)
        .limit(4)
        .all()
        .unwrap();
    let schema = keel_schema::Schema::parse(FBS, "demo.fbs").unwrap();
    let r = schema.reader("demo.Post").unwrap();
    let prios: Vec<keel_schema::Value> = ordered
        .iter()
        .map(|o| r.read(&o.bytes).unwrap().get(&r.path("priority").unwrap()))
        .collect();
    // Unlisted first (1, 3, 4, …), then 5, then 2.
    assert_eq!(prios, vec![1.into(), 3.into(), 4.into(), 6.into()]);
    // Arithmetic on a string field is a typed error.
    let bad = Term::field("title".into()).plus(int(1)).gt(int(0));
    let err = db
        .query("demo.Post".into())
        .filter(bad)
        .count()
        .unwrap_err();
    assert!(matches!(err, KeelError::TypeMismatch { .. }), "{err:?}");
    block_on(db.close()).unwrap();
}

/// Readable before durable through the FFI: `open_async` resolves while a slow
/// barrier sync runs, reads answer, a write waits for it, `durable()` resolves after
/// it, and the listener gets the `Durable` event after the handover.
#[test]
fn open_async_is_readable_before_durable() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.db");
    let db = open_blocking(
        src.display().to_string(),
        FBS.into(),
        OpenOptions::default(),
        None,
    )
    .unwrap();
    let ops = (0..5)
        .map(|i| WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: post(&format!("p{i}"), i),
        })
        .collect();
    block_on(db.write(ops)).unwrap();
    // Copy the files while open: the copy is a run killed with its commits in the WAL.
    let path = dir.path().join("app.db");
    for suffix in ["", "-wal"] {
        std::fs::copy(
            format!("{}{suffix}", src.display()),
            format!("{}{suffix}", path.display()),
        )
        .unwrap();
    }
    block_on(db.close()).unwrap();

    let progress = Arc::new(Mutex::new(Vec::new()));
    let opts = OpenOptions {
        open_barrier_sync: Some(SyncPolicy::SimulatedLatency { delay_ms: 1500 }),
        ..OpenOptions::default()
    };
    let db = block_on(open_async(
        path.display().to_string(),
        FBS.into(),
        opts,
        Some(Box::new(Progress(Arc::clone(&progress)))),
    ))
    .unwrap();
    let handed_over = progress.lock().unwrap().len();
    assert!(!db.is_durable());
    assert_eq!(db.count("demo.Post".into()).unwrap(), 5);
    let write = std::thread::spawn({
        let db = Arc::clone(&db);
        move || {
            block_on(db.write(vec![WriteOp::Insert {
                collection: "demo.Post".into(),
                bytes: post("late", 9),
            }]))
        }
    });
    block_on(db.durable()).unwrap();
    assert!(db.is_durable());
    write.join().unwrap().unwrap();
    assert_eq!(db.count("demo.Post".into()).unwrap(), 6);
    let ev = progress.lock().unwrap();
    let ms: Vec<_> = ev.iter().filter_map(|p| p.milestone).collect();
    assert_eq!(
        ms,
        [keel_ffi::Milestone::Readable, keel_ffi::Milestone::Durable]
    );
    assert!(ev.len() > handed_over, "no event after the handover");
    assert!(ev.last().unwrap().done);
    let r = db.open_report();
    assert!(r.durable_ms.unwrap() >= 1500.0 && r.readable_ms < r.durable_ms.unwrap());
    drop(ev);
    block_on(db.close()).unwrap();
}

#[test]
fn the_write_path_refuses_an_amplification_bomb() {
    // A ~1 MB buffer whose `[string]` holds 250,000 offsets to one 8 KB string:
    // ~2 GB decoded, in every language that reads the row, if it were stored.
    const TAGGED: &str = "namespace demo;
table Post { id: string (primary); tags: [string]; }
root_type Post;";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bomb.db").display().to_string();
    let db = open_blocking(path, TAGGED.into(), OpenOptions::default(), None).unwrap();
    let mut b = keel_schema::wire::Builder::new();
    let s = b.create_string(&"x".repeat(8192));
    let tags = b.create_offset_vector(&vec![s; 250_000]);
    let id = b.create_string("bomb");
    b.start_table();
    b.add_offset(0, id);
    b.add_offset(1, tags);
    let root = b.end_table();
    let bomb = b.finish(root, None);
    for op in [
        WriteOp::Insert {
            collection: "demo.Post".into(),
            bytes: bomb.clone(),
        },
        WriteOp::Upsert {
            collection: "demo.Post".into(),
            bytes: bomb,
        },
    ] {
        match block_on(db.write(vec![op])) {
            Err(KeelError::InvalidObject { message }) => {
                assert!(message.contains("decode budget"), "{message}")
            }
            other => panic!("not refused as an invalid object: {other:?}"),
        }
    }
}

/// Full-text search through the exported expressions: `matches` and
/// `search` filters, relevance order, and malformed query text as a typed error.
#[test]
fn full_text_search_through_expressions() {
    const SEARCH: &str = "attribute \"searchable\"; namespace demo;
        table Note { id: string (primary); title: string (searchable: 2.0); body: string (searchable); }
        root_type Note;";
    let dir = tempfile::tempdir().unwrap();
    let db = open_blocking(
        dir.path().join("s.db").display().to_string(),
        SEARCH.into(),
        OpenOptions::default(),
        None,
    )
    .unwrap();
    let note = |id: &str, title: &str, body: &str| WriteOp::Insert {
        collection: "demo.Note".into(),
        bytes: encode_json(
            SEARCH.into(),
            "demo.Note".into(),
            serde_json::json!({"id": id, "title": title, "body": body}).to_string(),
        )
        .unwrap(),
    };
    block_on(db.write(vec![
        note("a", "Straße", "über alles"),
        note("b", "北京天气", "晴"),
        note("c", "notes", "strasse strasse"),
    ]))
    .unwrap();
    let q = || db.query("demo.Note".into());
    assert_eq!(
        q().filter(Expr::search("strasse".into())).count().unwrap(),
        2
    );
    assert_eq!(
        q().filter(Expr::matches("title".into(), "天".into()))
            .count()
            .unwrap(),
        1
    );
    let ranked = q()
        .filter(Expr::search("strasse".into()))
        .order_by_relevance(false)
        .all()
        .unwrap();
    let schema = keel_schema::Schema::parse(SEARCH, "s.fbs").unwrap();
    let r = schema.reader("demo.Note").unwrap();
    let ids: Vec<keel_schema::Value> = ranked
        .iter()
        .map(|o| r.read(&o.bytes).unwrap().get(&r.path("id").unwrap()))
        .collect();
    assert_eq!(ids, vec!["a".into(), "c".into()]);
    assert_eq!(
        Expr::matches("title".into(), "x".into()).describe(),
        "title MATCHES \"x\""
    );
    for bad in ["(open", "NOT x", ""] {
        let err = q().filter(Expr::search(bad.into())).all().unwrap_err();
        assert!(matches!(err, KeelError::InvalidArgument { .. }), "{err:?}");
    }
    // A field that is not searchable.
    let err = q()
        .filter(Expr::matches("id".into(), "a".into()))
        .all()
        .unwrap_err();
    assert!(matches!(err, KeelError::TypeMismatch { .. }), "{err:?}");
    block_on(db.close()).unwrap();
}

/// A collection of 2-d photos (`l2`) with an indexed album, for the nearest tests.
const PHOTOS: &str = "namespace demo;
    table Photo { id: string (primary); album: int (indexed); e: [float] (vector: 2, metric: \"l2\"); }
    root_type Photo;";

fn open_photos(path: &std::path::Path) -> Arc<keel_ffi::Database> {
    open_blocking(
        path.display().to_string(),
        PHOTOS.into(),
        OpenOptions::default(),
        None,
    )
    .unwrap()
}

fn photo_op(id: &str, album: i64, e: serde_json::Value) -> WriteOp {
    WriteOp::Insert {
        collection: "demo.Photo".into(),
        bytes: encode_json(
            PHOTOS.into(),
            "demo.Photo".into(),
            serde_json::json!({"id": id, "album": album, "e": e}).to_string(),
        )
        .unwrap(),
    }
}

#[test]
fn nearest_neighbours_through_the_ffi() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_photos(&dir.path().join("v.db"));
    let photo = |id: &str, album: i64, e: serde_json::Value| photo_op(id, album, e);
    block_on(db.write(vec![
        photo("a", 1, serde_json::json!([0.0, 0.0])),
        photo("b", 2, serde_json::json!([1.0, 0.0])),
        photo("c", 1, serde_json::json!([3.0, 4.0])),
    ]))
    .unwrap();
    let q = || db.query("demo.Photo".into());
    let near = q().nearest("e".into(), vec![0.9, 0.0], 2).unwrap();
    assert_eq!(near.iter().map(|n| n.rowid).collect::<Vec<_>>(), [2, 1]);
    assert!((near[0].distance - 0.1).abs() < 1e-6);
    // Filters apply before k.
    let in_album = q()
        .filter(Expr::eq("album".into(), Value::Integer { v: 1 }))
        .nearest("e".into(), vec![0.9, 0.0], 2)
        .unwrap();
    assert_eq!(in_album.iter().map(|n| n.rowid).collect::<Vec<_>>(), [1, 3]);
    // Typed errors, never a panic.
    assert!(matches!(
        q().nearest("e".into(), vec![1.0], 1),
        Err(KeelError::InvalidArgument { .. })
    ));
    assert!(matches!(
        q().nearest("e".into(), vec![f32::NAN, 0.0], 1),
        Err(KeelError::InvalidArgument { .. })
    ));
    assert!(q().nearest("album".into(), vec![1.0, 0.0], 1).is_err());
    let bad = encode_json(
        PHOTOS.into(),
        "demo.Photo".into(),
        r#"{"id": "d", "e": [1.0, 2.0, 3.0]}"#.into(),
    )
    .unwrap();
    assert!(matches!(
        block_on(db.write(vec![WriteOp::Insert {
            collection: "demo.Photo".into(),
            bytes: bad
        }])),
        Err(KeelError::InvalidArgument { .. })
    ));
    assert_eq!(q().count().unwrap(), 3);
}

struct Nearest(Arc<Mutex<Vec<NearestUpdate>>>);
impl NearestListener for Nearest {
    fn on_update(&self, u: NearestUpdate) -> Result<(), CallbackError> {
        self.0.lock().unwrap().push(u);
        Ok(())
    }
}

#[test]
fn live_nearest_through_the_ffi() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_photos(&dir.path().join("live.db"));
    let photo = |id: &str, album: i64, e: [f32; 2]| photo_op(id, album, serde_json::json!(e));
    block_on(db.write(vec![
        photo("a", 1, [0.0, 0.0]),
        photo("b", 1, [1.0, 0.0]),
        photo("c", 1, [3.0, 4.0]),
        photo("far", 2, [0.5, 0.0]),
    ]))
    .unwrap();
    let q = || {
        db.query("demo.Photo".into())
            .filter(Expr::eq("album".into(), Value::Integer { v: 1 }))
    };
    // Bad input is a typed error at subscribe time; nothing is delivered.
    let seen = Arc::new(Mutex::new(Vec::new()));
    for (field, v) in [("e", vec![1.0]), ("e", vec![f32::NAN, 0.0])] {
        let err = q()
            .subscribe_nearest(field.into(), v, 2, Box::new(Nearest(seen.clone())))
            .unwrap_err();
        assert!(matches!(err, KeelError::InvalidArgument { .. }), "{err:?}");
    }
    assert!(q()
        .subscribe_nearest(
            "album".into(),
            vec![1.0, 0.0],
            2,
            Box::new(Nearest(seen.clone()))
        )
        .is_err());
    assert!(seen.lock().unwrap().is_empty());

    let ids = |u: &NearestUpdate| u.neighbors.iter().map(|n| n.rowid).collect::<Vec<_>>();
    let sub = q()
        .subscribe_nearest(
            "e".into(),
            vec![0.9, 0.0],
            2,
            Box::new(Nearest(seen.clone())),
        )
        .unwrap();
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.len(), 1);
        // Filters before k: "far" (album 2) is nearer but not in the result.
        assert_eq!(ids(&s[0]), [2, 1]);
        assert_eq!(s[0].diff.inserted, [0, 1]);
        assert!((s[0].neighbors[0].distance - 0.1).abs() < 1e-6);
    }
    // A nearer object enters at the front; the old second leaves.
    block_on(db.write(vec![photo("d", 1, [0.9, 0.05])])).unwrap();
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(ids(&s[1]), [5, 2]);
        assert_eq!(s[1].diff.inserted, [0]);
        assert_eq!(s[1].diff.removed, [1]);
    }
    // A write elsewhere in the collection that changes nothing delivers nothing.
    block_on(db.write(vec![photo("e", 2, [0.9, 0.0])])).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
    // Deleting a member: it leaves, the next candidate comes in.
    block_on(db.write(vec![WriteOp::Delete {
        collection: "demo.Photo".into(),
        key: vec![text("d")],
    }]))
    .unwrap();
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(ids(&s[2]), [2, 1]);
        assert_eq!(s[2].diff.removed, [0]);
        assert_eq!(s[2].diff.inserted, [1]);
    }
    assert!(sub.is_active());
    sub.cancel();
    assert!(!sub.is_active());
    block_on(db.write(vec![photo("g", 1, [0.9, 0.0])])).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 3, "nothing after cancel");
    block_on(db.close()).unwrap();
}
