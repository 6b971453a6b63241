package demoseed

// The demo cast and what they write. Tally stores counts, not content: the
// names, post texts and group name below exist only in the demo world (the
// app's side of the picture), keyed by the ids Tally knows.

// Cast is the eight named demo users, ids 1..8.
var Cast = []User{
	{ID: 1, Name: "Maya Chen", Handle: "maya"},
	{ID: 2, Name: "Leo Park", Handle: "leo"},
	{ID: 3, Name: "Ana Souza", Handle: "ana"},
	{ID: 4, Name: "Sam Okafor", Handle: "sam"},
	{ID: 5, Name: "Inès Duarte", Handle: "ines"},
	{ID: 6, Name: "Kenji Mori", Handle: "kenji"},
	{ID: 7, Name: "Zoe Novak", Handle: "zoe"},
	{ID: 8, Name: "Omar Haddad", Handle: "omar"},
}

// follows lists who follows whom (follower → followees).
var follows = map[uint64][]uint64{
	1: {2, 3, 4, 5},
	2: {1, 3, 6},
	3: {1, 2, 5, 7},
	4: {1, 2, 3},
	5: {1, 3, 8},
	6: {1, 2, 7},
	7: {1, 6, 8},
	8: {1, 5, 7},
}

// postSpec is one seeded post: its author, text, age and the audience it
// reached. Likes and views beyond the cast come from anonymous audience
// users (ids from audienceBase up), so the counts are real engine counts.
type postSpec struct {
	author   uint64
	ageMin   int // minutes before the seed ran
	text     string
	likes    int // total likes, cast first, then audience
	comments int
	reposts  int // reposts by the audience (cast reposts come from repostSpecs)
	views    int
	favs     int
}

// audienceBase is the first id of the anonymous audience.
const audienceBase = 1000

// posts is the seeded feed, oldest first: a long tail where a few posts
// travel far and most stay small.
var posts = []postSpec{
	{1, 2870, "Moved into the new flat. The light in the kitchen at 7am is unreal.", 14, 3, 0, 220, 1},
	{4, 2790, "Shipped the new onboarding flow. Conversion up 11% in the first day.", 41, 9, 2, 980, 6},
	{2, 2700, "Hot take: the best camera is the one with a charged battery.", 6, 2, 0, 140, 0},
	{6, 2610, "Kyoto in the rain. No notes.", 388, 27, 14, 6400, 52},
	{3, 2500, "Finished my first half marathon. 1:58:40. Legs are gone.", 73, 18, 1, 1900, 4},
	{7, 2420, "Does anyone still use RSS? Asking for a friend (me).", 9, 12, 0, 310, 0},
	{5, 2300, "Sunday market haul: figs, sourdough, far too many tomatoes.", 22, 4, 0, 430, 3},
	{8, 2210, "Reading list for the week: three papers on CRDTs and one novel.", 5, 1, 0, 120, 2},
	{1, 2100, "Team offsite planning: cabin, board games, zero laptops. Who's in?", 11, 7, 0, 260, 0},
	{2, 1980, "Found a 1970s film camera at a garage sale for $8. It works.", 1204, 96, 61, 12480, 171},
	{4, 1870, "Reminder that your pager rotation is a product too.", 17, 5, 1, 520, 2},
	{3, 1760, "Trail report: the upper loop is open again, bring layers.", 8, 2, 0, 190, 1},
	{6, 1650, "Made ramen from scratch. Took nine hours. Worth it.", 57, 14, 3, 1500, 9},
	{7, 1540, "Small wins: inbox zero, plants watered, tabs closed.", 3, 0, 0, 75, 0},
	{5, 1430, "Our cat figured out how to open the treat drawer. We have lost.", 236, 33, 12, 4100, 20},
	{8, 1320, "Unpopular opinion: meetings should have a stated outcome or not happen.", 29, 21, 2, 880, 1},
	{1, 1210, "The hike group is back! Saturday, 8am, usual trailhead.", 12, 6, 0, 240, 0},
	{2, 1100, "New lens day. Everything is a portrait now.", 4, 1, 0, 96, 0},
	{3, 990, "Coffee order of the day: cortado, extra shot, no regrets.", 2, 0, 0, 60, 0},
	{4, 880, "We're hiring two backend engineers. DM me, remote friendly.", 64, 11, 22, 3400, 15},
	{6, 770, "Sunrise from the ferry this morning.", 19, 2, 0, 410, 3},
	{7, 660, "Wrote 500 words today. That counts.", 7, 3, 0, 150, 0},
	{5, 550, "Bike repaired, tyres pumped, ready for the weekend.", 1, 0, 0, 40, 0},
	{8, 440, "Just learned the word 'petrichor'. Using it all week.", 10, 4, 0, 230, 1},
	{1, 330, "Anyone have a good sourdough starter to share? Mine gave up.", 8, 9, 0, 180, 0},
	{2, 240, "Golden hour at the pier.", 33, 5, 1, 760, 5},
	{3, 150, "Signed up for the autumn marathon. Future me will be upset.", 6, 4, 0, 130, 0},
	{6, 80, "Tiny bookshop find: a 1962 atlas with hand-drawn notes.", 3, 1, 0, 55, 1},
	{4, 35, "Status page is green, coffee is hot, deploy is out.", 2, 0, 0, 21, 0},
	{7, 12, "New post, who dis.", 0, 0, 0, 4, 0},
}

