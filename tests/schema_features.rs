//! Schema features Dflat apps use, each compiled (generated types), stored, indexed,
//! queried and evolved: an indexed union field (its type tag) and indexed fields of
//! a table that is not a collection, reached through a union (`equipped.Orb.name`).

use keel::prelude::*;
use keel_example_blog::{monster_v1 as v1, monster_v2 as v2};

fn monsters() -> Vec<v1::Monster> {
    let orb = |n: &str, c| v1::Orb::builder().name(n).color(c).build();
    vec![
        v1::Monster::builder()
            .name("orc")
            .color(v1::Color::Red)
            .equipped(orb("fire", v1::Color::Red))
            .build(),
        v1::Monster::builder()
            .name("elf")
            .equipped(orb("ice", v1::Color::Blue))
            .build(),
        v1::Monster::builder()
            .name("troll")
            .equipped(v1::Weapon::builder().name("club").damage(9).build())
            .build(),
        v1::Monster::builder().name("ghost").build(),
    ]
}

fn names<R: std::borrow::Borrow<v1::Monster>>(v: &[R]) -> Vec<String> {
    let mut n: Vec<String> = v.iter().map(|m| m.borrow().name.clone()).collect();
    n.sort();
    n
}

#[test]
fn indexes_on_a_union_and_inside_a_union_member() {
    let schema = keel::schema::Schema::parse(v1::SCHEMA_FBS, "monster.fbs").unwrap();
    let c = schema.collection("game.Monster").unwrap();
    let indexed: Vec<&str> = c.indexes.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        indexed,
        vec!["equipped", "equipped.Orb.name", "equipped.Orb.color"]
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let db = Database::open_for::<v1::Monster>(&path, StoreOptions::default()).unwrap();
    let all = monsters();
    db.write(move |t| {
        for m in &all {
            t.insert(m)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();

    // Query through the union member's field: answered from its index.
    let q = || {
        db.fetch::<v1::Monster>()
            .filter(v1::Monster::equipped_orb().join(v1::Orb::name()).eq("ice"))
    };
    assert_eq!(names(&q().all().unwrap()), vec!["elf"]);
    let plan = db
        .query("game.Monster")
        .filter(v1::Monster::equipped_orb().join(v1::Orb::name()).eq("ice"))
        .explain()
        .unwrap()
        .join("\n");
    assert!(plan.contains("game.Monster#"), "index not used: {plan}");
    // Query on the union tag: answered from the union field's index.
    let orbs = db
        .fetch::<v1::Monster>()
        .filter(v1::Monster::equipped_orb().is_member());
    let plan = db
        .query("game.Monster")
        .filter(v1::Monster::equipped_orb().is_member())
        .explain()
        .unwrap()
        .join("\n");
    assert_eq!(names(&orbs.all().unwrap()), vec!["elf", "orc"]);
    assert!(
        plan.contains("USING INDEX") || plan.contains("USING COVERING INDEX"),
        "{plan}"
    );
    let states = db.index_states().unwrap();
    assert_eq!(states.len(), 3, "{states:?}");
    db.close().wait().unwrap();

    // Evolve: v2 indexes more paths inside union members; they build on open.
    let db = Database::open_for::<v2::Monster>(&path, StoreOptions::default()).unwrap();
    db.wait_for_indexes().unwrap();
    let states = db.index_states().unwrap();
    assert_eq!(states.len(), 5, "{states:?}");
    assert!(states.iter().all(|(_, s)| s == "ready"), "{states:?}");
    let strong = db.fetch::<v2::Monster>().filter(
        v2::Monster::equipped_weapon()
            .join(v2::Weapon::damage())
            .gt(5),
    );
    let got: Vec<String> = strong
        .all()
        .unwrap()
        .iter()
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(got, vec!["troll".to_string()]);
    let plan = db
        .query("game.Monster")
        .filter(
            v2::Monster::equipped_weapon()
                .join(v2::Weapon::damage())
                .eq(9),
        )
        .explain()
        .unwrap()
        .join("\n");
    assert!(plan.contains("game.Monster#"), "{plan} {states:?}");
    // Objects written by v1 read back through v2's types.
    assert_eq!(db.fetch::<v2::Monster>().count().unwrap(), 4);
}

/// A `(unique)` field inside a union member is unique across the collection (absent
/// values do not collide).
#[test]
fn unique_inside_a_union_member() {
    let fbs = "table Orb { name: string (unique); } table Axe { w: int; } union Eq { Orb, Axe }
               table M { id: int (primary); e: Eq; } root_type M;";
    let schema = keel::schema::Schema::parse(fbs, "u.fbs").unwrap();
    let r = schema.reader("M").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(
        dir.path().join("u.db"),
        schema.clone(),
        StoreOptions::default(),
    )
    .unwrap();
    let obj = |j: serde_json::Value| r.encode_json(&j).unwrap();
    let a = obj(serde_json::json!({"id": 1, "e_type": "Orb", "e": {"name": "x"}}));
    let b = obj(serde_json::json!({"id": 2, "e_type": "Orb", "e": {"name": "x"}}));
    let c = obj(serde_json::json!({"id": 3, "e_type": "Axe", "e": {"w": 1}}));
    let d = obj(serde_json::json!({"id": 4, "e_type": "Axe", "e": {"w": 2}}));
    db.write(move |t| t.insert_bytes("M", a)).wait().unwrap();
    let err = db
        .write(move |t| t.insert_bytes("M", b))
        .wait()
        .unwrap_err();
    assert!(err.is_already_exists(), "{err:?}");
    db.write(move |t| {
        t.insert_bytes("M", c)?;
        t.insert_bytes("M", d)
    })
    .wait()
    .unwrap();
    assert_eq!(db.query("M").count().unwrap(), 3);
}

/// Two tables named `Item` in different namespaces: namespaced Rust types, two
/// collections in one file, each stored, indexed, queried, and evolved.
#[test]
fn same_table_name_in_two_namespaces() {
    use keel_example_blog::{ns_v1, ns_v2};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.db");
    let db = Database::open_for::<ns_v1::shop::Item>(&path, StoreOptions::default()).unwrap();
    db.write(|t| {
        t.insert(&ns_v1::shop::Item::builder().sku("a").price(5).build())?;
        t.insert(&ns_v1::shop::Item::builder().sku("b").price(9).build())?;
        t.insert(
            &ns_v1::warehouse::Item::builder()
                .bin(1)
                .sku("a")
                .count(3)
                .build(),
        )?;
        Ok(())
    })
    .wait()
    .unwrap();
    // Flat names exist too, qualified because the plain name is taken twice.
    let cheap: Vec<ns_v1::ShopItem> = db
        .fetch::<ns_v1::shop::Item>()
        .filter(ns_v1::shop::Item::price().lt(7))
        .all()
        .unwrap();
    assert_eq!(cheap.len(), 1);
    let stocked = db
        .fetch::<ns_v1::WarehouseItem>()
        .filter(ns_v1::warehouse::Item::sku().eq("a"))
        .all()
        .unwrap();
    assert_eq!(stocked[0].count, 3);
    let plan = db
        .query("warehouse.Item")
        .filter(ns_v1::warehouse::Item::sku().eq("a"))
        .explain()
        .unwrap()
        .join("\n");
    assert!(plan.contains("warehouse.Item#"), "{plan}");
    db.close().wait().unwrap();

    let db = Database::open_for::<ns_v2::shop::Item>(&path, StoreOptions::default()).unwrap();
    db.wait_for_indexes().unwrap();
    db.write(|t| {
        t.insert(
            &ns_v2::warehouse::Item::builder()
                .bin(2)
                .sku("b")
                .reserved(1)
                .build(),
        )
    })
    .wait()
    .unwrap();
    let reserved = db
        .fetch::<ns_v2::warehouse::Item>()
        .filter(ns_v2::warehouse::Item::reserved().gt(0))
        .count()
        .unwrap();
    assert_eq!(reserved, 1);
    assert_eq!(db.fetch::<ns_v2::shop::Item>().count().unwrap(), 2);
    assert_eq!(db.fetch::<ns_v2::warehouse::Item>().count().unwrap(), 2);
}

/// A vector of unions (`bag: [Equipment]`): generated types, storage, the runtime
/// reader and JSON, a change request on it, queries on its presence, and reading
/// v1 objects through v2's types.
#[test]
fn vector_of_unions() {
    let bag = vec![
        v1::Equipment::Weapon(v1::Weapon::builder().name("axe").damage(3).build()),
        v1::Equipment::Orb(
            v1::Orb::builder()
                .name("fire")
                .color(v1::Color::Red)
                .build(),
        ),
        v1::Equipment::Armor(v1::Armor::builder().name("mail").defense(4).build()),
    ];
    let m = v1::Monster::builder().name("orc").bag(bag.clone()).build();
    // Round trip through bytes, and the runtime reader agrees.
    let bytes = m.encode();
    assert_eq!(v1::Monster::decode(&bytes).unwrap(), m);
    let schema = keel::schema::Schema::parse(v1::SCHEMA_FBS, "monster.fbs").unwrap();
    let r = schema.reader("game.Monster").unwrap();
    let json = r.read(&bytes).unwrap().to_json().unwrap();
    assert_eq!(
        json["bag_type"],
        serde_json::json!(["Weapon", "Orb", "Armor"])
    );
    assert_eq!(json["bag"][1]["name"], "fire");
    assert_eq!(
        v1::Monster::decode(&r.encode_json(&json).unwrap()).unwrap(),
        m
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bag.db");
    let db = Database::open_for::<v1::Monster>(&path, StoreOptions::default()).unwrap();
    let m2 = m.clone();
    db.write(move |t| {
        t.insert(&m2)?;
        t.insert(&v1::Monster::builder().name("elf").build())
    })
    .wait()
    .unwrap();
    let key = v1::Monster::key_of("orc", v1::Color::Blue);
    assert_eq!(db.get::<v1::Monster>(&key).unwrap().unwrap().bag, bag);
    // The whole vector reads as a presence marker in queries.
    let with_bag = keel::schema::Expr::IsNotNull(r.path("bag").unwrap());
    assert_eq!(
        db.query("game.Monster").filter(with_bag).count().unwrap(),
        1
    );
    // A change request replaces the vector and keeps the other fields.
    let stale = db.get::<v1::Monster>(&key).unwrap().unwrap();
    let fewer = stale.change().bag(bag[1..2].to_vec()).build();
    db.write(move |t| t.submit(fewer)).wait().unwrap();
    let now = db.get::<v1::Monster>(&key).unwrap().unwrap();
    assert_eq!(now.bag, bag[1..2].to_vec());
    assert_eq!(now.hp, 100);
    db.close().wait().unwrap();

    // v2 reads the same bytes (its Orb has a new field: absent, default).
    let db = Database::open_for::<v2::Monster>(&path, StoreOptions::default()).unwrap();
    let orc = db
        .get::<v2::Monster>(&v2::Monster::key_of("orc", v2::Color::Blue))
        .unwrap()
        .unwrap();
    match &orc.bag[..] {
        [v2::Equipment::Orb(o)] => assert_eq!((o.name.as_deref(), o.power), (Some("fire"), 0)),
        other => panic!("{other:?}"),
    }
}

/// Bad vectors of unions (lengths that differ, a tag vector without tables) are
/// refused by both verifiers alike.
#[test]
fn damaged_vector_of_unions_is_refused_by_both_verifiers() {
    let m = v1::Monster::builder()
        .name("orc")
        .bag([v1::Equipment::Orb(v1::Orb::builder().name("x").build())])
        .build();
    let schema = keel::schema::Schema::parse(v1::SCHEMA_FBS, "monster.fbs").unwrap();
    let r = schema.reader("game.Monster").unwrap();
    let good = m.encode();
    // Find the tag vector `[1u32 len][tag 3]` and make its length 2.
    let at = good
        .windows(5)
        .position(|w| w == [1, 0, 0, 0, 3])
        .expect("tag vector");
    let mut bad = good.clone();
    bad[at] = 2;
    assert!(v1::Monster::decode(&bad).is_err());
    assert!(r.read(&bad).is_err());
    let mut bad = good;
    bad[at] = 0; // empty tag vector, one table: inconsistent
    assert!(v1::Monster::decode(&bad).is_err());
    assert!(r.read(&bad).is_err());
}
