//! The sync loop: one thread (`keel-sync`), one blocking WebSocket
//! (`tungstenite`), the relay's protocol (`docs/sync.md`).
//!
//! A session: connect, `hello` with the token and the install's client id,
//! `subscribe` (with the resume point of a snapshot the last session did not
//! finish), then until it fails: upload the outbox one batch at a time (the
//! next after the answer to the last), and apply what arrives — each snapshot
//! page in its own local transaction with the resume point recorded beside its
//! rows (a `Download`, reported as `SnapshotProgress`), each `changes` frame as
//! it comes (held back while a snapshot is arriving, then applied with its
//! end), acks and refusals, checkpoints. A failed
//! session waits (exponential backoff with jitter) and starts again; whatever was
//! not acknowledged is sent again with the same sequence numbers, which the
//! relay's ledger answers without applying twice. The socket reads with a short
//! timeout so a commit's wake-up, `pause` and `close` are seen within
//! [`TICK`].
//!
//! A frame from the relay is checked whole before anything of it is applied:
//! not JSON (or cut short), not an object, no `type`, a binary frame, one over the
//! WebSocket's size limit, a change or snapshot row that cannot be read, a
//! collection this client did not subscribe to, an ack without its results. Such a
//! frame is a [`SyncEvent::BadFrame`] with the code, and it ends the session:
//! nothing of it is applied, and the next session's fresh snapshot brings
//! whatever it carried. A frame `type` this client does not know is ignored.
//!
//! ## Test hook
//!
//! With the crate feature `sim` (test builds only, never production), the
//! environment variable `KEEL_SYNC_PAUSE_AT=<step>` makes the loop stop at that
//! step, write `keel-sync paused at <step>` to standard error and sleep until
//! killed; the convergence test kills it there with SIGKILL. The steps are
//! [`PAUSE_POINTS`].

use std::collections::HashSet;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value as Json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

use crate::base::error::{Error, Result};
use crate::db::database::Database;
use crate::sync::apply::{self, Incoming};
use crate::sync::ledger::{self, Op, OpsByRow};
use crate::sync::shared::{Command, RefusedOp, Shared, SnapshotProgress, SyncEvent, SyncOptions};
use crate::txn::transaction::Txn;

/// How long one socket read waits before the loop looks at its commands.
const TICK: Duration = Duration::from_millis(10);
/// How long the relay may take to answer a `hello` or an upload.
const ANSWER: Duration = Duration::from_secs(30);
/// How long a connect may take.
const CONNECT: Duration = Duration::from_secs(10);

/// The `keel_sync_state` entry of a snapshot being applied: its resume point.
const SNAPSHOT_STATE: &str = "snapshot";
/// The `keel_sync_state` entry holding the last snapshot generation handed out.
const SNAPSHOT_MARK: &str = "snapshot_mark";

/// A snapshot being applied, as recorded in `keel_sync_state` after each page.
struct Download {
    /// This snapshot's generation: the mark its rows are held with.
    mark: i64,
    /// PostgreSQL's snapshot the rows applied first were read in (kept across
    /// resumes: what changed since is what a resume must send again).
    pg_snapshot: String,
    /// The collections subscribed (a resume is for the same ones only).
    collections: Vec<String>,
    /// The last page's collection and key.
    cursor: Option<(String, Json)>,
    progress: SnapshotProgress,
    /// The collections that had no local and no held rows when this snapshot
    /// started (never for a resumed one): their pages insert without looking
    /// for each row first (`apply::page`). Not recorded: a resume starts empty.
    empty: Vec<String>,
}

impl Download {
    fn to_json(&self) -> Json {
        json!({
            "mark": self.mark,
            "snapshot": self.pg_snapshot,
            "collections": self.collections,
            "collection": self.cursor.as_ref().map(|c| c.0.clone()),
            "after": self.cursor.as_ref().map(|c| c.1.clone()),
            "applied": self.progress.rows_applied,
        })
    }

    fn from_json(j: &Json) -> Option<Download> {
        Some(Download {
            mark: j["mark"].as_i64()?,
            pg_snapshot: j["snapshot"].as_str()?.to_owned(),
            collections: j["collections"]
                .as_array()?
                .iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect(),
            cursor: match (j["collection"].as_str(), &j["after"]) {
                (Some(c), after) if after.is_object() => Some((c.to_owned(), after.clone())),
                _ => None,
            },
            progress: SnapshotProgress {
                rows_applied: j["applied"].as_u64().unwrap_or(0),
                ..SnapshotProgress::default()
            },
            empty: Vec::new(),
        })
    }
}

/// The snapshot this file was applying when its last session ended, if any.
fn saved_download(db: &Database) -> Option<Download> {
    let text = db
        .inner()
        .store
        .read(|conn| {
            ledger::state(conn, SNAPSHOT_STATE)
                .map_err(|e| Error::sqlite("read the snapshot state", "keel_sync_state", e))
        })
        .ok()??;
    Download::from_json(&serde_json::from_str(&text).ok()?)
}

