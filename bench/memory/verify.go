package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/tally-dev/tally/engine"
)

const pageQuery = `query($ids: [ID!]!) { posts(ids: $ids) { id author { id postCount } counts { likes comments reposts views favorites } } }`

type gqlPost struct {
	ID     string `json:"id"`
	Author *struct {
		ID        string `json:"id"`
		PostCount int64  `json:"postCount"`
	} `json:"author"`
	Counts struct {
		Likes, Comments, Reposts, Views, Favorites int64
	} `json:"counts"`
}

// verify asks for the sampled posts in pages of 100 and checks each one
// exactly: its counts, its author and the author's post count over the
// whole data set; without authors, an all-zero post was never imported and
// must read null. It returns how many posts it checked.
func verify(ctx context.Context, base string, sample []sampled, perUser []int32, withAuthors bool) (int, error) {
	checked := 0
	for lo := 0; lo < len(sample); lo += 100 {
		page := sample[lo:min(lo+100, len(sample))]
		ids := make([]string, len(page))
		for i, s := range page {
			ids[i] = strconv.FormatUint(s.id, 10)
		}
		posts, err := postsPage(ctx, base, ids)
		if err != nil {
			return checked, err
		}
		if len(posts) != len(page) {
			return checked, fmt.Errorf("asked for %d posts, got %d", len(page), len(posts))
		}
		for i, s := range page {
			if err := check(s, posts[i], perUser, withAuthors); err != nil {
				return checked, fmt.Errorf("post %d: %v", s.id, err)
			}
			checked++
		}
	}
	return checked, nil
}

func check(s sampled, p *gqlPost, perUser []int32, withAuthors bool) error {
	zero := s.counts == (engine.Counts{})
	if !withAuthors && zero {
		if p != nil {
			return fmt.Errorf("an all-zero post imported without an author reads %+v, want null", *p)
		}
		return nil
	}
	if p == nil {
		return fmt.Errorf("reads null; it was imported")
	}
	got := engine.Counts{Likes: p.Counts.Likes, Comments: p.Counts.Comments, Reposts: p.Counts.Reposts, Views: p.Counts.Views, Favorites: p.Counts.Favorites}
	if got != s.counts {
		return fmt.Errorf("counts %+v, imported %+v", got, s.counts)
	}
	if !withAuthors {
		if p.Author != nil {
			return fmt.Errorf("author %s; imported without one", p.Author.ID)
		}
		return nil
	}
	if p.Author == nil {
		return fmt.Errorf("no author; imported with %d", s.author)
	}
	if p.Author.ID != strconv.FormatUint(uint64(s.author), 10) {
		return fmt.Errorf("author %s, imported %d", p.Author.ID, s.author)
	}
	if want := int64(perUser[s.author]); p.Author.PostCount != want {
		return fmt.Errorf("author %d's postCount %d, imported %d posts by them", s.author, p.Author.PostCount, want)
	}
	return nil
}

func postsPage(ctx context.Context, base string, ids []string) ([]*gqlPost, error) {
	body, _ := json.Marshal(map[string]any{"query": pageQuery, "variables": map[string]any{"ids": ids}})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/query", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Posts []*gqlPost `json:"posts"`
		} `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("HTTP %d, not JSON: %.200s", resp.StatusCode, b)
	}
	if len(r.Errors) > 0 || resp.StatusCode != 200 {
		return nil, fmt.Errorf("HTTP %d, errors %s", resp.StatusCode, r.Errors)
	}
	return r.Data.Posts, nil
}
