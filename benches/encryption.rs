//! Encryption benchmark: what SQLCipher costs a keel store, and how fast a key
//! rotation moves a file.
//!
//! `cargo bench -p keel-bench-encryption --bench encryption -- [--quick]` writes
//! `target/keel-bench/encryption.json`. This bench is a package of its own
//! (`benches/encryption/`): it needs keel-storage's `encryption` feature, which in
//! `keel-benches` would link SQLCipher into every other scenario too.
//!
//! # What is measured
//!
//! Both sides are keel's storage kernel (`Store`) in the same SQLCipher build and
//! the same process, with the same options (commit and checkpoint sync `Normal`,
//! 2 readers); one opens with a data key (`StoreOptions::encryption`), the other
//! without. The object layer above adds the same work to both sides, so measuring
//! below it gives the stricter ratio. Repetitions alternate which side runs first.
//!
//! * **CRUD** (`crud_ratio`): one pass of a table of `ROWS` rows of 1,000 random
//!   bytes with a text index (about 10 MB, more than the readers' 4 MB page cache,
//!   so reads decrypt pages): inserts in transactions of 100, 1,000 single-row
//!   update transactions, a keyed read of every row, an indexed scan, and a delete
//!   of 1,000 rows. Encrypted time ÷ plaintext time, per repetition.
//! * **Open** (`open_ratio`): `Store::open` of the closed file (WAL empty) until it
//!   returns (durable), then one keyed read, then close. The encrypted open is given
//!   the raw 32-byte key and salt, so no password derivation runs; it also checks
//!   the key on the main file first.
//! * **Rotation** (`*_mb_s`): `rotate::rotate` of that file, plaintext → encrypted,
//!   encrypted → new key, encrypted → plaintext: bytes of the new file ÷ wall time,
//!   including both directory syncs and the file sync.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keel_storage::encryption::{DataKey, KeyError, KeyPurpose};
use keel_storage::rotate::{self, RotateOptions, Side};
use keel_storage::{Error, Store, StoreOptions, SyncPolicy};

mod support;

