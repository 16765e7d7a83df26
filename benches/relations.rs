//! Relations benchmark: 1,000 posts with their authors, read through
//! keel's `including` prefetch, against raw SQLite's `JOIN` over plain columns
//! and against N+1 single gets, in the same process.
//!
//! `cargo bench -p keel-benches --bench relations -- [--quick]` writes
//! `target/keel-bench/relations.json` (`cargo xtask bench relations` also
//! renders it into BENCHMARKS.md).
//!
//! # What is measured
//! * **prefetch**: 1,000 posts (`rel.Post`, from `examples/blog/schema/relations.fbs`)
//!   naming 100 authors, read as typed `(Post, Option<Author>)` pairs with
//!   `db.fetch::<Post>().including(Post::author_ref()).all()` — one read of the
//!   posts and one batched read of their authors, in one read transaction.
//! * **raw join**: the same rows in plain rusqlite tables (`post(id, title,
//!   author, rank)`, `author(id, name)`, a primary key on each id) read with
//!   `SELECT … FROM post LEFT JOIN author ON author.id = post.author` into Rust
//!   structs of owned strings. `join_ratio` = keel ÷ raw. Goal ≤ 1.5.
//! * **N+1**: keel fetching the posts, then `db.get::<Author>` per post.
//!   `prefetch_speedup` = N+1 ÷ prefetch. Goal ≥ 5.
//!
//! * **live rename**: 1,000 open live lists
//!   (`fetch::<Post>().filter(rank in a window of 10).including(author)
//!   .subscribe(…)`, windows spread over the posts), then an author renamed in
//!   a write transaction, timed until the write returns (every list it affects
//!   has its delivery by then). `live_rename_ms` against the same rename with no
//!   list open (`plain_rename_ms`); `live_rename_ratio` = the first ÷ the second.
//!   No goal: the issue asks for the figure.
//!
//! * **through the FFI**: the same posts and authors in a database opened
//!   through keel-ffi (what Swift, Kotlin and Python call), the same 1,000 lists
//!   as `Query::subscribe_including` with Rust listeners that only count the
//!   delivery, and the same rename as `write(ops)`, awaited
//!   (`ffi_live_rename_ms`; `ffi_plain_rename_ms` with no list open). Its
//!   repetitions take turns with the core's (each repetition starts with
//!   another of the three databases), and `ffi_rename_ratio` is, per
//!   repetition, `ffi_live_rename_ms` ÷ the core's `live_rename_ms` of the
//!   same repetition: goal ≤ 2. Then the same lists through one batched sink
//!   (`Query::subscribe_including_to`, as the Kotlin and Swift layers subscribe
//!   them), with a Rust listener that splits each batch by id
//!   (`ffi_sink_rename_ms`): what keel spends on the sink path before any
//!   foreign call. What a JVM adds on top (one JNA call per commit) is the
//!   Kotlin benchmark's `rename_live1000_ms`.
//!
//! * **unshown post write**: a post that no list shows before or after (its rank
//!   is outside every window) rewritten in a write transaction, with the same
//!   1,000 lists open (`live_unshown_write_ms`) and with none
//!   (`plain_unshown_write_ms`). `unshown_write_ratio` = the first ÷ the second.
//!   The writes with lists open and without (renames and unshown writes) go to
//!   two databases of the same content, one holding the lists, measured in
//!   turn, the order changing by repetition: a drift of the machine's load
//!   lands on both sides.
//!   Goal ≤ 1.3: the cost follows the changed objects, as for plain live
//!   queries (the lists' shared registry finds, by their filters, that no
//!   list can show the post: no list is visited).
//!
//! Each figure is the median of the repetitions (9; `--quick`: 1), each the
//! mean of 20 reads (`--quick`: 3) after one warm-up read (renames: 20 each;
//! `--quick`: 3). Both sides use WAL and `synchronous=NORMAL`.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use keel::storage::rusqlite;
use keel::storage::{SyncPolicies, SyncPolicy};
use keel::{Database, StoreOptions};
use keel_example_blog::rel::{Author, Post};
use keel_ffi::{BatchListener, CallbackError, DeliveryBatch, IncludingListener, IncludingUpdate};

mod support;

