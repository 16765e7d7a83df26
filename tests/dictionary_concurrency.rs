//! Dictionary: setters on 8 threads keep memory and disk consistent —
//! after reopen, every key holds the value that was set last.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Barrier};

use keel::{Database, DictValue, StoreOptions};
use keel_example_blog::blog::Post;

const THREADS: usize = 8;

fn open(path: &Path) -> Database {
    Database::open_for::<Post>(path, StoreOptions::default()).unwrap()
}

/// A small deterministic RNG (xorshift).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Every key's value as the dictionary reports it now.
fn snapshot(db: &Database, keys: &[String]) -> BTreeMap<String, Option<DictValue>> {
    let d = db.dictionary();
    keys.iter()
        .map(|k| (k.clone(), d.get_value(k).unwrap()))
        .collect()
}

/// Close `db` and reopen `path`: the disk must hold exactly what memory held before
/// the close — each of `keys` with its value in `memory`, and the key list `mem_keys`.
fn assert_disk_equals_memory_after_reopen(
    db: Database,
    path: &Path,
    keys: &[String],
    memory: &BTreeMap<String, Option<DictValue>>,
    mem_keys: &[String],
) {
    db.close().wait().unwrap();
    drop(db);

    let db = open(path);
    assert_eq!(
        &snapshot(&db, keys),
        memory,
        "disk differs from memory after reopen"
    );
    assert_eq!(db.dictionary().keys().unwrap(), mem_keys);
    db.close().wait().unwrap();
}

/// 8 threads set and remove overlapping keys (no `remove_all`), so the value each
/// key ends with must be the last operation of one of the threads on that key —
/// memory must agree, and after a reopen the disk must hold exactly the same.
#[test]
fn eight_setters_last_set_wins_in_memory_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let db = open(&path);
    let keys: Vec<String> = (0..48).map(|i| format!("shared{i}")).collect();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let d = db.dictionary();
            let keys = keys.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9 + t as u64 * 7919);
                // This thread's last operation per key.
                let mut last: HashMap<String, Option<DictValue>> = HashMap::new();
                barrier.wait();
                for i in 0..2500u64 {
                    let k = &keys[rng.below(keys.len() as u64) as usize];
                    let v = match rng.below(10) {
                        0 => None,
                        1..=6 => Some(DictValue::Int((t as i64) << 32 | i as i64)),
                        _ => Some(DictValue::String(format!("t{t}-{i}"))),
                    };
                    match &v {
                        Some(v) => d.set(k, v).unwrap(),
                        None => d.remove(k).unwrap(),
                    }
                    last.insert(k.clone(), v);
                    if i % 500 == 499 {
                        d.sync().wait().unwrap();
                    }
                }
                last
            })
        })
        .collect();
    let lasts: Vec<HashMap<String, Option<DictValue>>> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    let memory = snapshot(&db, &keys);
    for (k, v) in &memory {
        let candidates: Vec<&Option<DictValue>> = lasts.iter().filter_map(|l| l.get(k)).collect();
        assert!(
            candidates.contains(&v),
            "{k} holds {v:?}, which is no thread's last operation on it ({candidates:?})"
        );
    }
    let mem_keys = db.dictionary().keys().unwrap();
    assert_disk_equals_memory_after_reopen(db, &path, &keys, &memory, &mem_keys);
}

/// Everything at once: 8 threads doing sets, removes, transactional sets,
/// occasional `remove_all` and syncs, with a cache small enough that entries are
/// evicted and re-read from disk all the time. What memory says before the close
/// is what the disk holds after the reopen, key by key.
#[test]
fn eight_threads_mixed_operations_memory_equals_disk_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let db = open(&path);
    db.dictionary().set_cache_limit(8 * 1024);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            let keys = keys.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let d = db.dictionary();
                let mut rng = Rng(0xDEAD_BEEF + t as u64 * 104_729);
                let mut pending = Vec::new();
                barrier.wait();
                for i in 0..3000i64 {
                    let k = keys[rng.below(keys.len() as u64) as usize].clone();
                    match rng.below(100) {
                        0..=59 => d.set(&k, i * 10 + t as i64).unwrap(),
                        60..=69 => d.set(&k, vec![t as u8; (i % 50) as usize]).unwrap(),
                        70..=79 => d.remove(&k).unwrap(),
                        80..=94 => {
                            let _ = d.get_value(&k).unwrap();
                        }
                        95..=98 => {
                            let k2 = keys[rng.below(keys.len() as u64) as usize].clone();
                            pending.push(db.write(move |txn| {
                                let mut dict = txn.dictionary();
                                let n = dict.get_or(&k, 0i64);
                                dict.set(&k, n + 1)?;
                                dict.remove(&k2)?;
                                Ok(())
                            }));
                        }
                        _ => {
                            if i % 7 == 0 && t == 0 {
                                d.remove_all().unwrap();
                            } else {
                                d.sync().wait().unwrap();
                            }
                        }
                    }
                }
                for p in pending {
                    p.wait().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let memory = snapshot(&db, &keys);
    let mem_keys = db.dictionary().keys().unwrap();
    let expected_keys: Vec<String> = memory
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(mem_keys, expected_keys);
    assert_disk_equals_memory_after_reopen(db, &path, &keys, &memory, &mem_keys);
}

/// A thread always reads back its own latest set, even while flushes commit and
/// a tiny cache evicts entries under it (a stale disk read must never be cached).
#[test]
fn each_thread_reads_its_own_writes_under_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("r.db"));
    db.dictionary().set_cache_limit(4 * 1024);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let d = db.dictionary();
            std::thread::spawn(move || {
                let mut rng = Rng(77 + t as u64);
                let mut mine: HashMap<String, i64> = HashMap::new();
                for i in 0..2000i64 {
                    let k = format!("t{t}-{}", rng.below(40));
                    if rng.below(3) == 0 {
                        d.set(&k, i).unwrap();
                        mine.insert(k.clone(), i);
                    }
                    assert_eq!(
                        d.get::<i64>(&k).unwrap(),
                        mine.get(&k).copied(),
                        "thread {t} lost its write to {k}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    db.close().wait().unwrap();
}