fn opts(key: Option<&DataKey>) -> StoreOptions {
    let o = StoreOptions::default()
        .commit_sync(SyncPolicy::Normal)
        .checkpoint_sync(SyncPolicy::Normal)
        .readers(2);
    match key {
        Some(k) => {
            let k = k.clone();
            o.encryption(move |_: &Path, _: KeyPurpose| Ok::<_, KeyError>(k.clone()))
        }
        None => o,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One CRUD pass on a new store at `path`: the phases' times.
fn crud(path: &Path, key: Option<&DataKey>, rows: i64) -> [f64; 5] {
    let store = Store::open(path, opts(key)).unwrap();
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
            t.execute("DELETE FROM kv WHERE k % 10 = 3 AND k < 10000", [])?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let delete = ms(t.elapsed());
    store.close().unwrap();
    [insert, update, read, scan, delete]
}

/// Open the closed file, read one row, close: milliseconds.
fn open_once(path: &Path, key: Option<&DataKey>) -> f64 {
    let t = Instant::now();
    let store = Store::open(path, opts(key)).unwrap();
    let v: i64 = store
        .read(|c| {
            Ok::<_, Error>(c.query_row("SELECT length(v) FROM kv WHERE k = 1", [], |r| r.get(0))?)
        })
        .unwrap();
    assert_eq!(v, 1000);
    store.close().unwrap();
    ms(t.elapsed())
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

fn note(k: &str) -> &'static str {
    match k {
        "rows" => "rows of 1,000 random bytes in the CRUD table (about 1 KB each)",
        "crud_ratio" => "CRUD pass encrypted ÷ plaintext, median of the repetitions (goal ≤ 1.15)",
        "insert_ratio" => "inserts in transactions of 100, encrypted ÷ plaintext",
        "update_ratio" => "1,000 single-row update transactions, encrypted ÷ plaintext",
        "read_ratio" => "a keyed read of every row (pages beyond the cache decrypt), encrypted ÷ plaintext",
        "scan_ratio" => "10 indexed scans reading the rows' blobs, encrypted ÷ plaintext",
        "delete_ratio" => "a delete of a tenth of the rows, encrypted ÷ plaintext",
        "crud_plain_ms" => "the plaintext CRUD pass, median",
        "crud_encrypted_ms" => "the encrypted CRUD pass, median",
        "open_ratio" => "open (durable) + first read + close, encrypted with the raw key ÷ plaintext (goal ≤ 1.1)",
        "open_plain_ms" => "plaintext open + first read + close, median",
        "open_encrypted_ms" => "encrypted open + first read + close, median",
        "file_mb" => "size of the file rotated, MB",
        "encrypt_mb_s" => "plaintext → encrypted rotation, MB of the new file per second",
        "rekey_mb_s" => "encrypted → a new key, MB per second",
        "decrypt_mb_s" => "encrypted → plaintext, MB per second",
        _ => "",
    }
}

fn main() {
    let quick = support::flag("--quick");
    let reps = if quick { 3 } else { 7 };
    let rows: i64 = if quick { 2_000 } else { 10_000 };
    let root = tempfile::tempdir().unwrap();
    let key = DataKey::generate().unwrap();
    let key2 = DataKey::generate().unwrap();

    // CRUD, alternating which side runs first.
    let mut phases: Vec<[f64; 5]> = Vec::new();
    let (mut plain_total, mut enc_total, mut crud_ratio) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let run = |enc: bool| {
            let p = root.path().join(format!("crud-{rep}-{enc}.db"));
            crud(&p, enc.then_some(&key), rows)
        };
        let (plain, enc) = if rep % 2 == 0 {
            let p = run(false);
            (p, run(true))
        } else {
            let e = run(true);
            (run(false), e)
        };
        let (p, e): (f64, f64) = (plain.iter().sum(), enc.iter().sum());
        plain_total.push(p);
        enc_total.push(e);
        crud_ratio.push(e / p);
        let mut ratio = [0.0; 5];
        for i in 0..5 {
            ratio[i] = enc[i] / plain[i];
        }
        phases.push(ratio);
        eprintln!(
            "crud rep {rep}: plain {p:.0} ms, encrypted {e:.0} ms ({:.3}×)",
            e / p
        );
    }
    let phase = |i: usize| support::median(phases.iter().map(|r| r[i]).collect());

    // Open: the files the first CRUD repetition left, closed cleanly.
    let plain_db = root.path().join("crud-0-false.db");
    let enc_db = root.path().join("crud-0-true.db");
    let (mut open_plain, mut open_enc, mut open_ratio) = (Vec::new(), Vec::new(), Vec::new());
    open_once(&plain_db, None);
    open_once(&enc_db, Some(&key));
    for rep in 0..reps * 3 {
        let (p, e) = if rep % 2 == 0 {
            let p = open_once(&plain_db, None);
            (p, open_once(&enc_db, Some(&key)))
        } else {
            let e = open_once(&enc_db, Some(&key));
            (open_once(&plain_db, None), e)
        };
        open_plain.push(p);
        open_enc.push(e);
        open_ratio.push(e / p);
    }

    // Rotation throughput, on copies of the plaintext file.
    let file_mb = std::fs::metadata(&plain_db).unwrap().len() as f64 / 1e6;
    let (mut enc_mb, mut rekey_mb, mut dec_mb) = (Vec::new(), Vec::new(), Vec::new());
    let mb_s = |r: &rotate::RotateReport| r.bytes as f64 / 1e6 / r.duration.as_secs_f64();
    for rep in 0..reps {
        let p: PathBuf = root.path().join(format!("rotate-{rep}.db"));
        copy(&plain_db, &p);
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

    let m = support::median;
    let metrics: Vec<(&str, f64)> = vec![
        ("rows", rows as f64),
        ("crud_ratio", m(crud_ratio.clone())),
        ("insert_ratio", phase(0)),
        ("update_ratio", phase(1)),
        ("read_ratio", phase(2)),
        ("scan_ratio", phase(3)),
        ("delete_ratio", phase(4)),
        ("crud_plain_ms", m(plain_total)),
        ("crud_encrypted_ms", m(enc_total)),
        ("open_ratio", m(open_ratio.clone())),
        ("open_plain_ms", m(open_plain)),
        ("open_encrypted_ms", m(open_enc)),
        ("file_mb", file_mb),
        ("encrypt_mb_s", m(enc_mb.clone())),
        ("rekey_mb_s", m(rekey_mb)),
        ("decrypt_mb_s", m(dec_mb)),
    ];
    let target = |metric: &str, label: &str, vals: Vec<f64>, goal: f64| {
        let mut sorted = vals.clone();
        sorted.sort_by(f64::total_cmp);
        serde_json::json!({
            "metric": metric, "label": label,
            "median": (support::median(vals.clone()) * 1000.0).round() / 1000.0,
            "min": (sorted[0] * 1000.0).round() / 1000.0,
            "max": (sorted[sorted.len() - 1] * 1000.0).round() / 1000.0,
            "repetitions": vals.len(),
            "target": goal, "better": "lower", "unit": "×",
        })
    };
    let targets = vec![
        target(
            "crud_ratio",
            "CRUD pass, encrypted vs plaintext",
            crud_ratio,
            1.15,
        ),
        target(
            "open_ratio",
            "open + first read, raw key vs plaintext",
            open_ratio,
            1.1,
        ),
    ];
    support::write_targets_report(
        "encryption",
        &metrics,
        note,
        targets,
        format!(
            "keel's Store with and without a SQLCipher data key, same build, same process ({rows} rows of 1 KB); key rotation of that {file_mb:.1} MB file."
        ),
        include_str!("encryption.rs"),
        &["What is measured"],
    );
}
