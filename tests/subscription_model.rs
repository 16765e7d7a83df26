//! Model-based test of query subscriptions: random transactions (some committed in
//! one group), and after every one each subscription's latest result equals a fresh
//! fetch of its query, and applying each delivered diff to the previous result gives
//! the new one. Covers primary-key and field equality (hash-indexed), ranges and
//! NULL-sensitive filters (scanned), multi-key order, limit and offset.
//!
//! Each sequence runs twice: once with callbacks that keep every update (the hub's
//! delivered window stays shared, so each delivery takes a new one), once with
//! callbacks that copy the objects out and let the update go (the hub then edits
//! its window in place, `keel::Objects`).

use std::sync::{Arc, Mutex};

use keel::prelude::*;
use keel::{Diff, Objects, QueryUpdate};
use keel_example_blog::blog::Post;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Upsert(Post),
    Delete(u8),
}

fn arb_post() -> impl Strategy<Value = Post> {
    (
        0..12u8,
        0i32..6,
        prop::option::of("[abc]"),
        prop::option::of(0..4u8),
    )
        .prop_map(|(id, prio, title, rating)| {
            let mut b = Post::builder().id(format!("k{id:02}")).priority(prio);
            if let Some(t) = title {
                b = b.title(t);
            }
            if let Some(r) = rating {
                b = b.rating(f64::from(r) / 2.0);
            }
            b.build()
        })
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => arb_post().prop_map(Op::Upsert),
        1 => (0..12u8).prop_map(Op::Delete),
    ]
}

/// The subscribed queries, each buildable again for a fresh fetch.
fn queries(db: &Database) -> Vec<(&'static str, Query<'static>)> {
    let q = || db.fetch::<Post>();
    vec![
        ("all by rowid", q().into_query()),
        ("pk eq", q().filter(Post::id().eq("k03")).into_query()),
        (
            "pk in",
            q().filter(Post::id().in_(["k01", "k05", "k07"]))
                .order_by(Post::priority().desc())
                .into_query(),
        ),
        (
            "title eq, by priority",
            q().filter(Post::title().eq("a"))
                .order_by(Post::priority().asc())
                .into_query(),
        ),
        (
            "range, limit 3",
            q().filter(Post::priority().ge(1) & Post::priority().lt(5))
                .order_by(Post::priority().asc())
                .limit(3)
                .into_query(),
        ),
        (
            "multi-key order, offset 2 limit 4",
            q().order_by(Post::priority().desc())
                .order_by(Post::title().asc())
                .offset(2)
                .limit(4)
                .into_query(),
        ),
        (
            "null-sensitive, rating desc",
            q().filter(!Post::rating().gt(0.5))
                .order_by(Post::rating().desc())
                .into_query(),
        ),
        (
            "title null or b, offset 1",
            q().filter(Post::title().is_null() | Post::title().eq("b"))
                .order_by(Post::title().desc())
                .order_by(Post::priority().asc())
                .offset(1)
                .into_query(),
        ),
        (
            "range and another field, offset 1 limit 2",
            q().filter(Post::priority().gt(1) & Post::title().ne("a"))
                .order_by(Post::priority().desc())
                .offset(1)
                .limit(2)
                .into_query(),
        ),
        (
            "pk eq and a range",
            q().filter(Post::priority().gt(2) & Post::id().eq("k04"))
                .into_query(),
        ),
        (
            "point range",
            q().filter(Post::priority().le(3) & Post::priority().ge(3))
                .into_query(),
        ),
        (
            "limit 1 by title",
            q().filter(Post::title().is_not_null())
                .order_by(Post::title().asc())
                .limit(1)
                .into_query(),
        ),
    ]
}

type Log = Arc<Mutex<Vec<QueryUpdate>>>;

