// Must NOT compile: a filter on `Author` fields cannot filter the `Post` collection.
import Keel
import BlogModel

func authors(_ db: Database) throws -> [Post] {
    try db.fetch(Post.self).where(Author.name == "Ada").all() // expected-error: KeelPredicate<Author>
}
