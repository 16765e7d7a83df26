// Must NOT compile: Post's primary key is a String, not an Int.
import Keel
import BlogModel

func lookup(_ db: Database) throws -> Post? {
    try db.get(Post.self, key: 42) // expected-error: String
}
