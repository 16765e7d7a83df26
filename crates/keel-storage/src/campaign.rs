//! Crash and fault campaigns with an oracle, driven by one seed.
//!
//! This module sits above the store (feature `sim`): it opens [`Store`]s on a
//! [`SimDisk`], the simulated medium in [`crate::sim`] that the VFS shim writes to,
//! far below. Keeping the driver out of `sim` keeps the layers pointing one way.
//!
//! A campaign runs one database through a chain of *sessions*. Each session opens the
//! store through the normal open pipeline ([`Store::open`]) on a [`SimDisk`], checks the
//! oracle, runs a workload, and ends in one of three ways:
//!
//! * **crash session**: a crash point (the N-th mutating operation, N from the seed) is
//!   armed before the open, so it can land in the open itself (a crash during
//!   recovery), in a group commit, a checkpoint, a vacuum or an index build; the store
//!   is dropped and the disk suffers a power loss (or, sometimes, an app crash);
//! * **recovery session**: only an open that checkpoints a WAL over the threshold, with
//!   the crash point inside it — then another reopen;
//! * **fault session**: the N-th read, write, sync or truncate fails once with `EIO` or
//!   `ENOSPC`; every error must be typed, each transaction all-or-nothing, and the store
//!   must keep working (or reopen cleanly); it ends with a clean close.
//! * **open-time session**: an open whose WAL is not empty, with a slow open barrier (a
//!   latch holds it) and either a crash point (power loss or app crash) or a fault at
//!   one of the open's operations. While the barrier is held the store is readable:
//!   the oracle reads the recovered state through it, and writes are queued. Then the
//!   barrier is released. Besides the oracle below: no write may run (let alone be
//!   acknowledged) before the barrier's sync returned; a failed barrier fails the
//!   queued writes with a typed error and leaves the store readable and its data
//!   intact (checked on the live store, then again after the next open).
//! * **upgrade session** (once per campaign): the file is still unstamped, as a keel
//!   from before the identity stamp (or another app's file) leaves it, with a WAL
//!   holding unstamped page-1 images left by a killed process. It is opened with the
//!   identity check on (adopting it), stamped in the schema step, a PASSIVE checkpoint
//!   copies every frame, and the process is killed before any write. Every later
//!   session opens with the identity check: a good file refused as foreign counts as
//!   `refused`.
//!
//! * **app + extension session**: two stores on the same file, as an iOS app and its
//!   extension (or two Android processes) hold it, with a crash point armed before
//!   either opens. They take turns running the workload; between turns the app
//!   suspends (every connection closed, its threads parked), the extension writes,
//!   checkpoints or vacuums, and the app resumes and writes on top (after the
//!   barrier sync of what the extension left in the WAL). The crash ends both; the
//!   oracle checks the one history their acknowledged commits form, in the order
//!   they were acknowledged. No open may refuse the file.
//!
//! The **oracle**, after every crash, at the next successful open:
//!
//! 1. `PRAGMA integrity_check` is `ok`;
//! 2. the database equals the state after some prefix `k` of the committed history
//!    (each transaction whose outcome is unknown — its commit failed at the crash or
//!    its sync failed — may be present or absent, never half);
//! 3. `k` covers every transaction the sync policy promises: under `Full`, `Barrier` and
//!    a `Custom` hook that syncs, every acknowledged transaction; under `Normal`, every
//!    transaction acknowledged before the last complete checkpoint (or the last open
//!    barrier); after an app crash or a clean close, under any policy, every
//!    acknowledged transaction.
//!
//! Determinism: the background checkpointer and vacuum are configured never to run on
//! their own, group commits are formed behind a gate closure, so every operation of a
//! session happens in one order and the crash point and torn-write choices reproduce
//! from the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::checkpointer::CheckpointMode;
#[cfg(feature = "encryption-api")]
use crate::encryption::{key_connection, DataKey, KeyError};
use crate::error::Error;
use crate::options::StoreOptions;
use crate::paths::wal_path;
use crate::policy::{SyncContext, SyncPolicies, SyncPolicy, SyncReason};
use crate::sim::{FaultErrno, OpClass, SimDisk, SimRng};
use crate::store::Store;
use crate::suspend::SuspendOptions;
use crate::writer::{WriteFuture, WriteTxn};

/// The sync policy a campaign runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// `SyncPolicy::Full` everywhere (the default).
    Full,
    /// `SyncPolicy::Barrier` everywhere.
    Barrier,
    /// `SyncPolicy::Normal` for commits, `Full` for checkpoints and the open barrier.
    Normal,
    /// A `Custom` hook that calls `ctx.full_sync()`, everywhere.
    Custom,
    /// `SyncPolicy::Off` everywhere: only app crashes are simulated (the docs promise
    /// nothing more).
    Off,
    /// **Deliberately broken**: a commit hook that returns `Ok` without syncing while
    /// the policy (`Custom`) promises durability. The oracle must report lost data.
    LyingCustom,
    /// **Deliberately broken**: commits sync honestly, but the checkpoint hook returns
    /// `Ok` without syncing, so SQLite resets the WAL over database pages that never
    /// reached the medium. The oracle must report lost or corrupt data.
    LyingCheckpoint,
}

impl Policy {
    /// The honest policies a full campaign rotates through.
    pub const HONEST: [Policy; 5] = [
        Policy::Full,
        Policy::Barrier,
        Policy::Normal,
        Policy::Custom,
        Policy::Off,
    ];

