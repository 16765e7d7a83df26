//! Encryption benchmark: what SQLCipher costs an app's CRUD and open, and how fast a
//! key rotation moves a file.
//!
//! `cargo bench -p keel-bench-encryption --bench encryption -- [--quick]` (or
//! `cargo xtask bench encryption`) writes `target/keel-bench/encryption.json`. This
//! bench is a package of its own (`benches/encryption/`): it needs keel's
//! `encryption` feature, which in `keel-benches` would link SQLCipher into every
//! other scenario too.
//!
//! This doc comment's section *What is measured* is the one description of the
//! method: the report quotes it into BENCHMARKS.md.
//!
//! # What is measured
//!
//! Both sides of every comparison run in the same SQLCipher build and the same
//! process, with the same options; one side opens with a data key
//! (`StoreOptions::encryption`, the raw 32-byte key and salt, so no password
//! derivation runs), the other without. Each repetition runs both sides, the order
//! alternating from one repetition (or phase) to the next, and gives one encrypted ÷
//! plaintext ratio; the figure is the median of those ratios, the spread their
//! min–max.
//!
//! * **CRUD** (`crud_ratio`, the goal): the crud benchmark's workload
//!   (`benches/crud.rs`) through keel's object layer, as an app runs it:
//!   `Database::open_for::<Doc>` with every sync policy `Normal`, the generated
//!   `bench.Doc` objects (`support/crud.fbs`: six fields, a string key, one index;
//!   built before the timers start), `OBJECTS` of them. One pass is, on a new
//!   database: insert them all in one transaction; fetch the objects matching a
//!   non-indexed filter (1 in 6) ten times; get every object by key, one by one;
//!   update every object in one transaction; `TXNS` single-object update
//!   transactions one after another; delete every object in one transaction. Each
//!   repetition opens a new plaintext and a new encrypted database and runs each
//!   phase on both, alternating which goes first, so a slow spell of the shared
//!   machine lands on both sides. The ratio is the encrypted pass's time (the sum
//!   of its phases) ÷ the plaintext pass's; each phase's own ratio is reported too.
//!   The table (about 3 MB) fits keel's page caches, as an app's working set
//!   usually does: SQLCipher then decrypts a page when it first enters a cache and
//!   encrypts it when a commit writes it to the WAL.
//! * **Storage kernel, cache misses** (`kernel_miss_ratio`, a secondary figure with
//!   no goal): the worst case on purpose. keel's `Store` alone, with SQL, on a table
//!   of `ROWS` rows of 1,000 random bytes with a text index (about 10 MB, more than
//!   a reader's page cache), so nearly every read decrypts a page: inserts in
//!   transactions of 100, 1,000 single-row update transactions, a keyed read of
//!   every row, ten indexed scans reading the blobs, a delete of a tenth of the
//!   rows. Each repetition runs the whole pass on each side, alternating which goes
//!   first.
//! * **Open** (`open_ratio`, the goal): `Store::open` of the closed 10 MB file (no
//!   WAL beside it) until it returns (durable), one keyed read, close; the writer
//!   connection checks the key. `shared_open_ratio`, no goal: the same while
//!   another handle holds the file open with a commit in its WAL (an app's
//!   extension opening the app's database), where the encrypted open first
//!   checks the key on the file alone (page 1's HMAC, read by keel).
//!   `db_open_ratio` is the same through the object layer
//!   (`Database::open_for::<Doc>` of a closed CRUD database, one get by key,
//!   close).
//! * **Rotation** (`*_mb_s`): `rotate::rotate` of the 10 MB file, plaintext →
//!   encrypted, encrypted → new key, encrypted → plaintext: bytes of the new file ÷
//!   wall time, including both directory syncs and the file sync.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::storage::SyncPolicies;
use keel_storage::encryption::{DataKey, KeyError, KeyPurpose};
use keel_storage::rotate::{self, RotateOptions, Side};
use keel_storage::{Error, Store};

mod support;

/// Generated from `support/crud.fbs` by `encryption/build.rs`.
#[allow(dead_code, unused_imports, clippy::all)]
mod model {
    include!(concat!(env!("OUT_DIR"), "/crud.rs"));
}
use model::{Color, Doc, DocFields};

