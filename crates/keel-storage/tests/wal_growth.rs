//! The WAL under sustained writes. The background checkpointer keeps it near the
//! threshold when it gets the CPU; when it does not (a loaded machine: the test
//! failed there while the checkpointer sat in one slow PASSIVE), the writer's
//! backstop checkpoints past 4× the threshold, waiting for that PASSIVE first, so
//! the bound holds whatever the scheduler does.

use keel_storage::Error;

mod support;
use support::{count, open, opts};

/// Back-to-back commits never left the background checkpointer a moment in which
/// the whole WAL was copied: its PASSIVE checkpoint always ended a few commits
/// behind, so the WAL never started over and grew without bound (22 KB a commit in
/// the subscriptions benchmark: 160 MB after 7,000 commits, for a 10,000-object
/// database; 16 MB here). Whether the writes queue or commit inline, the WAL now
/// starts over after each checkpoint and passes the threshold only by what commits
/// add while one checkpoint runs (here, at tens of MB/s, up to about 4×).
#[test]
fn sustained_writes_keep_the_wal_near_the_checkpoint_threshold() {
    use keel_storage::{SyncPolicies, SyncPolicy};
    let threshold: u64 = 256 << 10;
    let dir = tempfile::tempdir().unwrap();
    let o = opts()
        .sync(SyncPolicies::all(SyncPolicy::Normal))
        .checkpoint_threshold(threshold);
    let store = open(&dir, "sustained.db", o);
    let wal = dir.path().join("sustained.db-wal");
    let row = "x".repeat(3000);
    let mut largest = 0;
    for i in 0..3000u32 {
        let r = row.clone();
        let write = move |t: &mut keel_storage::WriteTxn<'_>| {
            t.execute(
                "INSERT OR REPLACE INTO t(id, v) VALUES (?1, ?2)",
                (i % 300, format!("{r}{i}")),
            )?;
            Ok::<_, Error>(())
        };
        if i % 2 == 0 {
            store.write_blocking(write).unwrap();
        } else {
            store.write(write).wait().unwrap();
        }
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    assert!(
        largest <= 8 * threshold,
        "the WAL reached {largest} bytes under sustained writes (threshold {threshold})"
    );
    assert_eq!(count(&store), 300);
    store.close().unwrap();
}
