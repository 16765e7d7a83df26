//! Subscription benchmark (issue 5): keel's hub against refetching every subscribed
//! query after the commit, in the same process.
//!
//! `cargo bench -p keel-benches --bench subscriptions -- [--quick]` writes
//! `target/keel-bench/subscriptions.json`:
//! `{"scenario":"subscriptions","metrics":{...},"notes":{...}}`. `--quick` shrinks
//! the sizes (2,000 objects, 200 subscriptions, windows of 200) and reports the sizes
//! used as the `objects`, `subscriptions` and `window` metrics.
//!
//! Every case uses 10,000 `blog.Post` objects (`priority` = 0‥9,999) and one
//! transaction that updates all of them; latency runs from the COMMIT (a commit hook
//! registered before the hub's stamps it) to the last delivery (each callback
//! stamps the time; all run before the write future resolves):
//!
//! 1. 1,000 query subscriptions `id == "p…"` (one object each, primary-key equality:
//!    hash-indexed); the transaction bumps every object's `views`.
//! 2. 1,000 object subscriptions; the same transaction.
//! 3. 1,000 range subscriptions `priority >= lo AND priority < lo + 1000` ordered by
//!    `priority` (about 1,000 objects each, overlapping; scanned with a range
//!    pre-check); the transaction rotates every window: `priority = (priority + 1) %
//!    10,000`, so each window loses its first object, gains a new last one, and every
//!    object in it is updated.
//!
//! The refetch baseline (`*_refetch_ms`) is what Room or SQLDelight do: after the
//! same kind of commit, a commit hook re-runs every subscribed query through the
//! reader pool (`get_bytes` for object subscriptions), one after another, measured
//! from the same COMMIT stamp. Subscriptions use the dynamic core (bytes); the
//! typed layer adds decoding of inserted/updated objects only.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use keel::prelude::*;
use keel::storage::SyncPolicies;
use keel::Subscription;
use keel_example_blog::blog::Post;

mod support;
use support::median;

const COLL: &str = "blog.Post";

struct Clock {
    base: Instant,
    commit: AtomicU64,
    last: AtomicU64,
    deliveries: AtomicUsize,
}

impl Clock {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
    fn stamp(&self) {
        self.last.fetch_max(self.now(), Ordering::SeqCst);
        self.deliveries.fetch_add(1, Ordering::Relaxed);
    }
    fn reset(&self) {
        self.commit.store(0, Ordering::SeqCst);
        self.last.store(0, Ordering::SeqCst);
        self.deliveries.store(0, Ordering::SeqCst);
    }
    fn latency_ms(&self) -> f64 {
        let (c, l) = (
            self.commit.load(Ordering::SeqCst),
            self.last.load(Ordering::SeqCst),
        );
        l.saturating_sub(c) as f64 / 1e6
    }
}

type Refetch = Box<dyn Fn() + Send + Sync>;

struct Bench {
    db: Database,
    clock: Arc<Clock>,
    refetch: Arc<Mutex<Option<Refetch>>>,
    n: usize,
    round: Arc<AtomicU64>,
    rot: AtomicU64,
}

fn post(i: usize, priority: i32, views: u64) -> Post {
    Post::builder()
        .id(format!("p{i:05}"))
        .title(format!("title {i}"))
        .priority(priority)
        .views(views)
        .build()
}

