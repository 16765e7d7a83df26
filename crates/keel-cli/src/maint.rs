//! Commands that open the file through keel's storage kernel, like an app does:
//! `keel checkpoint`, `keel vacuum`, `keel explain-open`.

use std::path::Path;
use std::time::Duration;

use keel_query::Database;
use keel_storage::{
    CheckpointMode, Error as StorageError, FileStats, OpenPhase, OpenReport, Store, StoreOptions,
    SyncPolicy,
};
use serde_json::{json, Value as Json};

use crate::exit::{self, Failure, Result};
use crate::files::{self, human_bytes};
use crate::progress::Progress;

/// A WAL at open at least this big earns the `on_background()` suggestion.
pub const LARGE_WAL_BYTES: u64 = 1 << 20;
/// A phase slower than this (and over a fifth of the open) earns a suggestion.
pub const SLOW_PHASE: Duration = Duration::from_millis(50);
/// Free pages above this many (keel's default background-vacuum trigger) …
pub const MANY_FREE_PAGES: u64 = 256;
/// … or above this share of the file earn the vacuum suggestion.
pub const FREE_SHARE: f64 = 0.2;

/// A very long time: background checkpoints and vacuums never fire.
const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Options for a maintenance open. `hold_off` keeps the background checkpointer and
/// vacuum from running by themselves, so only what the command asks for happens.
fn options(hold_off: bool) -> StoreOptions {
    let mut o = StoreOptions::default();
    if hold_off {
        o.checkpoint_threshold_bytes = i64::MAX as u64;
        o.idle_checkpoint_delay = NEVER;
        o.vacuum_min_free_pages = u32::MAX;
    }
    o
}

/// Either handle; both give the store.
enum Opened {
    Store(Store),
    Db(Database),
}

impl Opened {
    fn store(&self) -> &Store {
        match self {
            Opened::Store(s) => s,
            Opened::Db(d) => d.store(),
        }
    }

    /// Close like an app does (queued writes, TRUNCATE checkpoint, threads joined).
    fn close(self) -> Result<()> {
        match self {
            Opened::Store(s) => s.close().map_err(Failure::storage),
            Opened::Db(d) => d.close().wait().map_err(Failure::query),
        }
    }

    /// Leave without closing, as if the process were killed now: no TRUNCATE
    /// checkpoint, the WAL stays as it is (SQLite's WAL is safe against exactly this).
    fn abandon(self) {
        if let Opened::Db(d) = &self {
            // A background index build must not be cut off half-way (harmless, but
            // wasted work); let it finish.
            let _ = d.wait_for_indexes();
        }
        std::mem::forget(self);
    }
}

fn open(db: &Path, opts: StoreOptions, schema_file: Option<&Path>) -> Result<Opened> {
    match schema_file {
        None => Store::open(db, opts)
            .map(Opened::Store)
            .map_err(Failure::storage),
        Some(file) => {
            let schema = files::load_schema_file(file)?;
            Database::open(db, schema, opts)
                .map(Opened::Db)
                .map_err(Failure::query)
        }
    }
}

