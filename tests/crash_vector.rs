//! Crash campaign with a vector collection (issue 29): writes that insert,
//! update, change and delete objects with a `(vector: 3)` field, on
//! keel-storage's simulated disk, cut by power losses at random points. After
//! every crash the database reopens, passes `PRAGMA integrity_check`, equals a
//! prefix of the committed history holding every acknowledged write, and its
//! packed vector table equals its rows (`inspect::vector_drift`) and answers
//! nearest queries like a naive scan of the rows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel::inspect;
use keel::prelude::*;
use keel::storage::sim::{SimDisk, SimRng};

const COLL: &str = "c.Note";

fn schema() -> Schema {
    Schema::parse(
        "namespace c;
         table Note { id: string (primary); body: string; e: [float] (vector: 3, metric: \"l2\"); }
         root_type Note;",
        "c.fbs",
    )
    .unwrap()
}

const WORDS: &[&str] = &[
    "rust",
    "Crème",
    "東京都",
    "京都",
    "🦀",
    "straße",
    "한국어",
    "go",
];

type State = BTreeMap<String, String>;

#[derive(Debug, Clone)]
enum Op {
    Upsert(String, String),
    Change(String, String),
    Delete(String),
}

fn encode(s: &Schema, id: &str, text: &str) -> Vec<u8> {
    s.reader(COLL)
        .unwrap()
        .encode_json(&serde_json::json!({"id": id, "body": text, "e": vector_of(text)}))
        .unwrap()
}

/// The vector an object with `text` holds (ties are common: same lengths).
fn vector_of(text: &str) -> [f32; 3] {
    [
        text.len() as f32,
        text.split(' ').count() as f32,
        text.bytes().next().unwrap_or(0) as f32 / 16.0,
    ]
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

fn read_state(db: &Database, s: &Arc<Schema>) -> Result<State, String> {
    let (integrity, drift) = db
        .store()
        .read(|c| {
            let i: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
            let d = inspect::vector_drift(c, s, 10)?;
            Ok::<_, keel::storage::Error>((i, d))
        })
        .map_err(|e| e.to_string())?;
    if integrity != "ok" {
        return Err(format!("integrity_check: {integrity}"));
    }
    if !drift.is_empty() {
        return Err(format!("vector table drifted: {drift:?}"));
    }
    let r = s.reader(COLL).unwrap();
    let (id, body) = (r.path("id").unwrap(), r.path("body").unwrap());
    let all = db.query(COLL).all().map_err(|e| e.to_string())?;
    let mut st = State::new();
    for o in &all {
        let obj = r.read(&o.bytes).map_err(|e| e.to_string())?;
        let text = match obj.get(&body) {
            Value::Text(t) => t,
            _ => String::new(),
        };
        if let Value::Text(k) = obj.get(&id) {
            st.insert(k, text);
        }
    }
    // Nearest queries answer like a naive scan of the rows.
    let e = r.path("e").unwrap();
    for q in [[0.0f32, 0.0, 0.0], [12.0, 2.0, 6.0], [30.0, 3.0, 7.0]] {
        let got: Vec<(i64, f32)> = db
            .query(COLL)
            .nearest(e.clone(), &q, 4)
            .all()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|n| (n.rowid, n.distance))
            .collect();
        let mut want: Vec<(i64, f32)> = all
            .iter()
            .map(|o| {
                let body = match r.read(&o.bytes).map(|x| x.get(&body)) {
                    Ok(Value::Text(t)) => t,
                    _ => String::new(),
                };
                (
                    o.rowid,
                    keel::schema::Metric::L2.distance(&q, 0.0, &vector_of(&body)),
                )
            })
            .collect();
        want.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        want.truncate(4);
        if got != want {
            return Err(format!("nearest {q:?}: table {got:?}, rows {want:?}"));
        }
    }
    Ok(st)
}

fn text(rng: &mut SimRng) -> String {
    (0..rng.range(1, 4))
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn apply(st: &mut State, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Upsert(k, t) => {
                st.insert(k.clone(), t.clone());
            }
            Op::Change(k, t) => {
                if let Some(v) = st.get_mut(k) {
                    *v = t.clone();
                }
            }
            Op::Delete(k) => {
                st.remove(k);
            }
        }
    }
}

/// One seed: `sessions` crash points. Returns (crash points, acknowledged, failures).
fn campaign(seed: u64, sessions: u64, dir: &std::path::Path) -> (u64, u64, Vec<String>) {
    let s = Arc::new(schema());
    let mut rng = SimRng::new(seed);
    let path = dir.join(format!("vector-{seed}.db"));
    let disk = Arc::new(SimDisk::new());
    let mut failures = Vec::new();
    Database::open(&path, (*s).clone(), StoreOptions::default())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    let mut base = State::new();
    let (mut acked_total, mut points) = (0, 0);
    for session in 0..sessions {
        disk.crash_at(rng.range(1, 60));
        let db = match Database::open(&path, (*s).clone(), opts(&disk)) {
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
        let mut history: Vec<(Vec<Op>, bool)> = Vec::new();
        for _ in 0..rng.range(2, 10) {
            let ops: Vec<Op> = (0..rng.range(1, 5))
                .map(|_| {
                    let k = format!("n{}", rng.below(12));
                    match rng.below(4) {
                        0 => Op::Delete(k),
                        1 => Op::Change(k, text(&mut rng)),
                        _ => Op::Upsert(k, text(&mut rng)),
                    }
                })
                .collect();
            let (o2, s2) = (ops.clone(), Arc::clone(&s));
            let r = db
                .write(move |t| {
                    for op in &o2 {
                        match op {
                            Op::Upsert(k, x) => {
                                t.upsert_bytes(COLL, encode(&s2, k, x))?;
                            }
                            Op::Change(k, x) => {
                                match t.change_bytes(
                                    COLL,
                                    &[k.as_str().into()],
                                    &encode(&s2, k, x),
                                    &["body", "e"],
                                ) {
                                    Ok(_) | Err(keel::Error::NotFound { .. }) => {}
                                    Err(e) => return Err(e),
                                }
                            }
                            Op::Delete(k) => {
                                t.delete_key(COLL, &[k.as_str().into()])?;
                            }
                        }
                    }
                    Ok(())
                })
                .wait();
            let ok = r.is_ok();
            history.push((ops, ok));
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
        let _ = db.close().wait();
        disk.power_loss(&mut rng.fork());
        points += 1;
        let db = Database::open(&path, (*s).clone(), opts(&disk)).unwrap();
        let got = match read_state(&db, &s) {
            Ok(st) => st,
            Err(e) => {
                failures.push(format!("seed {seed} session {session}: CORRUPT: {e}"));
                break;
            }
        };
        let acked = history.iter().take_while(|(_, ok)| *ok).count();
        let mut st = base.clone();
        let mut matched = false;
        for k in 0..=history.len() {
            if k >= acked && st == got {
                matched = true;
                break;
            }
            if k < history.len() {
                apply(&mut st, &history[k].0);
            }
        }
        if !matched {
            failures.push(format!(
                "seed {seed} session {session}: recovered state is no prefix ≥ {acked} of {} steps (lost or corrupt)",
                history.len()
            ));
        }
        base = got;
        db.close().wait().unwrap();
        disk.app_crash();
    }
    (points, acked_total, failures)
}

#[test]
fn vector_collection_survives_crashes_with_its_packed_table_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let (mut points, mut acked) = (0, 0);
    let mut failures = Vec::new();
    for seed in 0..6 {
        let (p, a, f) = campaign(seed, 25, dir.path());
        points += p;
        acked += a;
        failures.extend(f);
    }
    println!(
        "vector: crash points: {points}, acknowledged: {acked}, lost: {}, corrupt: {}",
        failures.iter().filter(|f| !f.contains("CORRUPT")).count(),
        failures.iter().filter(|f| f.contains("CORRUPT")).count()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty());
    assert!(points >= 150 && acked > 100, "{points} {acked}");
}
