//! One definition of valid bytes: the runtime reader (`DynamicTable::read`, what
//! `insert_bytes` and the FFI verify with) accepts exactly the bytes the generated
//! type's `decode` accepts (the `flatbuffers` verifier plus keel's read), on valid
//! objects and on every kind of damage to them: flipped bytes (a string's NUL
//! terminator, an offset made unaligned), truncation, inserted and removed bytes.
//! Also: a change applied by the runtime (`DynamicTable::patch`) always decodes
//! through the generated type and equals the typed merge.

mod strategies;

use std::sync::OnceLock;

use keel_example_blog::blog::{Post, SCHEMA_FBS};
use keel_schema::{Record, Schema};
use proptest::prelude::*;
use strategies::post;

fn schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| Schema::parse(SCHEMA_FBS, "blog.fbs").unwrap())
}

#[derive(Debug, Clone)]
enum Damage {
    Set(usize, u8),
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Remove(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Set(i, b)),
        4 => (any::<usize>(), 0u8..8).prop_map(|(i, bit)| Damage::Flip(i, 1 << bit)),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Insert(i, b)),
        1 => any::<usize>().prop_map(Damage::Remove),
    ]
}

fn apply(bytes: &mut Vec<u8>, d: &Damage) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    match *d {
        Damage::Set(i, b) => bytes[i % n] = b,
        Damage::Flip(i, m) => bytes[i % n] ^= m,
        Damage::Truncate(i) => bytes.truncate(i % n),
        Damage::Insert(i, b) => bytes.insert(i % n, b),
        Damage::Remove(i) => {
            bytes.remove(i % n);
        }
    }
}

/// Zero one NUL terminator of a string (the dynamic reader once accepted these).
fn drop_a_nul(bytes: &mut [u8], which: usize) {
    let nuls: Vec<usize> = (1..bytes.len())
        .filter(|&i| bytes[i] == 0 && bytes[i - 1] != 0)
        .collect();
    if !nuls.is_empty() {
        bytes[nuls[which % nuls.len()]] = b'x';
    }
}

fn agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let r = schema().reader(Post::COLLECTION).unwrap();
    let generated = Post::decode(bytes);
    let dynamic = r.read(bytes);
    prop_assert_eq!(
        generated.is_ok(),
        dynamic.is_ok(),
        "generated: {:?}\ndynamic: {:?}\nbytes: {:?}",
        generated.as_ref().err(),
        dynamic.as_ref().err(),
        bytes
    );
    Ok(())
}

proptest! {
    // Cheap cases (one encode, two verifications): 10,000 in every test run.
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn runtime_reader_accepts_exactly_what_generated_decode_accepts(
        p in post(),
        damages in proptest::collection::vec(damage(), 0..4),
        nul in proptest::option::of(any::<usize>()),
    ) {
        let mut bytes = p.encode();
        agree(&bytes)?;
        if let Some(w) = nul {
            drop_a_nul(&mut bytes, w);
        }
        for d in &damages {
            apply(&mut bytes, d);
        }
        agree(&bytes)?;
    }
}

fn field_ids() -> Vec<(u16, &'static str)> {
    let t = schema().table(schema().collection(Post::COLLECTION).unwrap().table);
    t.fields
        .iter()
        .filter(|f| !f.deprecated)
        .map(|f| {
            (
                f.id,
                Box::leak(f.name.clone().into_boxed_str()) as &'static str,
            )
        })
        .collect()
}

/// The typed merge: `stored` with the fields `names` taken from `changed`.
fn typed_merge(stored: &Post, changed: &Post, names: &[&str]) -> Post {
    let mut b = stored.to_builder();
    for n in names {
        b = match *n {
            "id" => b.id(changed.id.clone()),
            "priority" => b.priority(changed.priority),
            "color" => b.color(changed.color),
            "title" => match &changed.title {
                Some(t) => b.title(t.clone()),
                None => b.clear_title(),
            },
            "author" => match &changed.author {
                Some(a) => b.author(a.clone()),
                None => b.clear_author(),
            },
            "content" => match &changed.content {
                Some(c) => b.content(c.clone()),
                None => b.clear_content(),
            },
            "pos" => match changed.pos {
                Some(p) => b.pos(p),
                None => b.clear_pos(),
            },
            "frame" => match changed.frame {
                Some(f) => b.frame(f),
                None => b.clear_frame(),
            },
            "tags" => b.tags(changed.tags.clone()),
            "scores" => b.scores(changed.scores.clone()),
            "points" => b.points(changed.points.clone()),
            "attachments" => b.attachments(changed.attachments.clone()),
            "colors" => b.colors(changed.colors.clone()),
            "rating" => match changed.rating {
                Some(r) => b.rating(r),
                None => b.clear_rating(),
            },
            "slug" => match &changed.slug {
                Some(s) => b.slug(s.clone()),
                None => b.clear_slug(),
            },
            "published" => b.published(changed.published),
            "views" => b.views(changed.views),
            "delta" => b.delta(changed.delta),
            "flags" => b.flags(changed.flags.clone()),
            other => panic!("field {other} missing from the test"),
        };
    }
    b.build()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn runtime_patch_equals_the_typed_merge(
        stored in post(),
        changed in post(),
        pick in proptest::collection::vec(any::<bool>(), 19),
    ) {
        let fields = field_ids();
        let chosen: Vec<(u16, &str)> = fields.iter().zip(pick.iter().cycle()).filter(|(_, p)| **p).map(|(f, _)| *f).collect();
        let ids: Vec<u16> = chosen.iter().map(|(id, _)| *id).collect();
        let names: Vec<&str> = chosen.iter().map(|(_, n)| *n).collect();
        let r = schema().reader(Post::COLLECTION).unwrap();
        let merged = r.patch(&stored.encode(), &changed.encode(), &ids).unwrap();
        let decoded = Post::decode(&merged).unwrap();
        prop_assert_eq!(decoded, typed_merge(&stored, &changed, &names));
    }
}