    /// Name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Full => "full",
            Policy::Barrier => "barrier",
            Policy::Normal => "normal",
            Policy::Custom => "custom",
            Policy::Off => "off",
            Policy::LyingCustom => "lying-custom",
            Policy::LyingCheckpoint => "lying-checkpoint",
        }
    }

    /// Parse [`Policy::name`].
    pub fn parse(s: &str) -> Option<Policy> {
        [
            Policy::Full,
            Policy::Barrier,
            Policy::Normal,
            Policy::Custom,
            Policy::Off,
            Policy::LyingCustom,
            Policy::LyingCheckpoint,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    fn policies(self) -> SyncPolicies {
        match self {
            Policy::Full => SyncPolicies::all(SyncPolicy::Full),
            Policy::Barrier => SyncPolicies::all(SyncPolicy::Barrier),
            Policy::Normal => SyncPolicies {
                commit: SyncPolicy::Normal,
                ..SyncPolicies::default()
            },
            Policy::Custom => SyncPolicies::all(SyncPolicy::custom(|ctx| ctx.full_sync())),
            Policy::Off => SyncPolicies::all(SyncPolicy::Off),
            Policy::LyingCustom => SyncPolicies {
                commit: SyncPolicy::custom(|_| Ok(())),
                ..SyncPolicies::default()
            },
            Policy::LyingCheckpoint => SyncPolicies {
                checkpoint: SyncPolicy::custom(|_| Ok(())),
                ..SyncPolicies::default()
            },
        }
    }

    /// The primitive this policy's open barrier runs (what a latch-held barrier hook
    /// calls once released).
    fn barrier_sync(self, ctx: &SyncContext<'_>) -> std::io::Result<()> {
        match self {
            Policy::Barrier => ctx.barrier_sync(),
            Policy::Off => Ok(()),
            _ => ctx.full_sync(),
        }
    }

    /// Does every acknowledged commit survive a power loss (as the docs promise)?
    fn commit_durable(self) -> bool {
        matches!(
            self,
            Policy::Full
                | Policy::Barrier
                | Policy::Custom
                | Policy::LyingCustom
                | Policy::LyingCheckpoint
        )
    }

    /// Are power losses part of this policy's promise?
    fn power_loss(self) -> bool {
        self != Policy::Off
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// Every random choice derives from it.
    pub seed: u64,
    /// The policy under test.
    pub policy: Policy,
    /// Crash points to simulate (crash and recovery sessions).
    pub crash_points: u64,
    /// Faults to inject (fault sessions continue until this many fired).
    pub faults: u64,
    /// Working directory (created; its database files are replaced).
    pub dir: PathBuf,
    /// Whether to run open-time sessions (a slow barrier on its own thread while
    /// reads run and writes queue). Their disk operations come from two threads,
    /// so which operation a crash point hits depends on scheduling: a campaign
    /// with them is checked by the same oracle but does not replay exactly from
    /// its seed; one without them does (`a_seed_reproduces_exactly`).
    pub open_time: bool,
}

/// What a campaign found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CampaignReport {
    /// Crash images checked (power losses + app crashes).
    pub crash_points: u64,
    /// Injected faults that fired.
    pub faults: u64,
    /// Acknowledged transactions the policy promised that were missing after a crash.
    pub lost: u64,
    /// Crash images that failed the oracle otherwise: integrity check, a state that is
    /// no prefix of the history, an open that failed.
    pub corrupt: u64,
    /// Other broken promises: an untyped error (a panic), a non-atomic transaction, a
    /// store that neither kept working nor reopened after a fault.
    pub violations: u64,
    /// Crash points that landed inside the open pipeline (a crash during recovery).
    pub recovery_crashes: u64,
    /// Power losses simulated.
    pub power_losses: u64,
    /// App crashes simulated.
    pub app_crashes: u64,
    /// Transactions acknowledged.
    pub acknowledged: u64,
    /// After a fault the same store kept working.
    pub stayed_usable: u64,
    /// After a fault the store had to be reopened (and the reopen passed the oracle).
    pub reopened: u64,
    /// Open-time sessions: an open with a WAL, the barrier held while reads ran and
    /// writes were queued.
    pub open_sessions: u64,
    /// Open-time sessions whose barrier failed (crash or fault at its sync).
    pub barrier_failures: u64,
    /// Upgrade sessions: an unstamped file with unstamped page-1 images in its WAL,
    /// stamped, checkpointed, killed before any write.
    pub upgrade_sessions: u64,
    /// Good files the identity check refused as foreign (`ForeignWal`/`ForeignFile`).
    pub refused: u64,
    /// App + extension sessions (two stores on one file, suspend and resume).
    pub app_extension_sessions: u64,
    /// One line per failure, each with its seed and a repro command.
    pub failures: Vec<String>,
    /// A hash of everything that happened (same seed ⇒ same trace).
    pub trace: u64,
}

impl CampaignReport {
    /// Add another report's counts.
    pub fn merge(&mut self, o: &CampaignReport) {
        self.crash_points += o.crash_points;
        self.faults += o.faults;
        self.lost += o.lost;
        self.corrupt += o.corrupt;
        self.violations += o.violations;
        self.recovery_crashes += o.recovery_crashes;
        self.power_losses += o.power_losses;
        self.app_crashes += o.app_crashes;
        self.acknowledged += o.acknowledged;
        self.stayed_usable += o.stayed_usable;
        self.reopened += o.reopened;
        self.open_sessions += o.open_sessions;
        self.barrier_failures += o.barrier_failures;
        self.upgrade_sessions += o.upgrade_sessions;
        self.refused += o.refused;
        self.app_extension_sessions += o.app_extension_sessions;
        self.failures.extend(o.failures.iter().cloned());
        self.trace = self.trace.rotate_left(7) ^ o.trace;
    }

    /// No lost data, no corruption, no violation, no good file refused.
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.corrupt == 0 && self.violations == 0 && self.refused == 0
    }
}

impl fmt::Display for CampaignReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "crash points: {}, faults: {}, lost: {}, corrupt: {}, refused: {}",
            self.crash_points, self.faults, self.lost, self.corrupt, self.refused
        )
    }
}

impl CampaignReport {
    /// The detail line printed under the summary.
    pub fn details(&self) -> String {
        format!(
            "violations: {}, crashes in recovery: {}, power losses: {}, app crashes: {}, acknowledged: {}, after a fault: {} kept working, {} reopened, open-time sessions: {} ({} failed barriers), upgrade sessions: {}, app + extension sessions: {}",
            self.violations,
            self.recovery_crashes,
            self.power_losses,
            self.app_crashes,
            self.acknowledged,
            self.stayed_usable,
            self.reopened,
            self.open_sessions,
            self.barrier_failures,
            self.upgrade_sessions,
            self.app_extension_sessions
        )
    }
}

// ---------------------------------------------------------------- the model

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    rows: BTreeMap<i64, Vec<u8>>,
    dict: BTreeMap<String, Vec<u8>>,
    indexes: BTreeSet<String>,
}

#[derive(Debug, Clone)]
enum Op {
    Put(i64, Vec<u8>),
    Del(i64),
    DelRange(i64, i64),
    Dict(String, Vec<u8>),
    CreateIndex(&'static str),
    DropIndex(&'static str),
}

const INDEXES: [(&str, &str); 2] = [("ix_v", "kv(v)"), ("ix_prefix", "kv(substr(v, 1, 4))")];

impl Model {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Put(k, v) => {
                self.rows.insert(*k, v.clone());
            }
            Op::Del(k) => {
                self.rows.remove(k);
            }
            Op::DelRange(a, b) => {
                self.rows.retain(|k, _| !(*a..=*b).contains(k));
            }
            Op::Dict(k, v) => {
                self.dict.insert(k.clone(), v.clone());
            }
            Op::CreateIndex(n) => {
                self.indexes.insert((*n).to_string());
            }
            Op::DropIndex(n) => {
                self.indexes.remove(*n);
            }
        }
    }

    fn read(c: &rusqlite::Connection) -> rusqlite::Result<Model> {
        let mut m = Model::default();
        let mut s = c.prepare("SELECT k, v FROM kv ORDER BY k")?;
        let rows = s.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        for r in rows {
            let (k, v) = r?;
            m.rows.insert(k, v);
        }
        let mut s = c.prepare("SELECT key, value FROM dict ORDER BY key")?;
        let rows = s.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })?;
        for r in rows {
            let (k, v) = r?;
            m.dict.insert(k, v);
        }
        let mut s = c.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND name LIKE 'ix_%' ORDER BY name",
        )?;
        let rows = s.query_map([], |r| r.get::<_, String>(0))?;
        for r in rows {
            m.indexes.insert(r?);
        }
        Ok(m)
    }
}

fn exec_op(t: &rusqlite::Connection, op: &Op) -> rusqlite::Result<()> {
    match op {
        Op::Put(k, v) => {
            t.prepare_cached(
                "INSERT INTO kv(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
            )?
            .execute(rusqlite::params![k, v])?;
        }
        Op::Del(k) => {
            t.prepare_cached("DELETE FROM kv WHERE k = ?1")?
                .execute([k])?;
        }
        Op::DelRange(a, b) => {
            t.prepare_cached("DELETE FROM kv WHERE k BETWEEN ?1 AND ?2")?
                .execute([a, b])?;
        }
        Op::Dict(k, v) => {
            t.prepare_cached("INSERT INTO dict(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?
                .execute(rusqlite::params![k, v])?;
        }
        Op::CreateIndex(n) => {
            let on = INDEXES
                .iter()
                .find(|(x, _)| x == n)
                .map_or("kv(v)", |(_, o)| o);
            t.execute_batch(&format!("CREATE INDEX IF NOT EXISTS {n} ON {on}"))?;
        }
        Op::DropIndex(n) => {
            t.execute_batch(&format!("DROP INDEX IF EXISTS {n}"))?;
        }
    }
    Ok(())
}

/// One transaction of the history.
#[derive(Debug, Clone)]
struct Slot {
    ops: Vec<Op>,
    /// Its outcome is unknown (commit failed at a crash or its sync failed): it may be
    /// present or absent (as a whole, with the rest of its group).
    maybe: bool,
    /// Group id (closures of one group commit succeed or fail together).
    group: u64,
}

// ---------------------------------------------------------------- the campaign

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    PowerLoss,
    AppCrash,
    Clean,
}

