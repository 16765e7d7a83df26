// Must NOT compile: generated models are immutable (`let` fields, as Dflat's); a
// changed copy comes from `post.with { $0.title = … }`.
import Keel
import BlogModel

func retitle(_ post: Post) -> Post {
    var copy = post
    copy.title = "new" // expected-error: 'let' constant
    return copy
}
