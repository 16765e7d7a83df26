//! What the write-path test binaries share: a store with one table `t(id, v)`,
//! and its row count.

use std::time::Duration;

use keel_storage::{Error, Store, StoreOptions};

/// Options with the idle checkpoint out of the way (an hour).
pub fn opts() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

/// Open `name` in `dir` with `o` and create `t(id INTEGER PRIMARY KEY, v TEXT)`.
pub fn open(dir: &tempfile::TempDir, name: &str, o: StoreOptions) -> Store {
    let store = Store::open(dir.path().join(name), o).unwrap();
    store
        .write_blocking(|t| {
            t.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
                .map_err(Error::from)
        })
        .unwrap();
    store
}

/// The rows of `t`.
pub fn count(store: &Store) -> i64 {
    store
        .read(|c| {
            c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .map_err(Error::from)
        })
        .unwrap()
}
