// Must NOT compile: `title` is a string field, compared with an Int.
// `cargo xtask test` runs `swiftc -typecheck` on this file and expects exactly this
// error on the marked line.
import Keel
import BlogModel

let query = Post.title >= 2 // expected-error: Int is not a String
