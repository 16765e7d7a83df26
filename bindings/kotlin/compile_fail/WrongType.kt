// Compiled by `cargo xtask test` against the suite's classes; it must NOT compile.
// `Post.title` is a `Field<Post, String>`: comparing it with an Int is a type error,
// caught by the Kotlin compiler, not at run time. The suite checks that the compiler
// reports exactly this line.
import blog.Post
import dev.keel.Predicate

val ok: Predicate<Post> = (Post.priority ge 2) and Post.title.isNotNull()
val wrong = Post.title ge 2 // KEEL-EXPECT-ERROR