impl Bench {
    fn open(path: &Path, n: usize) -> Bench {
        let opts = StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal));
        let db = Database::open_for::<Post>(path, opts).unwrap();
        let clock = Arc::new(Clock {
            base: Instant::now(),
            commit: AtomicU64::new(0),
            last: AtomicU64::new(0),
            deliveries: AtomicUsize::new(0),
        });
        // Registered before any subscription creates the hub: runs first after COMMIT.
        let c2 = clock.clone();
        let refetch: Arc<Mutex<Option<Refetch>>> = Arc::default();
        let r2 = refetch.clone();
        db.on_commit_changes(move |_| {
            c2.commit.store(c2.now(), Ordering::SeqCst);
            if let Some(f) = &*r2.lock().unwrap() {
                f();
                c2.stamp();
            }
        });
        db.write(move |t| {
            for i in 0..n {
                t.insert(&post(i, i as i32, 0))?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
        Bench {
            db,
            clock,
            refetch,
            n,
            round: Arc::new(AtomicU64::new(0)),
            rot: AtomicU64::new(0),
        }
    }

    /// Update every object: bump `views` (cases 1, 2) or also rotate `priority`
    /// (case 3). Returns the latency in ms.
    fn update_all(&self, rotate: bool) -> f64 {
        let n = self.n as u64;
        let r = self.round.fetch_add(1, Ordering::SeqCst) + 1;
        if rotate {
            self.rot.fetch_add(1, Ordering::SeqCst);
        }
        let rot = self.rot.load(Ordering::SeqCst);
        let posts: Vec<Post> = (0..self.n)
            .map(|i| post(i, ((i as u64 + rot) % n) as i32, r))
            .collect();
        self.clock.reset();
        self.db
            .write(move |t| {
                for p in &posts {
                    t.update(p)?;
                }
                Ok(())
            })
            .wait()
            .unwrap();
        self.clock.latency_ms()
    }
}

fn main() {
    let quick = support::flag("--quick");
    let n: usize = if quick { 2_000 } else { 10_000 };
    let s: usize = if quick { 200 } else { 1_000 };
    let w: usize = if quick { 200 } else { 1_000 };
    let reps = if quick { 2 } else { 3 };
    let root = tempfile::tempdir().unwrap();
    let mut metrics: Vec<(&'static str, f64)> = Vec::new();
    let add = |k: &'static str, v: f64, ms: &mut Vec<(&'static str, f64)>| {
        eprintln!("{k:>28} {v:>12.3}");
        ms.push((k, v));
    };
    let b = Bench::open(&root.path().join("subs.db"), n);
    let keys: Vec<usize> = (0..s).map(|k| k * n / s).collect();

    // ---- case 1: query subscriptions by primary key ----
    let t = Instant::now();
    let subs: Vec<Subscription> = keys
        .iter()
        .map(|&i| {
            let c = b.clock.clone();
            b.db.query(COLL)
                .filter(Post::id().eq(format!("p{i:05}")))
                .subscribe(move |_| c.stamp())
                .unwrap()
        })
        .collect();
    let subscribe1 = t.elapsed();
    let mut hub = Vec::new();
    for _ in 0..reps {
        hub.push(b.update_all(false));
        assert_eq!(
            b.clock.deliveries.load(Ordering::SeqCst),
            s,
            "case 1 deliveries"
        );
    }
    drop(subs);
    let queries: Vec<_> = keys.iter().map(|&i| format!("p{i:05}")).collect();
    let refetch = refetch_with(&b, move |db| {
        for id in &queries {
            let r = db
                .query(COLL)
                .filter(Post::id().eq(id.clone()))
                .all()
                .unwrap();
            assert_eq!(r.len(), 1);
        }
    });
    let mut base = Vec::new();
    for _ in 0..reps {
        base.push(b.update_all(false));
    }
    *refetch.lock().unwrap() = None;
    add("case1_ms", median(hub.clone()), &mut metrics);
    add("case1_refetch_ms", median(base.clone()), &mut metrics);
    add("case1_ratio", median(hub) / median(base), &mut metrics);
    add(
        "case1_subscribe_ms",
        subscribe1.as_secs_f64() * 1e3,
        &mut metrics,
    );

    // ---- case 2: object subscriptions ----
    let subs: Vec<Subscription> = keys
        .iter()
        .map(|&i| {
            let c = b.clock.clone();
            b.db.subscribe_object(COLL, &[format!("p{i:05}").into()], None, move |_| c.stamp())
                .unwrap()
        })
        .collect();
    let mut hub = Vec::new();
    for _ in 0..reps {
        hub.push(b.update_all(false));
        assert_eq!(
            b.clock.deliveries.load(Ordering::SeqCst),
            s,
            "case 2 deliveries"
        );
    }
    drop(subs);
    let ids: Vec<Value> = keys.iter().map(|&i| format!("p{i:05}").into()).collect();
    let refetch = refetch_with(&b, move |db| {
        for id in &ids {
            assert!(db
                .get_bytes(COLL, std::slice::from_ref(id))
                .unwrap()
                .is_some());
        }
    });
    let mut base = Vec::new();
    for _ in 0..reps {
        base.push(b.update_all(false));
    }
    *refetch.lock().unwrap() = None;
    add("case2_ms", median(hub.clone()), &mut metrics);
    add("case2_refetch_ms", median(base.clone()), &mut metrics);
    add("case2_ratio", median(hub) / median(base), &mut metrics);

    // ---- case 3: range subscriptions, every window rotates ----
    let los: Vec<i32> = (0..s).map(|k| (k * (n - w) / s) as i32).collect();
    let range = move |db: &Database, lo: i32| {
        db.query(COLL)
            .filter(Post::priority().ge(lo) & Post::priority().lt(lo + w as i32))
            .order_by(Post::priority().asc())
    };
    let t = Instant::now();
    let last_sizes = Arc::new(Mutex::new(vec![0usize; s]));
    let subs: Vec<Subscription> = los
        .iter()
        .enumerate()
        .map(|(k, &lo)| {
            let (c, sz) = (b.clock.clone(), last_sizes.clone());
            range(&b.db, lo)
                .subscribe(move |u| {
                    sz.lock().unwrap()[k] = u.objects.len();
                    c.stamp()
                })
                .unwrap()
        })
        .collect();
    let subscribe3 = t.elapsed();
    let mut hub = Vec::new();
    for _ in 0..reps {
        hub.push(b.update_all(true));
        assert_eq!(
            b.clock.deliveries.load(Ordering::SeqCst),
            s,
            "case 3 deliveries"
        );
    }
    let sizes = last_sizes.lock().unwrap().clone();
    assert!(
        sizes.iter().all(|&x| x == w),
        "each window holds {w} objects"
    );
    let fresh = range(&b.db, los[s / 2]).all().unwrap().len();
    assert_eq!(fresh, w);
    drop(subs);
    let los2 = los.clone();
    let refetch = refetch_with(&b, move |db| {
        for &lo in &los2 {
            let r = range(db, lo).all().unwrap();
            assert_eq!(r.len(), w);
        }
    });
    let mut base = Vec::new();
    for _ in 0..reps {
        base.push(b.update_all(true));
    }
    *refetch.lock().unwrap() = None;
    add("case3_ms", median(hub.clone()), &mut metrics);
    add("case3_refetch_ms", median(base.clone()), &mut metrics);
    add("case3_ratio", median(hub) / median(base), &mut metrics);
    add(
        "case3_subscribe_ms",
        subscribe3.as_secs_f64() * 1e3,
        &mut metrics,
    );
    add("objects", n as f64, &mut metrics);
    add("subscriptions", s as f64, &mut metrics);
    add("window", w as f64, &mut metrics);
    b.db.close().wait().unwrap();

    let get = |k: &str| support::get(&metrics, k);
    let summary = format!(
        "{n} objects, {s} subscriptions, one transaction updating every object; latency from \
         COMMIT to the last delivery. Primary-key query subscriptions: {:.1} ms (refetching \
         every query: {:.1} ms). Object subscriptions: {:.1} ms (refetch {:.1} ms). Range \
         subscriptions of {w} objects each, every window rotated: {:.1} ms (refetch {:.1} ms).",
        get("case1_ms"),
        get("case1_refetch_ms"),
        get("case2_ms"),
        get("case2_refetch_ms"),
        get("case3_ms"),
        get("case3_refetch_ms"),
    );
    // Chart labels: the report's `caseN_ratio` bars say what each case is.
    let labels = serde_json::json!({
        "case1_ratio": "1k pk queries",
        "case2_ratio": "1k object subs",
        "case3_ratio": "1k range windows",
    });
    let (m, notes) = support::metrics_and_notes(&metrics, Some(3), note);
    support::write_report(
        "subscriptions",
        &serde_json::json!({
            "scenario": "subscriptions", "metrics": m, "notes": notes,
            "summary": summary, "labels": labels,
        }),
    );
}

/// Install `f` as the refetch strategy: a commit hook that runs it after COMMIT.
fn refetch_with(
    b: &Bench,
    f: impl Fn(&Database) + Send + Sync + 'static,
) -> Arc<Mutex<Option<Refetch>>> {
    let db = b.db.clone();
    *b.refetch.lock().unwrap() = Some(Box::new(move || f(&db)));
    b.refetch.clone()
}

fn note(k: &str) -> &'static str {
    match k {
        "case1_ms" => "1,000 query subscriptions `id == …` (one object each); one transaction updates all objects; ms from COMMIT to the last delivery",
        "case1_refetch_ms" => "case 1 with the refetch strategy: re-run each subscribed query through the reader pool after COMMIT",
        "case1_ratio" => "case1_ms / case1_refetch_ms",
        "case1_subscribe_ms" => "time to create the 1,000 case-1 subscriptions (each reads its first result)",
        "case2_ms" => "1,000 object subscriptions; one transaction updates all objects; ms from COMMIT to the last delivery",
        "case2_refetch_ms" => "case 2 with the refetch strategy: get each subscribed object by key after COMMIT",
        "case2_ratio" => "case2_ms / case2_refetch_ms",
        "case3_ms" => "1,000 range subscriptions of ~1,000 objects each (ordered); one transaction rotates every window (priority+1 mod N on all objects); ms from COMMIT to the last delivery",
        "case3_refetch_ms" => "case 3 with the refetch strategy: re-run each range query after COMMIT",
        "case3_ratio" => "case3_ms / case3_refetch_ms",
        "case3_subscribe_ms" => "time to create the 1,000 range subscriptions",
        "objects" => "objects in the collection (10,000 in a full run)",
        "subscriptions" => "subscriptions per case (1,000 in a full run)",
        "window" => "objects per range subscription in case 3 (1,000 in a full run)",
        _ => "",
    }
}