/// A queued closure: its future, "its body ran", its ops, "fails deliberately".
type Queued = (
    WriteFuture<Result<(), WErr>>,
    Arc<AtomicBool>,
    Vec<Op>,
    bool,
);

/// The error of a workload closure.
#[derive(Debug)]
enum WErr {
    Keel(Error),
    Deliberate,
}

impl From<Error> for WErr {
    fn from(e: Error) -> Self {
        WErr::Keel(e)
    }
}

impl From<rusqlite::Error> for WErr {
    fn from(e: rusqlite::Error) -> Self {
        WErr::Keel(Error::from(e))
    }
}

struct Campaign {
    cfg: CampaignConfig,
    rng: SimRng,
    path: PathBuf,
    disk: Arc<SimDisk>,
    /// State at the start of `history`.
    base: Model,
    history: Vec<Slot>,
    /// Leading slots of `history` the policy promises after a power loss.
    must_survive: usize,
    /// Leading slots acknowledged (present after an app crash or a clean close).
    acked_len: usize,
    next_group: u64,
    end: End,
    report: CampaignReport,
    session: u64,
    /// Mutating ops in a full regular session (adaptive crash-point range).
    est_ops: u64,
    /// Ops per class in a fault session's workload.
    est_class: [u64; 4],
    /// `KEEL_SIM_TRACE` set: print every event to stderr.
    verbose: bool,
    /// The upgrade session stamped the file: every open checks its identity.
    stamped: bool,
    /// Every session opens the file encrypted with this key (`run_encrypted`).
    #[cfg(feature = "encryption-api")]
    key: Option<DataKey>,
}

fn hash_mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(13)
}

/// Run one campaign.
///
/// ```
/// use keel_storage::campaign::{run, CampaignConfig, Policy};
/// let dir = tempfile::tempdir().unwrap();
/// let r = run(&CampaignConfig { seed: 1, policy: Policy::Full, crash_points: 3, faults: 3, dir: dir.path().into(), open_time: true });
/// assert!(r.ok(), "{r}\n{:?}", r.failures);
/// assert!(r.crash_points >= 3);
/// ```
pub fn run(cfg: &CampaignConfig) -> CampaignReport {
    run_campaign(Campaign::new(cfg.clone()), cfg)
}

/// Run one campaign on an encrypted file (feature `encryption`): the same
/// sessions and oracle, every store opened with a data key derived from the seed,
/// so the simulated disk sees only SQLCipher's encrypted pages. Pages are SQLCipher's
/// default 4 KiB (the plaintext campaign uses 1 KiB).
#[cfg(feature = "encryption-api")]
pub fn run_encrypted(cfg: &CampaignConfig) -> CampaignReport {
    let mut c = Campaign::new(cfg.clone());
    let mut key = [0u8; 32];
    let mut salt = [0u8; 16];
    let mut rng = SimRng::new(cfg.seed ^ 0x6b65_656c);
    key.iter_mut()
        .chain(salt.iter_mut())
        .for_each(|b| *b = rng.below(256) as u8);
    c.key = Some(DataKey::from_parts(&key, &salt));
    run_campaign(c, cfg)
}

fn run_campaign(mut c: Campaign, cfg: &CampaignConfig) -> CampaignReport {
    if let Err(e) = c.create_base() {
        c.fail_corrupt(format!("cannot create the base database: {e}"));
        return c.report;
    }
    let mut fault_sessions = 0u64;
    while c.report.crash_points < cfg.crash_points || c.report.faults < cfg.faults {
        c.session += 1;
        let want_crash = c.report.crash_points < cfg.crash_points;
        let want_fault = c.report.faults < cfg.faults && fault_sessions < cfg.faults * 4 + 8;
        let fault = want_fault && (!want_crash || c.rng.chance(1, 2));
        if fault {
            fault_sessions += 1;
            if c.rng.chance(1, 5) && cfg.open_time {
                c.open_time_session();
            } else {
                c.fault_session();
            }
        } else if want_crash {
            if !c.stamped && c.session > 1 && c.rng.chance(1, 3) {
                c.upgrade_session();
            } else if c.rng.chance(1, 4) && cfg.open_time {
                c.open_time_session();
            } else if c.rng.chance(1, 5) {
                c.recovery_session();
            } else if c.rng.chance(1, 5) {
                c.app_extension_session();
            } else {
                c.crash_session();
            }
        } else {
            break;
        }
        if c.report.failures.len() > 20 {
            break;
        }
    }
    // A last clean open: the final state passes the oracle too.
    c.final_check();
    c.report
}

impl Campaign {
    fn new(cfg: CampaignConfig) -> Campaign {
        let path = cfg.dir.join("crash.db");
        Campaign {
            rng: SimRng::new(cfg.seed),
            path,
            disk: Arc::new(SimDisk::new()),
            base: Model::default(),
            history: Vec::new(),
            must_survive: 0,
            acked_len: 0,
            next_group: 0,
            end: End::Clean,
            report: CampaignReport::default(),
            session: 0,
            est_ops: 40,
            est_class: [40, 30, 6, 1],
            verbose: std::env::var_os("KEEL_SIM_TRACE").is_some(),
            stamped: false,
            #[cfg(feature = "encryption-api")]
            key: None,
            cfg,
        }
    }

    fn repro(&self) -> String {
        format!(
            "cargo xtask stress --seed {} --policy {}{}",
            self.cfg.seed,
            self.cfg.policy.name(),
            if self.encrypted() { " --encrypted" } else { "" }
        )
    }

    /// Whether the sessions open the file encrypted (never without the
    /// encryption API, which the key needs).
    fn encrypted(&self) -> bool {
        #[cfg(feature = "encryption-api")]
        return self.key.is_some();
        #[cfg(not(feature = "encryption-api"))]
        false
    }

    fn failure(&mut self, what: String) {
        let line = format!(
            "seed {} policy {} session {}: {what} (repro: {})",
            self.cfg.seed,
            self.cfg.policy.name(),
            self.session,
            self.repro()
        );
        self.report.failures.push(line);
    }

    fn fail_corrupt(&mut self, what: String) {
        self.report.corrupt += 1;
        self.failure(format!("CORRUPT: {what}"));
    }

    fn violation(&mut self, what: String) {
        self.report.violations += 1;
        self.failure(format!("VIOLATION: {what}"));
    }

    /// Record a commit the store acknowledged: it joins the history, which is
    /// acknowledged up to it, and must survive a power loss too if the policy makes
    /// commits durable.
    fn acknowledged(&mut self, ops: Vec<Op>, group: u64) {
        self.history.push(Slot {
            ops,
            maybe: false,
            group,
        });
        self.report.acknowledged += 1;
        self.acked_len = self.history.len();
        if self.cfg.policy.commit_durable() {
            self.must_survive = self.history.len();
        }
    }

