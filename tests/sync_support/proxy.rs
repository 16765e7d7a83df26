//! A fault-injecting TCP proxy between sync clients and a relay.
//!
//! Clients connect to the proxy's address; each connection is forwarded to the
//! relay the proxy points at now ([`Proxy::set_upstream`]: a restarted relay
//! listens elsewhere). Two threads pump each connection, one per direction. What
//! the proxy does to the bytes is [`Faults`], drawn from a seeded generator:
//!
//! * **delay** — each chunk waits a random time up to `delay_max` first;
//! * **cut** — after a chunk, with probability `cut_per_mille`/1000, both sides
//!   of the connection are shut down (a dropped connection);
//! * **offline** — every connection is cut and new ones are closed at once, as
//!   when the device has no network ([`Proxy::set_faults`] with `offline`);
//! * **stall** — bytes are held, not forwarded, until the stall ends (a network
//!   that loses packets and retransmits: the connection lives, nothing moves);
//! * **corrupt** — toward the client, before a relay frame, with probability
//!   `corrupt_per_mille`/1000, one [`Injection`] of a random kind.
//!
//! Toward the client the proxy reads the relay's WebSocket stream frame by frame
//! (after the HTTP upgrade), so an injection lands between two whole frames, as a
//! broken relay or network would deliver it. [`Proxy::inject`] queues one
//! injection of a chosen kind for the next relay frame.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A small seeded generator (splitmix64): the same seed, the same faults in the
/// same order of draws.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `per_mille`/1000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

/// What the proxy does to the traffic now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    pub delay_max: Duration,
    pub cut_per_mille: u32,
    pub corrupt_per_mille: u32,
    pub offline: bool,
    pub stall: bool,
}

/// A bad frame toward the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injection {
    /// A text frame that is not JSON.
    Garbage,
    /// The next relay frame's text cut in half, as a whole frame.
    TruncatedJson,
    /// A frame header announcing 8 GiB, then the connection is cut.
    Oversized,
    /// A binary frame.
    Binary,
    /// A `changes` frame: a readable upsert of post `ghost-malformed`, then a
    /// change without its key.
    MalformedChange,
    /// A `changes` frame: a readable upsert of post `ghost-unknown`, then a change
    /// of a collection nobody subscribed to.
    UnknownCollection,
    /// The first half of the next relay frame, then the connection is cut.
    CutMidFrame,
}

impl Injection {
    pub const ALL: [Injection; 7] = [
        Injection::Garbage,
        Injection::TruncatedJson,
        Injection::Oversized,
        Injection::Binary,
        Injection::MalformedChange,
        Injection::UnknownCollection,
        Injection::CutMidFrame,
    ];
}

struct State {
    upstream: Mutex<Option<SocketAddr>>,
    faults: Mutex<Faults>,
    rng: Mutex<Rng>,
    queued: Mutex<VecDeque<Injection>>,
    live: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    next_id: AtomicU64,
    injected: AtomicU64,
    cuts: AtomicU64,
    closed: AtomicBool,
}

