//! Dictionary: every type round-trips across close and reopen; typed
//! errors; defaults, remove, keys, remove_all; transactions; subscriptions; cache.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use futures::StreamExt;
use keel::{Database, DictKind, DictValue, Error, StoreOptions};
use keel_example_blog::blog::Post;

fn open(path: &Path) -> Database {
    Database::open_for::<Post>(path, StoreOptions::default()).unwrap()
}

fn reopen(db: Database) -> Database {
    let path = db.path().to_path_buf();
    db.close().wait().unwrap();
    drop(db);
    open(&path)
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Prefs {
    theme: String,
    sizes: Vec<u32>,
    ratio: Option<f64>,
}

fn mismatch<T: std::fmt::Debug>(r: keel::Result<T>) -> (String, String) {
    match r {
        Err(Error::DictionaryTypeMismatch {
            stored, requested, ..
        }) => (stored, requested),
        other => panic!("expected a type mismatch, got {other:?}"),
    }
}

#[test]
fn every_type_round_trips_across_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let post = Post::builder()
        .id("draft")
        .title("Unsent ✉")
        .priority(-4)
        .tags(vec!["a".to_string(), "b".to_string()])
        .build();
    let prefs = Prefs {
        theme: "dark".into(),
        sizes: vec![1, 2, 3],
        ratio: Some(0.25),
    };
    {
        let d = db.dictionary();
        d.set("bool_t", true).unwrap();
        d.set("bool_f", false).unwrap();
        d.set("i8", i8::MIN).unwrap();
        d.set("i16", i16::MAX).unwrap();
        d.set("i32", -123_456i32).unwrap();
        d.set("i64", i64::MIN).unwrap();
        d.set("u8", u8::MAX).unwrap();
        d.set("u16", 65_000u16).unwrap();
        d.set("u32", u32::MAX).unwrap();
        d.set("u64", u64::MAX).unwrap();
        d.set("usize", 7usize).unwrap();
        d.set("f32", 1.1f32).unwrap();
        d.set("f64", std::f64::consts::PI).unwrap();
        d.set("f64_neg_zero", -0.0f64).unwrap();
        d.set("f64_inf", f64::NEG_INFINITY).unwrap();
        d.set("f64_nan", f64::NAN).unwrap();
        d.set("str", "héllo, 世界").unwrap();
        d.set("string_empty", String::new()).unwrap();
        d.set("bytes", &[0u8, 255, 0, 7][..]).unwrap();
        d.set("bytes_empty", Vec::<u8>::new()).unwrap();
        d.set_object("object", &post).unwrap();
        d.set_serde("serde", &prefs).unwrap();
        d.set("dynamic", DictValue::UInt(42)).unwrap();
        d.set("", "the empty key").unwrap();
        d.set("key with\0nul", 1).unwrap();
    }
    let check = |db: &Database| {
        let d = db.dictionary();
        assert_eq!(d.get::<bool>("bool_t").unwrap(), Some(true));
        assert_eq!(d.get::<bool>("bool_f").unwrap(), Some(false));
        assert_eq!(d.get::<i8>("i8").unwrap(), Some(i8::MIN));
        assert_eq!(d.get::<i16>("i16").unwrap(), Some(i16::MAX));
        assert_eq!(d.get::<i32>("i32").unwrap(), Some(-123_456));
        assert_eq!(d.get::<i64>("i64").unwrap(), Some(i64::MIN));
        assert_eq!(d.get::<u8>("u8").unwrap(), Some(u8::MAX));
        assert_eq!(d.get::<u16>("u16").unwrap(), Some(65_000));
        assert_eq!(d.get::<u32>("u32").unwrap(), Some(u32::MAX));
        assert_eq!(d.get::<u64>("u64").unwrap(), Some(u64::MAX));
        assert_eq!(d.get::<usize>("usize").unwrap(), Some(7));
        assert_eq!(d.get::<f32>("f32").unwrap(), Some(1.1f32));
        assert_eq!(d.get::<f64>("f64").unwrap(), Some(std::f64::consts::PI));
        let z = d.get::<f64>("f64_neg_zero").unwrap().unwrap();
        assert!(z == 0.0 && z.is_sign_negative());
        assert_eq!(d.get::<f64>("f64_inf").unwrap(), Some(f64::NEG_INFINITY));
        assert!(d.get::<f64>("f64_nan").unwrap().unwrap().is_nan());
        assert_eq!(
            d.get::<String>("str").unwrap().as_deref(),
            Some("héllo, 世界")
        );
        assert_eq!(
            d.get::<String>("string_empty").unwrap().as_deref(),
            Some("")
        );
        assert_eq!(d.get::<Vec<u8>>("bytes").unwrap(), Some(vec![0, 255, 0, 7]));
        assert_eq!(d.get::<Vec<u8>>("bytes_empty").unwrap(), Some(vec![]));
        assert_eq!(d.get_object::<Post>("object").unwrap(), Some(post.clone()));
        assert_eq!(d.get_serde::<Prefs>("serde").unwrap(), Some(prefs.clone()));
        assert_eq!(d.get_value("dynamic").unwrap(), Some(DictValue::UInt(42)));
        assert_eq!(
            d.get::<String>("").unwrap().as_deref(),
            Some("the empty key")
        );
        assert_eq!(d.get::<i32>("key with\0nul").unwrap(), Some(1));
        assert_eq!(
            d.get_value("object").unwrap().map(|v| v.kind()),
            Some(DictKind::Object)
        );
        assert_eq!(
            d.get_value("serde").unwrap().map(|v| v.kind()),
            Some(DictKind::Json)
        );
        assert_eq!(d.keys().unwrap().len(), 25);
    };
    check(&db);
    let db = reopen(db);
    // A fresh process: nothing cached, every read comes from disk.
    assert_eq!(db.dictionary().stats().cached_entries, 0);
    check(&db);
    // And through a raw look at the table: natural SQLite types, kind and type tags.
    let (kind, ty, value): (i64, Option<String>, String) = db
        .store()
        .read(|c| {
            c.query_row(
                "SELECT kind, type, typeof(value) FROM keel_dict WHERE key = 'object'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(keel::storage::Error::from)
        })
        .unwrap();
    assert_eq!(
        (kind, ty.as_deref(), value.as_str()),
        (7, Some("blog.Post"), "blob")
    );
    db.close().wait().unwrap();
}

#[test]
fn a_value_read_as_another_type_is_a_typed_error_or_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    d.set("big", 300i64).unwrap();
    d.set("neg", -1i32).unwrap();
    d.set("huge", u64::MAX).unwrap();
    d.set("s", "text").unwrap();
    d.set("flag", true).unwrap();
    d.set("x", 1e300f64).unwrap();
    d.set_serde("prefs", &vec![1, 2]).unwrap();
    d.set(
        "foreign",
        DictValue::Object {
            collection: "other.Thing".into(),
            bytes: vec![1, 2, 3, 4],
        },
    )
    .unwrap();
    d.set(
        "bad_post",
        DictValue::Object {
            collection: "blog.Post".into(),
            bytes: vec![1, 2, 3],
        },
    )
    .unwrap();
    let db = reopen(db); // the same from disk
    let d = db.dictionary();
    for _ in 0..2 {
        // first read from disk, second from the cache
        assert_eq!(mismatch(d.get::<u8>("big")), ("int".into(), "u8".into()));
        assert_eq!(d.get::<u16>("big").unwrap(), Some(300));
        assert_eq!(mismatch(d.get::<u64>("neg")).1, "u64");
        assert_eq!(
            mismatch(d.get::<i64>("huge")),
            ("uint".into(), "i64".into())
        );
        assert_eq!(mismatch(d.get::<i32>("s")), ("string".into(), "i32".into()));
        assert_eq!(mismatch(d.get::<Vec<u8>>("s")).0, "string");
        assert_eq!(mismatch(d.get::<i64>("flag")).0, "bool");
        assert_eq!(mismatch(d.get::<bool>("big")).0, "int");
        assert_eq!(mismatch(d.get::<f32>("x")), ("float".into(), "f32".into()));
        assert_eq!(mismatch(d.get::<f64>("big")).0, "int");
        assert_eq!(mismatch(d.get::<String>("prefs")).0, "json");
        assert!(mismatch(d.get_serde::<Prefs>("prefs"))
            .0
            .starts_with("json"));
        assert_eq!(d.get_serde::<Vec<u8>>("prefs").unwrap(), Some(vec![1, 2]));
        assert_eq!(mismatch(d.get_serde::<Prefs>("s")).0, "string");
        assert_eq!(
            mismatch(d.get_object::<Post>("foreign")),
            ("object other.Thing".into(), "blog.Post".into())
        );
        assert!(mismatch(d.get_object::<Post>("bad_post"))
            .0
            .contains("do not decode"));
        assert_eq!(mismatch(d.get_object::<Post>("s")).0, "string");
        // The `_or` getter gives the default instead.
        assert_eq!(d.get_or::<u8>("big", 9), 9);
        assert_eq!(d.get_or("s", 0i32), 0);
        assert_eq!(d.get_or("missing", 5u64), 5);
        assert_eq!(d.get_or("big", 0i64), 300);
    }
    let e = d.get::<u8>("big").unwrap_err();
    assert_eq!(
        e.to_string(),
        "dictionary key \"big\": stored as int, cannot be read as u8"
    );
    db.close().wait().unwrap();
}

