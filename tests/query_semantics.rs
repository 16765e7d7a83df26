//! Object store: query semantics, SQL vs in-memory agreement, index use, corrupt
//! rows, change hook, Dflat transaction semantics.

use std::sync::{Arc, Mutex};

use keel::eval::{Filter, Order};
use keel::prelude::*;
use keel::storage::SyncPolicies;
use keel_example_blog::blog::{Author, Color, Content, Image, Post, Rect, Vec2, Video};
use proptest::prelude::*;

fn opts() -> StoreOptions {
    StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Off))
}

fn open(dir: &tempfile::TempDir) -> Database {
    Database::open_for::<Post>(dir.path().join("q.db"), opts()).unwrap()
}

fn ids(v: &[Post]) -> Vec<String> {
    v.iter().map(|p| p.id.clone()).collect()
}

#[test]
fn crud_and_dflat_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let r = db
        .write(|t| {
            t.insert(&Post::builder().id("a").priority(1).slug("s-a").build())?;
            // Duplicate primary key: that request fails, the txn continues.
            let e = t
                .insert(&Post::builder().id("a").priority(2).build())
                .unwrap_err();
            assert!(e.is_already_exists(), "{e}");
            // Duplicate unique value.
            let e = t
                .insert(&Post::builder().id("b").slug("s-a").build())
                .unwrap_err();
            assert!(e.is_already_exists(), "{e}");
            t.insert(&Post::builder().id("b").priority(5).build())?;
            // Reads see own writes.
            assert_eq!(t.fetch::<Post>().count()?, 2);
            assert_eq!(t.get::<Post>(&"b".to_string())?.unwrap().priority, 5);
            // update of a missing key
            assert!(matches!(
                t.update(&Post::builder().id("zz").build()),
                Err(Error::NotFound { .. })
            ));
            Ok(())
        })
        .wait();
    r.unwrap();
    assert_eq!(
        ids(&db.fetch::<Post>().order_by(Post::id().asc()).all().unwrap()),
        ["a", "b"]
    );
    assert_eq!(
        db.get::<Post>(&"a".to_string()).unwrap().unwrap().priority,
        1
    );

    // Abort discards the closure's work.
    let r = db
        .write(|t| {
            t.delete::<Post>(&"a".to_string())?;
            t.abort();
            Ok(())
        })
        .wait();
    assert!(matches!(r, Err(Error::Aborted { .. })));
    assert_eq!(db.fetch::<Post>().count().unwrap(), 2);

    // Upsert and delete.
    db.write(|t| {
        t.upsert(&Post::builder().id("c").build())?;
        t.upsert(&Post::builder().id("a").priority(9).build())?;
        assert!(t.delete::<Post>(&"b".to_string())?);
        assert!(!t.delete::<Post>(&"b".to_string())?);
        Ok(())
    })
    .wait()
    .unwrap();
    let all = db
        .fetch::<Post>()
        .order_by(Post::priority().desc())
        .all()
        .unwrap();
    assert_eq!(ids(&all), ["a", "c"]);
    // Wrong key types are typed errors.
    assert!(matches!(
        db.get_bytes("blog.Post", &[Value::Int(3)]),
        Err(Error::TypeMismatch { .. })
    ));
    assert!(matches!(
        db.get_bytes("blog.Post", &[]),
        Err(Error::TypeMismatch { .. })
    ));
    assert!(matches!(
        db.get_bytes("blog.Nope", &["a".into()]),
        Err(Error::UnknownCollection { .. })
    ));
    // Malformed bytes are typed errors.
    let r = db
        .write(|t| t.insert_bytes("blog.Post", vec![0xff; 7]))
        .wait();
    assert!(matches!(r, Err(Error::InvalidObject { .. })), "{r:?}");
}

