//! Subscription benchmark: keel's hub against refetching every subscribed
//! query after the commit, in the same process.
//!
//! `cargo bench -p keel-benches --bench subscriptions -- [--quick]` writes
//! `target/keel-bench/subscriptions.json`:
//! `{"scenario":"subscriptions","metrics":{...},"notes":{...}}`. `--quick` shrinks
//! the sizes (2,000 objects, 200 subscriptions, windows of 200) and reports the sizes
//! used as the `objects`, `subscriptions` and `window` metrics. `--app-only` runs case
//! 4 alone, once, and writes no report (for profiling: `valgrind --tool=callgrind`);
//! `--case1-only` and `--case3-only` likewise run one case-1 or case-3 transaction;
//! `--app-only --all-open` runs case 4 with every query open and no other setting,
//! `--app-only --none-open` with none; `--commits=N` sets their number of commits
//! (1,000 by default). What one commit costs in instructions, setup aside, is the
//! difference of two `callgrind` runs, `--commits=1000` and `--commits=3000`, divided
//! by 2,000 (see `docs/subscriptions.md`).
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
//! 4. The app-shaped case: one object changes per transaction. 10,000 objects, 0, 100
//!    or 1,000 open live range queries `priority >= lo AND priority < lo + 50` ordered
//!    by `priority` with `limit(50)` (`lo` = 0, 10, 20, …: each value lies in about five
//!    windows), and N single-object transactions that each move one object to a
//!    priority half the collection away (another window). Measured on the writer's
//!    side: the time from `write` to its future resolving (all deliveries made), per
//!    commit; the three settings take turns in four rounds, so that the machine's
//!    drift reaches them alike. Each callback keeps its window's rowids as a list
//!    view does, applying the delivery's diff to them (`Diff::apply_to`); at the
//!    end, some windows are compared with fresh fetches. With no query open nothing is recorded at all (no change hook either),
//!    so `app_1000_vs_none_ratio` is everything open subscriptions add to a write.
//!    The refetch baseline re-runs every open query in a commit hook.
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
    if support::flag("--app-only") {
        let c = support::number("--commits").unwrap_or(if quick { 100 } else { 1_000 });
        let only = if support::flag("--all-open") {
            Only::AllOpen
        } else if support::flag("--none-open") {
            Only::NoneOpen
        } else {
            Only::Every
        };
        let a = app_case(&root.path().join("app.db"), n, s, c, 0, only);
        eprintln!(
            "none {:.4} ms, some {:.4} ms, all {:.4} ms, refetch {:.3} ms, {:.1} deliveries per commit",
            a.none, a.some, a.all, a.refetch, a.deliveries
        );
        return;
    }
    let load_start = loadavg();
    let b = Bench::open(&root.path().join("subs.db"), n);
    let keys: Vec<usize> = (0..s).map(|k| k * n / s).collect();
    if support::flag("--case1-only") {
        // For profiling case 1's hub side alone.
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
        eprintln!("case 1: {:.3} ms", b.update_all(false));
        drop(subs);
        return;
    }

    if support::flag("--case3-only") {
        // For profiling case 3's hub side alone.
        let los: Vec<i32> = (0..s).map(|k| (k * (n - w) / s) as i32).collect();
        let subs: Vec<Subscription> = los
            .iter()
            .map(|&lo| {
                let c = b.clock.clone();
                b.db.query(COLL)
                    .filter(Post::priority().ge(lo) & Post::priority().lt(lo + w as i32))
                    .order_by(Post::priority().asc())
                    .subscribe(move |_| c.stamp())
                    .unwrap()
            })
            .collect();
        // Twice: the first also frees the objects each window read for itself.
        eprintln!("case 3: {:.3} ms", b.update_all(true));
        eprintln!("case 3 again: {:.3} ms", b.update_all(true));
        drop(subs);
        return;
    }

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
    let c1 = (hub.clone(), base.clone());
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
    let c2 = (hub.clone(), base.clone());
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
    let c3 = (hub.clone(), base.clone());
    add("case3_ms", median(hub.clone()), &mut metrics);
    add("case3_refetch_ms", median(base.clone()), &mut metrics);
    add("case3_ratio", median(hub) / median(base), &mut metrics);
    add(
        "case3_subscribe_ms",
        subscribe3.as_secs_f64() * 1e3,
        &mut metrics,
    );
    // ---- case 4: the app-shaped case, single-object commits ----
    let (commits, refetch_commits) = if quick { (60, 6) } else { (600, 20) };
    let mut app = Vec::new();
    for r in 0..reps {
        let a = app_case(
            &root.path().join(format!("app{r}.db")),
            n,
            s,
            commits,
            refetch_commits,
            Only::Every,
        );
        eprintln!(
            "case 4 rep {r}: none {:.4} ms, {} open {:.4} ms, {s} open {:.4} ms, refetch {:.3} ms",
            a.none,
            s / 10,
            a.some,
            a.all,
            a.refetch
        );
        app.push(a);
    }
    let med = |f: &dyn Fn(&AppRun) -> f64| median(app.iter().map(f).collect());
    add("app_none_ms", med(&|a| a.none), &mut metrics);
    add("app_some_ms", med(&|a| a.some), &mut metrics);
    add("app_all_ms", med(&|a| a.all), &mut metrics);
    add("app_refetch_ms", med(&|a| a.refetch), &mut metrics);
    add(
        "app_deliveries_per_commit",
        med(&|a| a.deliveries),
        &mut metrics,
    );
    add(
        "app_added_us_per_delivery",
        med(&|a| (a.all - a.none) * 1e3 / a.deliveries),
        &mut metrics,
    );
    let vs_none: Vec<f64> = app.iter().map(|a| a.all / a.none).collect();
    let vs_refetch: Vec<f64> = app.iter().map(|a| a.all / a.refetch).collect();
    add(
        "app_1000_vs_none_ratio",
        median(vs_none.clone()),
        &mut metrics,
    );
    add(
        "app_vs_refetch_ratio",
        median(vs_refetch.clone()),
        &mut metrics,
    );
    let pair = |k: &[f64], b: &[f64]| -> Vec<f64> { k.iter().zip(b).map(|(k, b)| k / b).collect() };
    let targets = vec![
        target(
            "app_1000_vs_none_ratio",
            "app: write with 1k live queries ÷ with none",
            &vs_none,
            1.3,
        ),
        target(
            "app_vs_refetch_ratio",
            "app: keel ÷ refetching 1k queries (≥ 50× ahead)",
            &vs_refetch,
            0.02,
        ),
        target(
            "case1_ratio",
            "Dflat 1: 1k pk queries, keel ÷ refetch",
            &pair(&c1.0, &c1.1),
            0.5,
        ),
        target(
            "case2_ratio",
            "Dflat 2: 1k object subs, keel ÷ refetch",
            &pair(&c2.0, &c2.1),
            1.0,
        ),
        target(
            "case3_ratio",
            "Dflat 3: 1k range windows, keel ÷ refetch",
            &pair(&c3.0, &c3.1),
            0.5,
        ),
    ];
    add("loadavg_start", load_start, &mut metrics);
    add("loadavg_end", loadavg(), &mut metrics);
    add("objects", n as f64, &mut metrics);
    add("subscriptions", s as f64, &mut metrics);
    add("window", w as f64, &mut metrics);
    b.db.close().wait().unwrap();

    let get = |k: &str| support::get(&metrics, k);
    let summary = format!(
        "{n} objects, {s} subscriptions, one transaction updating every object; latency from \
         COMMIT to the last delivery. Primary-key query subscriptions: {:.1} ms (refetching \
         every query: {:.1} ms). Object subscriptions: {:.1} ms (refetch {:.1} ms). Range \
         subscriptions of {w} objects each, every window rotated: {:.1} ms (refetch {:.1} ms). \
         App-shaped, one object moved per transaction: {:.3} ms per write with no live query, \
         {:.3} ms with {} and {:.3} ms with {s} open range windows of 50 (refetching those \
         {s} queries instead: {:.1} ms per write). Wall-clock times on a shared machine: load \
         average {:.1} at the start and {:.1} at the end on {} cores.",
        get("case1_ms"),
        get("case1_refetch_ms"),
        get("case2_ms"),
        get("case2_refetch_ms"),
        get("case3_ms"),
        get("case3_refetch_ms"),
        get("app_none_ms"),
        get("app_some_ms"),
        s / 10,
        get("app_all_ms"),
        get("app_refetch_ms"),
        get("loadavg_start"),
        get("loadavg_end"),
        std::thread::available_parallelism().map_or(1, |c| c.get()),
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
            "summary": summary, "labels": labels, "targets": targets,
        }),
    );
}