/// A running proxy; dropping it stops accepting and cuts every connection.
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl Proxy {
    /// A proxy toward `upstream` (`None`: nothing to connect to yet), faults
    /// drawn from `seed`.
    pub fn start(upstream: Option<SocketAddr>, seed: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            upstream: Mutex::new(upstream),
            faults: Mutex::new(Faults::default()),
            rng: Mutex::new(Rng::new(seed)),
            queued: Mutex::new(VecDeque::new()),
            live: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let s = Arc::clone(&state);
        std::thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept(listener, s))
            .unwrap();
        Proxy { addr, state }
    }

    /// The WebSocket URL clients use.
    pub fn url(&self) -> String {
        format!("ws://{}/sync", self.addr)
    }

    /// Points new connections at `upstream` (`None`: they are closed at once).
    pub fn set_upstream(&self, upstream: Option<SocketAddr>) {
        *self.state.upstream.lock().unwrap() = upstream;
    }

    /// Changes the faults; going offline cuts every connection.
    pub fn set_faults(&self, faults: Faults) {
        let offline = faults.offline;
        *self.state.faults.lock().unwrap() = faults;
        if offline {
            self.cut_all();
        }
    }

    pub fn faults(&self) -> Faults {
        self.state.faults.lock().unwrap().clone()
    }

    /// Queues one injection before the next relay frame toward a client.
    pub fn inject(&self, kind: Injection) {
        self.state.queued.lock().unwrap().push_back(kind);
    }

    /// Whether a queued injection is still waiting for a relay frame.
    pub fn injection_pending(&self) -> bool {
        !self.state.queued.lock().unwrap().is_empty()
    }

    /// Cuts every open connection.
    pub fn cut_all(&self) {
        for (_, a, b) in self.state.live.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// How many bad frames it injected.
    pub fn injected(&self) -> u64 {
        self.state.injected.load(Ordering::Relaxed)
    }

    /// How many connections it forwarded.
    pub fn connections(&self) -> u64 {
        self.state.next_id.load(Ordering::Relaxed)
    }

    /// How many connections it cut at random.
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::Relaxed);
        self.cut_all();
        // Wake the accept loop so it sees `closed`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept(listener: TcpListener, state: Arc<State>) {
    for client in listener.incoming() {
        if state.closed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        let upstream = *state.upstream.lock().unwrap();
        let offline = state.faults.lock().unwrap().offline;
        let relay = match upstream {
            Some(addr) if !offline => {
                TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()
            }
            _ => None,
        };
        let Some(relay) = relay else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = relay.set_nodelay(true);
        let id = state.next_id.fetch_add(1, Ordering::Relaxed);
        let seed = state.rng.lock().unwrap().next_u64();
        state.live.lock().unwrap().push((
            id,
            client.try_clone().unwrap(),
            relay.try_clone().unwrap(),
        ));
        let up = Pump {
            state: Arc::clone(&state),
            id,
            from: client.try_clone().unwrap(),
            to: relay.try_clone().unwrap(),
            rng: Rng::new(seed),
        };
        let down = Pump {
            state: Arc::clone(&state),
            id,
            from: relay,
            to: client,
            rng: Rng::new(seed ^ 0x5555_5555_5555_5555),
        };
        std::thread::spawn(move || up.bytes());
        std::thread::spawn(move || down.frames());
    }
}

/// One direction of one connection.
struct Pump {
    state: Arc<State>,
    id: u64,
    from: TcpStream,
    to: TcpStream,
    rng: Rng,
}

impl Pump {
    fn faults(&self) -> Faults {
        self.state.faults.lock().unwrap().clone()
    }

    fn cut(&self) {
        let _ = self.from.shutdown(Shutdown::Both);
        let _ = self.to.shutdown(Shutdown::Both);
        self.state
            .live
            .lock()
            .unwrap()
            .retain(|(id, _, _)| *id != self.id);
    }