// castReposts are reposts by the cast: (reposter, index into posts). They
// become posts in the feed too.
var castReposts = []struct {
	by   uint64
	post int
}{
	{1, 9},
	{3, 3},
	{5, 14},
	{7, 12},
}

// castReactions are reactions of a kind other than like by the cast, on
// deployments that have such kinds: (reactor, index into posts, rank
// among the kinds but like), so a viewer sees their own pick in the
// picker. The reactor does not like the post (castLikers).
var castReactions = []struct {
	by   uint64
	post int
	rank int
}{
	{1, 3, 0},
	{3, 3, 1},
}

// commentMentions: comments that @-mention someone, as (commenter, index
// into posts, mentioned users).
var commentMentions = []struct {
	by    uint64
	post  int
	users []uint64
}{
	{2, 16, []uint64{1, 3}},
	{4, 24, []uint64{1}},
	{6, 9, []uint64{2, 7}},
	{3, 4, []uint64{1}},
	{8, 15, []uint64{4}},
}

// GroupName is the seeded group's display name.
const GroupName = "Weekend Hikers"

// groupMembers are the members of the seeded group; the first creates it.
var groupMembers = []uint64{1, 2, 3, 4, 5}

// chat is the group's history: sender, text, mentions, and which other
// members have read it.
var chat = []struct {
	from     uint64
	text     string
	mentions []uint64
	readBy   []uint64
}{
	{1, "Hike on Saturday? Weather looks perfect.", nil, []uint64{2, 3, 4, 5}},
	{2, "I'm in. Same trailhead as last time?", nil, []uint64{1, 3, 4, 5}},
	{1, "Yes, 8am at the north lot.", nil, []uint64{2, 3, 4, 5}},
	{3, "Can we do the upper loop? It just reopened.", nil, []uint64{1, 2, 4}},
	{4, "Upper loop sounds good. I'll bring snacks.", nil, []uint64{1, 2, 3}},
	{5, "Count me in, might be 10 min late.", nil, []uint64{1, 3}},
	{1, "@leo can you bring the spare poles?", []uint64{2}, []uint64{2, 3}},
	{2, "Got them. Also bringing the film camera.", nil, []uint64{1}},
	{3, "Carpool from the station at 7:30?", nil, []uint64{1}},
	{1, "Perfect. See you all Saturday!", nil, nil},
}

// notifications are the system notifications, oldest first.
var notifications = []struct{ title, body string }{
	{"Welcome to Tally", "Your counts, badges and read receipts now update live. Try liking a post."},
	{"Scheduled maintenance", "Sunday 02:00–02:30 UTC: a short maintenance window. Nothing to do on your side."},
}