#[test]
fn unchanged_update_writes_nothing_and_hook_sees_changes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let seen: Arc<Mutex<Vec<Change>>> = Arc::default();
    let s2 = seen.clone();
    db.on_commit_changes(move |c| s2.lock().unwrap().extend_from_slice(c));
    let p = Post::builder().id("a").title("t").build();
    let p2 = p.clone();
    db.write(move |t| t.insert(&p2)).wait().unwrap();
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].op, ChangeOp::Insert);
        assert_eq!(s[0].key, vec![Value::from("a")]);
        assert_eq!(s[0].new.as_deref(), Some(&p.encode()[..]));
    }
    let before = db.store().io_stats();
    let p3 = p.clone();
    db.write(move |t| t.update(&p3)).wait().unwrap();
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "an unchanged update records no change"
    );
    let after = db.store().io_stats();
    assert_eq!(
        before.wal.bytes_written, after.wal.bytes_written,
        "an unchanged update writes no WAL frame"
    );
    // A rolled-back closure reports nothing.
    let _ = db
        .write(|t| {
            t.insert(&Post::builder().id("b").build())?;
            Err::<(), _>(Error::Closed {
                op: "test",
                path: "x".into(),
            })
        })
        .wait();
    assert_eq!(seen.lock().unwrap().len(), 1);
    let p4 = p.to_builder().priority(7).build();
    db.write(move |t| {
        t.update(&p4)?;
        t.delete::<Post>(&"a".to_string())
    })
    .wait()
    .unwrap();
    let s = seen.lock().unwrap();
    assert_eq!(
        s.iter().map(|c| c.op).collect::<Vec<_>>(),
        [ChangeOp::Insert, ChangeOp::Update, ChangeOp::Delete]
    );
    assert_eq!(s[1].old.as_deref(), Some(&p.encode()[..]));
    assert!(s[2].new.is_none());
}

#[test]
fn index_use_in_query_plans() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        for i in 0..200 {
            t.insert(
                &Post::builder()
                    .id(format!("p{i}"))
                    .priority(i % 17)
                    .title(format!("t{i}"))
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let plan = |q: Query<'static>| q.explain().unwrap().join(" | ");
    let eq = plan(
        db.fetch::<Post>()
            .filter(Post::priority().eq(3))
            .into_query(),
    );
    assert!(eq.contains("USING INDEX blog.Post#1"), "{eq}");
    let range = plan(
        db.fetch::<Post>()
            .filter(Post::priority().gt(3) & Post::priority().le(9))
            .into_query(),
    );
    assert!(range.contains("USING INDEX blog.Post#1"), "{range}");
    let title = plan(
        db.fetch::<Post>()
            .filter(Post::title().eq("t5"))
            .into_query(),
    );
    assert!(title.contains("USING INDEX blog.Post#3"), "{title}");
    let order = plan(
        db.fetch::<Post>()
            .order_by(Post::priority().asc())
            .limit(5)
            .into_query(),
    );
    assert!(order.contains("USING INDEX blog.Post#1"), "{order}");
    assert!(
        !order.contains("TEMP B-TREE"),
        "order_by on an indexed field sorts by the index: {order}"
    );
    let order_desc = plan(
        db.fetch::<Post>()
            .order_by(Post::priority().desc())
            .into_query(),
    );
    assert!(!order_desc.contains("TEMP B-TREE"), "{order_desc}");
    // Values are bound parameters, never SQL text.
    let (sql, params) = db
        .fetch::<Post>()
        .filter(Post::title().eq("x'; DROP TABLE"))
        .into_query()
        .sql()
        .unwrap();
    assert!(!sql.contains("DROP"), "{sql}");
    assert_eq!(params, vec![Value::from("x'; DROP TABLE")]);
    // Non-indexed filter: a scan, still correct.
    let n = db
        .fetch::<Post>()
        .filter(Post::color().eq(Color::Green))
        .count()
        .unwrap();
    assert_eq!(n, 200);
    // A filter on a field without an index — a number field as much as a text
    // field — is evaluated by keel on each row's bytes, not by an SQL function
    // per row, and the conjunct on the indexed field still narrows the rows
    // through its index.
    let name = db
        .schema()
        .reader("blog.Post")
        .unwrap()
        .path("author.name")
        .unwrap();
    let green = plan(
        db.fetch::<Post>()
            .filter(Post::color().eq(Color::Green))
            .into_query(),
    );
    assert!(green.contains("keel: filter"), "{green}");
    assert!(!green.contains("keel_field"), "{green}");
    let scan = plan(db.query("blog.Post").filter(Expr::eq(name.clone(), "x")));
    assert!(scan.contains("keel: filter"), "{scan}");
    assert!(!scan.contains("keel_field"), "{scan}");
    let mixed = plan(
        db.query("blog.Post")
            .filter(Post::priority().eq(3) & Expr::eq(name.clone(), "x"))
            .order_by(Post::priority().asc()),
    );
    assert!(mixed.contains("USING INDEX blog.Post#1"), "{mixed}");
    assert!(mixed.contains("keel: filter"), "{mixed}");
    assert!(!mixed.contains("sort the matches"), "{mixed}");
    let sorted = plan(
        db.query("blog.Post")
            .filter(Expr::eq(name.clone(), "x") | Post::color().eq(Color::Green))
            .order_by(Post::color().desc()),
    );
    assert!(sorted.contains("sort the matches"), "{sorted}");
    assert!(!plan(
        db.fetch::<Post>()
            .filter(Post::priority().eq(3))
            .into_query()
    )
    .contains("keel:"));
    let page: Vec<i64> = db
        .query("blog.Post")
        .filter(Post::color().eq(Color::Green) | Expr::eq(name, "x"))
        .order_by(Post::priority().desc())
        .limit(3)
        .offset(2)
        .all()
        .unwrap()
        .iter()
        .map(|o| o.rowid)
        .collect();
    let all: Vec<i64> = db
        .query("blog.Post")
        .order_by(Post::priority().desc())
        .all()
        .unwrap()
        .iter()
        .map(|o| o.rowid)
        .collect();
    assert_eq!(page, all[2..5]);
}

#[test]
fn primary_key_filters_use_the_key_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        for i in 0..200 {
            t.insert(&Post::builder().id(format!("p{i:03}")).priority(i).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let plan = |q: Query<'static>| q.explain().unwrap().join(" | ");
    let key_index = "USING INDEX sqlite_autoindex_blog.Post_1";
    let eq = plan(
        db.fetch::<Post>()
            .filter(Post::id().eq("p007"))
            .into_query(),
    );
    assert!(eq.contains(key_index), "{eq}");
    assert!(!eq.contains("SCAN"), "{eq}");
    let within = plan(
        db.fetch::<Post>()
            .filter(Post::id().in_(["p001", "p002", "p300"]))
            .into_query(),
    );
    assert!(within.contains(key_index), "{within}");
    assert!(!within.contains("SCAN"), "{within}");
    // With another condition: the key still drives the lookup.
    let both = plan(
        db.fetch::<Post>()
            .filter(Post::id().eq("p007") & Post::priority().gt(3))
            .into_query(),
    );
    assert!(both.contains(key_index), "{both}");
    // Ordering by the key walks its index instead of sorting.
    let order = plan(
        db.fetch::<Post>()
            .order_by(Post::id().desc())
            .limit(5)
            .into_query(),
    );
    assert!(!order.contains("TEMP B-TREE"), "{order}");
    // Same answers as before.
    let got = db
        .fetch::<Post>()
        .filter(Post::id().in_(["p001", "p002", "p300"]))
        .order_by(Post::id().desc())
        .all()
        .unwrap();
    assert_eq!(ids(&got), ["p002", "p001"]);
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::id().ne("p000"))
            .count()
            .unwrap(),
        199
    );
    assert_eq!(
        db.fetch::<Post>()
            .filter(Expr::eq(Post::id().into_path(), 7))
            .count()
            .unwrap(),
        0,
        "an integer never equals a text key"
    );
}