#[test]
fn defaults_remove_keys_and_remove_all_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    d.register_defaults([("volume", DictValue::Float(0.5)), ("name", "anon".into())]);
    assert_eq!(d.get::<f64>("volume").unwrap(), Some(0.5));
    assert!(!d.contains("volume").unwrap());
    for i in 0..100 {
        d.set(&format!("k{i:03}"), i).unwrap();
    }
    d.set("volume", 0.9).unwrap();
    d.remove("k050").unwrap();
    d.remove("never_set").unwrap();
    let mut want: Vec<String> = (0..100)
        .filter(|i| *i != 50)
        .map(|i| format!("k{i:03}"))
        .collect();
    want.push("volume".into());
    assert_eq!(d.keys().unwrap(), want);
    d.sync().wait().unwrap();
    assert_eq!(d.keys().unwrap(), want);

    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.keys().unwrap(), want);
    assert_eq!(d.get::<i32>("k050").unwrap(), None);
    assert_eq!(d.get::<i32>("k051").unwrap(), Some(51));
    assert_eq!(d.get::<f64>("volume").unwrap(), Some(0.9));
    // Defaults live in memory: not registered in this session.
    assert_eq!(d.get::<String>("name").unwrap(), None);
    d.register_defaults([("name", "anon")]);
    assert_eq!(d.get::<String>("name").unwrap().as_deref(), Some("anon"));

    // remove_all, then new sets: only the new ones exist, in memory and on disk.
    d.remove_all().unwrap();
    assert!(d.keys().unwrap().is_empty());
    assert_eq!(d.get::<i32>("k051").unwrap(), None);
    d.set("after", 1).unwrap();
    assert_eq!(d.keys().unwrap(), vec!["after".to_string()]);
    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.keys().unwrap(), vec!["after".to_string()]);
    assert_eq!(d.get::<i32>("k051").unwrap(), None);
    db.close().wait().unwrap();
}

