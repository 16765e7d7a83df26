// The control for wrong_type.swift: the same module setup, well-typed queries.
import Keel
import BlogModel

let a = Post.title >= "b" && Post.priority >= 2 && Post.title.isNotNull()
let b = Post.author.name == "Ada" || Post.content.isImage && Post.content.image.width > 100
let c = Post.frame.origin.x < 1.5 && Post.color == .blue && !(Post.rating.isNull())
let d = [Post.priority.descending, Post.title.ascending]