#[test]
fn new_index_builds_in_background() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evo.db");
    let v1 = Schema::parse(
        "namespace e; table T { id: int (primary); n: int; } root_type T;",
        "v1.fbs",
    )
    .unwrap();
    let v2 = Schema::parse(
        "namespace e; table T { id: int (primary); n: int (indexed); } root_type T;",
        "v2.fbs",
    )
    .unwrap();
    let t = v1.reader("T").unwrap();
    let db = Database::open(&path, v1.clone(), opts()).unwrap();
    let rows: Vec<Vec<u8>> = (0..100)
        .map(|i| {
            t.encode_json(&serde_json::json!({"id": i, "n": i % 10}))
                .unwrap()
        })
        .collect();
    db.write(move |tx| {
        for r in rows {
            tx.insert_bytes("e.T", r)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
    let db = Database::open(&path, v2.clone(), opts()).unwrap();
    let n = v2.reader("T").unwrap().path("n").unwrap();
    // Correct before and after the index exists.
    assert_eq!(
        db.query("e.T")
            .filter(Expr::eq(n.clone(), 3))
            .count()
            .unwrap(),
        10
    );
    db.wait_for_indexes().unwrap();
    assert_eq!(
        db.index_states().unwrap(),
        vec![("e.T#1".to_string(), "ready".to_string())]
    );
    let plan = db
        .query("e.T")
        .filter(Expr::eq(n.clone(), 3))
        .explain()
        .unwrap()
        .join(" ");
    assert!(plan.contains("USING INDEX"), "{plan}");
    assert_eq!(db.query("e.T").filter(Expr::eq(n, 3)).count().unwrap(), 10);
}

#[test]
fn corrupt_row_is_a_decode_error_naming_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let db = Database::open_for::<Post>(&path, opts()).unwrap();
    db.write(|t| {
        t.insert(&Post::builder().id("good").priority(1).build())?;
        t.insert(&Post::builder().id("bad").priority(2).build())
    })
    .wait()
    .unwrap();
    let bad_rowid: i64 = db
        .store()
        .write_blocking(|t| {
            t.execute(
                "UPDATE \"blog.Post\" SET body = x'deadbeef0100' WHERE k0 = 'bad'",
                [],
            )?;
            t.query_row(
                "SELECT rowid FROM \"blog.Post\" WHERE k0 = 'bad'",
                [],
                |r| r.get(0),
            )
            .map_err(keel::storage::Error::from)
        })
        .unwrap();
    for r in [
        db.fetch::<Post>().all().map(|_| ()),
        db.query("blog.Post").all().map(|_| ()),
        db.get::<Post>(&"bad".to_string()).map(|_| ()),
        db.fetch::<Post>()
            .filter(Post::priority().ge(0) | Post::priority().is_null())
            .all()
            .map(|_| ()),
    ] {
        match r {
            Err(Error::Decode {
                rowid, collection, ..
            }) => {
                assert_eq!(rowid, bad_rowid);
                assert_eq!(collection, "blog.Post");
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
    }
    // The good row is still readable.
    assert_eq!(
        db.get::<Post>(&"good".to_string())
            .unwrap()
            .unwrap()
            .priority,
        1
    );
    assert_eq!(db.fetch::<Post>().count().unwrap(), 2);
}

#[test]
fn null_default_and_union_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&Post::builder().id("none").build())?;
        t.insert(
            &Post::builder()
                .id("img")
                .rating(4.5)
                .content(Image::builder().width(640).build())
                .build(),
        )?;
        t.insert(
            &Post::builder()
                .id("vid")
                .rating(1.0)
                .content(Video::builder().url("u").build())
                .author(Author::builder().name("ada").build())
                .build(),
        )?;
        Ok(())
    })
    .wait()
    .unwrap();
    let q = |e: Expr| {
        let mut v = ids(&db.fetch::<Post>().filter(e).all().unwrap());
        v.sort();
        v
    };
    // Absent optional: neither > nor NOT >.
    assert_eq!(q(Post::rating().gt(2.0)), ["img"]);
    assert_eq!(q(!Post::rating().gt(2.0)), ["vid"]);
    assert_eq!(q(Post::rating().is_null()), ["none"]);
    // Defaults are values, not NULL.
    assert_eq!(q(Post::priority().eq(1)).len(), 3);
    assert_eq!(q(Post::color().eq(Color::Green)).len(), 3);
    assert_eq!(q(Post::published().eq(true)).len(), 3);
    // Union members.
    assert_eq!(q(Post::content_image().is_member()), ["img"]);
    assert_eq!(q(!Post::content_image().is_member()), ["none", "vid"]);
    assert_eq!(
        q(Post::content_image().join(Image::width()).eq(640)),
        ["img"]
    );
    assert_eq!(
        q(Post::content_video().join(Video::seconds()).eq(1.5f32)),
        ["vid"]
    );
    // Nested tables (with defaults inside) and structs.
    assert_eq!(q(Post::author().join(Author::age()).eq(30)), ["vid"]);
    assert_eq!(
        q(Post::frame().join(Rect::origin()).join(Vec2::x()).is_null()).len(),
        3
    );
    // IN with NULL.
    assert_eq!(q(Post::rating().in_([4.5, 9.0])), ["img"]);
    assert_eq!(
        q(Expr::NotIn {
            path: Post::rating().into_path(),
            values: vec![Value::Null, 4.5.into()]
        }),
        Vec::<String>::new()
    );
    // NULLs first ascending, last descending; ties by rowid.
    let asc = ids(&db
        .fetch::<Post>()
        .order_by(Post::rating().asc())
        .all()
        .unwrap());
    assert_eq!(asc, ["none", "vid", "img"]);
    let desc = ids(&db
        .fetch::<Post>()
        .order_by(Post::rating().desc())
        .all()
        .unwrap());
    assert_eq!(desc, ["img", "vid", "none"]);
    let page = ids(&db
        .fetch::<Post>()
        .order_by(Post::id().asc())
        .limit(1)
        .offset(1)
        .all()
        .unwrap());
    assert_eq!(page, ["none"]);
    assert_eq!(
        db.fetch::<Post>()
            .order_by(Post::id().desc())
            .first()
            .unwrap()
            .unwrap()
            .id,
        "vid"
    );
    let _ = Content::from(Image::builder().build());
}