fn check(
    db: &Database,
    logs: &[(&str, Log)],
    seen: &mut [usize],
    last: &mut [Vec<Arc<StoredObject>>],
) {
    let fresh = queries(db);
    for (i, ((name, log), (_, q))) in logs.iter().zip(fresh).enumerate() {
        let want = q.all().unwrap();
        let log = log.lock().unwrap();
        for (k, u) in log.iter().enumerate().skip(seen[i]) {
            let rebuilt = u.diff.apply(&last[i], |j| u.objects[j].clone());
            assert_eq!(
                rebuilt, u.objects,
                "{name}: diff {:?} does not rebuild",
                u.diff
            );
            assert!(k == 0 || !u.diff.is_empty(), "{name}: empty delivery");
            assert_eq!(u.diff, Diff::between(&last[i], &u.objects), "{name}");
            last[i] = u.objects.to_vec();
        }
        seen[i] = log.len();
        let got: Vec<StoredObject> = last[i].iter().map(|o| (**o).clone()).collect();
        assert_eq!(
            got, want,
            "{name}: latest result differs from a fresh fetch"
        );
    }
}

fn run(txns: Vec<Vec<Vec<Op>>>) {
    run_keeping(txns.clone(), true);
    run_keeping(txns, false);
}

/// `keep`: the callbacks hold on to each update; else they log a copy of its
/// objects and drop it.
fn run_keeping(txns: Vec<Vec<Vec<Op>>>, keep: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("m.db"), StoreOptions::default()).unwrap();
    // Some data before subscribing, so first results come from disk.
    db.write(|t| {
        for i in (0..12u8).step_by(3) {
            t.insert(
                &Post::builder()
                    .id(format!("k{i:02}"))
                    .priority(i32::from(i % 6))
                    .title("a")
                    .rating(1.0)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let mut subs = Vec::new();
    let mut logs: Vec<(&str, Log)> = Vec::new();
    for (name, q) in queries(&db) {
        let log: Log = Arc::default();
        let l2 = log.clone();
        subs.push(
            q.subscribe(move |u| {
                let u = if keep {
                    u
                } else {
                    QueryUpdate {
                        objects: Objects::from(u.objects.to_vec()),
                        diff: u.diff,
                    }
                };
                l2.lock().unwrap().push(u);
            })
            .unwrap(),
        );
        logs.push((name, log));
    }
    let n = logs.len();
    let (mut seen, mut last) = (vec![0; n], vec![Vec::new(); n]);
    check(&db, &logs, &mut seen, &mut last);
    for group in txns {
        // Several closures queued at once usually share one group commit.
        let futs: Vec<_> = group
            .into_iter()
            .map(|ops| {
                db.write(move |t| {
                    for op in ops {
                        match op {
                            Op::Upsert(p) => {
                                t.upsert(&p)?;
                            }
                            Op::Delete(i) => {
                                t.delete::<Post>(&format!("k{i:02}"))?;
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for f in futs {
            f.wait().unwrap();
        }
        check(&db, &logs, &mut seen, &mut last);
    }
    drop(subs);
    assert_eq!(db.subscription_counts(), (0, 0));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn subscriptions_track_fresh_fetches(
        txns in prop::collection::vec(
            prop::collection::vec(prop::collection::vec(arb_op(), 1..6), 1..3),
            1..12,
        )
    ) {
        run(txns);
    }

    /// One object per commit, as apps write: the hub's single-object path (no
    /// window snapshot) against fresh fetches and `Diff::between`, with windows
    /// that fill, overflow their limit and slide.
    #[test]
    fn single_object_commits_track_fresh_fetches(
        ops in prop::collection::vec(arb_op(), 1..40)
    ) {
        run(ops.into_iter().map(|op| vec![vec![op]]).collect());
    }
}

#[test]
fn window_refills_after_deletes() {
    // Deleting inside a limited window leaves it short: the hub refills from disk.
    let mut txns = vec![vec![(0..12u8)
        .map(|i| {
            Op::Upsert(
                Post::builder()
                    .id(format!("k{i:02}"))
                    .priority(i32::from(i % 6))
                    .title("a")
                    .build(),
            )
        })
        .collect()]];
    for i in 0..12u8 {
        txns.push(vec![vec![Op::Delete(i)]]);
    }
    run(txns);
}
