//! The open report: where the open time went.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::options::OpenPhase;

/// One line of the [`OpenReport`].
///
/// ```
/// # use keel_storage::{OpenPhase, Store, StoreOptions};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(dir.path().join("a.db"), StoreOptions::default())?;
/// for line in &store.open_report().phases {
///     println!("{:>10} {:?} {} syncs", line.phase.name(), line.duration, line.syncs);
/// }
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseReport {
    /// The phase.
    pub phase: OpenPhase,
    /// Wall time spent in it.
    pub duration: Duration,
    /// Syncs issued during it (all file kinds, all reasons).
    pub syncs: u64,
    /// A short human note ("deferred to background", "4 readers", …).
    pub note: String,
}

/// What happened during open, phase by phase. `Display` prints it as a tree.
///
/// ```
/// # use keel_storage::{Store, StoreOptions, OpenPhase};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("r.db"), StoreOptions::default())?;
/// let report = store.open_report();
/// assert_eq!(report.phases.len(), 6);
/// assert_eq!(report.phase(OpenPhase::SyncWal).unwrap().syncs, 0); // fresh file: no WAL
/// // No WAL to sync: readable and durable at the same moment.
/// assert_eq!(report.durable_after, Some(report.readable_after));
/// println!("{report}");
/// # Ok::<(), keel_storage::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenReport {
    /// The database file.
    pub path: PathBuf,
    /// Total wall time of the pipeline (until durable, or until the barrier failed).
    pub total: Duration,
    /// When the store became readable (reads, snapshots, subscriptions), from the
    /// start of the open. See [`Milestone`](crate::options::Milestone).
    pub readable_after: Duration,
    /// When the store became durable (the open barrier done: writes commit), from
    /// the start of the open. `None` while the barrier runs, or if it failed.
    /// Equal to `readable_after` when the WAL was empty.
    pub durable_after: Option<Duration>,
    /// Size of `<db>-wal` when open started.
    pub wal_bytes_at_open: u64,
    /// WAL frames SQLite recovered (frames in the WAL file at open).
    pub frames_recovered: u64,
    /// Syncs issued by the whole open.
    pub syncs_issued: u64,
    /// The database page size.
    pub page_size: u64,
    /// True if the file was created (or replaced after `recover_corrupt`).
    pub created: bool,
    /// Where a bad file was moved by `recover_corrupt`.
    pub moved_aside: Option<PathBuf>,
    /// One entry per phase, in order.
    pub phases: Vec<PhaseReport>,
}

impl OpenReport {
    /// The line for one phase.
    pub fn phase(&self, p: OpenPhase) -> Option<&PhaseReport> {
        self.phases.iter().find(|r| r.phase == p)
    }

    /// The phase that took longest.
    pub fn slowest_phase(&self) -> Option<&PhaseReport> {
        self.phases.iter().max_by_key(|p| p.duration)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for OpenReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "open {}  {:.1} ms  (readable at {:.1} ms, durable at {}; wal {} B at open, {} frames recovered, {} syncs{}{})",
            self.path.display(),
            ms(self.total),
            ms(self.readable_after),
            match self.durable_after {
                Some(d) => format!("{:.1} ms", ms(d)),
                None => "-".to_string(),
            },
            self.wal_bytes_at_open,
            self.frames_recovered,
            self.syncs_issued,
            if self.created { ", created" } else { "" },
            match &self.moved_aside {
                Some(p) => format!(", bad file moved to {}", p.display()),
                None => String::new(),
            }
        )?;
        let n = self.phases.len();
        for (i, p) in self.phases.iter().enumerate() {
            let branch = if i + 1 == n { "└─" } else { "├─" };
            let pct = if self.total.is_zero() {
                0.0
            } else {
                100.0 * p.duration.as_secs_f64() / self.total.as_secs_f64()
            };
            writeln!(
                f,
                "{branch} {:<10} {:>10.2} ms {:>5.1}%  {} sync{}  {}",
                p.phase.name(),
                ms(p.duration),
                pct,
                p.syncs,
                if p.syncs == 1 { " " } else { "s" },
                p.note
            )?;
        }
        Ok(())
    }
}