// ---------- SQL vs in-memory ----------

fn arb_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..12).prop_map(Value::Int),
        prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(-1i64)].prop_map(Value::Int),
        prop_oneof![
            (-30i32..30).prop_map(|x| x as f64 / 4.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(1.5),
            Just(9_223_372_036_854_775_808.0)
        ]
        .prop_map(Value::Float),
        "[a-c]{0,2}".prop_map(Value::Text),
        // Primary-key values of the stored objects (`p00`, `p01`, …).
        (0..6u8).prop_map(|i| Value::Text(format!("p{i:02}"))),
        prop::collection::vec(any::<u8>(), 0..2).prop_map(Value::Blob),
    ]
}

fn paths() -> Vec<FieldPath> {
    vec![
        Post::id().into_path(),
        Post::priority().into_path(),
        Post::color().into_path(),
        Post::title().into_path(),
        Post::rating().into_path(),
        Post::published().into_path(),
        Post::views().into_path(),
        Post::delta().into_path(),
        Post::slug().into_path(),
        Post::author().join(Author::name()).into_path(),
        Post::author().join(Author::age()).into_path(),
        Post::content_image().join(Image::width()).into_path(),
        Post::content_video().join(Video::seconds()).into_path(),
        Post::frame()
            .join(Rect::origin())
            .join(Vec2::x())
            .into_path(),
        Post::frame().join(Rect::layer()).into_path(),
        Post::pos().join(Vec2::y()).into_path(),
        // Whole sub-table (presence marker), whole struct (its bytes as a blob).
        Post::author().into_path(),
        Post::pos().into_path(),
    ]
}