const POSTS: usize = 1_000;
const AUTHORS: usize = 100;

#[allow(dead_code)] // the fields are read only to build them, as an app would
struct RawPost {
    id: String,
    title: String,
    author: Option<String>,
    rank: i64,
}

#[allow(dead_code)]
struct RawAuthor {
    id: String,
    name: String,
}

fn opts() -> StoreOptions {
    StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal))
}

fn keel_db(dir: &std::path::Path) -> Database {
    let db = Database::open_for::<Post>(dir.join("keel.db"), opts()).unwrap();
    db.write_blocking(|t| {
        for a in 0..AUTHORS {
            t.insert(
                &Author::builder()
                    .id(format!("author-{a:03}"))
                    .name(format!("Author number {a}"))
                    .build(),
            )?;
        }
        for i in 0..POSTS {
            t.insert(
                &Post::builder()
                    .id(format!("post-{i:04}"))
                    .title(format!("A post about relation number {i}"))
                    .author(format!("author-{:03}", i % AUTHORS))
                    .rank(i as i32)
                    .build(),
            )?;
        }
        Ok(())
    })
    .unwrap();
    db
}

fn raw_db(dir: &std::path::Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(dir.join("raw.db")).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE author(id TEXT PRIMARY KEY, name TEXT);
         CREATE TABLE post(id TEXT PRIMARY KEY, title TEXT, author TEXT, rank INTEGER);
         CREATE INDEX post_author ON post(author);
         BEGIN;",
    )
    .unwrap();
    for a in 0..AUTHORS {
        c.execute(
            "INSERT INTO author VALUES (?1, ?2)",
            rusqlite::params![format!("author-{a:03}"), format!("Author number {a}")],
        )
        .unwrap();
    }
    for i in 0..POSTS {
        c.execute(
            "INSERT INTO post VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![
                format!("post-{i:04}"),
                format!("A post about relation number {i}"),
                format!("author-{:03}", i % AUTHORS),
                i as i64
            ],
        )
        .unwrap();
    }
    c.execute_batch("COMMIT").unwrap();
    c
}

fn raw_join(c: &rusqlite::Connection) -> Vec<(RawPost, Option<RawAuthor>)> {
    let mut st = c
        .prepare_cached(
            "SELECT post.id, post.title, post.author, post.rank, author.id, author.name
             FROM post LEFT JOIN author ON author.id = post.author ORDER BY post.rowid",
        )
        .unwrap();
    let rows = st
        .query_map([], |r| {
            let aid: Option<String> = r.get(4)?;
            Ok((
                RawPost {
                    id: r.get(0)?,
                    title: r.get(1)?,
                    author: r.get(2)?,
                    rank: r.get(3)?,
                },
                match aid {
                    Some(id) => Some(RawAuthor {
                        id,
                        name: r.get(5)?,
                    }),
                    None => None,
                },
            ))
        })
        .unwrap();
    rows.collect::<rusqlite::Result<Vec<_>>>().unwrap()
}

fn prefetch(db: &Database) -> Vec<(Post, Option<Author>)> {
    db.fetch::<Post>()
        .including(Post::author_ref())
        .all()
        .unwrap()
}

fn n_plus_one(db: &Database) -> Vec<(Post, Option<Author>)> {
    db.fetch::<Post>()
        .all()
        .unwrap()
        .into_iter()
        .map(|p| {
            let a = p
                .author
                .as_ref()
                .and_then(|k| db.get::<Author>(&k.clone()).unwrap());
            (p, a)
        })
        .collect()
}

