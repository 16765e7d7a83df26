//! Proptest strategies for the blog schema's objects, over every field type, shared
//! by the property tests.

use keel_example_blog::blog::{Author, Color, Content, Image, Post, Rect, Vec2, Video};
use proptest::prelude::*;

pub fn finite_f32() -> impl Strategy<Value = f32> {
    -1.0e6f32..1.0e6
}

pub fn vec2() -> impl Strategy<Value = Vec2> {
    (finite_f32(), finite_f32()).prop_map(|(x, y)| Vec2 { x, y })
}

pub fn rect() -> impl Strategy<Value = Rect> {
    (vec2(), vec2(), any::<i16>()).prop_map(|(origin, size, layer)| Rect {
        origin,
        size,
        layer,
    })
}

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z]{1,8}", any::<String>()]
}

pub fn author() -> impl Strategy<Value = Author> {
    (proptest::option::of(text()), any::<i32>()).prop_map(|(name, age)| {
        let b = Author::builder().age(age);
        match name {
            Some(n) => b.name(n).build(),
            None => b.build(),
        }
    })
}

pub fn image() -> impl Strategy<Value = Image> {
    (proptest::option::of(text()), any::<i32>(), any::<i32>()).prop_map(|(url, w, h)| {
        let b = Image::builder().width(w).height(h);
        match url {
            Some(u) => b.url(u).build(),
            None => b.build(),
        }
    })
}

pub fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        image().prop_map(Content::Image),
        (text(), finite_f32())
            .prop_map(|(u, s)| Content::Video(Video::builder().url(u).seconds(s).build())),
    ]
}

pub fn color() -> impl Strategy<Value = Color> {
    // includes values unknown to the schema: they must survive a round trip
    any::<i8>().prop_map(Color::from_raw)
}

prop_compose! {
    pub fn post()(
        (id, priority, color, title, author) in (text(), any::<i32>(), color(), proptest::option::of(text()), proptest::option::of(author())),
        (content, pos, frame, tags, scores) in (proptest::option::of(content()), proptest::option::of(vec2()), proptest::option::of(rect()), proptest::collection::vec(text(), 0..4), proptest::collection::vec(any::<i32>(), 0..5)),
        (points, attachments, colors, rating, slug) in (proptest::collection::vec(vec2(), 0..3), proptest::collection::vec(image(), 0..3), proptest::collection::vec(color(), 0..4), proptest::option::of(-1.0e12f64..1.0e12), proptest::option::of(text())),
        (published, views, delta, flags) in (any::<bool>(), any::<u64>(), any::<i8>(), proptest::collection::vec(any::<u8>(), 0..8)),
    ) -> Post {
        let mut b = Post::builder()
            .id(id).priority(priority).color(color).tags(tags).scores(scores)
            .points(points).attachments(attachments).colors(colors)
            .published(published).views(views).delta(delta).flags(flags);
        if let Some(t) = title { b = b.title(t); }
        if let Some(a) = author { b = b.author(a); }
        if let Some(c) = content { b = b.content(c); }
        if let Some(p) = pos { b = b.pos(p); }
        if let Some(f) = frame { b = b.frame(f); }
        if let Some(r) = rating { b = b.rating(r); }
        if let Some(s) = slug { b = b.slug(s); }
        b.build()
    }
}
