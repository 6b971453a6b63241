// Package model holds the PostgreSQL peer's GraphQL objects, as its
// resolvers return them before gqlgen asks for their fields.
package model

// Post is a row of posts: the rest of it (counts, author, the viewer's
// flags) is resolved per field, through the request's loaders.
type Post struct {
	ID       string
	Key      int64 // the id as the tables hold it
	AuthorID int64
}

// PostCounts is a row of post_counts (zeros when the post has none).
type PostCounts struct {
	Likes, Comments, Reposts, Views, Favorites int64
}

// User is a row of users (zeros when the user has none).
type User struct {
	ID                                       string
	PostCount, FollowerCount, FollowingCount int64
}
