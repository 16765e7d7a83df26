// The control for wrong_*.swift: the same module setup, well-typed queries.
import Keel
import BlogModel

let a = Post.title >= "b" && Post.priority >= 2 && Post.title.isNotNull()
let b = Post.author.name == "Ada" || Post.content.isImage && Post.content.image.width > 100
let c = Post.frame.origin.x < 1.5 && Post.color == .blue && !(Post.rating.isNull())
let d = [Post.priority.descending, Post.title.ascending]

func top(_ db: Database) throws -> [Post] {
    try db.fetch(Post.self).where(a && b && c).sorted(by: Post.priority.descending).all()
}

func lookup(_ db: Database) throws -> Post? {
    try db.get(Post.self, key: "p1")
}

func retitle(_ post: Post) -> Post {
    post.with { $0.title = "new"; $0.author = $0.author?.with { $0.name = "Ada" } }
}

func moved(_ frame: Rect) -> Rect {
    frame.with { $0.origin = $0.origin.with { $0.x += 1 }; $0.layer = 2 }
}
