//! Model test: many live queries that are identical (the same query
//! opened from several views) or overlap (range windows sharing rows, with limit and
//! offset), under random write sequences — single-object moves, batches, deletes and
//! transactions that touch every object. After every write each subscription's last
//! delivery equals a fresh fetch of its query, and each delivered diff rebuilds the
//! delivered result from the previous one.

use std::sync::{Arc, Mutex};

use keel::prelude::*;
use keel::{Diff, QueryUpdate};
use keel_example_blog::blog::Post;
use proptest::prelude::*;

const OBJECTS: u8 = 40;

#[derive(Debug, Clone)]
enum Op {
    /// Set object `id`'s priority (inserting it if missing).
    Move(u8, i32),
    /// Delete object `id`.
    Delete(u8),
    /// Add `by` to every stored object's priority (modulo 30) and bump its views.
    All(i32),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..OBJECTS, 0i32..30).prop_map(|(i, p)| Op::Move(i, p)),
        2 => (0..OBJECTS).prop_map(Op::Delete),
        1 => (1i32..5).prop_map(Op::All),
    ]
}

fn post(i: u8, priority: i32, views: u64) -> Post {
    Post::builder()
        .id(format!("k{i:02}"))
        .title(if i.is_multiple_of(3) { "a" } else { "b" })
        .priority(priority)
        .views(views)
        .build()
}

/// The subscribed queries: overlapping windows, and each opened more than once.
fn queries(db: &Database) -> Vec<Query<'static>> {
    let q = || db.fetch::<Post>();
    let mut out = Vec::new();
    for copy in 0..3 {
        for lo in [0, 4, 8, 12, 16, 20] {
            // Overlapping ordered windows on the indexed field (exact ranges).
            out.push(
                q().filter(Post::priority().ge(lo) & Post::priority().lt(lo + 10))
                    .order_by(Post::priority().asc())
                    .limit(5)
                    .into_query(),
            );
        }
        // The same range with an offset and a residual conjunct.
        out.push(
            q().filter(Post::priority().ge(5) & Post::priority().le(25) & Post::title().eq("b"))
                .order_by(Post::priority().desc())
                .offset(2)
                .limit(6)
                .into_query(),
        );
        // Open-ended range, no limit.
        out.push(
            q().filter(Post::priority().gt(20))
                .order_by(Post::priority().asc())
                .into_query(),
        );
        // Primary key (hash-indexed) and a scanned filter.
        out.push(q().filter(Post::id().eq("k07")).into_query());
        out.push(
            q().filter(Post::priority().lt(3) | Post::priority().gt(27))
                .order_by(Post::priority().asc())
                .limit(4)
                .into_query(),
        );
        if copy == 0 {
            // Everything, by rowid.
            out.push(q().into_query());
        }
    }
    out
}

type Log = Arc<Mutex<Vec<QueryUpdate>>>;

fn check(db: &Database, logs: &[Log], seen: &mut [usize], last: &mut [Vec<Arc<StoredObject>>]) {
    for (i, (log, q)) in logs.iter().zip(queries(db)).enumerate() {
        let want = q.all().unwrap();
        let log = log.lock().unwrap();
        for u in log.iter().skip(seen[i]) {
            let rebuilt = u.diff.apply(&last[i], |j| u.objects[j].clone());
            assert_eq!(
                rebuilt, u.objects,
                "query {i}: diff {:?} does not rebuild",
                u.diff
            );
            assert_eq!(u.diff, Diff::between(&last[i], &u.objects), "query {i}");
            last[i] = u.objects.to_vec();
        }
        seen[i] = log.len();
        let got: Vec<StoredObject> = last[i].iter().map(|o| (**o).clone()).collect();
        assert_eq!(
            got, want,
            "query {i}: last delivery differs from a fresh fetch"
        );
    }
}

