//! `stop_callbacks` waits for a call into foreign code that is running when it
//! starts, and returns once that call has returned. A listener's delivery
//! leaves without waking anyone until a stop is waiting, so this checks that
//! the stop is still woken. A binary of its own, since the stop holds for the
//! rest of the process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use keel_ffi::{
    encode_json, open_blocking, stop_callbacks, CallbackError, OpenOptions, QueryListener,
    QueryUpdate, WriteOp,
};

const FBS: &str = "namespace demo;
table Post { id: string (primary); priority: int = 1; }
root_type Post;";

/// How long the second delivery keeps running: the stop must wait for it.
const HOLD: Duration = Duration::from_millis(300);

/// Tells the test when a delivery after the first has started, holds it for
/// [`HOLD`], and records that it returned.
struct Slow {
    deliveries: Mutex<u32>,
    entered: Mutex<Option<mpsc::Sender<()>>>,
    returned: Arc<AtomicBool>,
}

impl QueryListener for Slow {
    fn on_update(&self, _: QueryUpdate) -> Result<(), CallbackError> {
        let n = {
            let mut d = self.deliveries.lock().unwrap();
            *d += 1;
            *d
        };
        if n == 2 {
            if let Some(tx) = self.entered.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            std::thread::sleep(HOLD);
            self.returned.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[test]
fn stop_callbacks_returns_once_the_running_delivery_has_returned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db").display().to_string();
    let db = open_blocking(path, FBS.into(), OpenOptions::default(), None).unwrap();
    let (tx, entered) = mpsc::channel();
    let returned = Arc::new(AtomicBool::new(false));
    let _sub = db
        .query("demo.Post".into())
        .subscribe(Box::new(Slow {
            deliveries: Mutex::new(0),
            entered: Mutex::new(Some(tx)),
            returned: Arc::clone(&returned),
        }))
        .unwrap();
    // Never joined: once callbacks stop, the wake of a suspended call is
    // dropped too (no keel thread enters a dying runtime), so this write's
    // future never resolves.
    {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let bytes = encode_json(
                FBS.into(),
                "demo.Post".into(),
                r#"{"id": "a", "priority": 2}"#.into(),
            )
            .unwrap();
            block_on(db.write(vec![WriteOp::Insert {
                collection: "demo.Post".into(),
                bytes,
            }]))
            .unwrap();
        });
    }
    entered.recv_timeout(Duration::from_secs(30)).unwrap();
    let start = Instant::now();
    assert!(
        stop_callbacks(60_000),
        "the running delivery was not waited for"
    );
    assert!(
        returned.load(Ordering::SeqCst),
        "stop_callbacks returned while the delivery still ran"
    );
    // Woken when the delivery returned, not at the timeout.
    assert!(start.elapsed() < Duration::from_secs(30));
}
