//! The common path without friction: untyped integer literals for narrow fields,
//! optional strings compared as they are, composite keys built by `key_of`,
//! delete and update by query, `get_object_or`.

use keel::prelude::*;
use keel_example_blog::blog::{Post, Rect};
use keel_example_blog::edge::{Child, Level};

#[test]
fn literals_and_optional_strings_compare_without_conversions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("f.db"), StoreOptions::default()).unwrap();
    let p = Post::builder().id("a").title("t").delta(-4).build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    // `delta` is a `byte`, `frame.layer` a `short`, `views` a `ulong`: plain literals.
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::delta().lt(0))
            .count()
            .unwrap(),
        1
    );
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::frame().join(Rect::layer()).lt(100))
            .count()
            .unwrap(),
        0
    );
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::views().eq(0))
            .count()
            .unwrap(),
        1
    );
    // An optional string compares as it is (None is NULL: no match).
    let stored = db.get::<Post>(&"a".into()).unwrap().unwrap();
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::title().eq(&stored.title))
            .count()
            .unwrap(),
        1
    );
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::slug().eq(&stored.slug))
            .count()
            .unwrap(),
        0
    );
}

#[test]
fn composite_keys_by_parts() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Child>(dir.path().join("k.db"), StoreOptions::default()).unwrap();
    let c = Child::builder()
        .set_key(1)
        .level(Level::Low)
        .set_builder(7)
        .build();
    db.write(move |t| t.insert(&c)).wait().unwrap();
    let got = db
        .get::<Child>(&Child::key_of(1, Level::Low))
        .unwrap()
        .unwrap();
    assert_eq!(got.builder, 7);
    assert!(db
        .get::<Child>(&Child::key_of(1, Level::MediumHigh))
        .unwrap()
        .is_none());
    db.write(|t| t.delete::<Child>(&Child::key_of(1, Level::Low)))
        .wait()
        .unwrap();
    assert_eq!(db.fetch::<Child>().count().unwrap(), 0);
}

#[test]
fn delete_and_update_by_query() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("q.db"), StoreOptions::default()).unwrap();
    db.write(|t| {
        for i in 0..10 {
            t.insert(&Post::builder().id(format!("p{i}")).priority(i).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let changes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let c2 = changes.clone();
    db.on_commit_changes(move |cs| c2.lock().unwrap().extend(cs.iter().map(|c| c.op)));
    let (deleted, updated) = db
        .write(|t| {
            let d = t.delete_where::<Post>(Post::priority().lt(3))?;
            let u = t.update_where::<Post>(Post::priority().ge(8), |p| {
                p.change().title("top").build()
            })?;
            Ok((d, u))
        })
        .wait()
        .unwrap();
    assert_eq!((deleted, updated), (3, 2));
    assert_eq!(db.fetch::<Post>().count().unwrap(), 7);
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::title().eq("top"))
            .count()
            .unwrap(),
        2
    );
    let ops = changes.lock().unwrap().clone();
    assert_eq!(ops.iter().filter(|o| **o == ChangeOp::Delete).count(), 3);
    assert_eq!(ops.iter().filter(|o| **o == ChangeOp::Update).count(), 2);
    // The dynamic form, by collection name.
    let n = db
        .write(|t| t.delete_matching("blog.Post", Expr::True))
        .wait()
        .unwrap();
    assert_eq!(n, 7);
}