#[test]
fn txn_dictionary_is_atomic_with_the_transactions_objects() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    // Commit: both.
    db.write(|t| {
        t.insert(&Post::builder().id("p1").build())?;
        t.dictionary().set("last_post", "p1")?;
        assert_eq!(
            t.dictionary().get::<String>("last_post")?.as_deref(),
            Some("p1")
        );
        Ok(())
    })
    .wait()
    .unwrap();
    assert_eq!(
        db.dictionary()
            .get::<String>("last_post")
            .unwrap()
            .as_deref(),
        Some("p1")
    );
    // The closure fails: neither.
    let r = db
        .write(|t| {
            t.insert(&Post::builder().id("p2").build())?;
            t.dictionary().set("last_post", "p2")?;
            t.dictionary().set("other", 1)?;
            t.insert(&Post::builder().id("p1").build())?; // duplicate: fails
            Ok(())
        })
        .wait();
    assert!(r.unwrap_err().is_already_exists());
    // Aborted: neither.
    let r = db
        .write(|t| {
            t.insert(&Post::builder().id("p3").build())?;
            t.dictionary().remove_all()?;
            t.abort();
            Ok(())
        })
        .wait();
    assert!(matches!(r, Err(Error::Aborted { .. })));
    let d = db.dictionary();
    assert_eq!(d.get::<String>("last_post").unwrap().as_deref(), Some("p1"));
    assert_eq!(d.get::<i32>("other").unwrap(), None);
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    // Not visible to others before commit; read-modify-write inside.
    d.set("n", 1u32).unwrap();
    db.write(|t| {
        let n = t.dictionary().get_or("n", 0u32);
        t.dictionary().set("n", n + 1)?;
        t.dictionary().remove("gone")?;
        Ok(())
    })
    .wait()
    .unwrap();
    assert_eq!(d.get::<u32>("n").unwrap(), Some(2));
    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.get::<String>("last_post").unwrap().as_deref(), Some("p1"));
    assert_eq!(d.get::<u32>("n").unwrap(), Some(2));
    assert_eq!(d.keys().unwrap(), vec!["last_post".to_string(), "n".into()]);
    db.close().wait().unwrap();
}