    /// Waits out a stall and the chunk's delay; `false` when the connection is
    /// to be cut (offline, or the draw says so).
    fn before_forward(&mut self) -> bool {
        loop {
            let f = self.faults();
            if f.offline {
                return false;
            }
            if !f.stall {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let f = self.faults();
        let wait = self.rng.below(f.delay_max.as_micros() as u64);
        if wait > 0 {
            std::thread::sleep(Duration::from_micros(wait));
        }
        if self.rng.chance(f.cut_per_mille) {
            self.state.cuts.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Client → relay: bytes as they come.
    fn bytes(mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match self.from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !self.before_forward() || self.to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        self.cut();
    }

    /// Relay → client: the HTTP upgrade as it comes, then whole WebSocket frames,
    /// an injection before a frame now and then.
    fn frames(mut self) {
        let mut pending: Vec<u8> = Vec::new();
        let mut upgraded = false;
        let mut buf = vec![0u8; 64 * 1024];
        'outer: loop {
            let n = match self.from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            if !upgraded {
                let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head: Vec<u8> = pending.drain(..end + 4).collect();
                if !self.before_forward() || self.to.write_all(&head).is_err() {
                    break;
                }
                upgraded = true;
            }
            while let Some(len) = frame_len(&pending) {
                let frame: Vec<u8> = pending.drain(..len).collect();
                if !self.before_forward() {
                    break 'outer;
                }
                let queued = self.state.queued.lock().unwrap().pop_front();
                let kind = match queued {
                    Some(k) => Some(k),
                    None => {
                        let f = self.faults();
                        if self.rng.chance(f.corrupt_per_mille) {
                            let i = self.rng.below(Injection::ALL.len() as u64) as usize;
                            Some(Injection::ALL[i])
                        } else {
                            None
                        }
                    }
                };
                if let Some(kind) = kind {
                    self.state.injected.fetch_add(1, Ordering::Relaxed);
                    let (bytes, then_cut) = injection(kind, &frame);
                    if self.to.write_all(&bytes).is_err() || then_cut {
                        break 'outer;
                    }
                }
                if self.to.write_all(&frame).is_err() {
                    break 'outer;
                }
            }
        }
        self.cut();
    }
}

/// The length of the first whole WebSocket frame in `b`, if it is all there.
fn frame_len(b: &[u8]) -> Option<usize> {
    if b.len() < 2 {
        return None;
    }
    let masked = b[1] & 0x80 != 0;
    let (len, mut at) = match b[1] & 0x7f {
        126 => (
            u16::from_be_bytes(b.get(2..4)?.try_into().ok()?) as usize,
            4,
        ),
        127 => (
            u64::from_be_bytes(b.get(2..10)?.try_into().ok()?) as usize,
            10,
        ),
        n => (n as usize, 2),
    };
    if masked {
        at += 4;
    }
    let total = at + len;
    (b.len() >= total).then_some(total)
}

/// The payload of an unmasked frame.
fn payload(frame: &[u8]) -> &[u8] {
    let at = match frame[1] & 0x7f {
        126 => 4,
        127 => 10,
        _ => 2,
    };
    &frame[at..]
}

/// A server frame (unmasked) of `opcode` carrying `payload`.
fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => f.push(n as u8),
        n if n <= u16::MAX as usize => {
            f.push(126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(payload);
    f
}

/// The bytes of an injection before the relay frame `next`, and whether the
/// connection is cut after them.
pub fn injection(kind: Injection, next: &[u8]) -> (Vec<u8>, bool) {
    let text = |s: &str| server_frame(0x1, s.as_bytes());
    match kind {
        Injection::Garbage => (text("this is not JSON {\"type\":"), false),
        Injection::TruncatedJson => {
            let p = payload(next);
            let cut = if p.len() > 1 {
                &p[..p.len() / 2]
            } else {
                b"{\"ty"
            };
            (server_frame(0x1, cut), false)
        }
        Injection::Oversized => {
            let mut f = vec![0x81, 127];
            f.extend_from_slice(&(8u64 << 30).to_be_bytes());
            f.extend_from_slice(b"{\"type\":\"changes\"");
            (f, true)
        }
        Injection::Binary => (server_frame(0x2, b"\x00\x01binary"), false),
        Injection::MalformedChange => (
            text(
                r#"{"type":"changes","lsn":"FFFF/0","changes":[
                {"op":"upsert","collection":"blog.Post","row":{"id":"ghost-malformed","owner":"ann","title":"never"},"version":9000000000},
                {"op":"upsert","collection":"blog.Post","row":{"title":"no key"},"version":9000000001}]}"#,
            ),
            false,
        ),
        Injection::UnknownCollection => (
            text(
                r#"{"type":"changes","lsn":"FFFF/0","changes":[
                {"op":"upsert","collection":"blog.Post","row":{"id":"ghost-unknown","owner":"ann","title":"never"},"version":9000000000},
                {"op":"upsert","collection":"blog.Nowhere","row":{"id":"x"},"version":9000000001}]}"#,
            ),
            false,
        ),
        Injection::CutMidFrame => {
            let half = next.len().div_ceil(2).max(1).min(next.len());
            (next[..half].to_vec(), true)
        }
    }
}
