//! A tour of keel's storage kernel on a simulated slow phone.
//!
//! Every sync sleeps 2 s (a `Custom` sync policy), like an `F_FULLFSYNC` on a busy
//! iPhone. The previous "app session" was killed with data still in the WAL, so open
//! must run the sync barrier — and the main thread keeps ticking through it.
//!
//! Run with: `cargo run --example tour`

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use keel::storage::rusqlite::{self, config::DbConfig};
use keel::storage::{Error, OpenProgress, Store, StoreOptions, SyncPolicies, SyncPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tour.db");

    // 1. A previous session wrote 300 rows and was killed before any checkpoint.
    {
        let c = rusqlite::Connection::open(&path)?;
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;
             CREATE TABLE note(id INTEGER PRIMARY KEY, body TEXT);",
        )?;
        for i in 0..300 {
            c.execute("INSERT INTO note(body) VALUES (?1)", [format!("note {i}")])?;
        }
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    }
    println!(
        "previous session left a {} byte WAL\n",
        std::fs::metadata(dir.path().join("tour.db-wal"))?.len()
    );

    // 2. Open on a "slow phone": every sync takes 2 s.
    let slow = SyncPolicy::custom(|ctx| {
        println!("    [sync] {:?} {:?} … 2 s", ctx.reason(), ctx.kind());
        std::thread::sleep(Duration::from_secs(2));
        ctx.full_sync()
    });
    let t0 = Instant::now();
    let options = StoreOptions::default()
        .sync(SyncPolicies::all(slow))
        .on_progress(move |p: OpenProgress| {
            println!(
                "    [progress] {:>10} {:>5.1}%{}",
                p.phase.name(),
                p.fraction * 100.0,
                if p.done { "  ready" } else { "" }
            )
        });
    let mut open = Store::open_async(&path, options);
    println!("open_async returned after {:?}", t0.elapsed());

    // 3. The UI thread keeps running while keel opens.
    let store = loop {
        if let Some(r) = (&mut open).now_or_never() {
            break r?;
        }
        println!(
            "  tick {:>5.2} s — UI still responsive",
            t0.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    println!(
        "\nopen finished after {:.2} s\n",
        t0.elapsed().as_secs_f64()
    );
    println!("{}", store.open_report());

    // 4. 20 concurrent writes: group commit turns them into one transaction, one sync.
    store.reset_io_stats();
    let t = Instant::now();
    let writes: Vec<_> = (0..20)
        .map(|i| {
            store.write(move |txn| {
                txn.execute(
                    "INSERT INTO note(body) VALUES (?1)",
                    [format!("new note {i}")],
                )?;
                Ok::<_, Error>(txn.last_insert_rowid())
            })
        })
        .collect();
    let ids: Vec<i64> = futures::executor::block_on(futures::future::join_all(writes))
        .into_iter()
        .collect::<Result<_, _>>()?;
    println!(
        "20 concurrent writes committed in {:.2} s with {} WAL sync(s); ids {}..={}",
        t.elapsed().as_secs_f64(),
        store.io_stats().wal.syncs,
        ids[0],
        ids[ids.len() - 1]
    );

    // 5. Reads: synchronous, any thread, one snapshot.
    let reader = store.clone();
    let (count, last): (i64, String) = std::thread::spawn(move || {
        reader.read(|c| {
            let n = c.query_row("SELECT count(*) FROM note", [], |r| r.get(0))?;
            let last = c.query_row("SELECT body FROM note ORDER BY id DESC LIMIT 1", [], |r| {
                r.get(0)
            })?;
            Ok::<_, Error>((n, last))
        })
    })
    .join()
    .map_err(|_| "reader thread panicked")??;
    println!("read: {count} notes, last = {last:?}\n");

    // 6. Physical I/O.
    println!("{}\n", store.io_stats());

    // 7. Going to the background: empty the WAL so the next launch has nothing to sync.
    let out = store.on_background()?;
    println!("on_background: {out:?}");
    let store = Arc::new(store);
    store.close()?;
    println!("closed after {:.2} s total", t0.elapsed().as_secs_f64());
    Ok(())
}