fn arb_leaf() -> impl Strategy<Value = Expr> {
    let n = paths().len();
    prop_oneof![
        3 => (0..n, 0..6usize, arb_value()).prop_map(|(p, op, v)| {
            let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][op];
            Expr::cmp(paths()[p].clone(), op, v)
        }),
        1 => (0..n, prop::collection::vec(arb_value(), 0..4)).prop_map(|(p, values)| Expr::In { path: paths()[p].clone(), values }),
        1 => (0..n, prop::collection::vec(arb_value(), 0..4)).prop_map(|(p, values)| Expr::NotIn { path: paths()[p].clone(), values }),
        1 => (0..n).prop_map(|p| Expr::IsNull(paths()[p].clone())),
        1 => (0..n).prop_map(|p| Expr::IsNotNull(paths()[p].clone())),
        1 => prop_oneof![Just(Post::content_image().is_member()), Just(Post::content_video().is_member())],
        1 => prop_oneof![Just(Expr::True), Just(Expr::False)],
    ]
}

/// Numeric fields (integers incl. `ulong` at `u64::MAX`, bool, enum, optional
/// double, struct and union members): what arithmetic takes.
fn numeric_paths() -> Vec<FieldPath> {
    vec![
        Post::priority().into_path(),
        Post::color().into_path(),
        Post::rating().into_path(),
        Post::published().into_path(),
        Post::views().into_path(),
        Post::delta().into_path(),
        Post::author().join(Author::age()).into_path(),
        Post::content_image().join(Image::width()).into_path(),
        Post::content_video().join(Video::seconds()).into_path(),
        Post::frame().join(Rect::layer()).into_path(),
        Post::pos().join(Vec2::y()).into_path(),
    ]
}

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..8).prop_map(Value::Int),
        prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(-1i64), Just(0i64)].prop_map(Value::Int),
        prop_oneof![
            (-12i32..12).prop_map(|x| x as f64 / 4.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(0.0),
            Just(-1.0),
            Just(9_223_372_036_854_775_808.0),
            Just(1e300),
        ]
        .prop_map(Value::Float),
    ]
}

/// Arithmetic over numeric fields and constants: overflow, division and
/// remainder by zero, `i64::MIN / -1`, floats (infinities, NaN results) and nulls.
fn arb_term() -> impl Strategy<Value = Term> {
    let n = numeric_paths().len();
    let leaf = prop_oneof![
        2 => (0..n).prop_map(|p| Term::field(numeric_paths()[p].clone())),
        1 => arb_number().prop_map(Term::Const),
    ];
    leaf.prop_recursive(3, 8, 2, |inner| {
        (inner.clone(), 0..5usize, inner).prop_map(|(a, op, b)| {
            let op = [
                ArithOp::Add,
                ArithOp::Sub,
                ArithOp::Mul,
                ArithOp::Div,
                ArithOp::Rem,
            ][op];
            a.arith(op, b)
        })
    })
}