    fn log(&self, what: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!(
                "[seed {} session {}] {}",
                self.cfg.seed,
                self.session,
                what()
            );
        }
    }

    fn trace(&mut self, v: u64) {
        self.report.trace = hash_mix(self.report.trace, v);
    }

    fn create_base(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.cfg.dir).map_err(|e| e.to_string())?;
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        // Small pages so a tiny database still has many pages, overflow chains and
        // free pages for the incremental vacuum.
        let c = rusqlite::Connection::open(&self.path).map_err(|e| e.to_string())?;
        #[cfg(feature = "encryption-api")]
        if let Some(key) = &self.key {
            key_connection(&c, key, false).map_err(|e| e.to_string())?;
        }
        #[cfg(feature = "encryption-api")]
        let small_pages = self.key.is_none();
        #[cfg(not(feature = "encryption-api"))]
        let small_pages = true;
        if small_pages {
            c.execute_batch("PRAGMA page_size=1024;")
                .map_err(|e| e.to_string())?;
        }
        c.execute_batch(
            "PRAGMA auto_vacuum=INCREMENTAL; PRAGMA journal_mode=WAL;
             CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB NOT NULL);
             CREATE TABLE dict(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;",
        )
        .map_err(|e| e.to_string())?;
        c.close().map_err(|(_, e)| e.to_string())?;
        Ok(())
    }

    fn options(&self) -> StoreOptions {
        let mut o = StoreOptions::default()
            .sync(self.cfg.policy.policies())
            .readers(1)
            .idle_checkpoint_after(Duration::from_secs(3600))
            .checkpoint_threshold(1 << 40)
            .sim_disk(Arc::clone(&self.disk));
        // No background vacuum: the workload runs it explicitly.
        o.vacuum_min_free_pages = 0;
        o.truncate_timeout = Duration::from_millis(200);
        #[cfg(feature = "encryption-api")]
        if let Some(key) = &self.key {
            let key = key.clone();
            o = o.encryption(move |_: &Path, _| Ok::<_, KeyError>(key.clone()));
        }
        if self.stamped {
            // As the object store opens it: identity checked, a schema step (which
            // changes nothing here) in every open. The app that adopted the file
            // keeps asking for adoption: a power loss that took the unsynced stamp
            // back (`Normal`) leaves it unstamped again, as before the upgrade.
            o = o
                .keel_identity(true)
                .adopt_foreign(true)
                .schema_hook(|_| Ok(()));
        }
        o
    }

    /// An open that failed with no crash or fault to explain it: a good file
    /// refused by the identity check, or something worse.
    fn unexplained_open_failure(&mut self, what: &str, e: &Error) {
        if matches!(e, Error::ForeignWal { .. } | Error::ForeignFile { .. }) {
            self.report.refused += 1;
            self.failure(format!("REFUSED: {what}: {e}"));
        } else {
            self.fail_corrupt(format!("{what}: {e}"));
        }
    }

    // ------------------------------------------------------------ oracle

    /// Check the store just opened after a crash (or clean close) and rebase.
    fn verify_after_open(&mut self, store: &Store, barrier_ran: bool) {
        let required = match self.end {
            End::PowerLoss => self.must_survive,
            End::AppCrash | End::Clean => self.acked_len,
        };
        self.log(|| {
            format!(
                "verify after {:?}: required {required} of {} (acked {}), open report: wal {} bytes at open, disk: {}",
                self.end,
                self.history.len(),
                self.acked_len,
                store.open_report().wal_bytes_at_open,
                self.disk.describe()
            )
        });
        let Some(found) = self.check_state(store, Some(required)) else {
            return;
        };
        let (k, model) = found;
        self.trace(k as u64);
        // Rebase: the recovered state is the new base. It is durable: after a power
        // loss by construction; after an app crash because the open barrier synced the
        // WAL (or, with no WAL, the last checkpoint synced the database file) — except
        // under `Off`, whose campaigns never lose power.
        let _ = barrier_ran;
        self.fold(model);
    }

    /// Integrity check plus "some prefix ≥ required" (None for `required`: the live
    /// store after a fault: the whole history, with unknown outcomes either way).
    /// Returns the matched prefix length and model.
    fn check_state(&mut self, store: &Store, required: Option<usize>) -> Option<(usize, Model)> {
        let res = store.read(|c| {
            let mut s = c.prepare("PRAGMA integrity_check")?;
            let lines: Vec<String> = s
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()?;
            let m = Model::read(c)?;
            Ok::<_, Error>((lines, m))
        });
        let (lines, got) = match res {
            Ok(v) => v,
            Err(e) => {
                self.fail_corrupt(format!("reading the recovered database failed: {e}"));
                return None;
            }
        };
        if lines != ["ok"] {
            self.fail_corrupt(format!("integrity_check: {}", lines.join("; ")));
            return None;
        }
        let lower = required.unwrap_or(self.acked_len);
        let only_full = required.is_none();
        // Walk the history; variants = subsets of unknown-outcome groups so far.
        let mut variants: Vec<(Model, Vec<u64>)> = vec![(self.base.clone(), Vec::new())];
        let mut best: Option<(usize, Model)> = None;
        let n = self.history.len();
        for k in 0..=n {
            if k >= lower && (!only_full || self.tail_maybe(k)) {
                if let Some((m, _)) = variants.iter().find(|(m, _)| *m == got) {
                    best = Some((k, m.clone()));
                    break;
                }
            }
            if k == n {
                break;
            }
            let slot = &self.history[k];
            if slot.maybe {
                let mut more = Vec::new();
                for (m, skipped) in &variants {
                    let mut with = m.clone();
                    for op in &slot.ops {
                        with.apply(op);
                    }
                    if !skipped.contains(&slot.group) {
                        more.push((with, skipped.clone()));
                    }
                    // Skipping means skipping the whole group.
                    let first_of_group = k == 0 || self.history[k - 1].group != slot.group;
                    if first_of_group {
                        let mut s = skipped.clone();
                        s.push(slot.group);
                        more.push((m.clone(), s));
                    } else if skipped.contains(&slot.group) {
                        more.push((m.clone(), skipped.clone()));
                    }
                }
                more.truncate(64);
                variants = more;
            } else {
                for (m, _) in variants.iter_mut() {
                    for op in &slot.ops {
                        m.apply(op);
                    }
                }
            }
        }
        if best.is_none() {
            // Lost promised data, or no prefix at all?
            let mut variants: Vec<Model> = vec![self.base.clone()];
            for k in 0..lower.min(n) {
                if variants.contains(&got) {
                    let lost = (lower - k) as u64;
                    self.report.lost += lost;
                    self.failure(format!(
                        "LOST: recovered the state after {k} of {n} transactions; {lower} were promised ({lost} lost, {:?} after a {:?})",
                        self.cfg.policy, self.end
                    ));
                    return Some((k, got));
                }
                let slot = &self.history[k];
                let mut next = Vec::new();
                for m in &variants {
                    let mut with = m.clone();
                    for op in &slot.ops {
                        with.apply(op);
                    }
                    next.push(with);
                    if slot.maybe {
                        next.push(m.clone());
                    }
                }
                next.truncate(64);
                variants = next;
            }
            self.fail_corrupt(format!(
                "the recovered state ({} rows, {} dict entries, indexes {:?}) is no prefix of the {n} committed transactions (at least {lower} required)",
                got.rows.len(),
                got.dict.len(),
                got.indexes
            ));
            return Some((n, got));
        }
        best
    }

    /// For the live check: every slot from `k` on is an unknown-outcome slot.
    fn tail_maybe(&self, k: usize) -> bool {
        self.history[k..].iter().all(|s| s.maybe)
    }

    /// Make `model` (a recovered, durable state) the new base.
    fn fold(&mut self, model: Model) {
        self.base = model;
        self.history.clear();
        self.acked_len = 0;
        self.must_survive = 0;
    }

    // ------------------------------------------------------------ workload

    fn value(&mut self) -> Vec<u8> {
        let len = match self.rng.below(10) {
            0 => self.rng.range(900, 2500), // overflow pages
            1..=3 => self.rng.range(100, 400),
            _ => self.rng.range(4, 60),
        } as usize;
        let b = self.rng.next_u64() as u8;
        let mut v: Vec<u8> = (0..len).map(|i| b.wrapping_add(i as u8)).collect();
        v[0] = self.rng.next_u64() as u8;
        v
    }

    fn random_ops(&mut self) -> Vec<Op> {
        let n = self.rng.range(1, 4);
        let mut ops = Vec::new();
        for _ in 0..n {
            let op = match self.rng.below(20) {
                0..=8 => Op::Put(self.rng.range(0, 150) as i64, self.value()),
                9..=11 => Op::Del(self.rng.range(0, 150) as i64),
                12 => {
                    let a = self.rng.range(0, 150) as i64;
                    Op::DelRange(a, a + self.rng.range(5, 40) as i64)
                }
                13..=16 => Op::Dict(format!("key{}", self.rng.below(12)), self.value()),
                17 => Op::CreateIndex(INDEXES[self.rng.below(2) as usize].0),
                18 => Op::DropIndex(INDEXES[self.rng.below(2) as usize].0),
                _ => {
                    // A bulk insert: many pages in one transaction.
                    let start = self.rng.range(150, 400) as i64;
                    for i in 0..self.rng.range(5, 20) as i64 {
                        ops.push(Op::Put(start + i, self.value()));
                    }
                    continue;
                }
            };
            ops.push(op);
        }
        ops
    }

    /// One group commit of `n` closures (one may fail deliberately). Returns false if
    /// the store stopped working (an error).
    fn group(&mut self, store: &Store, n: usize) -> bool {
        let mut closures = Vec::new();
        for _ in 0..n {
            let ops = self.random_ops();
            let deliberate = n > 1 && self.rng.chance(1, 8);
            closures.push((ops, deliberate));
        }
        let group = self.next_group;
        self.next_group += 1;
        // The gate holds the writer so the closures queue up and run as one group.
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let gate = (n > 1).then(|| {
            store.write(move |_t: &mut WriteTxn<'_>| {
                let _ = started_tx.send(());
                let _ = release_rx.recv();
                Ok::<_, Error>(())
            })
        });
        if gate.is_some() {
            let _ = started_rx.recv();
        }
        let mut futs: Vec<Queued> = Vec::new();
        for (ops, deliberate) in closures {
            let body_ok = Arc::new(AtomicBool::new(false));
            let b2 = Arc::clone(&body_ok);
            let ops2 = ops.clone();
            let fut = store.write(move |t: &mut WriteTxn<'_>| {
                for op in &ops2 {
                    exec_op(t, op)?;
                }
                if deliberate {
                    return Err(WErr::Deliberate);
                }
                b2.store(true, Ordering::SeqCst);
                Ok(())
            });
            futs.push((fut, body_ok, ops, deliberate));
        }
        drop(release_tx);
        let mut alive = true;
        if let Some(g) = gate {
            if let Err(e) = g.wait() {
                self.check_typed(&e);
                alive = false;
            }
        }
        for (fut, body_ok, ops, deliberate) in futs {
            match fut.wait() {
                Ok(()) => {
                    self.acknowledged(ops, group);
                    self.log(|| {
                        format!(
                            "group {group}: acked (history {}), clock {}",
                            self.history.len(),
                            self.disk.clock()
                        )
                    });
                    self.trace(1);
                }
                Err(WErr::Deliberate) => {
                    if !deliberate {
                        self.violation("a closure failed with an error it did not return".into());
                    }
                    self.trace(2);
                }
                Err(WErr::Keel(e)) => {
                    self.log(|| format!("group {group}: closure failed: {e}"));
                    self.check_typed(&e);
                    alive = false;
                    if body_ok.load(Ordering::SeqCst) {
                        // The closure ran; the group's COMMIT failed. Unknown outcome
                        // if the sync failed or the machine crashed mid-commit.
                        let unknown = matches!(e, Error::SyncFailed { .. }) || self.disk.crashed();
                        if unknown {
                            self.history.push(Slot {
                                ops,
                                maybe: true,
                                group,
                            });
                        }
                    }
                    self.trace(3);
                }
            }
        }
        alive
    }

    fn check_typed(&mut self, e: &Error) {
        if matches!(e, Error::Panicked { .. }) {
            self.violation(format!("a panic instead of a typed error: {e}"));
        }
    }

    /// One workload step; false if an operation failed.
    fn step(&mut self, store: &Store) -> bool {
        match self.rng.below(16) {
            0..=7 => {
                let n = self.rng.range(1, 6) as usize;
                self.group(store, n)
            }
            8..=9 => self.group(store, 1),
            10 | 11 => {
                let mode = if self.rng.chance(1, 2) {
                    CheckpointMode::Passive
                } else {
                    CheckpointMode::Truncate
                };
                self.checkpoint(store, mode)
            }
            12 | 13 => {
                // Free pages then reclaim some.
                let a = self.rng.range(0, 400) as i64;
                let op = Op::DelRange(a, a + self.rng.range(20, 120) as i64);
                let group = self.next_group;
                self.next_group += 1;
                let ok = self.single(store, vec![op], group);
                ok && self.vacuum(store)
            }
            14 => self.vacuum(store),
            _ => {
                // An index build in its own transaction.
                let (n, _) = INDEXES[self.rng.below(2) as usize];
                let group = self.next_group;
                self.next_group += 1;
                self.single(store, vec![Op::DropIndex(n), Op::CreateIndex(n)], group)
            }
        }
    }

    fn single(&mut self, store: &Store, ops: Vec<Op>, group: u64) -> bool {
        let body_ok = Arc::new(AtomicBool::new(false));
        let b2 = Arc::clone(&body_ok);
        let ops2 = ops.clone();
        let r = store
            .write(move |t: &mut WriteTxn<'_>| {
                for op in &ops2 {
                    exec_op(t, op)?;
                }
                b2.store(true, Ordering::SeqCst);
                Ok::<_, WErr>(())
            })
            .wait();
        match r {
            Ok(()) => {
                self.log(|| format!("single {group}: acked, clock {}", self.disk.clock()));
                self.acknowledged(ops, group);
                true
            }
            Err(WErr::Keel(e)) => {
                self.check_typed(&e);
                if body_ok.load(Ordering::SeqCst)
                    && (matches!(e, Error::SyncFailed { .. }) || self.disk.crashed())
                {
                    self.history.push(Slot {
                        ops,
                        maybe: true,
                        group,
                    });
                }
                false
            }
            Err(WErr::Deliberate) => false,
        }
    }

    fn checkpoint(&mut self, store: &Store, mode: CheckpointMode) -> bool {
        match store.checkpoint(mode) {
            Ok(o) => {
                let complete = !o.busy && o.wal_frames == o.checkpointed_frames;
                self.log(|| format!("checkpoint {mode:?}: {o:?}, clock {}", self.disk.clock()));
                if complete && self.cfg.policy == Policy::Normal {
                    // The checkpoint synced the WAL and the database file.
                    self.must_survive = self.history.len();
                }
                self.trace(4 + u64::from(complete));
                true
            }
            Err(e) => {
                self.log(|| format!("checkpoint {mode:?} failed: {e}"));
                self.check_typed(&e);
                false
            }
        }
    }

    fn vacuum(&mut self, store: &Store) -> bool {
        let pages = self.rng.range(1, 64) as u32;
        match store.incremental_vacuum(pages) {
            Ok(n) => {
                self.log(|| format!("vacuum: {n} pages, clock {}", self.disk.clock()));
                self.trace(100 + n);
                true
            }
            Err(e) => {
                self.check_typed(&e);
                false
            }
        }
    }

    // ------------------------------------------------------------ sessions

    /// Open; on success verify. `Err(())` if the open failed.
    fn open_and_verify(&mut self, opts: StoreOptions) -> Result<Store, Error> {
        let store = Store::open(&self.path, opts)?;
        let barrier_ran = store.open_report().wal_bytes_at_open > 0;
        self.verify_after_open(&store, barrier_ran);
        Ok(store)
    }

    fn crash_end(&mut self, store: Option<Store>) {
        self.log(|| {
            format!(
                "crash (clock {}, crashed {}), disk before: {}",
                self.disk.clock(),
                self.disk.crashed(),
                self.disk.describe()
            )
        });
        self.disk.crash_now();
        // The process is gone: wait for keel's threads to stop (a plain drop hands
        // the shutdown to a background thread, which would race with the power loss).
        if let Some(s) = store {
            let _ = s.close();
        }
        self.report.crash_points += 1;
        if self.cfg.policy.power_loss() && !self.rng.chance(1, 6) {
            let mut r = self.rng.fork();
            let rep = self.disk.power_loss(&mut r);
            self.log(|| format!("power loss: {rep:?}; disk after: {}", self.disk.describe()));
            self.trace(rep.applied * 7 + rep.dropped * 11 + rep.torn * 13 + rep.vanished);
            self.report.power_losses += 1;
            self.end = End::PowerLoss;
            // Until an open has checked what survived, only the promised prefix is
            // known to exist: a later app crash cannot bring the rest back.
            self.acked_len = self.acked_len.min(self.must_survive);
        } else {
            self.disk.app_crash();
            self.report.app_crashes += 1;
            self.end = End::AppCrash;
        }
    }

    fn crash_session(&mut self) {
        let hi = (self.est_ops + self.est_ops / 4).max(4);
        let at = self.rng.range(1, hi);
        self.log(|| format!("crash session, crash at op {at}"));
        self.trace(at);
        self.disk.crash_at(at);
        let store = match self.open_and_verify(self.options()) {
            Ok(s) => s,
            Err(e) => {
                self.opened_failed(e);
                return;
            }
        };
        let steps = self.rng.range(3, 9);
        let mut completed = true;
        for _ in 0..steps {
            if !self.step(&store) {
                completed = false;
                break;
            }
        }
        if completed && !self.disk.crashed() {
            let clock = self.disk.clock();
            self.est_ops = (self.est_ops * 3 + clock) / 4;
        } else if !self.disk.crashed() {
            self.violation("an operation failed before the crash point".into());
        }
        self.crash_end(Some(store));
    }

    /// Two stores on the file (an app and its extension), a crash point armed
    /// before either opens, the app suspending while the extension works.
    fn app_extension_session(&mut self) {
        let hi = (self.est_ops * 2 + self.est_ops / 2).max(4);
        let at = self.rng.range(1, hi);
        self.log(|| format!("app + extension session, crash at op {at}"));
        self.trace(3000 + at);
        self.report.app_extension_sessions += 1;
        self.disk.crash_at(at);
        let app = match self.open_and_verify(self.options()) {
            Ok(s) => s,
            Err(e) => {
                self.opened_failed(e);
                return;
            }
        };
        // The extension's open syncs what the app left in the WAL, on its own
        // thread: wait for it, so every disk operation keeps one order.
        let ext = Store::open(&self.path, self.options()).and_then(|s| {
            s.durable().wait()?;
            Ok(s)
        });
        let ext = match ext {
            Ok(s) => s,
            Err(e) => {
                self.check_typed(&e);
                if !self.disk.crashed() {
                    self.fail_corrupt(format!("the extension's open failed: {e}"));
                }
                self.crash_end(Some(app));
                return;
            }
        };
        let turns = self.rng.range(2, 6);
        let mut ok = true;
        for _ in 0..turns {
            ok = if self.rng.chance(1, 2) {
                // The app goes to the background: it suspends, the extension works,
                // the app resumes and writes on top.
                let opts = SuspendOptions::default().checkpoint_first(self.rng.chance(1, 3));
                match app.suspend(opts) {
                    Ok(_) => {
                        self.log(|| format!("app suspended, clock {}", self.disk.clock()));
                        self.trace(7);
                        let mut worked = true;
                        for _ in 0..self.rng.range(1, 4) {
                            worked = worked && self.step(&ext);
                        }
                        match app.resume() {
                            Ok(r) => {
                                self.log(|| format!("app resumed: {r:?}"));
                                self.trace(8 + u64::from(r.external_changes));
                                let n = 1 + self.rng.below(3) as usize;
                                worked && self.group(&app, n)
                            }
                            Err(e) => {
                                self.check_typed(&e);
                                false
                            }
                        }
                    }
                    Err(e) => {
                        self.check_typed(&e);
                        false
                    }
                }
            } else if self.rng.chance(1, 2) {
                self.step(&app)
            } else {
                self.step(&ext)
            };
            if !ok {
                break;
            }
        }
        if !ok && !self.disk.crashed() {
            self.violation("an operation failed before the crash point".into());
        }
        // Both processes die together.
        self.disk.crash_now();
        let _ = ext.close();
        self.crash_end(Some(app));
    }

    fn opened_failed(&mut self, e: Error) {
        self.check_typed(&e);
        if self.disk.crashed() {
            // A crash during recovery: power loss, then another reopen.
            self.report.recovery_crashes += 1;
            self.trace(9);
            self.crash_end(None);
        } else {
            self.unexplained_open_failure("open failed without a crash or fault", &e);
            // Keep going on a fresh database so the campaign still ends.
            self.disk = Arc::new(SimDisk::new());
            self.stamped = false;
            let _ = self.create_base();
            self.base = Model::default();
            self.history.clear();
            self.must_survive = 0;
            self.acked_len = 0;
            self.end = End::Clean;
        }
    }

    /// Open with a checkpoint in the pipeline (WAL over a small threshold) and the
    /// crash point inside it.
    fn recovery_session(&mut self) {
        let at = self.rng.range(1, 8);
        self.log(|| format!("recovery session, crash at op {at}"));
        self.trace(1000 + at);
        self.disk.crash_at(at);
        let mut o = self.options();
        o.checkpoint_on_open = true;
        o.checkpoint_threshold_bytes = 2048;
        match self.open_and_verify(o) {
            Ok(s) => self.crash_end(Some(s)),
            Err(e) => self.opened_failed(e),
        }
    }

    /// The file is unstamped (keel before the identity stamp, or
    /// an adopted file) and a killed process left unstamped page-1 images in its WAL.
    /// This open stamps it in its schema step, a PASSIVE checkpoint copies every
    /// frame, and the process is killed before any write: the stamped file now sits
    /// beside a WAL that still holds the unstamped images. From here on every open
    /// checks the identity (see `options`), and must not refuse the file.
    fn upgrade_session(&mut self) {
        self.log(|| "upgrade session".into());
        self.trace(2000);
        let store = match self.open_and_verify(self.options()) {
            Ok(s) => s,
            Err(e) => {
                self.opened_failed(e);
                return;
            }
        };
        // Values over a page: the file grows, so page 1 (its page count) is
        // rewritten, unstamped, in the WAL.
        let group = self.next_group;
        self.next_group += 1;
        let ops: Vec<Op> = (0..3)
            .map(|i| {
                let k = self.rng.range(0, 150) as i64;
                (k, vec![i as u8 ^ self.rng.next_u64() as u8; 1500])
            })
            .map(|(k, v)| Op::Put(k, v))
            .collect();
        self.single(&store, ops, group);
        self.disk.crash_now();
        let _ = store.close();
        self.disk.app_crash();
        self.report.app_crashes += 1;
        self.report.crash_points += 1;
        self.end = End::AppCrash;

        // The new build: identity on, the unstamped file adopted and stamped.
        self.stamped = true;
        self.report.upgrade_sessions += 1;
        let store = match self.open_and_verify(self.options()) {
            Ok(s) => s,
            Err(e) => {
                self.opened_failed(e);
                return;
            }
        };
        match store.checkpoint(CheckpointMode::Passive) {
            Ok(o) if !o.busy && o.checkpointed_frames == o.wal_frames => {}
            Ok(o) => {
                self.log(|| format!("upgrade: the checkpoint did not copy every frame: {o:?}"))
            }
            Err(e) => self.violation(format!("upgrade: checkpoint failed without a fault: {e}")),
        }
        // Killed before any write.
        self.disk.crash_now();
        let _ = store.close();
        self.disk.app_crash();
        self.report.app_crashes += 1;
        self.report.crash_points += 1;
        self.end = End::AppCrash;
    }

    /// Leave commits in the WAL (an app crash after a few groups), so the next open
    /// has a barrier to run.
    fn leave_wal(&mut self) -> bool {
        let wal = std::fs::metadata(wal_path(&self.path)).map_or(0, |m| m.len());
        if wal > 0 {
            return true;
        }
        let store = match self.open_and_verify(self.options()) {
            Ok(s) => s,
            Err(e) => {
                self.opened_failed(e);
                return false;
            }
        };
        for _ in 0..self.rng.range(1, 4) {
            let n = 1 + self.rng.below(3) as usize;
            if !self.group(&store, n) {
                break;
            }
        }
        // And one change for sure (a group of deletes of absent keys writes nothing).
        let group = self.next_group;
        self.next_group += 1;
        let (k, v) = (self.rng.range(0, 150) as i64, self.value());
        self.single(&store, vec![Op::Put(k, v)], group);
        self.disk.crash_now();
        // The process dies: wait for keel's threads to stop (a plain drop would
        // finish the shutdown in the background, racing with what follows).
        let _ = store.close();
        self.disk.app_crash();
        self.report.app_crashes += 1;
        self.report.crash_points += 1;
        self.end = End::AppCrash;
        true
    }

    /// An open with a WAL and a slow barrier (held by a latch), a crash point or a
    /// fault at one of its operations, reads during the barrier and writes queued.
    fn open_time_session(&mut self) {
        if !self.leave_wal() {
            return;
        }
        self.report.open_sessions += 1;
        // What goes wrong: a crash at one of the first mutating ops (the barrier's
        // sync is the first), or a fault on the barrier sync / a later op.
        let crash = self.rng.chance(1, 2);
        let at = self.rng.range(1, 6);
        // (No read faults here: the oracle reads through this store during the
        // barrier; fault sessions cover reads.)
        let (class, errno) = if self.rng.chance(2, 3) {
            (OpClass::Sync, FaultErrno::Eio)
        } else {
            (
                OpClass::Write,
                if self.rng.chance(1, 2) {
                    FaultErrno::Eio
                } else {
                    FaultErrno::Enospc
                },
            )
        };
        let nth = if class == OpClass::Sync {
            self.rng.range(1, 3)
        } else {
            self.rng.range(1, 12)
        };
        self.log(|| {
            if crash {
                format!("open-time session, crash at op {at}")
            } else {
                format!("open-time session, fault {class:?} #{nth} {errno:?}")
            }
        });
        self.trace(
            3000 + if crash {
                at
            } else {
                100 + nth * 4 + class as u64
            },
        );
        let fired_before = self.disk.fired().len();
        if crash {
            self.disk.crash_at(at);
        } else {
            self.disk.inject_fault(class, nth, errno);
        }
        // The barrier: held until released, then the policy's own primitive.
        let latch = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let synced = Arc::new(AtomicBool::new(false));
        let mut opts = self.options();
        {
            let (l, s2, policy) = (Arc::clone(&latch), Arc::clone(&synced), self.cfg.policy);
            opts.sync.open_barrier = SyncPolicy::custom(move |ctx| {
                let mut open = l.0.lock().unwrap_or_else(|p| p.into_inner());
                while !*open {
                    open = l.1.wait(open).unwrap_or_else(|p| p.into_inner());
                }
                drop(open);
                let r = policy.barrier_sync(ctx);
                if r.is_ok() {
                    s2.store(true, Ordering::SeqCst);
                }
                r
            });
        }
        let release = |latch: &(std::sync::Mutex<bool>, std::sync::Condvar)| {
            *latch.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
            latch.1.notify_all();
        };
        let store = match Store::open_async(&self.path, opts).wait() {
            Ok(s) => s,
            Err(e) => {
                release(&latch);
                self.check_typed(&e);
                if !crash {
                    self.disk.clear_fault();
                }
                if self.disk.crashed() {
                    self.report.recovery_crashes += 1;
                    self.crash_end(None);
                } else if self.disk.fired().len() > fired_before {
                    self.report.faults += 1;
                    self.end = End::Clean;
                } else {
                    self.unexplained_open_failure("open failed without a crash or fault", &e);
                }
                return;
            }
        };
        self.log(|| {
            format!(
                "open-time session: readable, wal {} bytes at open, durable {}",
                store.open_report().wal_bytes_at_open,
                store.is_durable()
            )
        });
        // Readable, the barrier held: the oracle reads the recovered state now. It
        // becomes the new base only once the barrier synced it (a failed barrier
        // leaves it as durable as the previous run left it).
        let required = match self.end {
            End::PowerLoss => self.must_survive,
            End::AppCrash | End::Clean => self.acked_len,
        };
        let recovered = self.check_state(&store, Some(required));
        // Writes submitted during the barrier: queued, run only after it.
        let group = self.next_group;
        self.next_group += 1;
        let mut futs = Vec::new();
        for _ in 0..self.rng.range(1, 4) {
            let ops = self.random_ops();
            let body_ok = Arc::new(AtomicBool::new(false));
            let early = Arc::new(AtomicBool::new(false));
            let (b2, e2, s2, ops2) = (
                Arc::clone(&body_ok),
                Arc::clone(&early),
                Arc::clone(&synced),
                ops.clone(),
            );
            let fut = store.write(move |t: &mut WriteTxn<'_>| {
                if !s2.load(Ordering::SeqCst) {
                    e2.store(true, Ordering::SeqCst);
                }
                for op in &ops2 {
                    exec_op(t, op)?;
                }
                b2.store(true, Ordering::SeqCst);
                Ok::<_, WErr>(())
            });
            futs.push((fut, body_ok, early, ops));
        }
        release(&latch);
        let durable = store.durable().wait();
        let mut barrier_failed = false;
        match &durable {
            Ok(()) => {
                if let Some((k, model)) = recovered.clone() {
                    self.trace(k as u64);
                    self.fold(model);
                }
            }
            Err(e) => {
                self.check_typed(e);
                barrier_failed = matches!(
                    e,
                    Error::SyncFailed {
                        reason: SyncReason::OpenBarrier,
                        ..
                    }
                );
                if !barrier_failed {
                    self.violation(format!("durable failed with an unexpected error: {e}"));
                }
            }
        }
        for (fut, body_ok, early, ops) in futs {
            let r = fut.wait();
            if early.load(Ordering::SeqCst) {
                self.violation("a write ran before the open barrier's sync returned".into());
            }
            match r {
                Ok(()) if barrier_failed => {
                    self.violation(
                        "a write was acknowledged although the open barrier failed".into(),
                    );
                }
                Ok(()) => {
                    self.acknowledged(ops, group);
                    self.trace(1);
                }
                Err(WErr::Keel(e)) => {
                    self.check_typed(&e);
                    if barrier_failed {
                        if !matches!(e, Error::SyncFailed { .. }) || body_ok.load(Ordering::SeqCst)
                        {
                            self.violation(format!(
                                "after a failed open barrier a queued write ran or failed untyped: {e}"
                            ));
                        }
                    } else if body_ok.load(Ordering::SeqCst)
                        && (matches!(e, Error::SyncFailed { .. }) || self.disk.crashed())
                    {
                        self.history.push(Slot {
                            ops,
                            maybe: true,
                            group,
                        });
                    }
                    self.trace(3);
                }
                Err(WErr::Deliberate) => {}
            }
        }
        if barrier_failed {
            self.report.barrier_failures += 1;
            // Readable and intact: the live store shows exactly the recovered state.
            if !crash {
                self.disk.clear_fault();
            }
            let live = store.read(|c| {
                let ok: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
                Ok::<_, Error>((ok, Model::read(c)?))
            });
            match (live, &recovered) {
                (Ok((ok, m)), Some((_, before))) => {
                    if ok != "ok" || m != *before {
                        self.fail_corrupt(format!(
                            "after a failed open barrier the store changed or is damaged (integrity {ok})"
                        ));
                    }
                }
                (Err(e), _) => {
                    self.violation(format!("not readable after a failed open barrier: {e}"))
                }
                (Ok(_), None) => {}
            }
            let w = store
                .write(|_t: &mut WriteTxn<'_>| Ok::<(), Error>(()))
                .wait();
            if !matches!(w, Err(Error::SyncFailed { .. })) {
                self.violation(format!(
                    "a write after a failed open barrier did not fail typed: {w:?}"
                ));
            }
        }
        if crash {
            self.crash_end(Some(store));
        } else {
            self.disk.clear_fault();
            if self.disk.fired().len() > fired_before {
                self.report.faults += 1;
            }
            if let Err(e) = store.close() {
                self.check_typed(&e);
            }
            // After a failed barrier the close writes nothing (no checkpoint): the
            // next open finds the recovered state again and syncs it then.
            self.end = End::Clean;
        }
    }

    fn fault_session(&mut self) {
        let class = match self.rng.below(10) {
            0..=2 => OpClass::Read,
            3..=5 => OpClass::Write,
            6..=8 => OpClass::Sync,
            _ => OpClass::Truncate,
        };
        let errno = if self.rng.chance(1, 2) {
            FaultErrno::Eio
        } else {
            FaultErrno::Enospc
        };
        let nth = self.rng.range(1, self.est_class[class as usize].max(1));
        let before_open = self.rng.chance(1, 4);
        self.log(|| {
            format!("fault session: {class:?} #{nth} {errno:?}, before open: {before_open}")
        });
        self.trace(2000 + nth * 4 + class as u64);
        let fired_before = self.disk.fired().len();
        let counts0 = self.disk.op_counts();
        if before_open {
            self.disk.inject_fault(class, nth, errno);
        }
        // The fault may hit the open; the oracle's reads run without it.
        let opened = Store::open(&self.path, self.options());
        if let Ok(s) = &opened {
            self.disk.clear_fault();
            let barrier_ran = s.open_report().wal_bytes_at_open > 0;
            self.verify_after_open(s, barrier_ran);
        }
        let mut hit_open = false;
        let store = match opened {
            Ok(s) => s,
            Err(e) => {
                hit_open = true;
                self.disk.clear_fault();
                self.check_typed(&e);
                if self.disk.fired().len() == fired_before {
                    self.unexplained_open_failure("open failed without a crash or fault", &e);
                    return;
                }
                // The fault hit the open: a typed error; the next open must work.
                match self.open_and_verify(self.options()) {
                    Ok(s) => {
                        self.report.reopened += 1;
                        s
                    }
                    Err(e) => {
                        self.violation(format!("reopen after a fault in open failed: {e}"));
                        return;
                    }
                }
            }
        };
        if !before_open {
            self.disk.inject_fault(class, nth, errno);
        }
        let steps = self.rng.range(3, 8);
        let mut failed = false;
        for i in 0..steps {
            // Always one TRUNCATE checkpoint so truncates happen.
            let ok = if i == steps / 2 {
                self.checkpoint(&store, CheckpointMode::Truncate)
            } else {
                self.step(&store)
            };
            failed |= !ok;
        }
        self.disk.clear_fault();
        let fired = self.disk.fired().len() > fired_before;
        let c1 = self.disk.op_counts();
        let used = [
            c1.reads - counts0.reads,
            c1.writes - counts0.writes,
            c1.syncs - counts0.syncs,
            c1.truncates - counts0.truncates,
        ];
        for (e, u) in self.est_class.iter_mut().zip(used) {
            *e = (*e * 3 + u.max(1)) / 4;
        }
        if failed && !fired {
            self.violation("an operation failed without a fault".into());
        }
        if fired {
            self.report.faults += 1;
        }
        // Still usable? A probe transaction must commit.
        let group = self.next_group;
        self.next_group += 1;
        let probe_ops = vec![Op::Dict(
            "probe".into(),
            self.session.to_le_bytes().to_vec(),
        )];
        let store = if self.single(&store, probe_ops.clone(), group) {
            if fired && !hit_open {
                self.report.stayed_usable += 1;
            }
            // The live store: the whole history (unknown outcomes either way). Not
            // folded: it is not durable yet under every policy; the next open checks
            // it again after the clean close.
            if let Some((k, _)) = self.check_state(&store, None) {
                self.trace(k as u64);
            }
            store
        } else {
            // A clean end: wait for the close (a plain drop would finish it in the
            // background while the next open starts).
            let _ = store.close();
            self.end = End::Clean;
            match self.open_and_verify(self.options()) {
                Ok(s) => {
                    self.report.reopened += 1;
                    if !self.single(&s, probe_ops, group) {
                        self.violation("the store does not work after a fault and a reopen".into());
                    }
                    s
                }
                Err(e) => {
                    self.violation(format!("reopen after a fault failed: {e}"));
                    return;
                }
            }
        };
        if let Err(e) = store.close() {
            self.check_typed(&e);
        }
        self.end = End::Clean;
    }

    fn final_check(&mut self) {
        self.disk.app_crash();
        match Store::open(&self.path, self.options()) {
            Ok(s) => {
                let barrier_ran = s.open_report().wal_bytes_at_open > 0;
                self.verify_after_open(&s, barrier_ran);
                let _ = s.close();
            }
            Err(e) => self.unexplained_open_failure("final open failed", &e),
        }
    }
}