/// The text every object carries in `body` (the crud benchmark's).
const BODY: &str = "the quick brown fox jumps over the lazy dog, twice: the quick brown fox";

/// Phases of the object-level CRUD pass, in order.
const PHASES: [&str; 6] = ["insert", "fetch", "get", "update", "txn_each", "delete"];

fn provider(key: &DataKey) -> impl Fn(&Path, KeyPurpose) -> Result<DataKey, KeyError> {
    let k = key.clone();
    move |_: &Path, _: KeyPurpose| Ok::<_, KeyError>(k.clone())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Milliseconds `f` takes.
fn time(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    ms(t.elapsed())
}

/// Milliseconds `f` takes; what it returns (inputs a write closure had to own) is
/// freed after the clock stops.
fn time_returning<T>(f: impl FnOnce() -> T) -> f64 {
    let t = Instant::now();
    let out = f();
    let took = ms(t.elapsed());
    drop(out);
    took
}

// ---------------------------------------------------------------- object level

/// The primary key of object `i`.
fn doc_key(i: usize) -> String {
    format!("doc-{i:08}")
}

/// Object `i`; `version` changes every field but the key (so an update writes).
fn doc(i: usize, version: i32) -> Doc {
    DocFields {
        id: doc_key(i),
        title: Some(format!("title {i} v{version}")),
        priority: ((i * 7_919) % 10_000) as i32 + version,
        color: Color::from_raw((i % 6) as i8),
        score: i as f64 * 0.25 + f64::from(version),
        body: Some(BODY.to_string()),
    }
    .into()
}

fn docs(n: usize, version: i32) -> Vec<Doc> {
    (0..n).map(|i| doc(i, version)).collect()
}

fn db_options(key: Option<&DataKey>) -> StoreOptions {
    let o = StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal));
    match key {
        Some(k) => o.encryption(provider(k)),
        None => o,
    }
}

fn open_db(path: &Path, key: Option<&DataKey>) -> Database {
    Database::open_for::<Doc>(path, db_options(key)).expect("open keel")
}

/// One phase of the object-level pass on `db`: milliseconds.
fn object_phase(db: &Database, phase: &str, n: usize, txns: usize, rep: usize) -> f64 {
    match phase {
        "insert" => {
            let d = docs(n, 0);
            time_returning(|| {
                db.write(move |t| {
                    for x in &d {
                        t.insert(x)?;
                    }
                    Ok(d)
                })
                .wait()
                .unwrap()
            })
        }
        "fetch" => {
            let expected = (0..n).filter(|i| i % 6 == 2).count();
            time(|| {
                for _ in 0..10 {
                    let rows = db
                        .fetch::<Doc>()
                        .filter(Doc::color().eq(Color::Blue))
                        .all()
                        .unwrap();
                    assert_eq!(rows.len(), expected);
                }
            })
        }
        "get" => {
            let keys: Vec<String> = (0..n).map(doc_key).collect();
            time(|| {
                for k in &keys {
                    let d = db.get::<Doc>(k).unwrap().expect("stored");
                    assert_eq!(&d.id, k);
                }
            })
        }
        "update" => {
            let d = docs(n, 1 + 2 * rep as i32);
            time_returning(|| {
                db.write(move |t| {
                    for x in &d {
                        t.update(x)?;
                    }
                    Ok(d)
                })
                .wait()
                .unwrap()
            })
        }
        "txn_each" => {
            // Spread over the table, as an app's edits are.
            let d: Vec<Doc> = (0..txns)
                .map(|i| doc((i * 7_919) % n, 2 + 2 * rep as i32))
                .collect();
            time(|| {
                for x in d {
                    db.write_blocking(move |t| t.update(&x)).unwrap();
                }
            })
        }
        "delete" => {
            let keys: Vec<String> = (0..n).map(doc_key).collect();
            let took = time_returning(|| {
                db.write(move |t| {
                    for k in &keys {
                        assert!(t.delete::<Doc>(k)?);
                    }
                    Ok(keys)
                })
                .wait()
                .unwrap()
            });
            assert_eq!(db.fetch::<Doc>().count().unwrap(), 0);
            took
        }
        other => unreachable!("phase {other}"),
    }
}