#[test]
fn txn_and_background_sets_keep_real_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    for round in 0..50i64 {
        // A pending background set, then a transaction on the same key: the
        // transaction is later, it wins.
        d.set("a", round * 10).unwrap();
        let fut = db.write(move |t| t.dictionary().set("a", round * 10 + 1));
        // A transaction that rolls back must not lose an earlier pending set.
        d.set("b", round).unwrap();
        let rb = db.write(|t| {
            t.dictionary().set("b", -1)?;
            t.dictionary().remove_all()?;
            Err::<(), _>(Error::Aborted {
                path: Default::default(),
            })
        });
        // A set after the transaction was queued (and maybe ran): it is later.
        fut.wait().unwrap();
        let _ = rb.wait();
        d.set("c", round).unwrap();
        assert_eq!(d.get::<i64>("a").unwrap(), Some(round * 10 + 1));
        assert_eq!(d.get::<i64>("b").unwrap(), Some(round));
    }
    d.sync().wait().unwrap();
    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.get::<i64>("a").unwrap(), Some(491));
    assert_eq!(d.get::<i64>("b").unwrap(), Some(49));
    assert_eq!(d.get::<i64>("c").unwrap(), Some(49));
    db.close().wait().unwrap();
}

#[test]
fn subscriptions_deliver_initial_value_updates_and_removals() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    d.set("theme", "light").unwrap();
    let next = |s: &mut keel::DictStream| futures::executor::block_on(s.next()).unwrap();

    let mut s = d.subscribe("theme");
    assert_eq!(next(&mut s), Some(DictValue::String("light".into())));
    d.set("theme", "dark").unwrap();
    assert_eq!(next(&mut s), Some(DictValue::String("dark".into())));
    d.set("other", 1).unwrap(); // another key: nothing
    assert_eq!(s.try_next(), None);
    d.remove("theme").unwrap();
    assert_eq!(next(&mut s), None);
    d.remove("theme").unwrap(); // already absent: no second removal
    assert_eq!(s.try_next(), None);
    db.write(|t| t.dictionary().set("theme", "txn"))
        .wait()
        .unwrap();
    assert_eq!(next(&mut s), Some(DictValue::String("txn".into())));
    // A rolled-back transaction delivers nothing.
    let _ = db
        .write(|t| {
            t.dictionary().set("theme", "never")?;
            t.abort();
            Ok(())
        })
        .wait();
    assert_eq!(s.try_next(), None);
    d.remove_all().unwrap();
    assert_eq!(next(&mut s), None);
    // Removal with a registered default delivers the default.
    d.register_defaults([("theme", "system")]);
    d.set("theme", "x").unwrap();
    d.remove("theme").unwrap();
    assert_eq!(next(&mut s), Some(DictValue::String("system".into())));
    // A slow consumer gets the latest value only.
    for i in 0..100 {
        d.set("theme", format!("v{i}")).unwrap();
    }
    assert_eq!(next(&mut s), Some(DictValue::String("v99".into())));
    assert_eq!(s.try_next(), None);

    // Callbacks: initial value then updates, on another thread; drop stops them.
    let (tx, rx) = mpsc::channel();
    let sub = d.subscribe_with("count", move |v| {
        let _ = tx.send(v);
    });
    let t = Duration::from_secs(5);
    assert_eq!(rx.recv_timeout(t).unwrap(), None);
    d.set("count", 1).unwrap();
    assert_eq!(rx.recv_timeout(t).unwrap(), Some(DictValue::Int(1)));
    d.set("count", 2).unwrap();
    let mut last = rx.recv_timeout(t).unwrap();
    while last != Some(DictValue::Int(2)) {
        last = rx.recv_timeout(t).unwrap();
    }
    drop(sub);
    d.set("count", 3).unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    drop(s);
    db.close().wait().unwrap();
}

