//! Dictionary: values acknowledged by `sync()` survive a simulated crash.
//!
//! Uses keel-storage's simulated disk (feature `sim`): each seed runs random sets,
//! removes, transactional sets and syncs against a store whose disk crashes at a
//! random operation, then loses power (unsynced writes applied, dropped or torn per
//! sector). After reopening, every key must hold the value acknowledged by its last
//! successful `sync()` or a value set after it — never an older one, never garbage.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use keel_example_blog::blog::Post;
use keel_query::{Database, DictValue, StoreOptions};
use keel_storage::sim::{SimDisk, SimRng};

const SEEDS: u64 = 24;
const KEYS: u64 = 24;

/// Per key: every value it was given, in order (`None` = removed), and how many of
/// them a successful `sync()` covered.
#[derive(Default, Debug)]
struct History {
    values: Vec<Option<DictValue>>,
    acked: usize,
}

impl History {
    /// What the disk may hold after a crash.
    fn allowed(&self) -> Vec<Option<DictValue>> {
        if self.acked == 0 {
            let mut v = vec![None];
            v.extend(self.values.iter().cloned());
            v
        } else {
            self.values[self.acked - 1..].to_vec()
        }
    }
}

/// Create a durable, empty database with keel's tables at `path` (on the real
/// disk), then reopen it with `options` on a fresh simulated disk.
fn open_on_sim_disk(path: &Path, options: StoreOptions) -> (Database, Arc<SimDisk>) {
    Database::open_for::<Post>(path, StoreOptions::default())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    let disk = Arc::new(SimDisk::new());
    let db = Database::open_for::<Post>(path, options.sim_disk(Arc::clone(&disk))).unwrap();
    (db, disk)
}

fn run_seed(seed: u64) -> (usize, bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let (db, disk) = open_on_sim_disk(
        &path,
        StoreOptions::default().idle_checkpoint_after(std::time::Duration::from_millis(5)),
    );
    let d = db.dictionary();
    let mut rng = SimRng::new(seed);
    let mut hist: BTreeMap<String, History> = BTreeMap::new();
    let mut acks = 0;
    disk.crash_at(rng.range(5, 400));
    'rounds: for round in 0..60u64 {
        for _ in 0..rng.range(1, 25) {
            let key = format!("k{}", rng.below(KEYS));
            let v = match rng.below(10) {
                0 => None,
                1..=5 => Some(DictValue::Int((round * 1000 + rng.below(1000)) as i64)),
                6..=8 => Some(DictValue::String(format!("r{round}-{}", rng.below(100)))),
                _ => {
                    // A transactional set: recorded whatever its outcome (a commit
                    // that failed on sync may still reach the disk).
                    let v = DictValue::Bytes(vec![round as u8; rng.below(300) as usize]);
                    hist.entry(key.clone())
                        .or_default()
                        .values
                        .push(Some(v.clone()));
                    let (k2, v2) = (key.clone(), v);
                    if db
                        .write(move |t| t.dictionary().set(&k2, v2))
                        .wait()
                        .is_err()
                    {
                        // Only the crash fails a write here. Its value may or may not
                        // be on disk, and no later `sync()` covers it (a sync with
                        // nothing pending succeeds without touching the disk), so
                        // nothing after this point may count as acknowledged.
                        assert!(
                            disk.crashed(),
                            "seed {seed}: a write failed before the crash"
                        );
                        break 'rounds;
                    }
                    continue;
                }
            };
            match &v {
                Some(v) => d.set(&key, v).unwrap(),
                None => d.remove(&key).unwrap(),
            }
            hist.entry(key).or_default().values.push(v);
        }
        if rng.chance(1, 3) {
            match d.sync().wait() {
                Ok(()) => {
                    acks += 1;
                    for h in hist.values_mut() {
                        h.acked = h.values.len();
                    }
                }
                Err(_) => break 'rounds, // the disk crashed
            }
        }
        if disk.crashed() {
            break;
        }
    }
    let crashed_early = disk.crashed();
    disk.crash_now();
    drop(d);
    // The store closes against a dead disk: nothing more reaches it. (Close, not
    // drop: a drop would finish the shutdown in the background, racing the power
    // loss.)
    let _ = db.close().wait();
    drop(db);
    disk.power_loss(&mut rng);

    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    let d = db.dictionary();
    for i in 0..KEYS {
        let key = format!("k{i}");
        let got = d
            .get_value(&key)
            .unwrap_or_else(|e| panic!("seed {seed}: {key} unreadable after the crash: {e}"));
        let allowed = hist.get(&key).map_or(vec![None], History::allowed);
        assert!(
            allowed.contains(&got),
            "seed {seed}: {key} = {got:?} after the crash; allowed {allowed:?} (acked {})",
            hist.get(&key).map_or(0, |h| h.acked)
        );
    }
    db.close().wait().unwrap();
    (acks, crashed_early)
}