/// Counts the deliveries of a live list through the FFI, as a foreign
/// collector's buffer takes them.
struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl IncludingListener for Counting {
    fn on_update(&self, _: IncludingUpdate) -> Result<(), CallbackError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// A batch listener as the Kotlin and Swift layers' sink is: it splits each
/// batch by id (`id u64 | len u64 | body`) and counts the deliveries.
struct Splitting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl BatchListener for Splitting {
    fn on_batch(&self, batch: DeliveryBatch) -> Result<(), CallbackError> {
        let b = &batch.bytes;
        let mut at = 0;
        for _ in 0..batch.count {
            let len = u64::from_le_bytes(b[at + 8..at + 16].try_into().unwrap()) as usize;
            std::hint::black_box(&b[at + 16..at + 16 + len]);
            at += 16 + len;
        }
        self.0
            .fetch_add(batch.count as usize, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// The posts and authors of [`keel_db`], in a database opened through the FFI.
fn ffi_db(dir: &std::path::Path) -> std::sync::Arc<keel_ffi::Database> {
    let opts = keel_ffi::OpenOptions {
        commit_sync: Some(keel_ffi::SyncPolicy::Normal),
        ..Default::default()
    };
    let path = dir.join("ffi.db").to_string_lossy().into_owned();
    let schema = <Post as keel::Record>::SCHEMA_FBS.to_owned();
    let db = keel_ffi::open_blocking(path, schema, opts, None).unwrap();
    let mut ops = Vec::new();
    for a in 0..AUTHORS {
        let json = format!(r#"{{"id": "author-{a:03}", "name": "Author number {a}"}}"#);
        ops.push(ffi_op(&db, "rel.Author", json, true));
    }
    for i in 0..POSTS {
        let json = format!(
            r#"{{"id": "post-{i:04}", "title": "A post about relation number {i}", "author": "author-{:03}", "rank": {i}}}"#,
            i % AUTHORS
        );
        ops.push(ffi_op(&db, "rel.Post", json, true));
    }
    futures::executor::block_on(db.write(ops)).unwrap();
    db
}

fn ffi_op(
    db: &keel_ffi::Database,
    collection: &str,
    json: String,
    insert: bool,
) -> keel_ffi::WriteOp {
    let bytes = db.encode_json(collection.to_owned(), json).unwrap();
    let collection = collection.to_owned();
    if insert {
        keel_ffi::WriteOp::Insert { collection, bytes }
    } else {
        keel_ffi::WriteOp::Update { collection, bytes }
    }
}

/// Mean ms of `n` runs of `f`, after one warm-up run.
fn time<T>(n: usize, mut f: impl FnMut() -> T) -> f64 {
    std::hint::black_box(f());
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(f());
    }
    t0.elapsed().as_secs_f64() * 1e3 / n as f64
}

/// The window of 10 ranks list `i` of the 1,000 live lists shows.
fn window(i: usize) -> (i32, i32) {
    let lo = (i % (POSTS - 10)) as i32;
    (lo, lo + 10)
}

/// Live list `i` in the core: the posts of its window with their authors,
/// `delivered` called on each delivery.
fn live_list(
    db: &Database,
    i: usize,
    delivered: impl Fn() + Send + Sync + 'static,
) -> keel::IncludingSubscription {
    let (lo, hi) = window(i);
    db.fetch::<Post>()
        .filter(Post::rank().ge(lo) & Post::rank().lt(hi))
        .order_by(Post::rank().asc())
        .including(Post::author_ref())
        .subscribe(move |_| delivered())
        .unwrap()
}

/// Live list `i`'s query through the FFI: the posts of its window, by rank.
fn ffi_window(fdb: &keel_ffi::Database, i: usize) -> std::sync::Arc<keel_ffi::Query> {
    let (lo, hi) = window(i);
    let range = keel_ffi::Expr::all_of(vec![
        keel_ffi::Expr::ge("rank".into(), keel_ffi::Value::Integer { v: lo.into() }),
        keel_ffi::Expr::lt("rank".into(), keel_ffi::Value::Integer { v: hi.into() }),
    ]);
    fdb.query("rel.Post".into())
        .filter(range)
        .order_by("rank".into(), false)
}

/// `relations --count plain|live N`: N writes of a post no list shows, with no
/// list open or with the 1,000 lists of the live scenarios, alone, for an
/// instruction counter (see [`support::measured_region`]): where the live
/// lists' cost per unrelated write goes, whatever the machine's load.
fn count_unshown(args: &[String]) {
    let [side, n] = args else {
        panic!("usage: --count plain|live N");
    };
    let n: usize = n.parse().expect("N");
    let dir = tempfile::tempdir().unwrap();
    let db = keel_db(dir.path());
    let subs: Vec<_> = match side.as_str() {
        "plain" => Vec::new(),
        "live" => (0..1_000).map(|i| live_list(&db, i, || {})).collect(),
        other => panic!("unknown side `{other}`"),
    };
    let post = |i: usize| {
        Post::builder()
            .id("unshown")
            .title(format!("count {i}"))
            .author("author-007")
            .rank(1_000_000)
            .build()
    };
    // Warm: the statements are prepared, the row exists.
    let first = post(0);
    db.write_blocking(move |t| t.upsert(&first)).unwrap();
    let mut posts = Some((1..=n).map(post).collect::<Vec<Post>>());
    support::measured(|| {
        for p in posts.take().unwrap_or_default() {
            db.write_blocking(move |t| t.upsert(&p)).unwrap();
        }
    });
    drop(subs);
}

fn main() {
    if let Some(rest) = support::mode_args("--count") {
        count_unshown(&rest);
        return;
    }
    let quick = support::flag("--quick");
    let (reps, n): (usize, usize) = if quick { (1, 3) } else { (9, 20) };
    let dir = tempfile::tempdir().unwrap();
    let db = keel_db(dir.path());
    let raw = raw_db(dir.path());
    // Same answer on both sides before anything is timed.
    let k = prefetch(&db);
    let r = raw_join(&raw);
    assert_eq!(k.len(), r.len());
    assert!(k.iter().zip(&r).all(|((p, a), (rp, ra))| p.id == rp.id
        && a.as_ref().map(|a| a.name.clone().unwrap_or_default())
            == ra.as_ref().map(|a| a.name.clone())));
    assert_eq!(n_plus_one(&db).len(), k.len());

    let (mut keel_ms, mut raw_ms, mut n1_ms) = (vec![], vec![], vec![]);
    for _ in 0..reps {
        // Interleaved, so drift in the machine's load falls on every side.
        keel_ms.push(time(n, || prefetch(&db)));
        raw_ms.push(time(n, || raw_join(&raw)));
        n1_ms.push(time(n, || n_plus_one(&db)));
    }
    // Live lists: the same writes on two databases of the same content, one with
    // none open and one with the 1,000 lists, measured in turn (the order
    // changing by repetition), so drift in the machine's load falls on both.
    let live_dir = tempfile::tempdir().unwrap();
    let live_db = keel_db(live_dir.path());
    let rename = |db: &Database, n: usize, tag: &str| -> f64 {
        let mut i = 0u64;
        time(n, || {
            i += 1;
            let author = Author::builder()
                .id("author-007")
                .name(format!("Renamed {tag} {i}"))
                .build();
            db.write_blocking(move |t| t.update(&author)).unwrap()
        })
    };
    let unshown = |db: &Database, n: usize, tag: &str| -> f64 {
        let mut i = 0u64;
        time(n, || {
            i += 1;
            let post = Post::builder()
                .id("unshown")
                .title(format!("{tag} {i}"))
                .author("author-007")
                .rank(1_000_000)
                .build();
            db.write_blocking(move |t| t.upsert(&post)).unwrap()
        })
    };
    // The same rename through the FFI, on a third database of the same
    // content: first with no list open, then with the same 1,000 lists open
    // there, its renames taking turns with the core's below.
    let fdb = ffi_db(dir.path());
    let ffi_rename = |n: usize, tag: &str| -> f64 {
        let mut i = 0u64;
        time(n, || {
            i += 1;
            let json = format!(r#"{{"id": "author-007", "name": "Renamed {tag} {i}"}}"#);
            let op = ffi_op(&fdb, "rel.Author", json, false);
            futures::executor::block_on(fdb.write(vec![op])).unwrap()
        })
    };
    let mut ffi_plain_ms = vec![];
    for _ in 0..reps {
        ffi_plain_ms.push(ffi_rename(n, "plain"));
    }
    let deliveries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subs: Vec<_> = (0..1_000)
        .map(|i| {
            let d = deliveries.clone();
            live_list(&live_db, i, move || {
                d.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        })
        .collect();
    let ffi_deliveries = std::sync::Arc::new(AtomicUsize::new(0));
    let ffi_subs: Vec<_> = (0..1_000)
        .map(|i| {
            ffi_window(&fdb, i)
                .subscribe_including("author".into(), Box::new(Counting(ffi_deliveries.clone())))
                .unwrap()
        })
        .collect();
    let before = deliveries.load(std::sync::atomic::Ordering::Relaxed);
    let ffi_before = ffi_deliveries.load(Relaxed);
    let (mut plain_rename_ms, mut plain_unshown_ms) = (vec![], vec![]);
    let (mut live_rename_ms, mut live_unshown_ms) = (vec![], vec![]);
    let mut ffi_live_ms = vec![];
    for rep in 0..reps {
        // Each repetition starts with another of the three sides, so a drift
        // of the machine's load falls on all of them, and the FFI's rename is
        // paired with the core's of the same repetition.
        for side in (0..3).map(|k| (rep + k) % 3) {
            match side {
                0 => {
                    plain_rename_ms.push(rename(&db, n, "plain"));
                    plain_unshown_ms.push(unshown(&db, n, "plain"));
                }
                1 => {
                    live_rename_ms.push(rename(&live_db, n, "live"));
                    live_unshown_ms.push(unshown(&live_db, n, "live"));
                }
                _ => ffi_live_ms.push(ffi_rename(n, "live")),
            }
        }
    }
    let renames = (reps * (n + 1)) as f64;
    let per_rename =
        (deliveries.load(std::sync::atomic::Ordering::Relaxed) - before) as f64 / renames;
    assert_eq!(
        (ffi_deliveries.load(Relaxed) - ffi_before) as f64 / renames,
        per_rename,
        "the FFI's lists deliver as the core's"
    );
    for s in &ffi_subs {
        s.cancel();
    }
    drop(subs);
    drop(live_db);

    // Renames with the lists `subs` open, each delivery counted in `counted`:
    // the ms of each repetition, once every list has delivered as the core's.
    let renames_with = |subs: Vec<std::sync::Arc<keel_ffi::IncludingSubscription>>,
                        counted: &AtomicUsize,
                        tag: &str|
     -> Vec<f64> {
        let before = counted.load(Relaxed);
        let ms: Vec<f64> = (0..reps).map(|_| ffi_rename(n, tag)).collect();
        let delivered = (counted.load(Relaxed) - before) as f64 / renames;
        assert_eq!(
            delivered, per_rename,
            "{tag}: the FFI's lists deliver as the core's"
        );
        for s in &subs {
            s.cancel();
        }
        ms
    };

    // The same lists through one batched sink, as the Kotlin and Swift layers
    // subscribe them: one call per commit for every list it changes.
    let sink_deliveries = std::sync::Arc::new(AtomicUsize::new(0));
    let sink = keel_ffi::deliveries(Box::new(Splitting(sink_deliveries.clone())));
    let sink_subs = (0..1_000u64)
        .map(|i| {
            ffi_window(&fdb, i as usize)
                .subscribe_including_to("author".into(), sink.clone(), i)
                .unwrap()
        })
        .collect();
    let ffi_sink_ms = renames_with(sink_subs, &sink_deliveries, "sink");
    futures::executor::block_on(fdb.close()).unwrap();

    let m = |v: &Vec<f64>| support::median(v.clone());
    let metrics = vec![
        ("posts", POSTS as f64),
        ("authors", AUTHORS as f64),
        ("keel_prefetch_ms", m(&keel_ms)),
        ("raw_join_ms", m(&raw_ms)),
        ("keel_n_plus_one_ms", m(&n1_ms)),
        ("join_ratio", m(&keel_ms) / m(&raw_ms)),
        ("prefetch_speedup", m(&n1_ms) / m(&keel_ms)),
        ("open_live_lists", 1_000.0),
        ("deliveries_per_rename", per_rename),
        ("plain_rename_ms", m(&plain_rename_ms)),
        ("live_rename_ms", m(&live_rename_ms)),
        (
            "live_rename_ratio",
            m(&live_rename_ms) / m(&plain_rename_ms),
        ),
        ("ffi_plain_rename_ms", m(&ffi_plain_ms)),
        ("ffi_live_rename_ms", m(&ffi_live_ms)),
        ("ffi_rename_ratio", m(&ffi_live_ms) / m(&live_rename_ms)),
        ("ffi_sink_rename_ms", m(&ffi_sink_ms)),
        ("plain_unshown_write_ms", m(&plain_unshown_ms)),
        ("live_unshown_write_ms", m(&live_unshown_ms)),
        (
            "unshown_write_ratio",
            m(&live_unshown_ms) / m(&plain_unshown_ms),
        ),
    ];
    let ratio = |num: &[f64], den: &[f64]| -> Vec<f64> {
        num.iter().zip(den).map(|(a, b)| a / b).collect()
    };
    let target = |metric: &str, label: &str, vals: Vec<f64>, goal: f64, better: &str| {
        let mut sorted = vals.clone();
        sorted.sort_by(f64::total_cmp);
        serde_json::json!({
            "metric": metric, "label": label,
            "median": (support::median(vals.clone()) * 1000.0).round() / 1000.0,
            "min": (sorted[0] * 1000.0).round() / 1000.0,
            "max": (sorted[sorted.len() - 1] * 1000.0).round() / 1000.0,
            "repetitions": vals.len(),
            "target": goal, "better": better, "unit": "×",
        })
    };
    let targets = vec![
        target(
            "join_ratio",
            "1,000 posts with authors, prefetched vs raw SQLite JOIN",
            ratio(&keel_ms, &raw_ms),
            1.5,
            "lower",
        ),
        target(
            "prefetch_speedup",
            "N+1 single gets vs prefetch",
            ratio(&n1_ms, &keel_ms),
            5.0,
            "higher",
        ),
        target(
            "ffi_rename_ratio",
            "an author renamed with 1,000 live lists open, through the FFI vs the core",
            ratio(&ffi_live_ms, &live_rename_ms),
            2.0,
            "lower",
        ),
        target(
            "unshown_write_ratio",
            "a post no list shows, written with 1,000 live lists open vs none",
            ratio(&live_unshown_ms, &plain_unshown_ms),
            1.3,
            "lower",
        ),
    ];
    support::write_targets_report(
        "relations",
        &metrics,
        note,
        targets,
        format!("{POSTS} posts naming {AUTHORS} authors, read with their authors."),
        include_str!("relations.rs"),
        &["What is measured"],
    );
    db.close().wait().unwrap();
}

fn note(k: &str) -> &'static str {
    match k {
        "posts" => "posts read per run",
        "authors" => "distinct authors they name",
        "keel_prefetch_ms" => "keel: fetch().including(author).all(), ms per read of every post",
        "raw_join_ms" => "raw rusqlite: LEFT JOIN over plain columns into structs, ms",
        "keel_n_plus_one_ms" => "keel: fetch posts, then get() the author of each, ms",
        "join_ratio" => "keel prefetch ÷ raw JOIN (goal ≤ 1.5)",
        "prefetch_speedup" => "N+1 gets ÷ keel prefetch (goal ≥ 5)",
        "open_live_lists" => {
            "live lists (posts with authors, 10 posts each) open during live_rename_ms"
        }
        "deliveries_per_rename" => "lists a rename re-delivered (those showing the author)",
        "plain_rename_ms" => "keel: rename an author, no list open, ms per write",
        "live_rename_ms" => {
            "keel: rename an author with 1,000 lists open, ms per write incl. deliveries"
        }
        "live_rename_ratio" => "live_rename_ms ÷ plain_rename_ms",
        "ffi_plain_rename_ms" => "keel-ffi: the rename as write(ops), awaited, no list open, ms",
        "ffi_live_rename_ms" => {
            "keel-ffi: the same with the 1,000 lists open through subscribe_including, ms"
        }
        "ffi_rename_ratio" => "ffi_live_rename_ms ÷ live_rename_ms (goal ≤ 2)",
        "ffi_sink_rename_ms" => {
            "keel-ffi: the same lists through one batched sink (subscribe_including_to), as the Kotlin and Swift layers subscribe them, with a Rust listener splitting each batch by id, ms"
        }
        "plain_unshown_write_ms" => "keel: write a post no list shows, no list open, ms",
        "live_unshown_write_ms" => "keel: the same write with 1,000 lists open, ms",
        "unshown_write_ratio" => "live_unshown_write_ms ÷ plain_unshown_write_ms (goal ≤ 1.3)",
        _ => "",
    }
}