#[test]
fn hot_reads_stay_in_memory_and_misses_load_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    for i in 0..500 {
        d.set(&format!("k{i}"), i).unwrap();
    }
    let before = d.stats().disk_reads;
    for i in 0..500 {
        assert_eq!(d.get::<i32>(&format!("k{i}")).unwrap(), Some(i));
    }
    assert_eq!(d.stats().disk_reads, before, "hot reads touched the disk");

    let db = reopen(db);
    let d = db.dictionary();
    for i in 0..500 {
        assert_eq!(d.get::<i32>(&format!("k{i}")).unwrap(), Some(i));
    }
    assert_eq!(d.stats().disk_reads, 500);
    assert_eq!(d.get::<i32>("absent").unwrap(), None);
    for i in 0..500 {
        assert_eq!(d.get::<i32>(&format!("k{i}")).unwrap(), Some(i));
    }
    assert_eq!(d.get::<i32>("absent").unwrap(), None);
    assert_eq!(d.stats().disk_reads, 501, "absent keys are cached too");

    // preload: one scan, then no misses.
    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.preload().unwrap(), 500);
    for i in 0..500 {
        assert_eq!(d.get::<i32>(&format!("k{i}")).unwrap(), Some(i));
    }
    assert_eq!(d.stats().disk_reads, 0);

    // A small cache evicts clean entries only; values stay right.
    d.set_cache_limit(32 * 1024);
    for i in 0..2000 {
        d.set(&format!("big{i}"), vec![i as u8; 100]).unwrap();
    }
    assert!(d.stats().dirty_entries > 0 || d.stats().flushes > 0);
    d.sync().wait().unwrap();
    for i in 0..2000 {
        assert_eq!(
            d.get::<Vec<u8>>(&format!("big{i}")).unwrap(),
            Some(vec![i as u8; 100])
        );
    }
    let st = d.stats();
    assert!(st.cached_bytes <= 40 * 1024, "{st:?}");
    assert!(st.disk_reads > 501);
    db.close().wait().unwrap();
}

#[test]
fn closed_database_refuses_dictionary_calls() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    d.set("a", 1).unwrap();
    db.close().wait().unwrap();
    assert!(d.set("a", 2).unwrap_err().is_closed());
    assert!(d.get::<i32>("a").unwrap_err().is_closed());
    assert!(d.sync().wait().unwrap_err().is_closed());
    let db = open(&dir.path().join("d.db"));
    assert_eq!(db.dictionary().get::<i32>("a").unwrap(), Some(1));
}