fn arb_arith_leaf() -> impl Strategy<Value = Expr> {
    let n = paths().len();
    prop_oneof![
        3 => (arb_term(), 0..6usize, arb_term()).prop_map(|(a, op, b)| {
            let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][op];
            a.cmp(op, b)
        }),
        // A term against any constant or any field (text, blobs: class order).
        1 => (arb_term(), 0..6usize, arb_value()).prop_map(|(a, op, v)| {
            let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][op];
            a.cmp(op, Term::Const(v))
        }),
        1 => (0..n, 0..6usize, 0..n).prop_map(|(a, op, b)| {
            let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][op];
            Term::field(paths()[a].clone()).cmp(op, Term::field(paths()[b].clone()))
        }),
        1 => arb_term().prop_map(Term::is_null),
        1 => arb_term().prop_map(Term::is_not_null),
    ]
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    prop_oneof![3 => arb_leaf(), 2 => arb_arith_leaf()].prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
            inner.clone().prop_map(|a| a.not()),
            inner.clone().prop_map(|a| a.is_null()),
            inner.prop_map(|a| a.is_not_null()),
        ]
    })
}

use keel::schema::{ArithOp, CmpOp, Term, Unlisted};

fn arb_post() -> impl Strategy<Value = Post> {
    (
        (
            -2i32..6,
            0i8..3,
            prop::option::of("[a-c]{0,2}"),
            prop::option::of((-2i32..3).prop_map(|x| x as f64 / 2.0)),
        ),
        (
            any::<bool>(),
            prop_oneof![Just(0u64), Just(u64::MAX), Just(5u64)],
            -4i8..2,
        ),
        prop::option::of((prop::option::of("[ab]{0,1}"), 28i32..32)),
        0u8..3,
        prop::option::of((-1.0f32..1.0, -2i16..2)),
    )
        .prop_map(
            |((prio, color, title, rating), (published, views, delta), author, content, frame)| {
                let mut b = Post::builder()
                    .priority(prio)
                    .color(Color::from_raw(color))
                    .published(published)
                    .views(views)
                    .delta(delta);
                if let Some(t) = title {
                    b = b.title(t);
                }
                if let Some(r) = rating {
                    b = b.rating(r);
                }
                if let Some((name, age)) = author {
                    let mut a = Author::builder().age(age);
                    if let Some(n) = name {
                        a = a.name(n);
                    }
                    b = b.author(a.build());
                }
                b = match content {
                    1 => b.content(Image::builder().width(prio * 100).build()),
                    2 => b.content(
                        Video::builder()
                            .seconds(rating.unwrap_or(1.5) as f32)
                            .build(),
                    ),
                    _ => b,
                };
                if let Some((x, _)) = frame {
                    b = b.pos(Vec2 { x, y: -x });
                }
                if let Some((x, layer)) = frame {
                    b = b.frame(Rect {
                        origin: Vec2 { x, y: 0.0 },
                        size: Vec2 { x: 1.0, y: 1.0 },
                        layer,
                    });
                }
                b.build()
            },
        )
}

fn arb_order() -> impl Strategy<Value = Vec<SortKey>> {
    let n = paths().len();
    let key = prop_oneof![
        3 => (0..n, any::<bool>()).prop_map(|(p, d)| {
            if d { SortKey::desc(paths()[p].clone()) } else { SortKey::asc(paths()[p].clone()) }
        }),
        // Dflat's orderBy(.index(of: […])): by position in a list (duplicates,
        // nulls, NaN, values of other types included), unlisted first or last.
        2 => (0..n, prop::collection::vec(arb_value(), 0..4), any::<bool>(), any::<bool>())
            .prop_map(|(p, values, last, d)| {
                let k = SortKey::by_list(
                    paths()[p].clone(),
                    values,
                    if last { Unlisted::Last } else { Unlisted::First },
                );
                if d { k.reversed() } else { k }
            }),
    ];
    prop::collection::vec(key, 0..3)
}

