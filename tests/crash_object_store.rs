//! Crash campaign through the object store: `Database::write` transactions (insert,
//! upsert, update, delete of `blog.Post` objects with indexed and unique fields) and
//! dictionary writes (`Dictionary::set` + `sync`), on keel-storage's simulated disk
//! (feature `sim`, enabled by the root package's dev-dependency). After every crash
//! the database reopens through `Database::open_for`, passes `PRAGMA integrity_check`,
//! equals a prefix of the committed history, and holds every acknowledged transaction
//! (default policy `Full`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel::prelude::*;
use keel::storage::sim::{SimDisk, SimRng};
use keel_example_blog::blog::Post;

#[derive(Debug, Clone, Default, PartialEq)]
struct State {
    posts: BTreeMap<String, Post>,
    dict: BTreeMap<String, i64>,
}

#[derive(Debug, Clone)]
enum Step {
    Objects(Vec<ObjOp>),
    Dict(String, i64),
}

#[derive(Debug, Clone)]
enum ObjOp {
    Upsert(Post),
    Delete(String),
}

fn apply(s: &mut State, step: &Step) {
    match step {
        Step::Objects(ops) => {
            for op in ops {
                match op {
                    ObjOp::Upsert(p) => {
                        s.posts.insert(p.id.clone(), p.clone());
                    }
                    ObjOp::Delete(k) => {
                        s.posts.remove(k);
                    }
                }
            }
        }
        Step::Dict(k, v) => {
            s.dict.insert(k.clone(), *v);
        }
    }
}

fn opts(disk: &Arc<SimDisk>) -> StoreOptions {
    let mut o = StoreOptions::default()
        .readers(1)
        .idle_checkpoint_after(Duration::from_secs(3600))
        .checkpoint_threshold(64 << 10)
        .sim_disk(Arc::clone(disk));
    o.vacuum_min_free_pages = 0;
    o
}

fn read_state(db: &Database) -> Result<State, String> {
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
    let mut s = State::default();
    for p in db.fetch::<Post>().all().map_err(|e| e.to_string())? {
        s.posts.insert(p.id.clone(), p);
    }
    let d = db.dictionary();
    for k in d.keys().map_err(|e| e.to_string())? {
        if let Some(v) = d.get::<i64>(&k).map_err(|e| e.to_string())? {
            s.dict.insert(k, v);
        }
    }
    Ok(s)
}

fn post(rng: &mut SimRng) -> Post {
    let id = format!("p{}", rng.below(24));
    let mut b = Post::builder()
        .id(id.clone())
        .priority(rng.below(100) as i32)
        .title(format!("t{}", rng.below(1000)))
        .tags(
            (0..rng.below(4))
                .map(|i| format!("tag{i}"))
                .collect::<Vec<_>>(),
        );
    // A unique slug derived from the id, so upserts never collide.
    if rng.chance(1, 2) {
        b = b.slug(format!("slug-{id}"));
    }
    b.build()
}

/// One seed: `sessions` crash points. Returns (crash points, acknowledged, failures).
fn campaign(seed: u64, sessions: u64, dir: &std::path::Path) -> (u64, u64, Vec<String>) {
    let mut rng = SimRng::new(seed);
    let path = dir.join(format!("objects-{seed}.db"));
    let disk = Arc::new(SimDisk::new());
    let mut failures = Vec::new();
    // The durable starting point: created and closed without the sim.
    Database::open_for::<Post>(&path, StoreOptions::default())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    let mut base = State::default();
    let mut acked_total = 0;
    let mut points = 0;
    for session in 0..sessions {
        disk.crash_at(rng.range(1, 60));
        let db = match Database::open_for::<Post>(&path, opts(&disk)) {
            Ok(db) => db,
            Err(e) => {
                assert!(
                    disk.crashed(),
                    "seed {seed} session {session}: open failed: {e}"
                );
                disk.power_loss(&mut rng.fork());
                points += 1;
                continue;
            }
        };
        // The oracle on what this open recovered is applied by the caller of the
        // previous session (below); here: run the workload.
        let mut history: Vec<(Step, bool)> = Vec::new(); // (step, acknowledged)
        for _ in 0..rng.range(2, 10) {
            let step = if rng.chance(1, 4) {
                Step::Dict(format!("d{}", rng.below(6)), rng.next_u64() as i64)
            } else {
                let n = rng.range(1, 5);
                Step::Objects(
                    (0..n)
                        .map(|_| {
                            if rng.chance(1, 4) {
                                ObjOp::Delete(format!("p{}", rng.below(24)))
                            } else {
                                ObjOp::Upsert(post(&mut rng))
                            }
                        })
                        .collect(),
                )
            };
            let r = match &step {
                Step::Objects(ops) => {
                    let ops = ops.clone();
                    db.write(move |t| {
                        for op in &ops {
                            match op {
                                ObjOp::Upsert(p) => {
                                    t.upsert(p)?;
                                }
                                ObjOp::Delete(k) => {
                                    t.delete::<Post>(k)?;
                                }
                            }
                        }
                        Ok(())
                    })
                    .wait()
                }
                Step::Dict(k, v) => {
                    let d = db.dictionary();
                    d.set(k, *v).and_then(|()| d.sync().wait())
                }
            };
            let ok = r.is_ok();
            history.push((step, ok));
            if let Err(e) = r {
                assert!(
                    disk.crashed(),
                    "seed {seed} session {session}: failed before the crash point: {e}"
                );
                break;
            }
            acked_total += 1;
            if rng.chance(1, 5) {
                let _ = db
                    .store()
                    .checkpoint(keel::storage::CheckpointMode::Passive);
            }
        }
        disk.crash_now();
        // The process dies: wait for keel's threads (a plain drop would finish the
        // shutdown in the background, racing with the power loss).
        let _ = db.close().wait();
        disk.power_loss(&mut rng.fork());
        points += 1;
        // Reopen (no crash point) and check: a prefix ≥ the acknowledged steps.
        let db = Database::open_for::<Post>(&path, opts(&disk)).unwrap();
        let got = match read_state(&db) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("seed {seed} session {session}: CORRUPT: {e}"));
                break;
            }
        };
        let acked = history.iter().take_while(|(_, ok)| *ok).count();
        let mut s = base.clone();
        let mut matched = None;
        for k in 0..=history.len() {
            if k >= acked && s == got {
                matched = Some(k);
                break;
            }
            if k < history.len() {
                apply(&mut s, &history[k].0);
            }
        }
        match matched {
            Some(_) => base = got,
            None => {
                failures.push(format!(
                    "seed {seed} session {session}: recovered state is no prefix ≥ {acked} of {} steps (lost or corrupt)",
                    history.len()
                ));
                base = got;
            }
        }
        db.close().wait().unwrap();
        disk.app_crash();
    }
    (points, acked_total, failures)
}

#[test]
fn object_store_and_dictionary_survive_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut points, mut acked) = (0, 0);
    let mut failures = Vec::new();
    for seed in 0..10 {
        let (p, a, f) = campaign(seed, 30, dir.path());
        points += p;
        acked += a;
        failures.extend(f);
    }
    println!(
        "object store: crash points: {points}, acknowledged: {acked}, lost: {}, corrupt: {}",
        failures.iter().filter(|f| !f.contains("CORRUPT")).count(),
        failures.iter().filter(|f| f.contains("CORRUPT")).count()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty());
    assert!(points >= 300 && acked > 200, "{points} {acked}");
}