/// Deterministic version of the ordering race: the writer is busy while a set is
/// made, so the transaction queued before the set's flush finds it pending. The
/// transaction (later in real time) must win on disk; a rolled-back one must leave
/// the pending set to be persisted.
#[test]
fn a_transaction_takes_over_an_older_pending_set_of_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let blocker = db.write(move |_| {
        go_rx.recv().unwrap();
        Ok(())
    });
    // Queued behind the blocker: the transactions run after the sets below.
    let (set_tx, set_rx) = mpsc::channel::<()>();
    let wins = db.write(move |t| {
        set_rx.recv().unwrap();
        t.dictionary().set("a", "txn")
    });
    let rolls_back = db.write(|t| {
        t.dictionary().set("b", "txn")?;
        t.dictionary().remove_all()?;
        t.abort();
        Ok(())
    });
    d.set("a", "pending").unwrap(); // its flush is queued after the transactions
    d.set("b", "pending").unwrap();
    set_tx.send(()).unwrap();
    go_tx.send(()).unwrap();
    blocker.wait().unwrap();
    wins.wait().unwrap();
    assert!(matches!(rolls_back.wait(), Err(Error::Aborted { .. })));
    assert_eq!(d.get::<String>("a").unwrap().as_deref(), Some("txn"));
    assert_eq!(d.get::<String>("b").unwrap().as_deref(), Some("pending"));
    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.get::<String>("a").unwrap().as_deref(), Some("txn"));
    assert_eq!(d.get::<String>("b").unwrap().as_deref(), Some("pending"));
    db.close().wait().unwrap();
}

/// A `remove_all` that is still pending when a transaction writes must not be
/// flushed after the transaction (it would delete the transaction's values).
#[test]
fn a_pending_remove_all_is_applied_before_a_later_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    d.set("old", 1).unwrap();
    d.sync().wait().unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let blocker = db.write(move |_| {
        go_rx.recv().unwrap();
        Ok(())
    });
    let txn = db.write(|t| t.dictionary().set("k", "txn"));
    let rolled_back = db.write(|t| {
        t.dictionary().set("x", 1)?;
        t.abort();
        Ok(())
    });
    d.remove_all().unwrap(); // its flush is queued after the transactions
    go_tx.send(()).unwrap();
    blocker.wait().unwrap();
    txn.wait().unwrap();
    let _ = rolled_back.wait();
    assert_eq!(d.keys().unwrap(), vec!["k".to_string()]);
    assert_eq!(d.get::<i32>("old").unwrap(), None);
    d.sync().wait().unwrap();
    let db = reopen(db);
    let d = db.dictionary();
    assert_eq!(d.keys().unwrap(), vec!["k".to_string()]);
    assert_eq!(d.get::<String>("k").unwrap().as_deref(), Some("txn"));
    assert_eq!(d.get::<i32>("old").unwrap(), None);
    db.close().wait().unwrap();
}

/// A `remove_all` made after a transaction's set but before its commit is later:
/// the commit must not bring the value back, in memory or on disk.
#[test]
fn a_remove_all_after_a_transactions_set_wins() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    let d2 = d.clone();
    db.write(move |t| {
        t.dictionary().set("k", 1)?;
        d2.remove_all()?; // later in real time than the set above
        Ok(())
    })
    .wait()
    .unwrap();
    assert_eq!(d.get::<i32>("k").unwrap(), None);
    assert!(d.keys().unwrap().is_empty());
    let db = reopen(db);
    assert_eq!(db.dictionary().get::<i32>("k").unwrap(), None);
    db.close().wait().unwrap();
}

/// `Database::close` ends dictionary streams (after their pending value) and
/// stops callbacks; a subscription made after the close starts ended.
#[test]
fn close_ends_dictionary_streams_and_callbacks() {
    use futures::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("d.db"));
    let d = db.dictionary();
    let mut s = d.subscribe("k");
    assert_eq!(futures::executor::block_on(s.next()), Some(None));
    let (tx, rx) = mpsc::channel();
    let _sub = d.subscribe_with("k", move |v| {
        let _ = tx.send(v);
    });
    let t = Duration::from_secs(5);
    assert_eq!(rx.recv_timeout(t).unwrap(), None);
    d.set("k", 1).unwrap();
    assert_eq!(rx.recv_timeout(t).unwrap(), Some(DictValue::Int(1)));
    db.close().wait().unwrap();
    // The value set before the close, then the end.
    assert_eq!(
        s.next().now_or_never().expect("ready after close"),
        Some(Some(DictValue::Int(1)))
    );
    assert_eq!(s.next().now_or_never().expect("ended"), None);
    assert!(d.set("k", 2).is_err());
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    let mut late = d.subscribe("k");
    assert_eq!(late.next().now_or_never().expect("ended"), None);
}