/// The steps at which the test hook (`KEEL_SYNC_PAUSE_AT`, feature `sim`) can
/// stop the loop: an upload sent and not answered; an ack read and not recorded,
/// then recorded; a finished snapshot read and not applied, then applied; a
/// `changes` frame read and not applied, then applied; a checkpoint read and
/// not applied, then applied.
pub const PAUSE_POINTS: &[&str] = &[
    "upload_sent",
    "ack_received",
    "ack_recorded",
    "snapshot_received",
    "snapshot_applied",
    "changes_received",
    "changes_applied",
    "checkpoint_received",
    "checkpoint_applied",
];

/// The test hook (module docs): stop here and wait to be killed.
#[cfg(feature = "sim")]
fn pause_point(step: &str) {
    use std::io::Write;
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if AT
        .get_or_init(|| std::env::var("KEEL_SYNC_PAUSE_AT").ok())
        .as_deref()
        == Some(step)
    {
        let mut err = std::io::stderr();
        let _ = writeln!(err, "keel-sync paused at {step}");
        let _ = err.flush();
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

#[cfg(not(feature = "sim"))]
fn pause_point(_: &str) {}

/// One row of a snapshot page: its fields and its server version.
type PageRow = (Map<String, Json>, i64);

/// A frame from the relay that cannot be used: its code (`SyncEvent::BadFrame`)
/// and what was wrong.
struct BadFrame(&'static str, String);

impl BadFrame {
    fn malformed(message: impl Into<String>) -> BadFrame {
        BadFrame("malformed_frame", message.into())
    }
}

/// How a session ended.
enum Ended {
    Close,
    Pause,
    Failed(String),
}

/// Exponential backoff with jitter.
struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
    seed: u64,
}

impl Backoff {
    fn new(min: Duration, max: Duration) -> Backoff {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
            | 1;
        Backoff {
            min,
            max,
            next: min,
            seed,
        }
    }

    fn reset(&mut self) {
        self.next = self.min;
    }

    /// The next wait: a random time between half the delay and the delay, which
    /// then doubles (up to `max`).
    fn wait(&mut self) -> Duration {
        // xorshift64: enough to keep many clients from retrying in step.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        let half = delay / 2;
        half + Duration::from_nanos(self.seed % (half.as_nanos() as u64).max(1))
    }
}

/// Runs the loop until closed.
pub(crate) fn run(
    db: Database,
    options: SyncOptions,
    shared: Arc<Shared>,
    commands: Receiver<Command>,
) {
    let mut backoff = Backoff::new(options.min_backoff, options.max_backoff);
    let mut paused = false;
    let mut batch = options.batch_ops.max(1);
    let mut counter = Counter::new();
    loop {
        if paused {
            let next = match counter.due_in() {
                Some(due) => commands.recv_timeout(due),
                None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match next {
                Ok(Command::Resume) => paused = false,
                Ok(Command::Close) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Command::Wake) | Err(RecvTimeoutError::Timeout) => {
                    counter.maybe(&db, &shared);
                    continue;
                }
                Ok(Command::Pause) => continue,
            }
        }
        refresh_pending(&db, &shared);
        let mut session = Session {
            db: &db,
            options: &options,
            shared: &shared,
            commands: &commands,
            batch: &mut batch,
            backoff: &mut backoff,
            dirty: true,
            by_row: Arc::default(),
        };
        let ended = session.run();
        shared.update(|s| {
            s.connected = false;
            s.uploading = false;
            s.downloading = false;
        });
        match ended {
            Ended::Close => return,
            Ended::Pause => {
                // The session may have taken a commit's wake-up without
                // counting: count (or owe a count) as the pause begins.
                paused = true;
                counter.maybe(&db, &shared);
            }
            Ended::Failed(why) => {
                tracing::debug!(error = %why, "sync session ended");
                shared.update(|s| s.last_error = Some(why));
                let until = Instant::now() + backoff.wait();
                loop {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let wait = counter.due_in().map_or(left, |due| due.min(left));
                    match commands.recv_timeout(wait) {
                        Ok(Command::Close) | Err(RecvTimeoutError::Disconnected) => return,
                        Ok(Command::Pause) => {
                            paused = true;
                            counter.maybe(&db, &shared);
                            break;
                        }
                        Ok(Command::Wake) => counter.maybe(&db, &shared),
                        Err(RecvTimeoutError::Timeout) if counter.due_in().is_some() => {
                            counter.maybe(&db, &shared);
                        }
                        Ok(Command::Resume) | Err(RecvTimeoutError::Timeout) => {}
                    }
                }
            }
        }
    }
}

/// Recounts pending operations after local commits while offline, at most every
/// [`COUNT_GAP`] (a count reads the whole outbox). A commit inside the gap is
/// owed a count at its end, so the last commit before a quiet spell is counted.
struct Counter {
    last: Instant,
    owed: bool,
}

/// The shortest time between two counts of a client not connected.
const COUNT_GAP: Duration = Duration::from_millis(50);

impl Counter {
    fn new() -> Counter {
        Counter {
            last: Instant::now(),
            owed: false,
        }
    }

    /// Count now if the gap has passed; otherwise owe a count at its end.
    fn maybe(&mut self, db: &Database, shared: &Shared) {
        if self.last.elapsed() >= COUNT_GAP {
            self.last = Instant::now();
            self.owed = false;
            refresh_pending(db, shared);
        } else {
            self.owed = true;
        }
    }

    /// How long until an owed count is due; none when nothing is owed.
    fn due_in(&self) -> Option<Duration> {
        self.owed
            .then(|| COUNT_GAP.saturating_sub(self.last.elapsed()))
    }
}

fn refresh_pending(db: &Database, shared: &Shared) {
    let n = db.inner().store.read(|conn| {
        ledger::pending_count(conn, None)
            .map_err(|e| Error::sqlite("count pending operations", "keel_sync_outbox", e))
    });
    if let Ok(n) = n {
        shared.update(|s| s.pending_ops = n);
    }
    shared.poke();
}

struct Session<'a> {
    db: &'a Database,
    options: &'a SyncOptions,
    shared: &'a Shared,
    commands: &'a Receiver<Command>,
    batch: &'a mut usize,
    backoff: &'a mut Backoff,
    /// The outbox may hold operations to send (a commit's wake-up, an answer).
    dirty: bool,
    /// Where each row's operations are, for the download's writes.
    by_row: Arc<Mutex<OpsByRow>>,
}

/// An upload on its way.
struct InFlight {
    ops: Vec<Op>,
    sent: Instant,
}

type Socket = WebSocket<TcpStream>;

fn connect(url: &str) -> std::result::Result<Socket, String> {
    let request = url
        .into_client_request()
        .map_err(|e| format!("bad sync url {url:?}: {e}"))?;
    let uri = request.uri();
    if uri.scheme_str() != Some("ws") {
        return Err(format!(
            "sync url {url:?}: only ws:// is built (put TLS in front of the relay)"
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("sync url {url:?} has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let addr = (host.trim_matches(|c| c == '[' || c == ']'), port)
        .to_socket_addrs()
        .map_err(|e| format!("resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolve {host}: no address"))?;
    let stream =
        TcpStream::connect_timeout(&addr, CONNECT).map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(CONNECT))
        .map_err(|e| e.to_string())?;
    let (socket, _) =
        tungstenite::client(request, stream).map_err(|e| format!("WebSocket handshake: {e}"))?;
    socket
        .get_ref()
        .set_read_timeout(Some(TICK))
        .map_err(|e| e.to_string())?;
    Ok(socket)
}

/// The next text frame as a JSON object with a `type`; `Ok(None)` when nothing
/// arrived within a tick. A frame that cannot be used is a [`BadFrame`]; a
/// connection that failed, the error's text.
fn read(socket: &mut Socket) -> std::result::Result<Option<Json>, Failure> {
    match socket.read() {
        Ok(Message::Text(text)) => {
            let frame: Json = serde_json::from_str(text.as_str())
                .map_err(|e| BadFrame::malformed(format!("not JSON: {e}")))?;
            if !frame.get("type").is_some_and(Json::is_string) {
                return Err(BadFrame::malformed("not an object with a `type`").into());
            }
            Ok(Some(frame))
        }
        Ok(Message::Binary(_)) => {
            Err(BadFrame("binary_frame", "the protocol speaks text frames".into()).into())
        }
        Ok(Message::Close(c)) => Err(format!("the relay closed the connection: {c:?}").into()),
        Ok(_) => Ok(None),
        Err(tungstenite::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Ok(None)
        }
        Err(tungstenite::Error::Capacity(e)) => {
            Err(BadFrame("frame_too_large", e.to_string()).into())
        }
        Err(tungstenite::Error::Utf8(e)) => {
            Err(BadFrame::malformed(format!("a text frame that is not UTF-8: {e}")).into())
        }
        Err(tungstenite::Error::Protocol(
            e @ (tungstenite::error::ProtocolError::ResetWithoutClosingHandshake
            | tungstenite::error::ProtocolError::SendAfterClosing
            | tungstenite::error::ProtocolError::ReceivedAfterClosing),
        )) => Err(format!("connection: {e}").into()),
        Err(tungstenite::Error::Protocol(e)) => {
            Err(BadFrame::malformed(format!("not a WebSocket frame: {e}")).into())
        }
        Err(e) => Err(format!("connection: {e}").into()),
    }
}

/// Why a session failed: the connection, or a frame that cannot be used.
enum Failure {
    Connection(String),
    Frame(BadFrame),
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Connection(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Failure {
        Failure::Connection(s.to_owned())
    }
}

impl From<BadFrame> for Failure {
    fn from(b: BadFrame) -> Failure {
        Failure::Frame(b)
    }
}

fn send(socket: &mut Socket, frame: Json) -> std::result::Result<(), String> {
    socket
        .send(Message::text(frame.to_string()))
        .map_err(|e| format!("send: {e}"))
}

fn lsn_of(frame: &Json) -> Option<u64> {
    let text = frame.get("lsn")?.as_str()?;
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

impl Session<'_> {
    fn run(&mut self) -> Ended {
        match self.session() {
            Ok(ended) => ended,
            Err(Failure::Connection(why)) => Ended::Failed(why),
            Err(Failure::Frame(BadFrame(code, message))) => {
                self.shared.emit(SyncEvent::BadFrame {
                    code: code.to_owned(),
                    message: message.clone(),
                });
                Ended::Failed(format!("the relay sent a bad frame: {code}: {message}"))
            }
        }
    }

    /// What a pending command means now, if anything.
    fn command(&mut self) -> Option<Ended> {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Close) | Err(TryRecvError::Disconnected) => return Some(Ended::Close),
                Ok(Command::Pause) => return Some(Ended::Pause),
                Ok(Command::Wake) => self.dirty = true,
                Ok(Command::Resume) => continue,
                Err(TryRecvError::Empty) => return None,
            }
        }
    }

    fn token(&self) -> std::result::Result<String, String> {
        (self.options.token_provider)().ok_or_else(|| "the token provider gave no token".into())
    }

    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Txn<'_>) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, String> {
        self.db
            .write_blocking(f)
            .map_err(|e| format!("local write: {e}"))
    }

    /// [`write`](Self::write) for a closure that settles rows under this
    /// client's operations: it gets [`OpsByRow`] caught up before it runs, and a
    /// write that fails starts it again from nothing.
    fn write_rows<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Txn<'_>, &OpsByRow) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, String> {
        let by_row = Arc::clone(&self.by_row);
        let result = self.write(move |txn| {
            let mut own = by_row.lock().unwrap_or_else(|p| p.into_inner());
            own.catch_up(txn.connection())
                .map_err(|e| Error::sqlite("read the outbox", "keel_sync_outbox", e))?;
            f(txn, &own)
        });
        if result.is_err() {
            *self.by_row.lock().unwrap_or_else(|p| p.into_inner()) = OpsByRow::default();
        }
        result
    }

    fn session(&mut self) -> std::result::Result<Ended, Failure> {
        if let Some(ended) = self.command() {
            return Ok(ended);
        }
        let client_id = self
            .db
            .inner()
            .store
            .read(|conn| {
                ledger::state(conn, "client_id")
                    .map_err(|e| Error::sqlite("read the client id", "keel_sync_state", e))
            })
            .map_err(|e| e.to_string())?
            .ok_or("no client id")?;
        let mut socket = connect(&self.options.url)?;
        send(
            &mut socket,
            json!({"type": "hello", "token": self.token()?, "client_id": client_id, "protocol": 1}),
        )?;
        let deadline = Instant::now() + ANSWER;
        let mut retried_token = false;
        loop {
            if Instant::now() > deadline {
                return Err("the relay did not answer hello".into());
            }
            if let Some(ended) = self.command() {
                let _ = socket.close(None);
                return Ok(ended);
            }
            let Some(frame) = read(&mut socket)? else {
                continue;
            };
            match frame["type"].as_str() {
                Some("welcome") => break,
                Some("refused") if frame["code"] == "token_expired" && !retried_token => {
                    retried_token = true;
                    send(
                        &mut socket,
                        json!({"type": "token", "token": self.token()?}),
                    )?;
                }
                Some("refused") => {
                    let code = frame["code"].as_str().unwrap_or("").to_owned();
                    let message = frame["message"].as_str().unwrap_or("").to_owned();
                    self.shared.emit(SyncEvent::TokenRefused {
                        code: code.clone(),
                        message: message.clone(),
                    });
                    return Err(format!("token refused: {code}: {message}").into());
                }
                _ => return Err(format!("unexpected answer to hello: {frame}").into()),
            }
        }
        self.backoff.reset();
        let collections: Vec<String> = if self.options.scopes.is_empty() {
            let schema = self.db.schema();
            schema
                .collections
                .iter()
                .filter(|c| schema.table(c.table).sync.is_some())
                .map(|c| c.name.clone())
                .collect()
        } else {
            self.options.scopes.clone()
        };
        let mut subscribe = json!({"type": "subscribe", "collections": collections});
        // A snapshot cut off continues after its last applied page.
        if let Some(saved) = saved_download(self.db).filter(|d| d.collections == collections) {
            if let Some((collection, after)) = saved.cursor {
                subscribe["resume"] = json!({
                    "snapshot": saved.pg_snapshot,
                    "collection": collection,
                    "after": after,
                });
            }
        }
        send(&mut socket, subscribe)?;
        self.shared.update(|s| {
            s.connected = true;
            s.downloading = true;
            s.last_error = None;
        });
        self.serve(&mut socket, &collections)
    }

    /// The session after the welcome, until it fails or a command ends it.
    fn serve(
        &mut self,
        socket: &mut Socket,
        collections: &[String],
    ) -> std::result::Result<Ended, Failure> {
        let mut in_flight: Option<InFlight> = None;
        // A snapshot is due or arriving (changes are held back meanwhile, and
        // applied after it), and its state once `snapshot_start` came.
        let mut snapshot = true;
        let mut download: Option<Download> = None;
        let mut held_back: Vec<(u64, Vec<Incoming>)> = Vec::new();
        // Upload again at this time (after `unavailable`).
        let mut retry_at: Option<Instant> = None;
        // Acked operations wait in the outbox until the download covers them.
        let mut acked_waiting = true;
        // How far the download is complete and applied in this session, and
        // the highest checkpoint that came while the snapshot still streamed:
        // an ack that arrives after the checkpoint covering its transaction is
        // covered at once, since no later checkpoint need ever come.
        let mut reached: Option<u64> = None;
        let mut held_checkpoint: Option<u64> = None;
        loop {
            if let Some(ended) = self.command() {
                let _ = socket.close(None);
                let _ = socket.flush();
                return Ok(ended);
            }
            if self.dirty && in_flight.is_none() && retry_at.is_none_or(|t| Instant::now() >= t) {
                retry_at = None;
                in_flight = self.upload(socket)?;
                self.dirty = in_flight.is_some();
            }
            if let Some(f) = &in_flight {
                if f.sent.elapsed() > ANSWER {
                    return Err("the relay did not answer an upload".into());
                }
            }
            let Some(frame) = read(socket)? else {
                continue;
            };
            match frame["type"].as_str().unwrap_or("") {
                "ack" => {
                    let lsn = frame_lsn(&frame)?;
                    let sent = in_flight.as_ref().map(|f| f.ops.as_slice()).unwrap_or(&[]);
                    let (results, skipped) = ack_results(&frame, sent)?;
                    pause_point("ack_received");
                    let schema = Arc::clone(self.db.schema());
                    acked_waiting = self.write_rows(move |txn, own| {
                        let sql = |e| Error::sqlite("record an ack", "keel_sync_outbox", e);
                        let mut downloaded = Vec::new();
                        for (seq, version) in results {
                            if skipped.contains(&seq) {
                                continue;
                            }
                            let op = ledger::op(txn.connection(), seq).map_err(sql)?;
                            ledger::acked(txn.connection(), seq, version, lsn).map_err(sql)?;
                            if let (Some(op), Some(v)) = (op, version) {
                                let held = ledger::held(txn.connection(), &op.collection, &op.key)
                                    .map_err(sql)?;
                                if held.version >= v {
                                    downloaded.push((op.collection, op.key));
                                }
                            }
                        }
                        downloaded.dedup();
                        apply::refresh(txn, own, &schema, &downloaded)?;
                        apply::roll_back(txn, own, &schema, &skipped)?;
                        // Nothing reached yet covers nothing: no ack is at LSN 0.
                        ledger::covered(txn.connection(), reached.unwrap_or(0)).map_err(sql)
                    })?;
                    pause_point("ack_recorded");
                    in_flight = None;
                    self.dirty = true;
                    self.shared.update(|s| s.uploading = false);
                    refresh_pending(self.db, self.shared);
                }
                "upload_refused" => {
                    let sent = in_flight.take().map(|f| f.ops).unwrap_or_default();
                    self.refused(&frame, &sent)?;
                    self.dirty = true;
                    self.shared.update(|s| s.uploading = false);
                    refresh_pending(self.db, self.shared);
                }
                "error" => {
                    let code = frame["code"].as_str().unwrap_or("");
                    let message = frame["message"].as_str().unwrap_or("");
                    match code {
                        "batch_too_large" | "frame_too_large" => {
                            *self.batch = (*self.batch / 2).max(1);
                            in_flight = None;
                            self.dirty = true;
                        }
                        "unavailable" if snapshot => {
                            // The snapshot failed on the relay's side: connect
                            // again (after the backoff); it resumes after the
                            // last page applied.
                            return Err(format!("relay error {code}: {message}").into());
                        }
                        "unavailable" => {
                            in_flight = None;
                            self.dirty = true;
                            retry_at = Some(Instant::now() + self.backoff.wait());
                            self.shared
                                .update(|s| s.last_error = Some(format!("{code}: {message}")));
                        }
                        "resync" => {
                            snapshot = true;
                            self.shared.update(|s| s.downloading = true);
                        }
                        _ => return Err(format!("relay error {code}: {message}").into()),
                    }
                }
                "refused" => {
                    if frame["code"] == "token_expired" {
                        send(socket, json!({"type": "token", "token": self.token()?}))?;
                    } else {
                        let code = frame["code"].as_str().unwrap_or("").to_owned();
                        let message = frame["message"].as_str().unwrap_or("").to_owned();
                        self.shared.emit(SyncEvent::TokenRefused {
                            code: code.clone(),
                            message: message.clone(),
                        });
                        return Err(format!("token refused: {code}: {message}").into());
                    }
                }
                "welcome" => {
                    // A fresh token was accepted. If the stream had paused, a fresh
                    // snapshot follows; its first frame starts holding changes back.
                }
                "snapshot_start" => {
                    snapshot = true;
                    let resumed = frame["resumed"] == true;
                    let total = frame["rows"].as_u64().unwrap_or(0);
                    let pg_snapshot = frame["snapshot"].as_str().unwrap_or("").to_owned();
                    let saved = saved_download(self.db).filter(|d| d.collections == collections);
                    let names = collections.to_vec();
                    let mut next = self.write(move |txn| {
                        let sql = |e| Error::sqlite("start a snapshot", "keel_sync_state", e);
                        ledger::ensure(txn.connection()).map_err(sql)?;
                        ledger::ensure_marks(txn.connection()).map_err(sql)?;
                        let mark = ledger::state(txn.connection(), SNAPSHOT_MARK)
                            .map_err(sql)?
                            .and_then(|m| m.parse::<i64>().ok())
                            .unwrap_or(0)
                            + 1;
                        ledger::set_state(txn.connection(), SNAPSHOT_MARK, &mark.to_string())
                            .map_err(sql)?;
                        // Resumed: the rows applied before stay counted, and the
                        // first snapshot stays the one "changed since" refers to.
                        let d = match saved.filter(|_| resumed) {
                            Some(saved) => Download {
                                mark,
                                progress: SnapshotProgress {
                                    rows_applied: saved.progress.rows_applied,
                                    rows_total: total,
                                    resumed: true,
                                    done: false,
                                },
                                ..saved
                            },
                            None => {
                                let mut empty = Vec::new();
                                for name in &names {
                                    if apply::is_empty(txn, name)? {
                                        empty.push(name.clone());
                                    }
                                }
                                Download {
                                    mark,
                                    pg_snapshot,
                                    collections: names,
                                    cursor: None,
                                    progress: SnapshotProgress {
                                        rows_total: total,
                                        ..SnapshotProgress::default()
                                    },
                                    empty,
                                }
                            }
                        };
                        ledger::set_state(
                            txn.connection(),
                            SNAPSHOT_STATE,
                            &d.to_json().to_string(),
                        )
                        .map_err(sql)?;
                        Ok(d)
                    })?;
                    next.progress.rows_applied = next.progress.rows_applied.min(total);
                    self.progress(&next.progress);
                    download = Some(next);
                }
                "snapshot" | "snapshot_keys" => {
                    let Some(d) = download.as_mut() else {
                        return Err(BadFrame::malformed(format!(
                            "{} before snapshot_start",
                            frame["type"]
                        ))
                        .into());
                    };
                    let mut frame = frame;
                    let collection = frame["collection"].as_str().unwrap_or("").to_owned();
                    let schema = Arc::clone(self.db.schema());
                    let mark = d.mark;
                    if frame["type"] == "snapshot_keys" {
                        let keys: Vec<Map<String, Json>> = match frame["keys"].take() {
                            Json::Array(keys) => keys
                                .into_iter()
                                .filter_map(|k| match k {
                                    Json::Object(k) => Some(k),
                                    _ => None,
                                })
                                .collect(),
                            _ => Vec::new(),
                        };
                        self.write(move |txn| apply::keys(txn, &schema, &collection, &keys, mark))?;
                        continue;
                    }
                    let rows: Vec<PageRow> = snapshot_rows(&mut frame, &schema, collections)?;
                    // A page with a cursor advances the resume point, in the
                    // same local transaction as its rows.
                    if frame["after"].is_object() {
                        d.cursor = Some((collection.clone(), frame["after"].take()));
                        d.progress.rows_applied = (d.progress.rows_applied + rows.len() as u64)
                            .min(d.progress.rows_total);
                    }
                    let state = d.to_json().to_string();
                    let fresh = d.empty.contains(&collection);
                    self.write_rows(move |txn, own| {
                        apply::page(txn, own, &schema, &collection, rows, mark, fresh)?;
                        ledger::set_state(txn.connection(), SNAPSHOT_STATE, &state).map_err(|e| {
                            Error::sqlite("record the snapshot state", "keel_sync_state", e)
                        })
                    })?;
                    self.progress(&d.progress);
                }
                "snapshot_done" => {
                    let lsn = frame_lsn(&frame)?;
                    pause_point("snapshot_received");
                    let schema = Arc::clone(self.db.schema());
                    let names = collections.to_vec();
                    let later = std::mem::take(&mut held_back);
                    let mut d = download.take();
                    // Without a `snapshot_start` nothing was marked: removing
                    // the rows not marked would remove them all.
                    let mark = d.as_ref().map(|d| d.mark);
                    // The changes held back are complete up to the checkpoints
                    // that came with them, and are applied here too.
                    let reach = held_checkpoint.take().map_or(lsn, |c| c.max(lsn));
                    acked_waiting = self.write_rows(move |txn, own| {
                        ledger::ensure(txn.connection())
                            .map_err(|e| Error::sqlite("finish a snapshot", "keel_sync_rows", e))?;
                        if let Some(mark) = mark {
                            apply::finish(txn, own, &schema, &names, mark, lsn)?;
                        }
                        for (_, changes) in &later {
                            apply::changes(txn, own, &schema, changes)?;
                        }
                        ledger::clear_state(txn.connection(), SNAPSHOT_STATE).map_err(|e| {
                            Error::sqlite("finish a snapshot", "keel_sync_state", e)
                        })?;
                        ledger::covered(txn.connection(), reach).map_err(|e| {
                            Error::sqlite("drop covered operations", "keel_sync_outbox", e)
                        })
                    })?;
                    reached = Some(reach);
                    snapshot = false;
                    let progress = d.as_mut().map(|d| {
                        d.progress.rows_applied = d.progress.rows_total;
                        d.progress.done = true;
                        d.progress.clone()
                    });
                    if let Some(p) = &progress {
                        self.shared.emit(SyncEvent::Snapshot(p.clone()));
                    }
                    pause_point("snapshot_applied");
                    self.shared.update(|s| {
                        s.downloading = false;
                        s.snapshot = None;
                        s.last_synced_lsn = frame["lsn"].as_str().map(str::to_owned);
                    });
                }
                "changes" => {
                    let lsn = frame_lsn(&frame)?;
                    let schema = Arc::clone(self.db.schema());
                    let changes = incoming(&frame, &schema, collections)?;
                    if snapshot {
                        held_back.push((lsn, changes));
                        continue;
                    }
                    pause_point("changes_received");
                    self.write_rows(move |txn, own| apply::changes(txn, own, &schema, &changes))?;
                    pause_point("changes_applied");
                    self.shared
                        .update(|s| s.last_synced_lsn = frame["lsn"].as_str().map(str::to_owned));
                }
                "checkpoint" => {
                    let lsn = frame_lsn(&frame)?;
                    if snapshot {
                        held_checkpoint = Some(held_checkpoint.map_or(lsn, |c| c.max(lsn)));
                        continue;
                    }
                    pause_point("checkpoint_received");
                    reached = Some(reached.map_or(lsn, |r| r.max(lsn)));
                    if acked_waiting {
                        acked_waiting = self.write(move |txn| {
                            ledger::covered(txn.connection(), lsn).map_err(|e| {
                                Error::sqlite("drop covered operations", "keel_sync_outbox", e)
                            })
                        })?;
                    }
                    pause_point("checkpoint_applied");
                    self.shared
                        .update(|s| s.last_synced_lsn = frame["lsn"].as_str().map(str::to_owned));
                }
                _ => {}
            }
        }
    }

    /// Publishes a snapshot's progress: in the status and as an event.
    fn progress(&self, progress: &SnapshotProgress) {
        self.shared.emit(SyncEvent::Snapshot(progress.clone()));
        self.shared.update(|s| {
            s.downloading = true;
            s.snapshot = Some(progress.clone());
        });
    }

    /// Sends the next batch of pending operations, if there are any.
    fn upload(&mut self, socket: &mut Socket) -> std::result::Result<Option<InFlight>, String> {
        let limit = *self.batch;
        let schema = Arc::clone(self.db.schema());
        let ops = self
            .db
            .inner()
            .store
            .read(|conn| {
                let sql = |e| Error::sqlite("read the outbox", "keel_sync_outbox", e);
                let ops = ledger::pending(conn, limit).map_err(sql)?;
                let mut seen = HashSet::new();
                let mut batch = Vec::new();
                for mut op in ops {
                    // An operation whose base version depends on the ack of an
                    // earlier one in this batch (a delete, a server-wins patch of
                    // the same row) waits for the next batch.
                    let row = (op.collection.clone(), op.key.clone());
                    if seen.contains(&row) && depends_on_base(&schema, &op) {
                        break;
                    }
                    let held = ledger::held(conn, &op.collection, &op.key).map_err(sql)?;
                    op.base = op.base.max(held.version).max(held.acked);
                    seen.insert(row);
                    batch.push(op);
                }
                Ok::<_, Error>(batch)
            })
            .map_err(|e| e.to_string())?;
        if ops.is_empty() {
            return Ok(None);
        }
        let frames: Vec<Json> = ops.iter().map(op_json).collect();
        // Pending operations go in sequence order and an answered one leaves the
        // pending set, so the batch's first is the lowest without an answer: the
        // relay may forget its ledger rows below it.
        let unacked_from = ops[0].seq;
        send(
            socket,
            json!({"type": "upload", "ops": frames, "unacked_from": unacked_from}),
        )?;
        pause_point("upload_sent");
        self.shared.update(|s| s.uploading = true);
        Ok(Some(InFlight {
            ops,
            sent: Instant::now(),
        }))
    }

    /// An `upload_refused`: the refused operations are rolled back and named in
    /// an event; the rest stays pending and goes in the next batch.
    fn refused(&mut self, frame: &Json, sent: &[Op]) -> std::result::Result<(), String> {
        let mut refused = Vec::new();
        for entry in frame["ops"].as_array().into_iter().flatten() {
            let seq = entry["seq"].as_i64().or_else(|| {
                let index = entry["index"].as_u64()? as usize;
                sent.get(index).map(|o| o.seq)
            });
            let Some(seq) = seq else { continue };
            let Some(op) = sent.iter().find(|o| o.seq == seq) else {
                continue;
            };
            refused.push(RefusedOp {
                seq,
                collection: op.collection.clone(),
                key: op.key.clone(),
                op: op.op.clone(),
                reason: entry["reason"].as_str().unwrap_or("").to_owned(),
                message: entry["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        if refused.is_empty() {
            return Err(format!(
                "upload refused without naming an operation: {frame}"
            ));
        }
        let seqs: Vec<i64> = refused.iter().map(|r| r.seq).collect();
        let schema = Arc::clone(self.db.schema());
        self.write_rows(move |txn, own| apply::roll_back(txn, own, &schema, &seqs).map(|_| ()))?;
        self.shared.emit(SyncEvent::Refused { ops: refused });
        Ok(())
    }
}

/// Whether `op`'s base version must include the ack of an earlier operation on
/// the same row: a delete (it removes only the incarnation it saw) and a patch of
/// a `server_wins` field.
fn depends_on_base(schema: &keel_schema::Schema, op: &Op) -> bool {
    if op.op == "delete" {
        return true;
    }
    let Some(c) = schema.collection(&op.collection) else {
        return false;
    };
    let t = schema.table(c.table);
    op.fields.keys().any(|name| {
        t.field(name)
            .is_some_and(|f| f.sync == keel_schema::SyncRule::ServerWins)
    })
}

/// An outbox operation as the relay reads it.
fn op_json(op: &Op) -> Json {
    let key: Json = serde_json::from_str(&op.key).unwrap_or(Json::Null);
    let mut o = json!({
        "seq": op.seq,
        "op": op.op,
        "collection": op.collection,
        "key": key,
        "base_version": op.base,
    });
    if op.op != "delete" {
        o["fields"] = Json::Object(op.fields.clone());
    }
    if !op.deltas.is_empty() {
        o["deltas"] = Json::Object(op.deltas.clone());
    }
    o
}

/// The LSN of a frame that must carry one.
fn frame_lsn(frame: &Json) -> std::result::Result<u64, BadFrame> {
    lsn_of(frame)
        .ok_or_else(|| BadFrame::malformed(format!("{} without a readable lsn", frame["type"])))
}

/// The synced table of `collection`, if this client subscribed to it.
fn subscribed<'s>(
    schema: &'s keel_schema::Schema,
    collections: &[String],
    collection: &str,
) -> std::result::Result<&'s keel_schema::Table, BadFrame> {
    let table = schema
        .collection(collection)
        .map(|c| schema.table(c.table))
        .filter(|t| t.sync.is_some());
    match table {
        Some(t) if collections.iter().any(|c| c == collection) => Ok(t),
        _ => Err(BadFrame(
            "unknown_collection",
            format!("{collection:?} is not a collection this client subscribed to"),
        )),
    }
}

/// Whether `row` names every key field of `table` with a value.
fn has_key(table: &keel_schema::Table, row: &serde_json::Map<String, Json>) -> bool {
    table.fields.iter().filter(|f| f.primary).all(|f| {
        row.get(&f.name)
            .is_some_and(|v| v.is_string() || v.is_number())
    })
}

/// The rows of a `snapshot` frame, each with its version.
fn snapshot_rows(
    frame: &mut Json,
    schema: &keel_schema::Schema,
    collections: &[String],
) -> std::result::Result<Vec<PageRow>, BadFrame> {
    let collection = frame["collection"]
        .as_str()
        .ok_or_else(|| BadFrame::malformed("a snapshot without a collection"))?
        .to_owned();
    let table = subscribed(schema, collections, &collection)?;
    let Json::Array(rows) = frame["rows"].take() else {
        return Err(BadFrame::malformed("a snapshot without rows"));
    };
    rows.into_iter()
        .map(|row| {
            let Json::Object(mut row) = row else {
                return Err(BadFrame::malformed("a snapshot row that is not an object"));
            };
            let version = row
                .remove("keel_version")
                .and_then(|v| v.as_i64())
                .ok_or_else(|| BadFrame::malformed("a snapshot row without its keel_version"))?;
            if !has_key(table, &row) {
                return Err(BadFrame::malformed(format!(
                    "a snapshot row of {collection} without its key"
                )));
            }
            Ok((row, version))
        })
        .collect()
}

/// The results of an `ack`: each acknowledged operation of the batch in flight
/// with the row version it gave (`None`: none, a delete), and the skipped ones.
/// An ack naming an operation that is not in flight cannot be recorded.
#[allow(clippy::type_complexity)]
fn ack_results(
    frame: &Json,
    sent: &[Op],
) -> std::result::Result<(Vec<(i64, Option<i64>)>, Vec<i64>), BadFrame> {
    let entries = frame["results"]
        .as_array()
        .ok_or_else(|| BadFrame::malformed("an ack without results"))?;
    let mut results = Vec::new();
    // A skipped operation (`row_gone`, `stale_delete`) changed nothing on the
    // server: locally it is undone like a refusal, so the row reads as the
    // server's again.
    let mut skipped = Vec::new();
    for r in entries {
        let (Some(seq), Some(outcome)) = (r["seq"].as_i64(), r["outcome"].as_str()) else {
            return Err(BadFrame::malformed("an ack result without seq and outcome"));
        };
        if !sent.iter().any(|o| o.seq == seq) {
            return Err(BadFrame::malformed(format!(
                "an ack of operation {seq}, which is not in flight"
            )));
        }
        let version = (outcome == "applied")
            .then(|| r["version"].as_i64())
            .flatten();
        if outcome == "skipped" {
            skipped.push(seq);
        }
        results.push((seq, version));
    }
    Ok((results, skipped))
}

/// The changes of a `changes` frame; one that cannot be read, or of a collection
/// this client did not subscribe to, refuses the frame.
fn incoming(
    frame: &Json,
    schema: &keel_schema::Schema,
    collections: &[String],
) -> std::result::Result<Vec<Incoming>, BadFrame> {
    let changes = frame["changes"]
        .as_array()
        .ok_or_else(|| BadFrame::malformed("a changes frame without changes"))?;
    changes
        .iter()
        .map(|c| {
            let bad = || BadFrame::malformed(format!("a change that cannot be read: {c}"));
            let collection = c["collection"].as_str().ok_or_else(bad)?.to_owned();
            let table = subscribed(schema, collections, &collection)?;
            Ok(match c["op"].as_str().ok_or_else(bad)? {
                "upsert" => {
                    let row = c["row"]
                        .as_object()
                        .filter(|r| has_key(table, r))
                        .ok_or_else(bad)?;
                    Incoming::Upsert {
                        collection,
                        row: row.clone(),
                        version: c["version"].as_i64().ok_or_else(bad)?,
                    }
                }
                "delete" => {
                    let key = c["key"]
                        .as_object()
                        .filter(|k| has_key(table, k))
                        .ok_or_else(bad)?;
                    Incoming::Delete {
                        collection,
                        key: key.clone(),
                        version: c["version"].as_i64().ok_or_else(bad)?,
                    }
                }
                "truncate" => Incoming::Truncate { collection },
                _ => return Err(bad()),
            })
        })
        .collect()
}
