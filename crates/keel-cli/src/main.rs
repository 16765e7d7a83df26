//! `keel`: look inside a keel database, check it, maintain it, and find out why it
//! opened slowly — the tool for a database pulled off a device.
//!
//! ```text
//! keel info DB [--key-file K] [--json]   collections, rows, pages, freelist, WAL, journal mode
//! keel dump DB [--key-file K] [--schema S.fbs] [--collection C] [--json]
//!                                        objects as JSON lines, decoded through the schema
//! keel check DB [--key-file K] [--schema S.fbs] [--repair] [--json]
//!                                        integrity check, every object verified, key and
//!                                        index columns compared with the bytes (--repair
//!                                        rewrites those that disagree)
//! keel checkpoint DB [--mode passive|truncate] [--json]
//! keel vacuum DB [--json]                incremental vacuum
//! keel explain-open DB [--schema S.fbs] [--keep-wal] [--barrier full|barrier|normal|off] [--json]
//!                                        the open pipeline, phase by phase, with suggestions
//! keel encrypt DB --key-file K [--plaintext-header] [--json]
//!                                        plaintext -> encrypted (K is made if missing)
//! keel decrypt DB --key-file K [--plaintext-header] [--json]
//!                                        encrypted -> plaintext (an export for other tools)
//! keel rekey DB --key-file OLD --new-key-file NEW [--json]
//!                                        rotate to a new key (NEW is made if missing)
//! keel schema check OLD.fbs NEW.fbs [--json]
//!                                        is the schema change compatible?
//! keel codegen swift|kotlin S.fbs OUT_DIR [--check] [--package P]
//!                                        typed Swift / Kotlin models for an app
//!                                        (--check: exit 1 when OUT_DIR's are stale)
//! ```
//!
//! ## What each command may write
//!
//! * `info`, `dump`, `check` open the file **read-only**: they never write the
//!   database or its WAL and never checkpoint. SQLite may create the `-shm` file (the
//!   WAL index, shared memory) next to a WAL database if it is missing.
//! * `checkpoint`, `vacuum` and `explain-open` open the file through keel's storage
//!   kernel exactly like an app: a file in rollback-journal mode is switched to WAL,
//!   a WAL left by a previous run is synced (the open barrier) and recovered, and
//!   `-wal`/`-shm` are created. For `checkpoint` and `vacuum` the automatic
//!   background checkpoints and vacuums are held off so only the requested work
//!   happens; `explain-open` uses the app's default options, so keel's background
//!   checkpointer may start copying a large WAL right after open, as in the app.
//!   `checkpoint --mode truncate`,
//!   `vacuum` and `explain-open` end with the app's `close()` (a TRUNCATE checkpoint:
//!   the WAL ends empty); `checkpoint --mode passive` and `explain-open --keep-wal`
//!   leave without closing, as if the app were killed, so the WAL file stays
//!   (SQLite's WAL is built to survive exactly that) and `explain-open --keep-wal`
//!   can be repeated on the same file.
//!   `explain-open --schema` also runs keel's schema phase (tables, indexes,
//!   `keel_meta`), as the app would with that schema.
//! * `encrypt`, `decrypt` and `rekey` write a whole new file beside the database
//!   and rename it over the old one (keel's crash-safe rotation, which needs the
//!   file to itself: exit 5 while anything else has it open). A crash leaves the
//!   old file under the old key or the new one under the new key; the next open
//!   by keel settles which. A key file named but missing is made first, synced.
//!   With `--key-file`, `info`, `dump` and `check` read an encrypted file.
//! * `schema check` reads two `.fbs` files and writes nothing.
//!
//! ## Exit status
//!
//! | code | meaning |
//! |---:|---|
//! | 0 | ok: healthy file, compatible schemas |
//! | 1 | the command ran and found problems: objects that do not verify (`check`, `dump`), an incompatible schema change (`schema check`), a vacuum that cannot run |
//! | 2 | usage or I/O error: bad arguments, a missing or unreadable file |
//! | 3 | not a database, or a corrupt database |
//! | 4 | wrong schema: it does not parse, or does not fit the database |
//! | 5 | locked: another process holds the database (or kept a checkpoint from finishing) |
//! | 6 | wrong key: the key does not decrypt the file, a key was given for a plaintext file, or the key file holds no key |
//!
//! With `--json`, a failure is printed on stdout as
//! `{"error": "…", "kind": "corrupt", "exit_code": 3}`; otherwise as `keel: …` on
//! stderr. Progress bars go to stderr, only when it is a terminal and never with
//! `--json`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use keel_storage::rotate::Side;

mod crypt;
mod exit;
mod files;
mod info;
mod keys;
mod maint;
mod objects;
mod progress;
mod schema_cmd;