fn run(txns: Vec<Vec<Op>>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    db.write(|t| {
        for i in (0..OBJECTS).step_by(2) {
            t.insert(&post(i, i32::from(i) * 3 % 30, 0))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let mut subs = Vec::new();
    let mut logs: Vec<Log> = Vec::new();
    for q in queries(&db) {
        let log: Log = Arc::default();
        let l2 = log.clone();
        subs.push(q.subscribe(move |u| l2.lock().unwrap().push(u)).unwrap());
        logs.push(log);
    }
    let n = logs.len();
    let (mut seen, mut last) = (vec![0; n], vec![Vec::new(); n]);
    check(&db, &logs, &mut seen, &mut last);
    for (round, ops) in txns.into_iter().enumerate() {
        db.write(move |t| {
            for op in ops {
                match op {
                    Op::Move(i, p) => {
                        t.upsert(&post(i, p, round as u64))?;
                    }
                    Op::Delete(i) => {
                        t.delete::<Post>(&format!("k{i:02}"))?;
                    }
                    Op::All(by) => {
                        for p in t.fetch::<Post>().all()? {
                            let i: u8 = p.id[1..].parse().unwrap();
                            t.update(&post(i, (p.priority + by) % 30, round as u64 + 1))?;
                        }
                    }
                }
            }
            Ok(())
        })
        .wait()
        .unwrap();
        check(&db, &logs, &mut seen, &mut last);
    }
    drop(subs);
    assert_eq!(db.subscription_counts(), (0, 0));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn shared_and_overlapping_subscriptions_track_fresh_fetches(
        txns in prop::collection::vec(prop::collection::vec(arb_op(), 1..5), 1..16)
    ) {
        run(txns);
    }
}

/// A fixed sequence: single-object moves between windows, then a transaction that
/// touches every object, then deletes that empty windows.
#[test]
fn moves_then_everything_then_deletes() {
    let mut txns: Vec<Vec<Op>> = (0..OBJECTS)
        .map(|i| vec![Op::Move(i, (i32::from(i) * 7) % 30)])
        .collect();
    txns.push(vec![Op::All(3)]);
    txns.push(vec![Op::All(1), Op::Move(3, 29)]);
    for i in (0..OBJECTS).step_by(3) {
        txns.push(vec![Op::Delete(i)]);
    }
    run(txns);
}

/// A new database holding posts `0..n`, each with its number as priority.
fn with_posts(n: u8) -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("t.db"), StoreOptions::default()).unwrap();
    db.write(move |t| {
        for i in 0..n {
            t.insert(&post(i, i32::from(i), 0))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    (dir, db)
}

/// Identical queries share one stored result: dropping the first opened (whose
/// result the others share) leaves the others delivering, and counts follow.
#[test]
fn dropping_the_first_of_identical_queries_keeps_the_others() {
    let (_dir, db) = with_posts(10);
    let q = || {
        db.fetch::<Post>()
            .filter(Post::priority().ge(2) & Post::priority().lt(8))
            .order_by(Post::priority().asc())
            .limit(3)
            .into_query()
    };
    let logs: Vec<Log> = (0..3).map(|_| Log::default()).collect();
    let mut subs: Vec<_> = logs
        .iter()
        .map(|l| {
            let l2 = l.clone();
            Some(q().subscribe(move |u| l2.lock().unwrap().push(u)).unwrap())
        })
        .collect();
    assert_eq!(db.subscription_counts(), (0, 3));
    subs[0] = None;
    assert_eq!(db.subscription_counts(), (0, 2));
    db.write(|t| t.update(&post(2, 9, 1))).wait().unwrap();
    subs[1] = None;
    db.write(|t| t.update(&post(3, 9, 1))).wait().unwrap();
    let fresh = q().all().unwrap();
    let first = logs[0].lock().unwrap();
    assert_eq!(first.len(), 1, "no delivery after drop");
    assert_eq!(logs[1].lock().unwrap().len(), 2);
    let last = logs[2].lock().unwrap();
    assert_eq!(last.len(), 3);
    let got: Vec<StoredObject> = last[2].objects.iter().map(|o| (**o).clone()).collect();
    assert_eq!(got, fresh);
    // A query opened after a commit shares the current result.
    let late = q().all().unwrap();
    let l2 = Log::default();
    let l3 = l2.clone();
    let _s = q().subscribe(move |u| l3.lock().unwrap().push(u)).unwrap();
    let got: Vec<StoredObject> = l2.lock().unwrap()[0]
        .objects
        .iter()
        .map(|o| (**o).clone())
        .collect();
    assert_eq!(got, late);
    drop(subs);
    assert_eq!(db.subscription_counts(), (0, 1));
}

/// Among many open queries, a query opened again finds its live twin and shares
/// its result (the first delivery hands out the twin's very list), also after the
/// query first opened that way was dropped, and not after every one of them was.
#[test]
fn a_query_opened_again_among_many_shares_its_twin() {
    let (_dir, db) = with_posts(100);
    let q = |lo: i32| {
        db.fetch::<Post>()
            .filter(Post::priority().ge(lo) & Post::priority().lt(lo + 10))
            .order_by(Post::priority().asc())
            .limit(5)
            .into_query()
    };
    // The address of the list the first delivery of a new subscription to `lo`
    // hands out, and the subscription.
    let open = |lo: i32| {
        let first = Arc::new(Mutex::new(None));
        let f = Arc::clone(&first);
        let sub = q(lo)
            .subscribe(move |u| {
                f.lock().unwrap().get_or_insert(u.objects.as_ptr() as usize);
            })
            .unwrap();
        let at = first.lock().unwrap().expect("a first delivery");
        (sub, at)
    };
    let mut originals: Vec<_> = (0..90).map(open).collect();
    assert_eq!(db.subscription_counts(), (0, 90));
    for lo in [0, 17, 45, 89] {
        let (_twin, at) = open(lo);
        assert_eq!(
            at, originals[lo as usize].1,
            "the twin of {lo} shares its list"
        );
    }
    // Drop the first opened of 17; one opened after it shares with the next.
    let (later, at_later) = open(17);
    assert_eq!(at_later, originals[17].1);
    let (gone, _) = std::mem::replace(&mut originals[17], open(18));
    drop(gone);
    let (_again, at) = open(17);
    assert_eq!(at, at_later, "shares with the twin still open");
    drop(later);
    drop(_again);
    // None of 17 left: a new one reads its own, and a second one shares that.
    let (_fresh, at_fresh) = open(17);
    let (_its_twin, at) = open(17);
    assert_eq!(at, at_fresh);
    let got: Vec<i64> = q(17).all().unwrap().iter().map(|o| o.rowid).collect();
    assert_eq!(got.len(), 5);
}