fn read_i64(store: &Store, pragma: &'static str) -> Result<i64> {
    store
        .read(|c| {
            c.query_row(&format!("PRAGMA {pragma}"), [], |r| r.get::<_, i64>(0))
                .map_err(StorageError::from)
        })
        .map_err(Failure::storage)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------
// checkpoint

/// `keel checkpoint DB [--mode passive|truncate]`.
pub fn checkpoint(db: &Path, mode: CheckpointMode, json: bool) -> Result<u8> {
    let before = files::existing_database(db)?;
    let progress = Progress::new(json);
    let spinner = progress.spinner(format!("{} checkpoint of {}", mode.sql(), db.display()));
    let opened = open(db, options(true), None)?;
    let out = opened.store().checkpoint(mode).map_err(Failure::storage);
    spinner.finish_and_clear();
    let out = match out {
        Ok(o) => o,
        Err(f) => {
            let _ = opened.close();
            return Err(f);
        }
    };
    // PASSIVE must not turn into TRUNCATE through close(); TRUNCATE already did it.
    let closed = match mode {
        CheckpointMode::Truncate => {
            opened.close()?;
            true
        }
        _ => {
            opened.abandon();
            false
        }
    };
    let wal_after = std::fs::metadata(files::sibling(db, "-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    let code = if out.busy { exit::LOCKED } else { exit::OK };
    if json {
        let v = json!({
            "path": db.display().to_string(),
            "mode": mode.sql().to_lowercase(),
            "busy": out.busy,
            "wal_bytes_before": before.wal_bytes,
            "wal_frames": out.wal_frames,
            "checkpointed_frames": out.checkpointed_frames,
            "duration_ms": ms(out.duration),
            "wal_bytes_after": wal_after,
            "closed": closed,
            "exit_code": code,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!(
            "{} checkpoint of {}: {} of {} WAL frames copied into the database in {:.1} ms",
            mode.sql(),
            db.display(),
            out.checkpointed_frames.max(0),
            out.wal_frames.max(0),
            ms(out.duration)
        );
        println!(
            "  WAL {} before, {} after{}",
            human_bytes(before.wal_bytes),
            human_bytes(wal_after),
            if closed {
                ""
            } else {
                " (PASSIVE keeps the WAL file; the next writes reuse it)"
            }
        );
        if out.busy {
            println!("  busy: another connection kept the checkpoint from finishing; run it again when the app is idle");
        }
    }
    Ok(code)
}

// ---------------------------------------------------------------------------------
// vacuum

/// `keel vacuum DB`: incremental vacuum until no free page is left, then close
/// (the TRUNCATE checkpoint at close is what shrinks the file).
pub fn vacuum(db: &Path, json: bool) -> Result<u8> {
    let before = files::existing_database(db)?;
    let opened = open(db, options(true), None)?;
    let store = opened.store();
    let auto_vacuum = read_i64(store, "auto_vacuum")?;
    let page_size = read_i64(store, "page_size")?.max(0) as u64;
    let free_before = read_i64(store, "freelist_count")?.max(0) as u64;
    if auto_vacuum != 2 {
        opened.close()?;
        let msg = format!(
            "{}: auto_vacuum is {}, so free pages cannot be reclaimed incrementally ({free_before} free pages); \
             a one-time `PRAGMA auto_vacuum=INCREMENTAL; VACUUM;` (sqlite3) fixes that",
            db.display(),
            files::auto_vacuum_name(auto_vacuum)
        );
        if json {
            println!(
                "{}",
                json!({ "path": db.display().to_string(), "error": msg, "auto_vacuum": files::auto_vacuum_name(auto_vacuum), "freelist_pages": free_before, "exit_code": exit::PROBLEMS })
            );
        } else {
            eprintln!("keel: {msg}");
        }
        return Ok(exit::PROBLEMS);
    }
    let progress = Progress::new(json);
    let pb = progress.bar(free_before, "vacuum", "pages");
    let mut freed = 0u64;
    let chunk = 1024u32;
    loop {
        let n = match store.incremental_vacuum(chunk) {
            Ok(n) => n,
            Err(e) => {
                pb.finish_and_clear();
                let _ = opened.close();
                return Err(Failure::storage(e));
            }
        };
        freed += n;
        pb.inc(n);
        if n == 0 {
            break;
        }
    }
    pb.finish_and_clear();
    let free_after = read_i64(store, "freelist_count")?.max(0) as u64;
    opened.close()?;
    let after = files::existing_database(db)?;
    if json {
        let v = json!({
            "path": db.display().to_string(),
            "pages_freed": freed,
            "page_size": page_size,
            "freelist_pages_before": free_before,
            "freelist_pages_after": free_after,
            "file_bytes_before": before.db_bytes,
            "wal_bytes_before": before.wal_bytes,
            "file_bytes_after": after.db_bytes,
            "wal_bytes_after": after.wal_bytes,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!(
            "incremental vacuum of {}: {freed} free pages reclaimed ({}), {free_after} left",
            db.display(),
            human_bytes(freed * page_size)
        );
        println!(
            "  file {} → {} (WAL {} → {})",
            human_bytes(before.db_bytes),
            human_bytes(after.db_bytes),
            human_bytes(before.wal_bytes),
            human_bytes(after.wal_bytes)
        );
    }
    Ok(exit::OK)
}

// ---------------------------------------------------------------------------------
// explain-open

/// A suggestion derived from the open's figures.
#[derive(Debug, Clone)]
pub struct Suggestion {
    /// Stable identifier for scripts (`large_wal`, `slow_sync_wal`, …).
    pub id: &'static str,
    /// The advice.
    pub text: String,
}

/// Figures of the file as open found it (from the header and side files, and
/// pragmas read right after open).
#[derive(Debug, Clone, Default)]
pub struct FileFigures {
    pub journal_before: &'static str,
    pub page_count: u64,
    pub freelist: u64,
    pub auto_vacuum: i64,
}

/// The suggestions for one open: what would make the next open faster or the file
/// smaller. Pure, so it is unit-tested on made-up reports.
pub fn suggestions(
    r: &OpenReport,
    f: &FileFigures,
    barrier: &str,
    building: usize,
) -> Vec<Suggestion> {
    let mut out = Vec::new();
    let slow = |p: OpenPhase| {
        r.phase(p).filter(|ph| {
            ph.duration >= SLOW_PHASE && ph.duration.as_secs_f64() >= 0.2 * r.total.as_secs_f64()
        })
    };
    if r.wal_bytes_at_open >= LARGE_WAL_BYTES {
        out.push(Suggestion {
            id: "large_wal",
            text: format!(
                "WAL is {} at open ({} frames): the last run ended without checkpointing. \
                 Call on_background() before suspension (a TRUNCATE checkpoint) so the next \
                 launch has no WAL to sync or recover.",
                human_bytes(r.wal_bytes_at_open),
                r.frames_recovered
            ),
        });
    }
    if let Some(ph) = slow(OpenPhase::SyncWal) {
        out.push(Suggestion {
            id: "slow_sync_wal",
            text: format!(
                "sync_wal took {:.0} ms ({:.0}% of the open) under the {barrier} open-barrier policy. \
                 An empty WAL at launch removes it (on_background()); if a WAL that survives an OS \
                 crash but maybe not a power loss is enough, StoreOptions::open_barrier_sync(SyncPolicy::Barrier) \
                 makes it cheaper (see docs/durability.md).",
                ms(ph.duration),
                100.0 * ph.duration.as_secs_f64() / r.total.as_secs_f64().max(1e-9)
            ),
        });
    }
    if let Some(ph) = slow(OpenPhase::Recover) {
        out.push(Suggestion {
            id: "slow_recover",
            text: format!(
                "recover took {:.0} ms reading {} WAL frames: SQLite rebuilds the wal-index from every \
                 frame, so this grows with the WAL; keeping it small (on_background(), a lower \
                 checkpoint_threshold) keeps it short.",
                ms(ph.duration),
                r.frames_recovered
            ),
        });
    }
    if let Some(ph) = slow(OpenPhase::Schema) {
        out.push(Suggestion {
            id: "slow_schema",
            text: format!(
                "the schema phase took {:.0} ms: it runs in one write transaction on every open; \
                 new indexes are built after open in the background, so a slow schema phase \
                 usually means lock waits or a slow disk.",
                ms(ph.duration)
            ),
        });
    }
    if building > 0 {
        out.push(Suggestion {
            id: "building_indexes",
            text: format!(
                "{building} new index(es) are built in the background after open: queries are \
                 correct meanwhile, and use the index once it is ready."
            ),
        });
    }
    let share = if f.page_count > 0 {
        f.freelist as f64 / f.page_count as f64
    } else {
        0.0
    };
    if f.freelist > 0 && f.auto_vacuum != 2 {
        out.push(Suggestion {
            id: "no_auto_vacuum",
            text: format!(
                "{} free pages and auto_vacuum is {}: they never go back to the file system. \
                 Run a one-time `PRAGMA auto_vacuum=INCREMENTAL; VACUUM;` so keel's background \
                 vacuum can reclaim them.",
                f.freelist,
                files::auto_vacuum_name(f.auto_vacuum)
            ),
        });
    } else if f.freelist >= MANY_FREE_PAGES || (f.freelist > 0 && share >= FREE_SHARE) {
        out.push(Suggestion {
            id: "free_pages",
            text: format!(
                "{} free pages ({:.0}% of the file): run `keel vacuum` (the app's background \
                 vacuum reclaims them when idle, or call incremental_vacuum()).",
                f.freelist,
                100.0 * share
            ),
        });
    }
    if f.journal_before == "rollback" {
        out.push(Suggestion {
            id: "was_rollback",
            text: "the file was in rollback-journal mode: keel switched it to WAL (this open \
                   wrote that change to the header)."
                .into(),
        });
    }
    out
}

fn file_stats_json(s: &FileStats) -> Json {
    json!({
        "reads": s.reads, "writes": s.writes,
        "bytes_read": s.bytes_read, "bytes_written": s.bytes_written,
        "syncs": s.syncs, "sync_ms": ms(s.sync_time), "max_sync_ms": ms(s.max_sync),
    })
}

fn parse_policy(name: &str) -> SyncPolicy {
    match name {
        "barrier" => SyncPolicy::Barrier,
        "normal" => SyncPolicy::Normal,
        "off" => SyncPolicy::Off,
        _ => SyncPolicy::Full,
    }
}

/// `keel explain-open DB [--schema S] [--keep-wal] [--barrier P]`.
pub fn explain_open(
    db: &Path,
    schema_file: Option<&Path>,
    keep_wal: bool,
    barrier: &str,
    json: bool,
) -> Result<u8> {
    let before = files::existing_database(db)?;
    let progress = Progress::new(json);
    let pb = progress.bar(OpenPhase::ALL.len() as u64, "open", "phases");
    let pb2 = pb.clone();
    // The app's own options: the report (its checkpoint phase too) is what the app sees.
    let opts = options(false)
        .open_barrier_sync(parse_policy(barrier))
        .on_progress(move |p| {
            pb2.set_message(p.phase.name());
            pb2.set_position(if p.done {
                OpenPhase::ALL.len() as u64
            } else {
                OpenPhase::ALL
                    .iter()
                    .position(|x| *x == p.phase)
                    .unwrap_or(0) as u64
            });
        });
    let opened = open(db, opts, schema_file);
    pb.finish_and_clear();
    let opened = opened?;
    let store = opened.store();
    let report = store.open_report().clone();
    let io = store.io_stats();
    let figures = FileFigures {
        journal_before: before.header_journal,
        page_count: read_i64(store, "page_count")?.max(0) as u64,
        freelist: read_i64(store, "freelist_count")?.max(0) as u64,
        auto_vacuum: read_i64(store, "auto_vacuum")?,
    };
    let building = match &opened {
        Opened::Db(d) => d
            .index_states()
            .map(|v| v.iter().filter(|(_, s)| s == "building").count())
            .unwrap_or(0),
        Opened::Store(_) => 0,
    };
    let policy_name = match barrier {
        "barrier" => "Barrier",
        "normal" => "Normal",
        "off" => "Off",
        _ => "Full",
    };
    let sugg = suggestions(&report, &figures, policy_name, building);
    let closed = if keep_wal {
        opened.abandon();
        false
    } else {
        opened.close()?;
        true
    };
    let wal_after = std::fs::metadata(files::sibling(db, "-wal"))
        .map(|m| m.len())
        .unwrap_or(0);

    if json {
        let v = json!({
            "path": report.path.display().to_string(),
            "total_ms": ms(report.total),
            "readable_ms": ms(report.readable_after),
            "durable_ms": report.durable_after.map(ms),
            "wal_bytes_at_open": report.wal_bytes_at_open,
            "frames_recovered": report.frames_recovered,
            "syncs_issued": report.syncs_issued,
            "page_size": report.page_size,
            "created": report.created,
            "open_barrier_policy": policy_name,
            "schema": schema_file.map(|p| p.display().to_string()),
            "phases": report.phases.iter().map(|p| json!({
                "phase": p.phase.name(), "ms": ms(p.duration), "syncs": p.syncs, "note": p.note,
            })).collect::<Vec<_>>(),
            "slowest_phase": report.slowest_phase().map(|p| p.phase.name()),
            "io": {
                "main_db": file_stats_json(&io.main_db),
                "wal": file_stats_json(&io.wal),
                "open_barrier_syncs": io.open_barrier_syncs,
                "commit_syncs": io.commit_syncs,
                "checkpoint_syncs": io.checkpoint_syncs,
            },
            "file": {
                "bytes_before": before.db_bytes,
                "journal_mode_before": before.header_journal,
                "page_count": figures.page_count,
                "freelist_pages": figures.freelist,
                "auto_vacuum": files::auto_vacuum_name(figures.auto_vacuum),
            },
            "suggestions": sugg.iter().map(|s| json!({ "id": s.id, "text": s.text })).collect::<Vec<_>>(),
            "closed": closed,
            "wal_bytes_after": wal_after,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(exit::OK);
    }
    print!("{report}");
    println!(
        "milestones: readable after {:.2} ms (an app lists its data, subscriptions start), durable after {} (writes commit{})",
        ms(report.readable_after),
        report
            .durable_after
            .map_or_else(|| "-".to_string(), |d| format!("{:.2} ms", ms(d))),
        if report.wal_bytes_at_open > 0 {
            "; the open barrier ran in parallel with recovery"
        } else {
            "; no WAL: both at once"
        }
    );
    println!(
        "I/O during open: main db {} reads ({}), WAL {} reads ({}); {} open-barrier sync{}, longest WAL sync {:.2} ms",
        io.main_db.reads,
        human_bytes(io.main_db.bytes_read),
        io.wal.reads,
        human_bytes(io.wal.bytes_read),
        io.open_barrier_syncs,
        if io.open_barrier_syncs == 1 { "" } else { "s" },
        ms(io.wal.max_sync)
    );
    if let Some(p) = report.slowest_phase() {
        println!(
            "slowest phase: {} ({:.2} ms)",
            p.phase.name(),
            ms(p.duration)
        );
    }
    if sugg.is_empty() {
        println!("suggestions: none — nothing here slows the open down");
    } else {
        println!("suggestions:");
        for s in &sugg {
            println!("  - {}", s.text);
        }
    }
    if closed {
        println!(
            "closed like an app does (TRUNCATE checkpoint): WAL now {}",
            human_bytes(wal_after)
        );
    } else {
        println!(
            "left without closing (--keep-wal): WAL still {}",
            human_bytes(wal_after)
        );
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_storage::PhaseReport;

    fn report(wal: u64, sync_ms: u64, recover_ms: u64) -> OpenReport {
        let phases: Vec<PhaseReport> = OpenPhase::ALL
            .iter()
            .map(|p| PhaseReport {
                phase: *p,
                duration: Duration::from_millis(match p {
                    OpenPhase::SyncWal => sync_ms,
                    OpenPhase::Recover => recover_ms,
                    _ => 1,
                }),
                syncs: 0,
                note: String::new(),
            })
            .collect();
        OpenReport {
            total: phases.iter().map(|p| p.duration).sum(),
            wal_bytes_at_open: wal,
            frames_recovered: wal / 4120,
            phases,
            ..OpenReport::default()
        }
    }

    fn ids(s: &[Suggestion]) -> Vec<&'static str> {
        s.iter().map(|s| s.id).collect()
    }

    #[test]
    fn healthy_open_has_no_suggestions() {
        let f = FileFigures {
            auto_vacuum: 2,
            page_count: 100,
            ..FileFigures::default()
        };
        assert!(suggestions(&report(0, 0, 1), &f, "Full", 0).is_empty());
    }

    #[test]
    fn large_wal_and_slow_sync() {
        let f = FileFigures {
            auto_vacuum: 2,
            page_count: 100,
            ..FileFigures::default()
        };
        let s = suggestions(&report(16 << 20, 3000, 200), &f, "Full", 0);
        assert_eq!(ids(&s), ["large_wal", "slow_sync_wal"]);
        assert!(s[0].text.contains("WAL is 16.0 MiB"), "{}", s[0].text);
        assert!(s[0].text.contains("on_background() before suspension"));
        assert!(s[1].text.contains("Barrier"));
        // recover at 200 ms of a 3.2 s open is not a fifth of it.
        let s = suggestions(&report(16 << 20, 10, 200), &f, "Full", 0);
        assert_eq!(ids(&s), ["large_wal", "slow_recover"]);
    }

    #[test]
    fn free_pages_and_auto_vacuum() {
        let mut f = FileFigures {
            auto_vacuum: 2,
            page_count: 1000,
            freelist: 300,
            ..FileFigures::default()
        };
        assert_eq!(
            ids(&suggestions(&report(0, 0, 1), &f, "Full", 0)),
            ["free_pages"]
        );
        f.freelist = 10;
        assert!(suggestions(&report(0, 0, 1), &f, "Full", 0).is_empty());
        f.auto_vacuum = 0;
        f.journal_before = "rollback";
        assert_eq!(
            ids(&suggestions(&report(0, 0, 1), &f, "Full", 2)),
            ["building_indexes", "no_auto_vacuum", "was_rollback"]
        );
    }
}