#[test]
fn values_acknowledged_by_sync_survive_a_simulated_crash() {
    let mut acks = 0;
    let mut early = 0;
    for seed in 0..SEEDS {
        let (a, e) = run_seed(seed);
        acks += a;
        early += e as usize;
    }
    // The campaign must exercise both: syncs that were acknowledged before the
    // crash, and crashes in the middle of the work.
    assert!(acks >= SEEDS as usize, "only {acks} acknowledged syncs");
    assert!(early >= 1, "no seed crashed mid-run");
}

/// A flush whose commit fails (a sync error, a full disk) keeps its values pending:
/// reads still see them, `sync()` reports the failure, the next `sync()` persists
/// them, and nothing set later is overwritten by the retry.
#[test]
fn a_failed_flush_keeps_its_values_pending_and_sync_retries() {
    use keel_storage::sim::{FaultErrno, OpClass};
    for (class, errno) in [
        (OpClass::Sync, FaultErrno::Eio),
        (OpClass::Write, FaultErrno::Enospc),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fault.db");
        let (db, disk) = open_on_sim_disk(&path, StoreOptions::default());
        let d = db.dictionary();
        d.set("before", 1).unwrap();
        d.sync().wait().unwrap();
        // Block the writer so the next flush is the one that meets the fault.
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let blocker = db.write(move |_| {
            go_rx.recv().unwrap();
            Ok(())
        });
        d.set("a", "kept").unwrap();
        d.remove("before").unwrap();
        disk.inject_fault(class, 1, errno);
        let failed = d.sync();
        go_tx.send(()).unwrap();
        // (The blocker shares the group commit, so it may fail with it.)
        let _ = blocker.wait();
        // The background flush that `set` queued may run in the group that meets the
        // fault while the sync lands in the next group; then that sync retries the
        // restored values and succeeds. Either way the fault fired on a flush of
        // these values, which must stay pending until a later commit persists them.
        // (The reopen below checks that every value reached the disk in the end.)
        let _ = failed.wait();
        assert_eq!(disk.fired().len(), 1, "{class:?}: the fault must fire");
        // Still visible (pending, or committed by the retry).
        assert_eq!(d.get::<String>("a").unwrap().as_deref(), Some("kept"));
        assert_eq!(d.get::<i32>("before").unwrap(), None);
        d.set("b", 2).unwrap();
        d.sync().wait().unwrap();
        drop(d);
        db.close().wait().unwrap();
        drop(db);
        let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
        let d = db.dictionary();
        assert_eq!(
            d.get::<String>("a").unwrap().as_deref(),
            Some("kept"),
            "{class:?}"
        );
        assert_eq!(d.get::<i32>("before").unwrap(), None, "{class:?}");
        assert_eq!(d.get::<i32>("b").unwrap(), Some(2), "{class:?}");
        db.close().wait().unwrap();
    }
}
