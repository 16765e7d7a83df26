//! Crash campaign for cascading deletes: a tree of objects linked by
//! `(references: "Node", on_delete: "cascade")` is deleted through its root in
//! one write transaction, on keel-storage's simulated disk, and a power loss
//! cuts the write at a random point. After every crash the database reopens,
//! passes `PRAGMA integrity_check`, and holds each tree whole or not at all
//! (a cascade is all or nothing): never a node whose parent is gone. An
//! acknowledged cascade is gone; a tree whose insert was acknowledged and whose
//! cascade was not is whole or gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel::prelude::*;
use keel::storage::sim::{SimDisk, SimRng};

const COLL: &str = "c.Node";

fn schema() -> Schema {
    Schema::parse(
        r#"namespace c;
           table Node { id: string (primary); parent: string (references: "Node", on_delete: "cascade"); }
           root_type Node;"#,
        "c.fbs",
    )
    .unwrap()
}

fn opts(disk: &Arc<SimDisk>) -> StoreOptions {
    let mut o = StoreOptions::default()
        .readers(1)
        .idle_checkpoint_after(Duration::from_secs(3600))
        .checkpoint_threshold(256 << 10)
        .sim_disk(Arc::clone(disk));
    o.vacuum_min_free_pages = 0;
    o
}

/// The nodes of tree `t`: `t/0` is the root; node `i` hangs off `i - 1` when
/// `i` is even (a chain) and off the root when it is odd (a fan).
fn tree(s: &Schema, t: &str, n: usize) -> Vec<Vec<u8>> {
    let r = s.reader(COLL).unwrap();
    (0..n)
        .map(|i| {
            let json = if i == 0 {
                serde_json::json!({"id": format!("{t}/0")})
            } else {
                let parent = if i % 2 == 0 { i - 1 } else { 0 };
                serde_json::json!({"id": format!("{t}/{i}"), "parent": format!("{t}/{parent}")})
            };
            r.encode_json(&json).unwrap()
        })
        .collect()
}

/// Nodes per tree, after checking integrity and that every parent exists.
fn read_trees(db: &Database, s: &Schema) -> Result<BTreeMap<String, usize>, String> {
    let integrity: String = db
        .store()
        .read(|c| {
            c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(keel::storage::Error::from)
        })
        .map_err(|e| e.to_string())?;
    if integrity != "ok" {
        return Err(format!("integrity_check: {integrity}"));
    }
    let r = s.reader(COLL).unwrap();
    let (id, parent) = (r.path("id").unwrap(), r.path("parent").unwrap());
    let mut ids = std::collections::HashSet::new();
    let mut parents = Vec::new();
    let mut trees = BTreeMap::new();
    for o in db.query(COLL).all().map_err(|e| e.to_string())? {
        let obj = r.read(&o.bytes).map_err(|e| e.to_string())?;
        let Value::Text(k) = obj.get(&id) else {
            return Err(format!("row {} has no id", o.rowid));
        };
        *trees
            .entry(k.split('/').next().unwrap_or("").to_string())
            .or_insert(0) += 1;
        if let Value::Text(p) = obj.get(&parent) {
            parents.push((k.clone(), p));
        }
        ids.insert(k);
    }
    if let Some((k, p)) = parents.iter().find(|(_, p)| !ids.contains(p)) {
        return Err(format!("node {k} survived its parent {p}"));
    }
    Ok(trees)
}

/// One seed: `sessions` trees of `n` nodes, each cascaded under a crash.
/// Returns (crash points, cascades acknowledged, cascades cut, failures).
fn campaign(
    seed: u64,
    sessions: u64,
    n: usize,
    dir: &std::path::Path,
) -> (u64, u64, u64, Vec<String>) {
    let s = schema();
    let mut rng = SimRng::new(seed);
    let path = dir.join(format!("rel-{seed}-{n}.db"));
    let disk = Arc::new(SimDisk::new());
    Database::open(&path, s.clone(), StoreOptions::default())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    let mut failures = Vec::new();
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    let (mut points, mut acked, mut cut) = (0, 0, 0);
    for session in 0..sessions {
        let t = format!("t{session}");
        let db = Database::open(&path, s.clone(), opts(&disk)).unwrap();
        let nodes = tree(&s, &t, n);
        db.write(move |w| {
            for b in nodes {
                w.insert_bytes(COLL, b)?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
        // The crash falls somewhere in or after the cascade's writes.
        disk.crash_at(rng.range(1, n as u64 / 6 + 40));
        let root = t.clone();
        let r = db
            .write(move |w| w.delete_key(COLL, &[format!("{root}/0").into()]))
            .wait();
        match &r {
            Ok(true) => acked += 1,
            Ok(false) => failures.push(format!("seed {seed} session {session}: root missing")),
            Err(e) => {
                assert!(
                    disk.crashed(),
                    "seed {seed} session {session}: failed before the crash: {e}"
                );
                cut += 1;
            }
        }
        disk.crash_now();
        let _ = db.close().wait();
        disk.power_loss(&mut rng.fork());
        points += 1;
        let db = Database::open(&path, s.clone(), opts(&disk)).unwrap();
        match read_trees(&db, &s) {
            Err(e) => {
                failures.push(format!("seed {seed} session {session}: CORRUPT: {e}"));
                break;
            }
            Ok(got) => {
                let now = got.get(&t).copied().unwrap_or(0);
                if r.is_ok() && now != 0 {
                    failures.push(format!(
                        "seed {seed} session {session}: acknowledged cascade left {now} of {n} nodes"
                    ));
                }
                if now != 0 && now != n {
                    failures.push(format!(
                        "seed {seed} session {session}: cascade half done: {now} of {n} nodes left"
                    ));
                }
                if now == n {
                    expected.insert(t.clone(), n);
                }
                for (tree, count) in &expected {
                    if got.get(tree) != Some(count) {
                        failures.push(format!(
                            "seed {seed} session {session}: earlier tree {tree} changed: {:?} nodes",
                            got.get(tree)
                        ));
                    }
                }
            }
        }
        db.close().wait().unwrap();
        disk.app_crash();
    }
    (points, acked, cut, failures)
}

#[test]
fn cascades_survive_crashes_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut points, mut acked, mut cut) = (0, 0, 0);
    let mut failures = Vec::new();
    // Many small trees (crash points all over a short cascade), then trees of
    // 10,000 nodes (the issue's size).
    for (seed, sessions, n) in [(1, 12, 300), (2, 12, 300), (3, 3, 10_000), (4, 3, 10_000)] {
        let (p, a, c, f) = campaign(seed, sessions, n, dir.path());
        points += p;
        acked += a;
        cut += c;
        failures.extend(f);
    }
    println!("relations: crash points: {points}, cascades acknowledged: {acked}, cut: {cut}");
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty());
    assert!(
        cut > 0,
        "no crash fell inside a cascade: {points} points, {acked} acknowledged"
    );
}
