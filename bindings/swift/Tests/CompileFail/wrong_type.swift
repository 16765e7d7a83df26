// Must NOT compile: `title` is a string field, compared with an Int.
// `cargo xtask test` runs `swiftc -typecheck` on every wrong_*.swift here and
// requires an error on the marked line that mentions the text after the marker.
import Keel
import BlogModel

let query = Post.title >= 2 // expected-error: KeelField<Post, String>
