//! Through the FFI: a live query including a to-one or a
//! to-many reference (`Query::subscribe_including`), updated when only the
//! referenced object changes, on a real database file.

use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use keel_ffi::{
    open_blocking, CallbackError, IncludingListener, IncludingUpdate, KeelError, OpenOptions,
    SyncPolicy, WriteOp,
};

const FBS: &str = include_str!("../../../examples/blog/schema/relations.fbs");

/// One delivery, with the list it makes: the previous one with the diff
/// applied, the inserted and updated rows taken from the delivery.
#[derive(Debug, Clone)]
struct Shown {
    objects: Vec<keel_ffi::IncludedObject>,
    diff: keel_ffi::Diff,
    /// The indexes of the rows the delivery carried.
    changed: Vec<u64>,
}

/// Applies each delivery to the list the one before made, as a list view does.
struct Updates(Arc<Mutex<Vec<Shown>>>);
impl IncludingListener for Updates {
    fn on_update(&self, u: IncludingUpdate) -> Result<(), CallbackError> {
        let mut all = self.0.lock().unwrap();
        let old = all.last().map(|s| s.objects.clone()).unwrap_or_default();
        let objects = apply(&old, &u);
        assert_eq!(objects.len() as u64, u.count, "{u:?}");
        all.push(Shown {
            objects,
            diff: u.diff.clone(),
            changed: u.changed.iter().map(|c| c.index).collect(),
        });
        Ok(())
    }
}

/// `old` with `u`'s diff applied: the rows kept in their order, moved ones
/// where they went, inserted and updated ones from the delivery.
fn apply(old: &[keel_ffi::IncludedObject], u: &IncludingUpdate) -> Vec<keel_ffi::IncludedObject> {
    let d = keel_query::Diff {
        removed: u.diff.removed.iter().map(|&i| i as usize).collect(),
        inserted: u.diff.inserted.iter().map(|&i| i as usize).collect(),
        moved: u
            .diff
            .moved
            .iter()
            .map(|m| (m.from as usize, m.to as usize))
            .collect(),
        updated: u.diff.updated.iter().map(|&i| i as usize).collect(),
    };
    d.apply(old, |i| {
        u.changed
            .iter()
            .find(|c| c.index as usize == i)
            .map(|c| c.row.clone())
            .expect("every inserted and updated row is in the delivery")
    })
}

fn op(db: &keel_ffi::Database, insert: bool, collection: &str, json: &str) -> WriteOp {
    let bytes = db.encode_json(collection.into(), json.into()).unwrap();
    let collection = collection.to_owned();
    if insert {
        WriteOp::Insert { collection, bytes }
    } else {
        WriteOp::Update { collection, bytes }
    }
}

/// Open `name` in `dir` with the relations example's schema.
fn open_rel(dir: &tempfile::TempDir, name: &str, opts: OpenOptions) -> Arc<keel_ffi::Database> {
    let path = dir.path().join(name).display().to_string();
    open_blocking(path, FBS.into(), opts, None).unwrap()
}

/// Options for a test that needs no durability: commits skip the sync.
fn fast() -> OpenOptions {
    OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        ..OpenOptions::default()
    }
}

/// Insert (or, `update`, replace) each `(collection, JSON object)` in one write.
fn write_all(db: &keel_ffi::Database, insert: bool, rows: &[(&str, &str)]) {
    let ops = rows.iter().map(|(c, j)| op(db, insert, c, j)).collect();
    block_on(db.write(ops)).unwrap();
}

/// Insert each `(collection, JSON object)`, in one write.
fn insert(db: &keel_ffi::Database, rows: &[(&str, &str)]) {
    write_all(db, true, rows);
}

/// Replace each `(collection, JSON object)` by its key, in one write.
fn update(db: &keel_ffi::Database, rows: &[(&str, &str)]) {
    write_all(db, false, rows);
}

fn json(db: &keel_ffi::Database, collection: &str, bytes: &[u8]) -> serde_json::Value {
    serde_json::from_str(&db.decode_json(collection.into(), bytes.to_vec()).unwrap()).unwrap()
}