#[derive(Parser, Debug)]
#[command(
    name = "keel",
    version,
    about = "Look inside keel databases, check and maintain them, explain a slow open",
    after_help = exit::HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The key of an encrypted database.
#[derive(clap::Args, Debug)]
struct KeyArgs {
    /// The file holding the database's data key (96 hex digits: key, then salt),
    /// for an encrypted database.
    #[arg(long, value_name = "K")]
    key_file: Option<PathBuf>,
    /// The file keeps its first 32 bytes plaintext (StoreOptions::plaintext_header).
    #[arg(long, requires = "key_file")]
    plaintext_header: bool,
}

impl KeyArgs {
    fn load(&self) -> exit::Result<Option<keys::FileKey>> {
        keys::optional(self.key_file.as_deref(), self.plaintext_header)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Collections, row counts, page and freelist figures, WAL size, journal mode.
    ///
    /// Read-only: never writes the database or its WAL (SQLite may create `-shm`).
    #[command(after_help = exit::HELP)]
    Info {
        /// The database file.
        db: PathBuf,
        #[command(flatten)]
        key: KeyArgs,
        /// Print the figures as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write objects as JSON lines, decoded through the schema.
    ///
    /// One line per object on stdout: {"collection": …, "rowid": …, "object": {…}}
    /// (flatc's JSON conventions: enums by name, unions as `x_type` + `x`). An
    /// object that does not verify is reported on stderr with its collection and
    /// rowid, and makes the exit status 1. Without --schema the schema keel stored
    /// in the file is used; with it, the file must be that schema, a newer or an
    /// older version of it (exit 4 otherwise).
    ///
    /// Read-only: never writes the database or its WAL (SQLite may create `-shm`).
    #[command(after_help = exit::HELP)]
    Dump {
        /// The database file.
        db: PathBuf,
        #[command(flatten)]
        key: KeyArgs,
        /// The .fbs schema to decode with (default: the schema stored in the file).
        #[arg(long, value_name = "S.fbs")]
        schema: Option<PathBuf>,
        /// Only this collection (fully qualified like `blog.Post`, or the bare table name).
        #[arg(long, value_name = "C")]
        collection: Option<String>,
        /// The output is JSON lines already; with --json a failure is reported as a
        /// JSON object on stdout too.
        #[arg(long)]
        json: bool,
    },
    /// SQLite's integrity check, then every FlatBuffers object verified, then every
    /// key and index column compared with the object's bytes it is derived from.
    ///
    /// Exit status: 0 healthy; 1 some objects do not verify, or some columns
    /// disagree with their object (each is listed with its collection and rowid)
    /// but the file is sound; 3 SQLite found the file corrupt; 4 wrong schema.
    ///
    /// Read-only unless --repair: never writes the database or its WAL (SQLite may
    /// create `-shm`).
    #[command(after_help = exit::HELP)]
    Check {
        /// The database file.
        db: PathBuf,
        #[command(flatten)]
        key: KeyArgs,
        /// The .fbs schema to verify objects with (default: the schema stored in the file).
        #[arg(long, value_name = "S.fbs")]
        schema: Option<PathBuf>,
        /// Rewrite key and index columns that disagree with their object's bytes
        /// (what a write by another SQLite tool can leave), in one transaction.
        #[arg(long)]
        repair: bool,
        /// Print the result as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run a checkpoint: copy the WAL's frames into the database file.
    ///
    /// passive (default) copies what it can without waiting for other connections
    /// and keeps the WAL file (keel exits without closing, so no TRUNCATE happens);
    /// truncate waits (bounded) for other connections, copies everything and
    /// truncates the WAL to zero bytes. Opens the file like an app does (WAL mode, open
    /// barrier sync, recovery). Exit status 5 if other connections kept it from finishing.
    #[command(after_help = exit::HELP)]
    Checkpoint {
        /// The database file.
        db: PathBuf,
        /// Checkpoint mode.
        #[arg(long, value_enum, default_value_t = Mode::Passive)]
        mode: Mode,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run an incremental vacuum: give free pages back to the file system.
    ///
    /// Opens the file like an app does, reclaims every free page (keel files use
    /// auto_vacuum=INCREMENTAL), then closes with a TRUNCATE checkpoint, which is
    /// when the file shrinks. Exit status 1 if the file's auto_vacuum mode does not
    /// allow an incremental vacuum.
    #[command(after_help = exit::HELP)]
    Vacuum {
        /// The database file.
        db: PathBuf,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run keel's open pipeline and explain where the time went.
    ///
    /// Prints the OpenReport tree (prepare, sync_wal, recover, checkpoint, schema,
    /// ready: time, share and syncs of each), the WAL bytes and frames recovered, the
    /// I/O of the open, and suggestions (a large WAL: call on_background() before
    /// suspension; a slow sync_wal: the open-barrier policy; free pages: vacuum; …).
    ///
    /// This is a real open with keel's default options: it writes what an app's open
    /// writes (WAL mode, the open-barrier sync, with --schema the schema phase; the
    /// background checkpointer starts on a large WAL). By default it then closes like
    /// an app (TRUNCATE checkpoint: the WAL ends empty); with --keep-wal it leaves
    /// without closing, so the WAL file stays and the run can be repeated.
    #[command(name = "explain-open", after_help = exit::HELP)]
    ExplainOpen {
        /// The database file.
        db: PathBuf,
        /// Open through keel's object store with this schema (runs the schema phase too).
        #[arg(long, value_name = "S.fbs")]
        schema: Option<PathBuf>,
        /// Leave without closing: no TRUNCATE checkpoint, the WAL stays as found.
        #[arg(long)]
        keep_wal: bool,
        /// Sync policy of the open barrier (what an app would set with
        /// StoreOptions::open_barrier_sync).
        #[arg(long, value_enum, default_value_t = BarrierPolicy::Full)]
        barrier: BarrierPolicy,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Generate typed Swift or Kotlin models (value types, FlatBuffers encoding and
    /// decoding, typed query fields) from a `.fbs` schema, for an app using keel's
    /// Swift package or Android library.
    ///
    /// Writes the source files for the schema into OUT_DIR (one for Swift, one per
    /// namespace for Kotlin) and prints each path. With --check, writes nothing:
    /// compares the files in OUT_DIR with what the generator makes and lists each
    /// one that differs or is missing (for CI: checked-in models cannot go stale).
    /// Exit status: 0 written (or up to date), 1 --check found a stale or missing
    /// file, 2 unreadable schema or unwritable directory, 4 the schema does not
    /// parse or cannot be expressed in the language.
    #[command(after_help = exit::HELP)]
    Codegen {
        /// The language to generate.
        #[arg(value_enum)]
        language: Language,
        /// The `.fbs` schema (its includes are followed).
        schema: PathBuf,
        /// Where to write the sources (created if missing).
        out_dir: PathBuf,
        /// Write nothing; exit 1 when a file in OUT_DIR differs from the generator's.
        #[arg(long)]
        check: bool,
        /// Kotlin only: the package of the generated code (e.g. `com.example.blog`),
        /// instead of the schema's namespace. Collection names stay the schema's.
        #[arg(long)]
        package: Option<String>,
    },
    /// Encrypt a plaintext database in place, through a new file and one rename.
    ///
    /// Makes the key file first if it does not exist (a new random key, synced).
    /// Needs the file to itself: exit 5 while another process has it open. A crash
    /// leaves the plaintext file or the encrypted one, never a mix; keel's next
    /// open settles it.
    #[command(after_help = exit::HELP)]
    Encrypt {
        /// The database file.
        db: PathBuf,
        /// Where the new data key is kept (made if missing).
        #[arg(long, value_name = "K")]
        key_file: PathBuf,
        /// Keep the first 32 bytes plaintext (for iOS shared containers).
        #[arg(long)]
        plaintext_header: bool,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Decrypt an encrypted database in place: it becomes a plaintext SQLite file
    /// (an export for tools that have no key). Crash-safe like `encrypt`.
    #[command(after_help = exit::HELP)]
    Decrypt {
        /// The database file.
        db: PathBuf,
        /// The file holding the database's data key.
        #[arg(long, value_name = "K")]
        key_file: PathBuf,
        /// The file keeps its first 32 bytes plaintext.
        #[arg(long)]
        plaintext_header: bool,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Move an encrypted database to a new key. Crash-safe like `encrypt`: the file
    /// opens with exactly one of the two keys at every moment.
    ///
    /// The new key file is made first if missing. The old one is left as it is:
    /// remove it once the database opens with the new key.
    #[command(after_help = exit::HELP)]
    Rekey {
        /// The database file.
        db: PathBuf,
        /// The file holding the current key.
        #[arg(long, value_name = "OLD")]
        key_file: PathBuf,
        /// Where the new key is kept (made if missing).
        #[arg(long, value_name = "NEW")]
        new_key_file: PathBuf,
        /// The file keeps its first 32 bytes plaintext now.
        #[arg(long)]
        plaintext_header: bool,
        /// The rekeyed file keeps its first 32 bytes plaintext.
        #[arg(long)]
        new_plaintext_header: bool,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Work with `.fbs` schemas.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Mode {
    /// Copy what can be copied without waiting; keep the WAL file.
    Passive,
    /// Wait (bounded) for other connections, copy everything, truncate the WAL.
    Truncate,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum BarrierPolicy {
    /// F_FULLFSYNC on Apple, fsync elsewhere (keel's default).
    Full,
    /// F_BARRIERFSYNC on Apple, fdatasync elsewhere.
    Barrier,
    /// Plain fsync/fdatasync.
    Normal,
    /// No sync.
    Off,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Language {
    /// Swift structs for the `Keel` Swift package.
    Swift,
    /// Kotlin data classes for keel's Android library.
    Kotlin,
}

#[derive(Subcommand, Debug)]
enum SchemaCommand {
    /// Check that NEW can replace OLD without rewriting stored objects.
    ///
    /// Exit status: 0 compatible, 1 incompatible, 2 unreadable or invalid schema.
    Check {
        /// The schema the data was written with.
        old: PathBuf,
        /// The schema that will read and write it from now on.
        new: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (json, result) = match cli.command {
        Command::Schema {
            command: SchemaCommand::Check { old, new, json },
        } => return schema_cmd::schema_check(&old, &new, json),
        Command::Codegen {
            language,
            schema,
            out_dir,
            check,
            package,
        } => {
            let sources = match (language, package.as_deref()) {
                (Language::Swift, None) => keel_schema::swift::sources(&schema),
                (Language::Swift, Some(_)) => {
                    eprintln!("error: --package applies to Kotlin only");
                    return ExitCode::from(exit::USAGE_OR_IO);
                }
                (Language::Kotlin, p) => keel_schema::kotlin::sources(&schema, p),
            };
            (false, schema_cmd::codegen(sources, &out_dir, check))
        }
        Command::Info { db, key, json } => (
            json,
            key.load().and_then(|k| info::run(&db, k.as_ref(), json)),
        ),
        Command::Dump {
            db,
            key,
            schema,
            collection,
            json,
        } => (
            json,
            key.load().and_then(|k| {
                objects::dump(&db, k.as_ref(), schema.as_deref(), collection.as_deref())
            }),
        ),
        Command::Check {
            db,
            key,
            schema,
            json,
            repair,
        } => (
            json,
            key.load()
                .and_then(|k| objects::check(&db, k.as_ref(), schema.as_deref(), json, repair)),
        ),
        Command::Encrypt {
            db,
            key_file,
            plaintext_header,
            json,
        } => (
            json,
            crypt::existing_file(&db)
                .and_then(|()| keys::FileKey::load_or_create(&key_file, plaintext_header))
                .and_then(|(k, created)| {
                    let to = crypt::NewKey {
                        key: Some(k),
                        created,
                    };
                    crypt::run(&db, crypt::Kind::Encrypt, Side::Plaintext, to, json)
                }),
        ),
        Command::Decrypt {
            db,
            key_file,
            plaintext_header,
            json,
        } => (
            json,
            keys::FileKey::load(&key_file, plaintext_header).and_then(|k| {
                let to = crypt::NewKey {
                    key: None,
                    created: false,
                };
                crypt::run(&db, crypt::Kind::Decrypt, k.side(), to, json)
            }),
        ),
        Command::Rekey {
            db,
            key_file,
            new_key_file,
            plaintext_header,
            new_plaintext_header,
            json,
        } => (
            json,
            keys::FileKey::load(&key_file, plaintext_header).and_then(|old| {
                crypt::existing_file(&db)?;
                let (new, created) =
                    keys::FileKey::load_or_create(&new_key_file, new_plaintext_header)?;
                if old.side().id() == new.side().id() {
                    return Err(exit::Failure::new(
                        exit::USAGE_OR_IO,
                        format!(
                            "{} holds the same key as {}: a rekey needs a new one",
                            new_key_file.display(),
                            key_file.display()
                        ),
                    ));
                }
                let to = crypt::NewKey {
                    key: Some(new),
                    created,
                };
                crypt::run(&db, crypt::Kind::Rekey, old.side(), to, json)
            }),
        ),
        Command::Checkpoint { db, mode, json } => {
            let mode = match mode {
                Mode::Passive => keel_storage::CheckpointMode::Passive,
                Mode::Truncate => keel_storage::CheckpointMode::Truncate,
            };
            (json, maint::checkpoint(&db, mode, json))
        }
        Command::Vacuum { db, json } => (json, maint::vacuum(&db, json)),
        Command::ExplainOpen {
            db,
            schema,
            keep_wal,
            barrier,
            json,
        } => {
            let barrier = match barrier {
                BarrierPolicy::Full => "full",
                BarrierPolicy::Barrier => "barrier",
                BarrierPolicy::Normal => "normal",
                BarrierPolicy::Off => "off",
            };
            (
                json,
                maint::explain_open(&db, schema.as_deref(), keep_wal, barrier, json),
            )
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "error": f.message, "kind": f.kind(), "exit_code": f.code })
                );
            } else {
                eprintln!("keel: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}