/// Run `seeds` campaigns (seeds `first..first+seeds`), rotating through the honest
/// policies, with `crash_points` and `faults` each, in subdirectories of `dir`.
pub fn run_many(
    first: u64,
    seeds: u64,
    crash_points: u64,
    faults: u64,
    dir: &Path,
    policy: Option<Policy>,
) -> CampaignReport {
    run_many_with(run, first, seeds, crash_points, faults, dir, policy)
}

/// [`run_many`] on encrypted files ([`run_encrypted`]): `cargo xtask stress
/// --encrypted`.
#[cfg(feature = "encryption-api")]
pub fn run_many_encrypted(
    first: u64,
    seeds: u64,
    crash_points: u64,
    faults: u64,
    dir: &Path,
    policy: Option<Policy>,
) -> CampaignReport {
    run_many_with(
        run_encrypted,
        first,
        seeds,
        crash_points,
        faults,
        dir,
        policy,
    )
}

fn run_many_with(
    one: fn(&CampaignConfig) -> CampaignReport,
    first: u64,
    seeds: u64,
    crash_points: u64,
    faults: u64,
    dir: &Path,
    policy: Option<Policy>,
) -> CampaignReport {
    let mut total = CampaignReport::default();
    for seed in first..first + seeds {
        let policy = policy.unwrap_or(Policy::HONEST[(seed % 5) as usize]);
        let r = one(&CampaignConfig {
            seed,
            policy,
            crash_points,
            faults,
            dir: dir.join(format!("seed-{seed}")),
            open_time: true,
        });
        let _ = std::fs::remove_dir_all(dir.join(format!("seed-{seed}")));
        total.merge(&r);
    }
    total
}