/// Runs `expr` ordered by `order` in SQL (all rows and count) and checks it against
/// the in-memory filter and comparator over `stored` (rowid, bytes); returns the
/// expected rowids in order.
fn check_sql_matches_memory(
    db: &Database,
    collection: &str,
    stored: &[(i64, Vec<u8>)],
    expr: &Expr,
    order: &[SortKey],
) -> Result<Vec<i64>, TestCaseError> {
    let schema = db.schema().clone();
    let f = Filter::with_schema(schema.clone(), collection, expr).unwrap();
    let o = Order::with_schema(schema, collection, order).unwrap();
    let mut expect: Vec<_> = stored
        .iter()
        .filter(|(_, b)| f.matches(b))
        .map(|(r, b)| o.key(b, *r))
        .collect();
    expect.sort_by(|a, b| o.compare(a, b));
    let expect: Vec<i64> = expect.iter().map(|k| k.rowid).collect();
    let mut q = db.query(collection).filter(expr.clone());
    for k in order {
        q = q.order_by(k.clone());
    }
    // The whole query in SQL (`keel_field` per row for fields without an index),
    // which `all()` does not run when part of the filter is evaluated on the bytes.
    let via_sql = run_sql(db, q.sql().unwrap());
    prop_assert_eq!(
        &via_sql,
        &expect,
        "SQL form of expr {} order {:?}",
        expr,
        order
    );
    let got: Vec<i64> = q.all().unwrap().iter().map(|s| s.rowid).collect();
    prop_assert_eq!(&got, &expect, "expr {} order {:?}", expr, order);
    let n = db.query(collection).filter(expr.clone()).count().unwrap();
    prop_assert_eq!(n as usize, expect.len());
    Ok(expect)
}

/// The rowids `Query::sql`'s statement returns, run as plain SQL on a reader.
fn run_sql(db: &Database, (sql, params): (String, Vec<Value>)) -> Vec<i64> {
    use keel::storage::rusqlite::{params_from_iter, types::Value as V};
    // Bound as keel binds them: `Bool` → integer, NaN → NULL.
    let params: Vec<V> = params
        .into_iter()
        .map(|v| match v {
            Value::Null => V::Null,
            Value::Bool(b) => V::Integer(b.into()),
            Value::Int(i) => V::Integer(i),
            Value::Float(f) if f.is_nan() => V::Null,
            Value::Float(f) => V::Real(f),
            Value::Text(s) => V::Text(s),
            Value::Blob(b) => V::Blob(b),
        })
        .collect();
    db.store()
        .read(|c| {
            let mut st = c.prepare(&sql)?;
            let rows = st.query_map(params_from_iter(params.iter()), |r| r.get(0))?;
            rows.collect::<Result<Vec<i64>, _>>()
                .map_err(keel::storage::Error::from)
        })
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The SQL result of an `Expr` equals its in-memory evaluation, and SQL order equals
    /// the in-memory comparator's order (with limit/offset), on random objects.
    #[test]
    fn sql_matches_in_memory(posts in prop::collection::vec(arb_post(), 0..20),
                             exprs in prop::collection::vec((arb_expr(), arb_order()), 1..8)) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let mut stored: Vec<(i64, Vec<u8>)> = Vec::new();
        let objs = posts.clone();
        let rowids = db.write(move |t| {
            let mut out = Vec::new();
            for (i, p) in objs.into_iter().enumerate() {
                let p = p.to_builder().id(format!("p{i:02}")).build();
                out.push((t.insert(&p)?, p.encode()));
            }
            Ok(out)
        }).wait().unwrap();
        stored.extend(rowids);
        for (expr, order) in exprs {
            let expect = check_sql_matches_memory(&db, "blog.Post", &stored, &expr, &order)?;
            // The typed fetch (decoding each kept row from SQLite's buffer) keeps
            // the same objects in the same order.
            let mut f = db.fetch::<Post>().filter(expr.clone());
            for k in &order { f = f.order_by(k.clone()); }
            let typed: Vec<String> = ids(&f.all().unwrap());
            let want: Vec<String> = expect
                .iter()
                .map(|r| format!("p{:02}", stored.iter().position(|(s, _)| s == r).unwrap()))
                .collect();
            prop_assert_eq!(typed, want, "typed fetch of {}", expr);
            let mut q = db.query("blog.Post").filter(expr.clone()).limit(3).offset(1);
            for k in &order { q = q.order_by(k.clone()); }
            let page: Vec<i64> = q.all().unwrap().iter().map(|s| s.rowid).collect();
            let want: Vec<i64> = expect.iter().skip(1).take(3).copied().collect();
            prop_assert_eq!(page, want);
        }
    }
}