mod monster {
    //! The same differential check on Dflat's Monster schema: a vector of unions,
    //! a union with an indexed tag, a composite key.
    use super::{apply, damage, drop_a_nul};
    use keel_example_blog::monster_v1::{
        Armor, Color, Equipment, Monster, Orb, Weapon, SCHEMA_FBS,
    };
    use keel_schema::{Record, Schema};
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn schema() -> &'static Schema {
        static S: OnceLock<Schema> = OnceLock::new();
        S.get_or_init(|| Schema::parse(SCHEMA_FBS, "monster.fbs").unwrap())
    }

    fn equipment() -> impl Strategy<Value = Equipment> {
        prop_oneof![
            ("[a-z]{0,4}", any::<i16>())
                .prop_map(|(n, d)| Equipment::Weapon(Weapon::builder().name(n).damage(d).build())),
            ("[a-z]{0,4}", any::<i16>())
                .prop_map(|(n, d)| Equipment::Armor(Armor::builder().name(n).defense(d).build())),
            ("[a-z]{0,4}", any::<i8>()).prop_map(|(n, c)| Equipment::Orb(
                Orb::builder().name(n).color(Color::from_raw(c)).build()
            )),
        ]
    }

    prop_compose! {
        fn monster()(
            name in "[a-z]{0,6}",
            color in any::<i8>(),
            (mana, hp) in (any::<i16>(), any::<i16>()),
            equipped in proptest::option::of(equipment()),
            bag in proptest::collection::vec(equipment(), 0..4),
            inventory in proptest::collection::vec(any::<u8>(), 0..4),
        ) -> Monster {
            let b = Monster::builder().name(name).color(Color::from_raw(color)).mana(mana).hp(hp)
                .bag(bag).inventory(inventory);
            match equipped { Some(e) => b.equipped(e).build(), None => b.build() }
        }
    }

    /// Found by the property test below: a damaged byte turns a `bag` element's
    /// tag into one this schema does not know (4) while the element's table
    /// claims an inline size past the buffer. The runtime reader (like Swift's
    /// and Kotlin's) refused it; the generated decode accepted it, because the
    /// verifier checked an unknown member's vtable but not its inline size.
    #[test]
    fn an_unknown_bag_member_with_a_bad_table_size_is_refused_by_both() {
        let orb = Orb::builder().name("a").color(Color::Green).build();
        let armor = Armor::builder().name("a").defense(-1).build();
        let m = Monster::builder()
            .name("aaaa")
            .color(Color::from_raw(3))
            .mana(257)
            .hp(-1)
            .bag(vec![Equipment::Orb(orb), Equipment::Armor(armor)])
            .build();
        let mut bytes = m.encode();
        drop_a_nul(&mut bytes, 5593074045972008671);
        apply(&mut bytes, &super::Damage::Set(4191371975831596633, 4));
        let generated = Monster::decode(&bytes);
        let dynamic = schema().reader(Monster::COLLECTION).unwrap().read(&bytes);
        assert!(
            dynamic.is_err(),
            "the runtime reader accepted the damaged bytes"
        );
        assert_eq!(
            generated.is_ok(),
            dynamic.is_ok(),
            "generated: {:?}\ndynamic: {:?}",
            generated.err(),
            dynamic.err()
        );
    }

    /// The same damage on the single union field `equipped`: an unknown tag
    /// (9) over a table whose inline size runs past the buffer.
    #[test]
    fn an_unknown_equipped_member_with_a_bad_table_size_gets_one_verdict() {
        let armor = Armor::builder().name("a").defense(-1).build();
        let m = Monster::builder()
            .name("m")
            .equipped(Equipment::Armor(armor))
            .build();
        let mut bytes = m.encode();
        let (tag_at, table_at) = {
            let t = keel_schema::wire::TableRef::root(&bytes).unwrap();
            let tag = t.field_pos(5, 1).unwrap().unwrap();
            (tag, t.table(6).unwrap().unwrap().pos())
        };
        let soff = i32::from_le_bytes(bytes[table_at..table_at + 4].try_into().unwrap());
        let vt = (table_at as i64 - soff as i64) as usize;
        bytes[tag_at] = 9;
        bytes[vt + 2..vt + 4].copy_from_slice(&0x7fffu16.to_le_bytes());
        let generated = Monster::decode(&bytes);
        let dynamic = schema().reader(Monster::COLLECTION).unwrap().read(&bytes);
        assert!(
            dynamic.is_err(),
            "the runtime reader accepted the damaged bytes"
        );
        assert_eq!(
            generated.is_ok(),
            dynamic.is_ok(),
            "generated: {:?}\ndynamic: {:?}",
            generated.err(),
            dynamic.err()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        #[test]
        fn runtime_reader_agrees_with_generated_decode_on_monsters(
            m in monster(),
            damages in proptest::collection::vec(damage(), 0..4),
            nul in proptest::option::of(any::<usize>()),
        ) {
            let r = schema().reader(Monster::COLLECTION).unwrap();
            let mut bytes = m.encode();
            prop_assert_eq!(Monster::decode(&bytes).unwrap(), m);
            prop_assert!(r.read(&bytes).is_ok());
            if let Some(w) = nul {
                drop_a_nul(&mut bytes, w);
            }
            for d in &damages {
                apply(&mut bytes, d);
            }
            let generated = Monster::decode(&bytes);
            let dynamic = r.read(&bytes);
            prop_assert_eq!(generated.is_ok(), dynamic.is_ok(),
                "generated: {:?}\ndynamic: {:?}", generated.err(), dynamic.err());
        }
    }
}