/// One repetition of the object-level pass: a new plaintext and a new encrypted
/// database, each phase on both in turn (which side first alternates by phase and
/// repetition). Returns the phases' milliseconds, plaintext then encrypted.
fn object_pass(
    dir: &Path,
    key: &DataKey,
    n: usize,
    txns: usize,
    rep: usize,
) -> ([f64; 6], [f64; 6]) {
    let plain = open_db(&dir.join(format!("obj-{rep}-plain.db")), None);
    let enc = open_db(&dir.join(format!("obj-{rep}-enc.db")), Some(key));
    // Warm both: statements prepared, a reader open.
    for db in [&plain, &enc] {
        assert!(db.get::<Doc>(&doc_key(0)).unwrap().is_none());
    }
    let (mut p, mut e) = ([0.0; 6], [0.0; 6]);
    for (i, phase) in PHASES.iter().enumerate() {
        if (rep + i).is_multiple_of(2) {
            p[i] = object_phase(&plain, phase, n, txns, rep);
            e[i] = object_phase(&enc, phase, n, txns, rep);
        } else {
            e[i] = object_phase(&enc, phase, n, txns, rep);
            p[i] = object_phase(&plain, phase, n, txns, rep);
        }
    }
    plain.close().wait().unwrap();
    enc.close().wait().unwrap();
    (p, e)
}