// ---------- SQL vs in-memory on numeric, composite primary keys ----------

/// Key parts of every kind the key column holds (int with a default the encoder
/// may omit, bool, float, enum), so filters and orders on them compile to `k0…k3`.
const KEYED_FBS: &str = "enum E : byte { X, Y, Z }
table K { a: int = 2 (primary); b: bool = true (primary); c: double = 0.5 (primary); e: E = Y (primary); n: int = null; }
root_type K;";

fn keyed_paths(schema: &Schema) -> Vec<FieldPath> {
    let t = schema.reader("K").unwrap();
    ["a", "b", "c", "e", "n"]
        .iter()
        .map(|f| t.path(f).unwrap())
        .collect()
}

fn arb_key_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-2i64..4).prop_map(Value::Int),
        prop_oneof![Just(0.5), Just(2.0), Just(-0.0), Just(0.25), Just(f64::NAN)]
            .prop_map(Value::Float),
        prop_oneof![Just("1"), Just(""), Just("Y")].prop_map(|s| Value::Text(s.into())),
        Just(Value::Blob(vec![1])),
    ]
}

fn arb_keyed_expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        3 => (0..5usize, 0..6usize, arb_key_value()).prop_map(|(p, op, v)| {
            let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][op];
            (p, Some(op), vec![v])
        }),
        2 => (0..5usize, prop::collection::vec(arb_key_value(), 0..4)).prop_map(|(p, v)| (p, None, v)),
        1 => (0..5usize, prop::collection::vec(arb_key_value(), 0..3)).prop_map(|(p, v)| (p + 5, None, v)),
        1 => (0..5usize).prop_map(|p| (p + 10, None, vec![])),
    ];
    let schema = Schema::parse(KEYED_FBS, "k.fbs").unwrap();
    let paths = keyed_paths(&schema);
    leaf.prop_map(move |(p, op, mut v)| match (p, op) {
        (p, Some(op)) => Expr::cmp(paths[p].clone(), op, v.remove(0)),
        (p @ 0..=4, None) => Expr::In {
            path: paths[p].clone(),
            values: v,
        },
        (p @ 5..=9, None) => Expr::NotIn {
            path: paths[p - 5].clone(),
            values: v,
        },
        (p, None) => {
            if p % 2 == 0 {
                Expr::IsNull(paths[p - 10].clone())
            } else {
                Expr::IsNotNull(paths[p - 10].clone())
            }
        }
    })
    .prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
            inner.prop_map(|a| a.not()),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Filters and orders on primary-key fields (compiled to the key columns) agree
    /// with in-memory evaluation of the objects' own fields, including key values
    /// equal to the field's default (which the encoder may leave out of the bytes).
    #[test]
    fn sql_matches_in_memory_on_composite_keys(
        rows in prop::collection::vec((0u8..3, prop::option::of(-2i32..3)), 0..24),
        exprs in prop::collection::vec((arb_keyed_expr(), prop::collection::vec((0..5usize, any::<bool>()), 0..3)), 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::parse(KEYED_FBS, "k.fbs").unwrap();
        let db = Database::open(dir.path().join("k.db"), schema.clone(), opts()).unwrap();
        let t = schema.reader("K").unwrap();
        let objs: Vec<Vec<u8>> = rows.iter().enumerate().map(|(i, (e, n))| {
            let c = [0.5, 0.0, 2.0][i / 8];
            let e = ["X", "Y", "Z"][*e as usize];
            let mut j = serde_json::json!({"a": (i % 4) as i64 - 1, "b": (i / 4) % 2 == 0, "c": c, "e": e});
            if let Some(n) = n { j["n"] = (*n).into(); }
            t.encode_json(&j).unwrap()
        }).collect();
        let o2 = objs.clone();
        let stored: Vec<(i64, Vec<u8>)> = db.write(move |t| {
            o2.into_iter().map(|b| Ok((t.insert_bytes("K", b.clone())?, b))).collect::<Result<Vec<_>, Error>>()
        }).wait().unwrap();
        let schema = db.schema().clone();
        let paths = keyed_paths(&schema);
        for (expr, order) in exprs {
            let order: Vec<SortKey> = order.into_iter().map(|(p, d)| if d { SortKey::desc(paths[p].clone()) } else { SortKey::asc(paths[p].clone()) }).collect();
            check_sql_matches_memory(&db, "K", &stored, &expr, &order)?;
        }
    }
}