#[test]
fn live_including_updates_on_an_author_rename() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "rel.db", fast());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "ada", "name": "Ada"}"#),
            ("rel.Author", r#"{"id": "bob", "name": "Bob"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "ada", "rank": 1}"#),
            ("rel.Post", r#"{"id": "p2", "author": "bob", "rank": 2}"#),
            ("rel.Post", r#"{"id": "p3", "author": "ada", "rank": 3}"#),
            ("rel.Post", r#"{"id": "p4", "rank": 4}"#),
        ],
    );

    let updates = Arc::new(Mutex::new(Vec::new()));
    let sub = db
        .query("rel.Post".into())
        .order_by("rank".into(), false)
        .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&updates))))
        .unwrap();
    {
        let u = updates.lock().unwrap();
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].diff.inserted, vec![0, 1, 2, 3]);
        let related: Vec<usize> = u[0].objects.iter().map(|o| o.related.len()).collect();
        assert_eq!(related, vec![1, 1, 1, 0]);
    }

    // An unrelated author: nothing delivered.
    insert(&db, &[("rel.Author", r#"{"id": "cy", "name": "Cy"}"#)]);
    assert_eq!(updates.lock().unwrap().len(), 1);

    // Only the author changes: the posts naming her are updated in place.
    update(&db, &[("rel.Author", r#"{"id": "ada", "name": "Ada L."}"#)]);
    {
        let u = updates.lock().unwrap();
        assert_eq!(u.len(), 2, "delivered before the write resolved");
        assert_eq!(u[1].diff.updated, vec![0, 2]);
        assert!(u[1].diff.inserted.is_empty() && u[1].diff.removed.is_empty());
        // Only the two rows naming her cross the FFI; the others are the
        // listener's from before.
        assert_eq!(u[1].changed, vec![0, 2]);
        for i in [0, 2] {
            let a = json(&db, "rel.Author", &u[1].objects[i].related[0].bytes);
            assert_eq!(a["name"], "Ada L.");
        }
        let b = json(&db, "rel.Author", &u[1].objects[1].related[0].bytes);
        assert_eq!(b["name"], "Bob");
    }

    // A post moving: row-level diff, as a plain subscription gives.
    insert(
        &db,
        &[("rel.Post", r#"{"id": "p0", "author": "cy", "rank": 0}"#)],
    );
    {
        let u = updates.lock().unwrap();
        assert_eq!(u.len(), 3);
        assert_eq!(u[2].diff.inserted, vec![0]);
        assert_eq!(u[2].objects.len(), 5);
    }

    sub.cancel();
    assert!(!sub.is_active());
    update(&db, &[("rel.Author", r#"{"id": "ada", "name": "Ada K."}"#)]);
    assert_eq!(updates.lock().unwrap().len(), 3, "nothing after cancel");

    // Not a reference: a typed error, not a panic.
    for field in ["title", "nope"] {
        let e = db
            .query("rel.Post".into())
            .subscribe_including(field.into(), Box::new(Updates(Arc::clone(&updates))))
            .unwrap_err();
        assert!(
            matches!(e, KeelError::InvalidArgument { .. }),
            "{field}: {e:?}"
        );
    }
}

#[test]
fn filter_through_a_reference() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "through.db", OpenOptions::default());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "ada", "name": "Ada"}"#),
            ("rel.Author", r#"{"id": "bob", "name": "Bob"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "ada"}"#),
            ("rel.Post", r#"{"id": "p2", "author": "bob"}"#),
            ("rel.Post", r#"{"id": "p3", "author": "ada"}"#),
            ("rel.Post", r#"{"id": "p4"}"#),
        ],
    );
    let posts = db.query("rel.Post".into()).order_by("id".into(), false);
    let ids = |q: &keel_ffi::Query| -> Vec<String> {
        q.all()
            .unwrap()
            .iter()
            .map(|o| {
                json(&db, "rel.Post", &o.bytes)["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let by_ada = posts
        .through(
            "author".into(),
            keel_ffi::Expr::eq("name".into(), keel_ffi::Value::Text { v: "Ada".into() }),
        )
        .unwrap();
    assert_eq!(ids(&posts.filter(by_ada)), ["p1", "p3"]);
    let nobody = posts
        .through(
            "author".into(),
            keel_ffi::Expr::eq("name".into(), keel_ffi::Value::Text { v: "Cy".into() }),
        )
        .unwrap();
    assert!(ids(&posts.filter(nobody)).is_empty());
    // Typed errors: not a to-one reference, a field the target lacks.
    let any = keel_ffi::Expr::is_null("name".into());
    for field in ["title", "tags"] {
        let e = posts.through(field.into(), any.clone()).unwrap_err();
        assert!(
            matches!(e, KeelError::InvalidArgument { .. }),
            "{field}: {e:?}"
        );
    }
    let bad = keel_ffi::Expr::eq("rank".into(), keel_ffi::Value::Integer { v: 1 });
    assert!(posts.through("author".into(), bad).is_err());
}

/// Cancels its own subscription from inside its second delivery.
struct CancelInside {
    sub: Arc<Mutex<Option<Arc<keel_ffi::IncludingSubscription>>>>,
    seen: Arc<Mutex<usize>>,
}
impl IncludingListener for CancelInside {
    fn on_update(&self, _u: IncludingUpdate) -> Result<(), CallbackError> {
        let mut n = self.seen.lock().unwrap();
        *n += 1;
        if *n == 2 {
            if let Some(s) = self.sub.lock().unwrap().as_ref() {
                s.cancel();
            }
        }
        Ok(())
    }
}

#[test]
fn cancel_from_inside_the_listener_does_not_wait_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "cancel.db", OpenOptions::default());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "ada", "name": "Ada"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "ada"}"#),
        ],
    );
    let slot = Arc::new(Mutex::new(None));
    let seen = Arc::new(Mutex::new(0));
    let sub = db
        .query("rel.Post".into())
        .subscribe_including(
            "author".into(),
            Box::new(CancelInside {
                sub: Arc::clone(&slot),
                seen: Arc::clone(&seen),
            }),
        )
        .unwrap();
    *slot.lock().unwrap() = Some(Arc::clone(&sub));
    for name in ["Ada L.", "Ada K."] {
        let json = format!(r#"{{"id": "ada", "name": "{name}"}}"#);
        update(&db, &[("rel.Author", &json)]);
    }
    assert_eq!(
        *seen.lock().unwrap(),
        2,
        "the first, the rename; none after the cancel"
    );
    assert!(!sub.is_active());
    slot.lock().unwrap().take();
}

#[test]
fn live_including_follows_a_to_many_reference() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "tags.db", fast());
    insert(
        &db,
        &[
            ("rel.Tag", r#"{"id": "db", "label": "DB"}"#),
            ("rel.Tag", r#"{"id": "rust", "label": "Rust"}"#),
            (
                "rel.Post",
                r#"{"id": "p1", "tags": ["rust", "db"], "rank": 1}"#,
            ),
            ("rel.Post", r#"{"id": "p2", "tags": ["swift"], "rank": 2}"#),
            ("rel.Post", r#"{"id": "p3", "rank": 3}"#),
        ],
    );
    let updates = Arc::new(Mutex::new(Vec::new()));
    let _sub = db
        .query("rel.Post".into())
        .order_by("rank".into(), false)
        .subscribe_including("tags".into(), Box::new(Updates(Arc::clone(&updates))))
        .unwrap();
    let labels = |u: &Shown, row: usize| -> Vec<String> {
        u.objects[row]
            .related
            .iter()
            .map(|t| {
                json(&db, "rel.Tag", &t.bytes)["label"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    {
        let u = updates.lock().unwrap();
        assert_eq!(u.len(), 1);
        assert_eq!(labels(&u[0], 0), ["Rust", "DB"]);
        assert!(labels(&u[0], 1).is_empty(), "a missing tag is left out");
    }
    // A tag the first post holds is relabelled: that row is updated.
    update(&db, &[("rel.Tag", r#"{"id": "db", "label": "Databases"}"#)]);
    // The tag the second post holds appears.
    insert(&db, &[("rel.Tag", r#"{"id": "swift", "label": "Swift"}"#)]);
    // A tag no post holds: nothing.
    insert(&db, &[("rel.Tag", r#"{"id": "go", "label": "Go"}"#)]);
    let u = updates.lock().unwrap();
    assert_eq!(u.len(), 3);
    assert_eq!(u[1].diff.updated, vec![0]);
    assert_eq!(labels(&u[1], 0), ["Rust", "Databases"]);
    assert_eq!(u[2].diff.updated, vec![1]);
    assert_eq!(labels(&u[2], 1), ["Swift"]);
}

/// A schema change declaring a reference `dangling: false` over data that
/// names missing objects opens through the FFI when a migration backfills the
/// reference by a rule (here: clear the missing keys), and is refused without it.
#[test]
fn a_registered_backfill_lets_a_strict_reference_open_over_dangling_keys() {
    let schema = |attrs: &str| {
        format!(
            "namespace ev; table A (entity) {{ id: string (primary); }}
             table P {{ id: string (primary); a: string {attrs}; tags: [string] {attrs}; }}
             root_type P;"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backfill.db").display().to_string();
    let db = open_blocking(path.clone(), schema(""), OpenOptions::default(), None).unwrap();
    insert(
        &db,
        &[
            ("ev.A", r#"{"id": "a1"}"#),
            (
                "ev.P",
                r#"{"id": "p1", "a": "gone", "tags": ["a1", "gone"]}"#,
            ),
            ("ev.P", r#"{"id": "p2", "a": "a1"}"#),
        ],
    );
    block_on(db.close()).unwrap();
    let strict = schema(r#"(references: "A", dangling: false)"#);
    let refused = open_blocking(path.clone(), strict.clone(), OpenOptions::default(), None);
    assert!(refused.is_err(), "a dangling key refuses the schema");
    let m = keel_ffi::Migrator::new();
    for field in ["a", "tags"] {
        m.register_backfill(
            format!("v2: backfill P.{field}"),
            "ev.P".into(),
            field.into(),
            keel_ffi::BackfillRule::Nullify,
        )
        .unwrap();
    }
    let db =
        keel_ffi::open_migrating_blocking(path, strict, m, OpenOptions::default(), None).unwrap();
    let mut got: Vec<serde_json::Value> = db
        .query("ev.P".into())
        .all()
        .unwrap()
        .iter()
        .map(|o| json(&db, "ev.P", &o.bytes))
        .collect();
    got.sort_by_key(|j| j["id"].as_str().unwrap().to_owned());
    assert_eq!(got[0]["id"], "p1");
    assert!(got[0].get("a").is_none(), "{}", got[0]);
    assert_eq!(got[0]["tags"], serde_json::json!(["a1"]));
    assert_eq!(got[1]["a"], "a1");
}

/// The count over a relation through the FFI: per post, how many of its tags
/// exist; a field that is no reference is a typed error.
#[test]
fn count_including_counts_the_named_objects_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "count.db", OpenOptions::default());
    insert(
        &db,
        &[
            ("rel.Tag", r#"{"id": "db"}"#),
            ("rel.Tag", r#"{"id": "rust"}"#),
            (
                "rel.Post",
                r#"{"id": "p1", "tags": ["rust", "db", "gone"], "rank": 1}"#,
            ),
            ("rel.Post", r#"{"id": "p2", "rank": 2}"#),
        ],
    );
    let counts: Vec<u64> = db
        .query("rel.Post".into())
        .order_by("rank".into(), false)
        .count_including("tags".into())
        .unwrap()
        .iter()
        .map(|c| c.count)
        .collect();
    assert_eq!(counts, [2, 0]);
    let e = db
        .query("rel.Post".into())
        .count_including("title".into())
        .unwrap_err();
    assert!(matches!(e, KeelError::UnknownField { .. }), "{e:?}");
}

/// A live filter through a reference through the FFI (`Query::where_related`):
/// an author renamed into the condition brings their posts into the live list,
/// one renamed out takes them away; the window applies after the filter.
#[test]
fn a_live_list_filtered_through_a_reference_follows_renames() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "where.db", fast());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "a1", "name": "Ada"}"#),
            ("rel.Author", r#"{"id": "a2", "name": "Bob"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "a1", "rank": 1}"#),
            ("rel.Post", r#"{"id": "p2", "author": "a2", "rank": 2}"#),
            ("rel.Post", r#"{"id": "p3", "author": "a1", "rank": 3}"#),
        ],
    );
    let ada = keel_ffi::Expr::eq("name".into(), keel_ffi::Value::Text { v: "Ada".into() });
    let query = db
        .query("rel.Post".into())
        .order_by("rank".into(), false)
        .where_related("author".into(), ada)
        .unwrap();
    let ids = |rows: &[keel_ffi::IncludedObject]| -> Vec<String> {
        rows.iter()
            .map(|r| {
                json(&db, "rel.Post", &r.object.bytes)["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(
        ids(&query.all_including("author".into()).unwrap()),
        ["p1", "p3"]
    );
    // The window applies to the filtered list.
    assert_eq!(
        ids(&query
            .limit(1)
            .offset(1)
            .all_including("author".into())
            .unwrap()),
        ["p3"]
    );
    let updates = Arc::new(Mutex::new(Vec::new()));
    let _sub = query
        .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&updates))))
        .unwrap();
    update(&db, &[("rel.Author", r#"{"id": "a2", "name": "Ada"}"#)]);
    update(&db, &[("rel.Author", r#"{"id": "a1", "name": "Ann"}"#)]);
    let u = updates.lock().unwrap();
    assert_eq!(u.len(), 3);
    assert_eq!(ids(&u[1].objects), ["p1", "p2", "p3"]);
    assert_eq!(u[1].diff.inserted, vec![1]);
    assert_eq!(ids(&u[2].objects), ["p2"]);
    assert_eq!(u[2].diff.removed, vec![0, 2]);
    // Another field than the one filtered through: a typed error.
    let e = query.all_including("editor".into()).unwrap_err();
    assert!(matches!(e, KeelError::InvalidArgument { .. }), "{e:?}");
}

/// The way back through the FFI: `all_including` and `subscribe_including`
/// take an inverse name (`posts` of `Post.author`): each author with the posts
/// naming them, live as posts come and go.
#[test]
fn an_inverse_name_lists_and_follows_the_referring_objects() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "inverse.db", fast());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "ada", "name": "Ada"}"#),
            ("rel.Author", r#"{"id": "bob", "name": "Bob"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "ada"}"#),
        ],
    );
    let authors = db.query("rel.Author".into()).order_by("id".into(), false);
    let counts = |rows: &[keel_ffi::IncludedObject]| {
        rows.iter().map(|r| r.related.len()).collect::<Vec<_>>()
    };
    assert_eq!(
        counts(&authors.all_including("posts".into()).unwrap()),
        [1, 0]
    );
    let updates = Arc::new(Mutex::new(Vec::new()));
    let _sub = authors
        .subscribe_including("posts".into(), Box::new(Updates(Arc::clone(&updates))))
        .unwrap();
    insert(&db, &[("rel.Post", r#"{"id": "p2", "author": "bob"}"#)]);
    let u = updates.lock().unwrap();
    assert_eq!(u.len(), 2);
    assert_eq!(counts(&u[1].objects), [1, 1]);
    assert_eq!(u[1].diff.updated, vec![1]);
    let p2 = json(&db, "rel.Post", &u[1].objects[1].related[0].bytes);
    assert_eq!(p2["id"], "p2");
    drop(u);
    // Filtered through the inverse: the authors with a post titled "Hello".
    update(
        &db,
        &[(
            "rel.Post",
            r#"{"id": "p2", "author": "bob", "title": "Hello"}"#,
        )],
    );
    let hello = keel_ffi::Expr::eq("title".into(), keel_ffi::Value::Text { v: "Hello".into() });
    let with_hello = authors
        .where_related("posts".into(), hello)
        .unwrap()
        .all_including("posts".into())
        .unwrap();
    let names: Vec<String> = with_hello
        .iter()
        .map(|r| {
            json(&db, "rel.Author", &r.object.bytes)["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(names, ["bob"]);
}

/// A live list across a relation follows another connection's commits (a
/// second handle here, as another process would be): with `share_changes`
/// once the catch-up reads them, without it at this handle's next read.
#[test]
fn a_live_list_follows_another_connections_rename() {
    for share in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rel.db").display().to_string();
        let opts = || OpenOptions {
            share_changes: share,
            ..OpenOptions::default()
        };
        let a = open_blocking(path.clone(), FBS.into(), opts(), None).unwrap();
        let b = open_blocking(path, FBS.into(), opts(), None).unwrap();
        insert(
            &a,
            &[
                ("rel.Author", r#"{"id": "ada", "name": "Ada"}"#),
                ("rel.Post", r#"{"id": "p1", "author": "ada"}"#),
            ],
        );
        let updates = Arc::new(Mutex::new(Vec::new()));
        let _sub = a
            .query("rel.Post".into())
            .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&updates))))
            .unwrap();
        update(&b, &[("rel.Author", r#"{"id": "ada", "name": "Ada L."}"#)]);
        let start = std::time::Instant::now();
        loop {
            let name = {
                let u = updates.lock().unwrap();
                let last = u.last().unwrap();
                json(&a, "rel.Author", &last.objects[0].related[0].bytes)["name"].clone()
            };
            if name == "Ada L." {
                break;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "share_changes {share}: the list never saw the other handle's rename"
            );
            // Without the feed: noticed at this handle's next read.
            a.query("rel.Post".into()).count().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// The `id` of each row's object.
fn row_ids(db: &keel_ffi::Database, rows: &[keel_ffi::IncludedObject]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            json(db, "rel.Post", &r.object.bytes)["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn order_by_related_sorts_by_the_authors_field_then_cuts_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "order.db", fast());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "z", "name": "Zoe"}"#),
            ("rel.Author", r#"{"id": "a", "name": "Ada"}"#),
            ("rel.Author", r#"{"id": "m", "name": "Max"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "z", "rank": 1}"#),
            ("rel.Post", r#"{"id": "p2", "author": "a", "rank": 2}"#),
            ("rel.Post", r#"{"id": "p3", "rank": 3}"#),
            ("rel.Post", r#"{"id": "p4", "author": "m", "rank": 4}"#),
            ("rel.Post", r#"{"id": "p5", "author": "a", "rank": 5}"#),
        ],
    );
    let q = db.query("rel.Post".into()).order_by("rank".into(), false);
    // Absent first ascending; equal names keep the rank order.
    let asc = q.order_by_related("name".into(), false);
    let rows = asc.all_including("author".into()).unwrap();
    assert_eq!(row_ids(&db, &rows), ["p3", "p2", "p5", "p4", "p1"]);
    let desc = q.order_by_related("name".into(), true);
    let rows = desc.all_including("author".into()).unwrap();
    assert_eq!(row_ids(&db, &rows), ["p1", "p4", "p2", "p5", "p3"]);
    // The window applies after the order, not before it.
    let page = asc
        .offset(1)
        .limit(2)
        .all_including("author".into())
        .unwrap();
    assert_eq!(row_ids(&db, &page), ["p2", "p5"]);
    let counts = asc.limit(2).count_including("author".into()).unwrap();
    assert_eq!(
        counts.iter().map(|c| c.count).collect::<Vec<_>>(),
        [0, 1],
        "p3 names no author, p2 names Ada"
    );
    // The live list keeps the order: renaming Zoe to Abe moves p1 first.
    let got = Arc::new(Mutex::new(Vec::new()));
    let sub = asc
        .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&got))))
        .unwrap();
    update(&db, &[("rel.Author", r#"{"id": "z", "name": "Abe"}"#)]);
    let last = got.lock().unwrap().last().unwrap().objects.clone();
    assert_eq!(row_ids(&db, &last), ["p3", "p1", "p2", "p5", "p4"]);
    sub.cancel();
    let bad = q.order_by_related("nope".into(), false);
    assert!(matches!(
        bad.all_including("author".into()),
        Err(KeelError::UnknownField { .. })
    ));
}

#[test]
fn subscriptions_end_with_closed_when_their_database_closes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "ended.db", fast());
    insert(&db, &[("rel.Post", r#"{"id": "p1", "rank": 1}"#)]);
    let got = Arc::new(Mutex::new(Vec::new()));
    let including = db
        .query("rel.Post".into())
        .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&got))))
        .unwrap();
    struct Quiet;
    impl keel_ffi::QueryListener for Quiet {
        fn on_update(&self, _: keel_ffi::QueryUpdate) -> Result<(), CallbackError> {
            Ok(())
        }
    }
    let live = db
        .query("rel.Post".into())
        .subscribe(Box::new(Quiet))
        .unwrap();
    let cancelled = db
        .query("rel.Post".into())
        .subscribe(Box::new(Quiet))
        .unwrap();
    cancelled.cancel();
    assert!(
        block_on(cancelled.ended()).is_ok(),
        "a cancel ends it without an error"
    );
    assert!(live.is_active() && including.is_active());
    block_on(db.close()).unwrap();
    assert!(matches!(
        block_on(live.ended()),
        Err(KeelError::Closed { .. })
    ));
    assert!(matches!(
        block_on(including.ended()),
        Err(KeelError::Closed { .. })
    ));
    assert!(!live.is_active() && !including.is_active());
}

#[test]
fn live_subscriptions_counts_live_lists_across_a_relation() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "count.db", fast());
    let got = Arc::new(Mutex::new(Vec::new()));
    let before = db.live_subscriptions();
    let a = db
        .query("rel.Post".into())
        .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&got))))
        .unwrap();
    let b = db
        .query("rel.Post".into())
        .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&got))))
        .unwrap();
    assert_eq!(db.live_subscriptions(), before + 2);
    a.cancel();
    assert_eq!(db.live_subscriptions(), before + 1);
    drop(b);
    assert_eq!(db.live_subscriptions(), before);
    let c = db
        .query("rel.Post".into())
        .subscribe_including("author".into(), Box::new(Updates(got)))
        .unwrap();
    assert_eq!(db.live_subscriptions(), before + 1);
    block_on(db.close()).unwrap();
    assert_eq!(db.live_subscriptions(), 0, "none is live after close");
    drop(c);
}

/// One batch's deliveries, each (id, update), unpacked.
type Batch = Vec<(u64, IncludingUpdate)>;

/// Every batch a sink got.
struct Batches(Arc<Mutex<Vec<Batch>>>);
impl keel_ffi::BatchListener for Batches {
    fn on_batch(&self, b: keel_ffi::DeliveryBatch) -> Result<(), CallbackError> {
        let got = unpack(&b.bytes);
        assert_eq!(got.len() as u32, b.count);
        self.0.lock().unwrap().push(got);
        Ok(())
    }
}

/// A reader over a packed buffer.
struct Cursor<'a>(&'a [u8], usize);
impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.0[self.1..self.1 + n];
        self.1 += n;
        s
    }
    fn u32(&mut self) -> u64 {
        u32::from_le_bytes(self.take(4).try_into().unwrap()) as u64
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn list(&mut self) -> Vec<u64> {
        let n = self.u32();
        (0..n).map(|_| self.u32()).collect()
    }
    fn object(&mut self) -> keel_ffi::StoredObject {
        let rowid = self.u64() as i64;
        let n = self.u32() as usize;
        keel_ffi::StoredObject {
            rowid,
            bytes: self.take(n).to_vec().into(),
        }
    }
}

/// The packed layout of `batch.rs`, read back.
fn unpack(b: &[u8]) -> Vec<(u64, IncludingUpdate)> {
    let mut c = Cursor(b, 0);
    let mut out = Vec::new();
    while c.1 < b.len() {
        let id = c.u64();
        let len = c.u64() as usize;
        let end = c.1 + len;
        let count = c.u32();
        let removed = c.list();
        let inserted = c.list();
        let moves = c.u32();
        let moved = (0..moves)
            .map(|_| keel_ffi::Move {
                from: c.u32(),
                to: c.u32(),
            })
            .collect();
        let updated = c.list();
        let rows = c.u32();
        let changed = (0..rows)
            .map(|_| {
                let index = c.u32();
                let object = c.object();
                let n = c.u32();
                let related = (0..n).map(|_| c.object()).collect();
                keel_ffi::ChangedRow {
                    index,
                    row: keel_ffi::IncludedObject { object, related },
                }
            })
            .collect();
        assert_eq!(c.1, end, "the body is as long as its length says");
        out.push((
            id,
            IncludingUpdate {
                count,
                diff: keel_ffi::Diff {
                    removed,
                    inserted,
                    moved,
                    updated,
                },
                changed,
            },
        ));
    }
    out
}

#[test]
fn a_sink_gets_one_batch_per_commit_with_what_each_list_would_get() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_rel(&dir, "sink.db", fast());
    insert(
        &db,
        &[
            ("rel.Author", r#"{"id": "ada", "name": "Ada"}"#),
            ("rel.Author", r#"{"id": "bob", "name": "Bob"}"#),
            ("rel.Post", r#"{"id": "p1", "author": "ada", "rank": 1}"#),
            ("rel.Post", r#"{"id": "p2", "author": "bob", "rank": 2}"#),
            ("rel.Post", r#"{"id": "p3", "author": "ada", "rank": 3}"#),
        ],
    );
    let batches = Arc::new(Mutex::new(Vec::new()));
    let sink = keel_ffi::deliveries(Box::new(Batches(Arc::clone(&batches))));
    // Three lists through the sink, and each also through its own listener:
    // what the sink hands over must be what the listener gets.
    let window = |lo: i64, hi: i64| {
        db.query("rel.Post".into())
            .filter(keel_ffi::Expr::all_of(vec![
                keel_ffi::Expr::ge("rank".into(), keel_ffi::Value::Integer { v: lo }),
                keel_ffi::Expr::le("rank".into(), keel_ffi::Value::Integer { v: hi }),
            ]))
            .order_by("rank".into(), false)
    };
    let windows = [(1, 1), (2, 2), (1, 3)];
    let mut own = Vec::new();
    let mut subs = Vec::new();
    for (i, (lo, hi)) in windows.iter().enumerate() {
        let id = 100 + i as u64;
        subs.push(
            window(*lo, *hi)
                .subscribe_including_to("author".into(), Arc::clone(&sink), id)
                .unwrap(),
        );
        let u = Arc::new(Mutex::new(Vec::new()));
        let s = window(*lo, *hi)
            .subscribe_including("author".into(), Box::new(Updates(Arc::clone(&u))))
            .unwrap();
        own.push((u, s));
    }
    assert_eq!(db.live_subscriptions(), 6);
    {
        // Each first delivery alone, before its subscribe returned.
        let b = batches.lock().unwrap();
        let ids: Vec<Vec<u64>> = b.iter().map(|x| x.iter().map(|d| d.0).collect()).collect();
        assert_eq!(ids, vec![vec![100], vec![101], vec![102]]);
    }
    batches.lock().unwrap().clear();
    // Ada's rename: lists 100 and 102 show her; one batch, before the write
    // returns.
    update(&db, &[("rel.Author", r#"{"id": "ada", "name": "Ada L."}"#)]);
    {
        let b = batches.lock().unwrap();
        assert_eq!(b.len(), 1, "one call for the commit");
        let ids: Vec<u64> = b[0].iter().map(|d| d.0).collect();
        assert_eq!(ids, vec![100, 102]);
        for (id, u) in &b[0] {
            let mine = own[(*id - 100) as usize].0.lock().unwrap();
            let last = mine.last().unwrap();
            assert_eq!(u.diff, last.diff, "list {id}");
            assert_eq!(
                u.changed.iter().map(|c| c.index).collect::<Vec<_>>(),
                last.changed
            );
            for c in &u.changed {
                assert_eq!(c.row, last.objects[c.index as usize], "list {id}");
            }
        }
        assert_eq!(b[0][1].1.diff.updated, vec![0, 2]);
    }
    batches.lock().unwrap().clear();
    // A commit no sink list shows: no call at all.
    insert(&db, &[("rel.Author", r#"{"id": "cy", "name": "Cy"}"#)]);
    assert!(batches.lock().unwrap().is_empty());
    // Cancelled: never delivered again; the others still are.
    subs[0].cancel();
    update(&db, &[("rel.Author", r#"{"id": "ada", "name": "Ada K."}"#)]);
    {
        let b = batches.lock().unwrap();
        let ids: Vec<Vec<u64>> = b.iter().map(|x| x.iter().map(|d| d.0).collect()).collect();
        assert_eq!(ids, vec![vec![102]]);
    }
    // The last subscription out leaves no hook behind: a commit calls nothing.
    for s in &subs {
        s.cancel();
    }
    batches.lock().unwrap().clear();
    update(&db, &[("rel.Author", r#"{"id": "ada", "name": "Ada J."}"#)]);
    assert!(batches.lock().unwrap().is_empty());
    for (_, s) in &own {
        s.cancel();
    }
    assert_eq!(db.live_subscriptions(), 0);
}
