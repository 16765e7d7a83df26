// Must NOT compile: generated structs are immutable like tables (`let` fields); a
// changed copy comes from `pos.with { $0.x = … }`.
import Keel
import BlogModel

func moved(_ pos: Vec2) -> Vec2 {
    var copy = pos
    copy.x = 1 // expected-error: 'let' constant
    return copy
}
