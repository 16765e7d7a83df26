//! Dflat's query features: arithmetic in filters, order by a list of values, and
//! null tests on any expression — typed, dynamic and through live queries.

use std::sync::{Arc, Mutex};

use keel::prelude::*;
use keel::schema::{Term, Unlisted};
use keel::Update;
use keel_example_blog::blog::{Color, Post};

fn open_with(posts: Vec<Post>) -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("q.db"), StoreOptions::default()).unwrap();
    db.write(move |t| {
        for p in &posts {
            t.insert(p)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    (dir, db)
}

fn post(id: &str, priority: i32, delta: i8, rating: Option<f64>, color: Color) -> Post {
    let b = Post::builder()
        .id(id)
        .priority(priority)
        .delta(delta)
        .color(color);
    match rating {
        Some(r) => b.rating(r).build(),
        None => b.build(),
    }
}

fn ids<P: std::borrow::Borrow<Post>>(v: &[P]) -> Vec<&str> {
    v.iter().map(|p| p.borrow().id.as_str()).collect()
}

fn sample() -> Vec<Post> {
    vec![
        post("a", 100, 60, Some(1.0), Color::Red),
        post("b", 140, 1, None, Color::Green),
        post("c", 14, 100, Some(2.5), Color::Blue),
        post("d", 21, -3, Some(0.0), Color::Green),
        post("e", 7, 0, None, Color::from_raw(9)),
    ]
}

#[test]
fn arithmetic_filters() {
    let (_d, db) = open_with(sample());
    // `mana + hp > 150`
    let q = (Post::priority() + Post::delta()).gt(150);
    let got = db
        .fetch::<Post>()
        .filter(q)
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(&got), vec!["a"]);
    // `x % 7 == 0`
    let q = (Post::priority() % 7).eq(0);
    let got = db
        .fetch::<Post>()
        .filter(q)
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(&got), vec!["b", "c", "d", "e"]);
    // Field against field, and float arithmetic with a null operand.
    let q = Post::delta().term().gt(Post::priority());
    assert_eq!(ids(&db.fetch::<Post>().filter(q).all().unwrap()), vec!["c"]);
    let q = (Post::rating() * 2).ge(2);
    let got = db
        .fetch::<Post>()
        .filter(q)
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(&got), vec!["a", "c"]);
    // Division by zero is null: neither the comparison nor its negation matches.
    let by_zero = (Post::priority() / 0).gt(0);
    assert_eq!(
        db.fetch::<Post>().filter(by_zero.clone()).count().unwrap(),
        0
    );
    assert_eq!(db.fetch::<Post>().filter(!by_zero).count().unwrap(), 0);
    // Arithmetic on a string is a typed error, not an empty result.
    let err = db
        .fetch::<Post>()
        .filter((Post::title() + 1).gt(0))
        .all()
        .unwrap_err();
    assert!(matches!(err, Error::TypeMismatch { .. }), "{err:?}");
}

#[test]
fn null_tests_on_any_expression() {
    let (_d, db) = open_with(sample());
    // The term `rating * 2` is null where rating is absent.
    let q = (Post::rating() * 2).is_null();
    let got = db
        .fetch::<Post>()
        .filter(q)
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(&got), vec!["b", "e"]);
    // A predicate is unknown where it compares with an absent field.
    let q = Post::rating().gt(1.0).is_null();
    let got = db
        .fetch::<Post>()
        .filter(q)
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(&got), vec!["b", "e"]);
    let q = Post::rating().gt(1.0).is_not_null();
    assert_eq!(db.fetch::<Post>().filter(q).count().unwrap(), 3);
}

#[test]
fn order_by_a_list_of_values() {
    let (_d, db) = open_with(sample());
    let order = |k| {
        let got = db
            .fetch::<Post>()
            .order_by(k)
            .order_by(Post::id().asc())
            .all()
            .unwrap();
        ids(&got).into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let listed = [Color::Blue, Color::Red];
    assert_eq!(
        order(Post::color().in_order_of(listed, Unlisted::Last)),
        vec!["c", "a", "b", "d", "e"]
    );
    assert_eq!(
        order(Post::color().in_order_of(listed, Unlisted::First)),
        vec!["b", "d", "e", "c", "a"]
    );
    assert_eq!(
        order(Post::color().in_order_of(listed, Unlisted::Last).reversed()),
        vec!["a", "c", "b", "d", "e"]
    );
}

/// Live queries evaluate the same features in memory.
#[test]
fn live_queries_use_the_same_semantics() {
    let (_d, db) = open_with(sample());
    let seen: Arc<Mutex<Vec<Update<Post>>>> = Arc::default();
    let s2 = seen.clone();
    let _sub = db
        .fetch::<Post>()
        .filter((Post::priority() + Post::delta()).gt(150))
        .order_by(Post::color().in_order_of([Color::Green, Color::Red], Unlisted::Last))
        .subscribe(move |u| s2.lock().unwrap().push(u))
        .unwrap();
    db.write(|t| t.insert(&post("f", 151, 0, None, Color::Green)))
        .wait()
        .unwrap();
    db.write(|t| t.insert(&post("g", 150, 0, None, Color::Green)))
        .wait()
        .unwrap();
    let last = seen.lock().unwrap().last().unwrap().objects.clone();
    assert_eq!(ids(&last), vec!["f", "a"]);
    // The dynamic API builds the same terms.
    let schema = db.schema().clone();
    let t = schema.reader("blog.Post").unwrap();
    let q = Term::field(t.path("priority").unwrap())
        .arith(keel::schema::ArithOp::Rem, 7)
        .eq(0);
    assert_eq!(db.query("blog.Post").filter(q).count().unwrap(), 4);
}