/// A closed object-level database of `n` objects at `path`, for the open figure.
fn object_file(path: &Path, key: Option<&DataKey>, n: usize) {
    let db = open_db(path, key);
    let d = docs(n, 0);
    db.write(move |t| {
        for x in &d {
            t.insert(x)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
}

/// `Database::open_for` of the closed file, one get by key, close: milliseconds.
fn db_open_once(path: &Path, key: Option<&DataKey>) -> f64 {
    time(|| {
        let db = open_db(path, key);
        assert!(db.get::<Doc>(&doc_key(1)).unwrap().is_some());
        db.close().wait().unwrap();
    })
}

// ---------------------------------------------------------------- storage kernel

fn store_options(key: Option<&DataKey>) -> StoreOptions {
    let o = StoreOptions::default()
        .commit_sync(SyncPolicy::Normal)
        .checkpoint_sync(SyncPolicy::Normal)
        .readers(2);
    match key {
        Some(k) => o.encryption(provider(k)),
        None => o,
    }
}

/// One cache-miss pass of the storage kernel on a new store at `path`: the
/// phases' milliseconds.
fn kernel_pass(path: &Path, key: Option<&DataKey>, rows: i64) -> [f64; 5] {
    let store = Store::open(path, store_options(key)).unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch(
                "CREATE TABLE kv(k INTEGER PRIMARY KEY, tag TEXT NOT NULL, v BLOB NOT NULL);
                 CREATE INDEX kv_tag ON kv(tag);",
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let t = Instant::now();
    for start in (0..rows).step_by(100) {
        store
            .write_blocking(move |t| {
                let mut st = t.prepare_cached(
                    "INSERT INTO kv(k, tag, v) VALUES (?1, ?2, randomblob(1000))",
                )?;
                for k in start..(start + 100).min(rows) {
                    st.execute(keel_storage::rusqlite::params![k, format!("tag{}", k % 50)])?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
    }
    let insert = ms(t.elapsed());
    let t = Instant::now();
    for i in 0..1000i64 {
        let k = (i * 7919) % rows;
        store
            .write_blocking(move |t| {
                t.prepare_cached("UPDATE kv SET v = randomblob(1000) WHERE k = ?1")?
                    .execute([k])?;
                Ok::<_, Error>(())
            })
            .unwrap();
    }
    let update = ms(t.elapsed());
    let t = Instant::now();
    let mut bytes = 0usize;
    for k in 0..rows {
        bytes += store
            .read(|c| {
                Ok::<_, Error>(
                    c.prepare_cached("SELECT length(v) FROM kv WHERE k = ?1")?
                        .query_row([(k * 104_729) % rows], |r| r.get::<_, i64>(0))?
                        as usize,
                )
            })
            .unwrap();
    }
    assert_eq!(bytes, rows as usize * 1000);
    let read = ms(t.elapsed());
    let t = Instant::now();
    for tag in 0..10 {
        let n: i64 = store
            .read(|c| {
                Ok::<_, Error>(c.query_row(
                    "SELECT count(*) FROM kv WHERE tag = ?1 AND length(v) > 0",
                    [format!("tag{tag}")],
                    |r| r.get(0),
                )?)
            })
            .unwrap();
        assert!(n > 0);
    }
    let scan = ms(t.elapsed());
    let t = Instant::now();
    store
        .write_blocking(|t| {
            t.execute("DELETE FROM kv WHERE k % 10 = 3", [])?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let delete = ms(t.elapsed());
    store.close().unwrap();
    [insert, update, read, scan, delete]
}

/// `Store::open` of the closed file, one keyed read, close: milliseconds.
fn store_open_once(path: &Path, key: Option<&DataKey>) -> f64 {
    time(|| {
        let store = Store::open(path, store_options(key)).unwrap();
        let v: i64 = store
            .read(|c| {
                Ok::<_, Error>(
                    c.query_row("SELECT length(v) FROM kv WHERE k = 1", [], |r| r.get(0))?,
                )
            })
            .unwrap();
        assert_eq!(v, 1000);
        store.close().unwrap();
    })
}

/// Runs `plain` and `enc` `reps` times, alternating which goes first; returns
/// their times and the encrypted ÷ plaintext ratio of each repetition.
fn paired(
    reps: usize,
    mut plain: impl FnMut() -> f64,
    mut enc: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut p, mut e, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let (a, b) = if rep.is_multiple_of(2) {
            let a = plain();
            (a, enc())
        } else {
            let b = enc();
            (plain(), b)
        };
        p.push(a);
        e.push(b);
        r.push(b / a);
    }
    (p, e, r)
}

fn note(k: &str) -> &'static str {
    match k {
        "objects" => "objects in the object-level CRUD pass (the crud benchmark's `bench.Doc`)",
        "txns" => "single-object update transactions in that pass",
        "crud_ratio" => "object-level CRUD pass, encrypted ÷ plaintext, median of the repetitions (goal ≤ 1.15)",
        "crud_insert_ratio" => "insert every object in one transaction, encrypted ÷ plaintext",
        "crud_fetch_ratio" => "fetch the objects matching a non-indexed filter, 10 times, encrypted ÷ plaintext",
        "crud_get_ratio" => "get every object by key, one by one, encrypted ÷ plaintext",
        "crud_update_ratio" => "update every object in one transaction, encrypted ÷ plaintext",
        "crud_txn_each_ratio" => "single-object update transactions one after another, encrypted ÷ plaintext",
        "crud_delete_ratio" => "delete every object in one transaction, encrypted ÷ plaintext",
        "crud_plain_ms" => "the plaintext object-level pass, median (ms)",
        "crud_encrypted_ms" => "the encrypted object-level pass, median (ms)",
        "crud_insert_plain_ms" | "crud_fetch_plain_ms" | "crud_update_plain_ms" | "crud_delete_plain_ms" => "that phase, plaintext, median (ms)",
        "crud_insert_encrypted_ms" | "crud_fetch_encrypted_ms" | "crud_update_encrypted_ms" | "crud_delete_encrypted_ms" => "that phase, encrypted, median (ms)",
        "get_plain_us" => "one get by key, plaintext (µs)",
        "get_encrypted_us" => "one get by key, encrypted (µs)",
        "txn_each_plain_us" => "one single-object update transaction, plaintext (µs)",
        "txn_each_encrypted_us" => "one single-object update transaction, encrypted (µs)",
        "rows" => "rows of 1,000 random bytes in the storage kernel's cache-miss table",
        "kernel_miss_ratio" => "secondary, no goal: the storage kernel's cache-miss pass (a table 2.5× a reader's cache, nearly every read decrypts), encrypted ÷ plaintext",
        "kernel_insert_ratio" => "kernel: inserts in transactions of 100, encrypted ÷ plaintext",
        "kernel_update_ratio" => "kernel: 1,000 single-row update transactions, encrypted ÷ plaintext",
        "kernel_read_ratio" => "kernel: a keyed read of every row (pages beyond the cache decrypt), encrypted ÷ plaintext",
        "kernel_scan_ratio" => "kernel: 10 indexed scans reading the rows' blobs, encrypted ÷ plaintext",
        "kernel_delete_ratio" => "kernel: a delete of a tenth of the rows, encrypted ÷ plaintext",
        "open_ratio" => "Store::open (durable) + first read + close, encrypted with the raw key ÷ plaintext (goal ≤ 1.1)",
        "open_plain_ms" => "plaintext Store open + first read + close, median (ms)",
        "open_encrypted_ms" => "encrypted Store open + first read + close, median (ms)",
        "shared_open_ratio" => "Store open + first read + close while another handle holds the file open (its WAL beside it), encrypted ÷ plaintext",
        "shared_open_plain_ms" => "plaintext open beside a live WAL, median (ms)",
        "shared_open_encrypted_ms" => "encrypted open beside a live WAL, median (ms)",
        "db_open_ratio" => "Database::open_for + one get + close, encrypted ÷ plaintext",
        "db_open_plain_ms" => "plaintext Database open + get + close, median (ms)",
        "db_open_encrypted_ms" => "encrypted Database open + get + close, median (ms)",
        "file_mb" => "size of the file rotated, MB",
        "encrypt_mb_s" => "plaintext → encrypted rotation, MB of the new file per second",
        "rekey_mb_s" => "encrypted → a new key, MB per second",
        "decrypt_mb_s" => "encrypted → plaintext, MB per second",
        "loadavg_start" => "1-minute load average when the run started (other work on the machine)",
        "loadavg_end" => "1-minute load average when the run ended",
        _ => "",
    }
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn spread(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[0], s[s.len() - 1])
}

fn main() {
    let quick = support::flag("--quick");
    let reps = if quick { 3 } else { 11 };
    let kernel_reps: usize = if quick { 3 } else { 5 };
    let objects: usize = if quick { 1_000 } else { 10_000 };
    let txns: usize = if quick { 200 } else { 1_000 };
    let rows: i64 = if quick { 2_000 } else { 10_000 };
    let load_start = loadavg();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let key = DataKey::generate().unwrap();
    let key2 = DataKey::generate().unwrap();
    let m = support::median;

    // Object-level CRUD.
    let (mut obj_plain, mut obj_enc) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let (p, e) = object_pass(dir, &key, objects, txns, rep);
        eprintln!(
            "crud rep {rep}: plain {:.0} ms, encrypted {:.0} ms ({:.3}×); phases {:?}",
            p.iter().sum::<f64>(),
            e.iter().sum::<f64>(),
            e.iter().sum::<f64>() / p.iter().sum::<f64>(),
            p.iter()
                .zip(&e)
                .map(|(p, e)| (e / p * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
        obj_plain.push(p);
        obj_enc.push(e);
    }
    let crud_ratio: Vec<f64> = obj_plain
        .iter()
        .zip(&obj_enc)
        .map(|(p, e)| e.iter().sum::<f64>() / p.iter().sum::<f64>())
        .collect();
    let obj_phase_ratio = |i: usize| {
        m(obj_plain
            .iter()
            .zip(&obj_enc)
            .map(|(p, e)| e[i] / p[i])
            .collect())
    };
    let obj_phase_ms = |side: &[[f64; 6]], i: usize| m(side.iter().map(|s| s[i]).collect());

    // The storage kernel's cache-miss pass.
    let mut kernel_phases: Vec<[f64; 5]> = Vec::new();
    let mut kernel_ratio = Vec::new();
    for rep in 0..kernel_reps {
        let run = |enc: bool| {
            let p = dir.join(format!("kernel-{rep}-{enc}.db"));
            kernel_pass(&p, enc.then_some(&key), rows)
        };
        let (plain, enc) = if rep.is_multiple_of(2) {
            let p = run(false);
            (p, run(true))
        } else {
            let e = run(true);
            (run(false), e)
        };
        let (p, e): (f64, f64) = (plain.iter().sum(), enc.iter().sum());
        kernel_ratio.push(e / p);
        let mut ratio = [0.0; 5];
        for i in 0..5 {
            ratio[i] = enc[i] / plain[i];
        }
        kernel_phases.push(ratio);
        eprintln!(
            "kernel rep {rep}: plain {p:.0} ms, encrypted {e:.0} ms ({:.3}×)",
            e / p
        );
    }
    let kernel_phase = |i: usize| m(kernel_phases.iter().map(|r| r[i]).collect());

    // Open: the files the first kernel repetition left, closed cleanly.
    let plain_db = dir.join("kernel-0-false.db");
    let enc_db = dir.join("kernel-0-true.db");
    store_open_once(&plain_db, None);
    store_open_once(&enc_db, Some(&key));
    let (open_plain, open_enc, open_ratio) = paired(
        reps * 3,
        || store_open_once(&plain_db, None),
        || store_open_once(&enc_db, Some(&key)),
    );
    // Open beside a live WAL: another handle holds each file open (as an app
    // holds the database its extension opens), with a commit in its WAL.
    let (shared_plain, shared_enc, shared_ratio) = {
        let held = [
            Store::open(&plain_db, store_options(None)).unwrap(),
            Store::open(&enc_db, store_options(Some(&key))).unwrap(),
        ];
        for s in &held {
            s.write_blocking(|t| {
                t.execute("UPDATE kv SET v = v WHERE k = 2", [])?;
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        let r = paired(
            reps * 3,
            || store_open_once(&plain_db, None),
            || store_open_once(&enc_db, Some(&key)),
        );
        for s in held {
            s.close().unwrap();
        }
        r
    };
    let obj_plain_db = dir.join("open-plain.db");
    let obj_enc_db = dir.join("open-enc.db");
    object_file(&obj_plain_db, None, objects);
    object_file(&obj_enc_db, Some(&key), objects);
    db_open_once(&obj_plain_db, None);
    db_open_once(&obj_enc_db, Some(&key));
    let (db_open_plain, db_open_enc, db_open_ratio) = paired(
        reps * 3,
        || db_open_once(&obj_plain_db, None),
        || db_open_once(&obj_enc_db, Some(&key)),
    );

    // Rotation throughput, on copies of the plaintext kernel file.
    let file_mb = std::fs::metadata(&plain_db).unwrap().len() as f64 / 1e6;
    let (mut enc_mb, mut rekey_mb, mut dec_mb) = (Vec::new(), Vec::new(), Vec::new());
    let mb_s = |r: &rotate::RotateReport| r.bytes as f64 / 1e6 / r.duration.as_secs_f64();
    for rep in 0..kernel_reps {
        let p: PathBuf = dir.join(format!("rotate-{rep}.db"));
        std::fs::copy(&plain_db, &p).unwrap();
        let r = rotate::rotate(
            &p,
            Side::Plaintext,
            Side::encrypted(key.clone()),
            RotateOptions::default(),
        )
        .unwrap();
        enc_mb.push(mb_s(&r));
        let r = rotate::rotate(
            &p,
            Side::encrypted(key.clone()),
            Side::encrypted(key2.clone()),
            RotateOptions::default(),
        )
        .unwrap();
        rekey_mb.push(mb_s(&r));
        let r = rotate::rotate(
            &p,
            Side::encrypted(key2.clone()),
            Side::Plaintext,
            RotateOptions::default(),
        )
        .unwrap();
        dec_mb.push(mb_s(&r));
    }

    let per = |total_ms: f64, count: usize| total_ms * 1e3 / count as f64;
    let metrics: Vec<(&str, f64)> = vec![
        ("objects", objects as f64),
        ("txns", txns as f64),
        ("crud_ratio", m(crud_ratio.clone())),
        ("crud_insert_ratio", obj_phase_ratio(0)),
        ("crud_fetch_ratio", obj_phase_ratio(1)),
        ("crud_get_ratio", obj_phase_ratio(2)),
        ("crud_update_ratio", obj_phase_ratio(3)),
        ("crud_txn_each_ratio", obj_phase_ratio(4)),
        ("crud_delete_ratio", obj_phase_ratio(5)),
        (
            "crud_plain_ms",
            m(obj_plain.iter().map(|p| p.iter().sum()).collect()),
        ),
        (
            "crud_encrypted_ms",
            m(obj_enc.iter().map(|e| e.iter().sum()).collect()),
        ),
        ("crud_insert_plain_ms", obj_phase_ms(&obj_plain, 0)),
        ("crud_insert_encrypted_ms", obj_phase_ms(&obj_enc, 0)),
        ("crud_fetch_plain_ms", obj_phase_ms(&obj_plain, 1)),
        ("crud_fetch_encrypted_ms", obj_phase_ms(&obj_enc, 1)),
        ("crud_update_plain_ms", obj_phase_ms(&obj_plain, 3)),
        ("crud_update_encrypted_ms", obj_phase_ms(&obj_enc, 3)),
        ("crud_delete_plain_ms", obj_phase_ms(&obj_plain, 5)),
        ("crud_delete_encrypted_ms", obj_phase_ms(&obj_enc, 5)),
        ("get_plain_us", per(obj_phase_ms(&obj_plain, 2), objects)),
        ("get_encrypted_us", per(obj_phase_ms(&obj_enc, 2), objects)),
        ("txn_each_plain_us", per(obj_phase_ms(&obj_plain, 4), txns)),
        (
            "txn_each_encrypted_us",
            per(obj_phase_ms(&obj_enc, 4), txns),
        ),
        ("rows", rows as f64),
        ("kernel_miss_ratio", m(kernel_ratio.clone())),
        ("kernel_insert_ratio", kernel_phase(0)),
        ("kernel_update_ratio", kernel_phase(1)),
        ("kernel_read_ratio", kernel_phase(2)),
        ("kernel_scan_ratio", kernel_phase(3)),
        ("kernel_delete_ratio", kernel_phase(4)),
        ("open_ratio", m(open_ratio.clone())),
        ("open_plain_ms", m(open_plain)),
        ("open_encrypted_ms", m(open_enc)),
        ("shared_open_ratio", m(shared_ratio.clone())),
        ("shared_open_plain_ms", m(shared_plain)),
        ("shared_open_encrypted_ms", m(shared_enc)),
        ("db_open_ratio", m(db_open_ratio.clone())),
        ("db_open_plain_ms", m(db_open_plain)),
        ("db_open_encrypted_ms", m(db_open_enc)),
        ("file_mb", file_mb),
        ("encrypt_mb_s", m(enc_mb.clone())),
        ("rekey_mb_s", m(rekey_mb.clone())),
        ("decrypt_mb_s", m(dec_mb.clone())),
        ("loadavg_start", load_start),
        ("loadavg_end", loadavg()),
    ];
    for (k, v) in &metrics {
        eprintln!("{k:>28} {v:>10.3}");
    }
    let target = |metric: &str, label: &str, vals: Vec<f64>, goal: f64| {
        let (lo, hi) = spread(&vals);
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        serde_json::json!({
            "metric": metric, "label": label,
            "median": r(m(vals.clone())),
            "min": r(lo),
            "max": r(hi),
            "repetitions": vals.len(),
            "values": vals.iter().map(|&x| r(x)).collect::<Vec<_>>(),
            "target": goal, "better": "lower", "unit": "×",
        })
    };
    let (klo, khi) = spread(&kernel_ratio);
    let (dlo, dhi) = spread(&db_open_ratio);
    let summary = format!(
        "keel with and without a SQLCipher data key, same build, same process. CRUD: the \
         crud benchmark's {objects} objects through keel's object layer (every phase on both \
         sides in turn). Secondary, no goal: the storage kernel alone on a table of {rows} \
         random 1 KB rows, larger than a reader's cache so nearly every read decrypts a \
         page, {:.2}× ({klo:.2}–{khi:.2}). Open through the object layer: {:.2}× \
         ({dlo:.2}–{dhi:.2}). Rotation of a {file_mb:.1} MB file: {:.0} MB/s plaintext → \
         encrypted, {:.0} MB/s to a new key, {:.0} MB/s encrypted → plaintext. Load \
         average {load_start:.1} at the start, {:.1} at the end.",
        m(kernel_ratio.clone()),
        m(db_open_ratio.clone()),
        m(enc_mb),
        m(rekey_mb),
        m(dec_mb),
        loadavg(),
    );
    let targets = vec![
        target(
            "crud_ratio",
            "object-level CRUD pass, encrypted vs plaintext",
            crud_ratio,
            1.15,
        ),
        target(
            "open_ratio",
            "Store open + first read, raw key vs plaintext",
            open_ratio,
            1.1,
        ),
    ];
    support::write_targets_report(
        "encryption",
        &metrics,
        note,
        targets,
        summary,
        include_str!("encryption.rs"),
        &["What is measured"],
    );
}
