//! Builds, encodes, decodes and queries generated types. Run with
//! `cargo run -p keel-example-blog`.

use keel_example_blog::blog::{Author, Color, Content, Image, Post, Vec2};
use keel_schema::{ChangeRequest, Record, Schema};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Build an immutable object.
    let post = Post::builder()
        .id("hello-world")
        .title("Hello, world")
        .priority(5)
        .color(Color::Blue)
        .author(Author::builder().name("Ada").build())
        .content(
            Image::builder()
                .url("cat.png")
                .width(640)
                .height(480)
                .build(),
        )
        .pos(Vec2 { x: 1.0, y: 2.0 })
        .tags(["intro", "rust"])
        .rating(4.5)
        .build();

    // Encode to FlatBuffers bytes and decode them again.
    let bytes = post.encode();
    let back = Post::decode(&bytes)?;
    assert_eq!(back, post);
    println!(
        "{} bytes, title {:?}, by {:?}",
        bytes.len(),
        back.title,
        back.author.as_ref().and_then(|a| a.name.clone())
    );
    if let Some(Content::Image(img)) = &back.content {
        println!("image {}x{}", img.width, img.height);
    }

    // Queries are plain data, type-checked by the compiler.
    let query = Post::priority().gt(3)
        & Post::author().join(Author::name()).eq("Ada")
        & Post::content_image().join(Image::width()).ge(600);
    println!("query: {query}");
    println!("order: {}", Post::priority().desc());

    // Change requests, Dflat style.
    let change = post.change().title("Hello again").build();
    if let ChangeRequest::Change(p) = &change {
        println!("changed title: {:?}", p.object().title);
    }
    println!(
        "delete: {:?}",
        Post::delete(&"hello-world".to_string()).key_values()
    );

    // The runtime schema reads the same bytes without generated code.
    let schema = Schema::parse(Post::SCHEMA_FBS, "blog.fbs")?;
    let reader = schema.reader(Post::COLLECTION)?;
    let obj = reader.read(&bytes)?;
    println!(
        "dynamic: author.name = {}",
        obj.get(&reader.path("author.name")?)
    );
    println!("json: {}", obj.to_json()?);
    Ok(())
}