/// The 1-minute load average (NaN where unavailable).
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// One goal of the scenario, judged on the median of the repetitions' `values`
/// (lower is better).
fn target(metric: &str, label: &str, values: &[f64], goal: f64) -> serde_json::Value {
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = median(v.clone());
    serde_json::json!({
        "metric": metric,
        "label": label,
        "median": r(m),
        "min": r(v[0]),
        "max": r(v[v.len() - 1]),
        "repetitions": v.len(),
        "values": values.iter().map(|&x| r(x)).collect::<Vec<_>>(),
        "target": goal,
        "better": "lower",
        "unit": "×",
        "met": m <= goal,
    })
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
        "loadavg_start" => "1-minute load average when the run started (other builds may share the machine)",
        "loadavg_end" => "1-minute load average when the run ended",
        "app_none_ms" => "case 4: ms per single-object write (write call to future resolved), no live query open (nothing recorded)",
        "app_some_ms" => "case 4: the same with a tenth of the range queries open (100 in a full run)",
        "app_all_ms" => "case 4: the same with every range query open (1,000 in a full run; ordered windows of 50, each value in about five)",
        "app_refetch_ms" => "case 4: ms per write when a commit hook re-runs every one of those queries instead (Room / SQLDelight)",
        "app_1000_vs_none_ratio" => "app_all_ms / app_none_ms, median over repetitions (goal ≤ 1.3)",
        "app_deliveries_per_commit" => "case 4: deliveries per commit with every query open (each the whole window of up to 50 objects and its diff)",
        "app_added_us_per_delivery" => "case 4: (app_all_ms − app_none_ms) ÷ deliveries per commit, µs: what open queries add to a write, per delivery made",
        "app_vs_refetch_ratio" => "app_all_ms / app_refetch_ms, median over repetitions (goal ≤ 0.02: 50× ahead)",
        _ => "",
    }
}

