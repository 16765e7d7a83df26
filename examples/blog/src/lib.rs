//! keel example: Rust types generated from `schema/blog.fbs` by `build.rs`.
//!
//! ```
//! use keel_example_blog::blog::{Color, Post};
//! use keel_schema::Record;
//! let post = Post::builder().id("p1").title("Hello").priority(3).build();
//! let back = Post::decode(&post.encode()).unwrap();
//! assert_eq!(back, post);
//! assert_eq!(back.color, Color::Green); // schema default
//! let query = Post::priority().gt(2) & Post::title().eq("Hello");
//! assert_eq!(query.to_string(), "(priority > 2 AND title == \"Hello\")");
//! assert_eq!(post.primary_key(), vec!["p1".into()]);
//! ```
//!
//! Queries are type-checked: comparing an `int` field with a string does not compile.
//!
//! ```compile_fail
//! use keel_example_blog::blog::Post;
//! let _ = Post::priority().gt("x");
//! ```

/// Types generated from `schema/blog.fbs`.
pub mod blog {
    include!(concat!(env!("OUT_DIR"), "/blog.rs"));
}

/// Version 1 of the evolution-test schema (`schema/evolution/post_v1.fbs`).
pub mod evo_v1 {
    include!(concat!(env!("OUT_DIR"), "/post_v1.rs"));
}

/// Version 2 of the evolution-test schema (`schema/evolution/post_v2.fbs`).
pub mod evo_v2 {
    include!(concat!(env!("OUT_DIR"), "/post_v2.rs"));
}

/// Code-generation edge cases (`schema/edge.fbs`): keywords as field names,
/// composite and enum keys, union aliases, vectors of every element kind.
pub mod edge {
    include!(concat!(env!("OUT_DIR"), "/edge.rs"));
}

/// Dflat's Monster schema (`schema/monster/monster_v1.fbs`): composite key, a union
/// with an indexed tag, indexed fields of a union member table.
pub mod monster_v1 {
    include!(concat!(env!("OUT_DIR"), "/monster_v1.rs"));
}

/// Version 2 of the Monster schema (`schema/monster/monster_v2.fbs`): more indexed
/// paths.
pub mod monster_v2 {
    include!(concat!(env!("OUT_DIR"), "/monster_v2.rs"));
}

/// Two tables named `Item` in different namespaces (`schema/namespaces/ns_v1.fbs`):
/// `ns_v1::shop::Item` and `ns_v1::warehouse::Item`.
pub mod ns_v1 {
    include!(concat!(env!("OUT_DIR"), "/ns_v1.rs"));
}

/// Version 2 of `ns_v1` (`schema/namespaces/ns_v2.fbs`).
pub mod ns_v2 {
    include!(concat!(env!("OUT_DIR"), "/ns_v2.rs"));
}

/// Types generated from `schema/relations.fbs`: references between collections.
pub mod rel {
    include!(concat!(env!("OUT_DIR"), "/relations.rs"));
}

/// Photos and points with `(vector: N)` embeddings
/// (`bindings/swift/Tests/vector.fbs`, the shape `docs/vector.md` shows):
/// `Photo::embedding()` is the handle a nearest query takes.
pub mod vectors {
    include!(concat!(env!("OUT_DIR"), "/vector.rs"));
}

/// `mod name { include!(OUT_DIR/file) }` for each `name: "file"`.
macro_rules! generated {
    ($($name:ident: $file:literal),* $(,)?) => {
        $(
            mod $name {
                include!(concat!(env!("OUT_DIR"), "/", $file));
            }
        )*
    };
}

/// Every generated schema again, in a private module that nothing uses and that
/// denies warnings: the generated code compiles warning-free wherever a crate
/// `include!`s it, used or not (no unused re-export, no dead code).
#[deny(warnings)]
mod unused {
    generated! {
        blog: "blog.rs",
        evo_v1: "post_v1.rs",
        evo_v2: "post_v2.rs",
        edge: "edge.rs",
        monster_v1: "monster_v1.rs",
        monster_v2: "monster_v2.rs",
        ns_v1: "ns_v1.rs",
        ns_v2: "ns_v2.rs",
        rel: "relations.rs",
        vectors: "vector.rs",
    }
}