/// Width and limit of case 4's windows, and the distance between their starts.
const APP_WINDOW: i32 = 50;
const APP_STEP: usize = 10;
/// Case 4's settings (0, a tenth, all queries open) take turns this many times.
const APP_ROUNDS: usize = 4;

/// Which of case 4's settings a run measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    /// No window, 100 and 1,000, taking turns (the bench's run).
    Every,
    /// Every window open (`--all-open`), for profiling what they add.
    AllOpen,
    /// No window open (`--none-open`), the bare write, to subtract.
    NoneOpen,
}

/// Case 4's figures of one repetition: ms per commit with 0, 100 and all queries
/// open, and with the refetch strategy for all of them.
struct AppRun {
    none: f64,
    some: f64,
    all: f64,
    refetch: f64,
    /// Deliveries per commit with every query open (each carries its whole
    /// result of up to 50 objects).
    deliveries: f64,
}

/// Case 4 (see the module docs): `n` objects, `s` open range queries at most,
/// `commits` single-object transactions per measurement.
/// `only`: the settings measured (all three, or one for profiling).
fn app_case(
    path: &Path,
    n: usize,
    s: usize,
    commits: usize,
    refetch_commits: usize,
    only: Only,
) -> AppRun {
    let db = Database::open_for::<Post>(
        path,
        StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal)),
    )
    .unwrap();
    db.write(move |t| {
        for i in 0..n {
            t.insert(&post(i, i as i32, 0))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let prio: Arc<Mutex<Vec<i32>>> = Arc::new(Mutex::new((0..n as i32).collect()));
    let step = AtomicU64::new(0);
    // `k` commits, each moving one object half the collection away; ms of each.
    let run = |k: usize| -> Vec<f64> {
        let mut times = Vec::with_capacity(k);
        for _ in 0..k {
            let t = Instant::now();
            let c = step.fetch_add(1, Ordering::Relaxed) as usize;
            let j = (c * 7_919 + 13) % n;
            let p = {
                let mut pr = prio.lock().unwrap();
                pr[j] = (pr[j] + (n / 2) as i32 + 7) % n as i32;
                pr[j]
            };
            let o = post(j, p, c as u64);
            db.write(move |t| t.update(&o)).wait().unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times
    };
    let range = |lo: i32| {
        db.query(COLL)
            .filter(Post::priority().ge(lo) & Post::priority().lt(lo + APP_WINDOW))
            .order_by(Post::priority().asc())
            .limit(APP_WINDOW as u64)
    };
    let los: Vec<i32> = (0..s).map(|k| (k * APP_STEP) as i32).collect();
    let deliveries = Arc::new(AtomicUsize::new(0));
    // Each subscription keeps the rowids it shows, as a list view does: it applies
    // each delivery's row-level diff to them (`Diff::apply_to`).
    type Shown = Arc<Mutex<Vec<i64>>>;
    let open = |los: &[i32]| -> Vec<(Subscription, Shown)> {
        los.iter()
            .map(|&lo| {
                let (d, shown) = (deliveries.clone(), Shown::default());
                let sh = shown.clone();
                let sub = range(lo)
                    .subscribe(move |u| {
                        d.fetch_add(1, Ordering::Relaxed);
                        u.diff
                            .apply_to(&mut sh.lock().unwrap(), |j| u.objects[j].rowid);
                    })
                    .unwrap();
                (sub, shown)
            })
            .collect()
    };
    run(commits / 4); // warm up
                      // The three settings take turns, a slice of the commits each per round, so that
                      // the machine's drift (its speed moves by a quarter within minutes) and the
                      // file's growth reach them alike. Each figure is the median of its commits (not
                      // the mean: a descheduled writer thread would dominate a sub-millisecond figure).
    let tenth: Vec<i32> = los.iter().step_by(10).copied().collect();
    let per_round = commits.div_ceil(APP_ROUNDS);
    let (mut none, mut some, mut all) = (Vec::new(), Vec::new(), Vec::new());
    let mut delivered = 0;
    let mut subs = Vec::new();
    for round in 0..APP_ROUNDS {
        if only == Only::Every {
            none.extend(run(per_round));
            let tenth_subs = open(&tenth);
            some.extend(run(per_round));
            drop(tenth_subs);
        }
        if only == Only::NoneOpen {
            none.extend(run(per_round));
            continue;
        }
        if subs.is_empty() {
            subs = open(&los);
        }
        let before = deliveries.load(Ordering::Relaxed);
        all.extend(run(per_round));
        delivered += deliveries.load(Ordering::Relaxed) - before;
        if round + 1 < APP_ROUNDS && only == Only::Every {
            drop(std::mem::take(&mut subs));
        }
    }
    let med = |v: Vec<f64>| if v.is_empty() { f64::NAN } else { median(v) };
    let (none, some, all) = (med(none), med(some), med(all));
    let per_commit = delivered as f64 / (per_round * APP_ROUNDS) as f64;
    assert!(
        per_commit > 1.0 || only == Only::NoneOpen,
        "moves reach the windows ({per_commit})"
    );
    // The last round's windows, after its commits, against fresh fetches.
    for ((_, shown), &lo) in subs.iter().zip(&los).step_by(97) {
        let fresh: Vec<i64> = range(lo).all().unwrap().iter().map(|o| o.rowid).collect();
        assert_eq!(
            *shown.lock().unwrap(),
            fresh,
            "window at {lo} equals a fresh fetch"
        );
    }
    drop(subs);
    let db2 = db.clone();
    let hook = db.on_commit_changes(move |_| {
        for &lo in &los {
            let r = db2
                .query(COLL)
                .filter(Post::priority().ge(lo) & Post::priority().lt(lo + APP_WINDOW))
                .order_by(Post::priority().asc())
                .limit(APP_WINDOW as u64)
                .all()
                .unwrap();
            assert!(r.len() <= APP_WINDOW as usize);
        }
    });
    let refetch = if refetch_commits > 0 {
        median(run(refetch_commits))
    } else {
        f64::NAN
    };
    drop(hook);
    db.close().wait().unwrap();
    AppRun {
        none,
        some,
        all,
        refetch,
        deliveries: per_commit,
    }
}
