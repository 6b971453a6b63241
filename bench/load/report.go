package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// jsonReport is what -json writes: the same figures as the text, for
// scripts and for the tool's own test.
type jsonReport struct {
	Commit        string                   `json:"commit,omitempty"`
	Phases        []jsonPhase              `json:"phases"`
	Exactness     map[string]exactness     `json:"exactness"`
	Subscriptions map[string]subMemory     `json:"subscriptions,omitempty"`
	Broadcast     map[string]jsonBroadcast `json:"broadcast,omitempty"`
	SameBytes     bool                     `json:"reference_same_bytes"`
	// PostgresSameBytes: the PostgreSQL peer answered the same bytes as tally (-postgres).
	PostgresSameBytes bool               `json:"postgres_same_bytes"`
	Ratios            map[string]float64 `json:"ratios,omitempty"`
	// ReactionPage: the reactions page against the counts page, per tally
	// serving kinds beyond like (-react-compare).
	ReactionPage map[string]jsonReactionPage `json:"reaction_page,omitempty"`
}

type jsonKind struct {
	OK        uint64            `json:"ok"`
	Errors    map[string]uint64 `json:"errors,omitempty"`
	PerSecond float64           `json:"per_second"`
	P50us     float64           `json:"p50_us"`
	P99us     float64           `json:"p99_us"`
	P999us    float64           `json:"p999_us"`
	MaxUs     float64           `json:"max_us"`
}

type jsonPhase struct {
	Target     string              `json:"target"`
	Phase      string              `json:"phase"`
	Clients    int                 `json:"clients"`
	Mix        string              `json:"mix"`
	Pages      string              `json:"page_size"`
	Seconds    float64             `json:"seconds"`
	ServerCPUs float64             `json:"server_cpu_seconds"` // -1: unknown
	StoreCPUs  float64             `json:"store_cpu_seconds"`  // the part of it the store's processes took; -1: none or unknown
	ToolCPUs   float64             `json:"tool_cpu_seconds"`
	Kinds      map[string]jsonKind `json:"kinds"`
	LoadAvg    string              `json:"load_average"`
}

type subMemory struct {
	Requested        int     `json:"requested"`
	Subs             int     `json:"open"`
	Servers          int     `json:"servers"`              // the subscriptions are spread over these, the figures summed
	Processes        int     `json:"subscriber_processes"` // the tool's processes holding them
	OpenSeconds      float64 `json:"open_seconds"`
	AfterGC          bool    `json:"after_gc"` // heap measured after a forced GC (tally's -pprof)
	HeapBefore       float64 `json:"heap_inuse_before"`
	HeapAfter        float64 `json:"heap_inuse_after"`
	StackBefore      float64 `json:"stack_inuse_before"`
	StackAfter       float64 `json:"stack_inuse_after"`
	GoroutinesBefore float64 `json:"goroutines_before"`
	GoroutinesAfter  float64 `json:"goroutines_after"`
	RSSBefore        float64 `json:"rss_before"`
	RSSAfter         float64 `json:"rss_after"`
	HeapPerSub       float64 `json:"heap_bytes_per_sub"`
	StackPerSub      float64 `json:"stack_bytes_per_sub"`
	GoroutinesPerSub float64 `json:"goroutines_per_sub"`
	RSSPerSub        float64 `json:"rss_bytes_per_sub"`
}

type jsonBroadcast struct {
	Subs          int                     `json:"subs"`
	Phases        map[string]jsonDelivery `json:"delivery"`
	Rounds        []map[string]any        `json:"quiet_rounds"`
	CPUPerPushUs  float64                 `json:"server_cpu_per_push_us"` // -1: unknown
	ToolCPUPerMsg float64                 `json:"tool_cpu_per_message_us"`
	AllWithin1s   bool                    `json:"all_within_1s"`
	Codes         map[string]int64        `json:"subscription_codes,omitempty"`
	Stray         int64                   `json:"stray_pushes"`
}

type jsonDelivery struct {
	Expected  int64   `json:"expected"`
	Delivered uint64  `json:"delivered"`
	Late      int64   `json:"later_than_1s"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	MaxUs     float64 `json:"max_us"`
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// dur prints a duration with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "?"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
}

func (r *report) phase(p *phaseResult) {
	cpu := "server CPU unknown"
	if p.ServerCPU >= 0 {
		cpu = fmt.Sprintf("server CPU %.2fs (%.2f cores)", p.ServerCPU.Seconds(), p.ServerCPU.Seconds()/p.Elapsed.Seconds())
	}
	r.printf("phase %s on %s: %d clients, %.1fs, mix %s, pages %s; %s, tool CPU %.2fs (%.2f cores), load average %s\n",
		p.Phase, p.Target, p.Clients, p.Elapsed.Seconds(), p.Mix, p.Pages, cpu, p.ToolCPU.Seconds(), p.ToolCPU.Seconds()/p.Elapsed.Seconds(), p.LoadAvg)
	r.printf("  %-10s %9s %7s %10s %9s %9s %9s %9s\n", "kind", "ok", "errors", "per s", "p50", "p99", "p999", "max")
	jp := jsonPhase{Target: p.Target, Phase: p.Phase, Clients: p.Clients, Mix: p.Mix, Pages: p.Pages, Seconds: p.Elapsed.Seconds(),
		ServerCPUs: -1, StoreCPUs: -1, ToolCPUs: p.ToolCPU.Seconds(), Kinds: map[string]jsonKind{}, LoadAvg: p.LoadAvg}
	if p.StoreCPU >= 0 {
		jp.StoreCPUs = p.StoreCPU.Seconds()
	}
	if p.ServerCPU >= 0 {
		jp.ServerCPUs = p.ServerCPU.Seconds()
	}
	var errLines []string
	for k, c := range p.Kinds {
		if c.ok == 0 && c.failed() == 0 {
			continue
		}
		h := &c.lat
		r.printf("  %-10s %9d %7d %10.1f %9s %9s %9s %9s\n", kindNames[k], c.ok, c.failed(), p.rate(kind(k)),
			dur(h.quantile(0.5)), dur(h.quantile(0.99)), dur(h.quantile(0.999)), dur(time.Duration(h.max)))
		jp.Kinds[kindNames[k]] = jsonKind{OK: c.ok, Errors: c.errs, PerSecond: p.rate(kind(k)),
			P50us: us(h.quantile(0.5)), P99us: us(h.quantile(0.99)), P999us: us(h.quantile(0.999)), MaxUs: us(time.Duration(h.max))}
		codes := slices.Sorted(maps.Keys(c.errs))
		for _, code := range codes {
			errLines = append(errLines, fmt.Sprintf("  errors %s %s ×%d (e.g. %s)", kindNames[k], code, c.errs[code], c.errEx[code]))
		}
	}
	for _, l := range errLines {
		r.printf("%s\n", l)
	}
	if strings.Contains(strings.Join(errLines, "\n"), " RATE_LIMITED ") {
		r.printf("  (tally's limits are per user: more -users spreads the same load thinner; -tally-args can raise -rate-limit or -cost-rate)\n")
	}
	r.json.Phases = append(r.json.Phases, jp)
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func (r *report) subscriptions(target string, m subMemory) {
	where := ""
	if m.Servers > 1 {
		where = fmt.Sprintf(" over %d servers (figures summed)", m.Servers)
	}
	r.printf("subscriptions: %d of %d open%s, held by %d subscriber processes, in %.1fs\n", m.Subs, m.Requested, where, m.Processes, m.OpenSeconds)
	if m.HeapAfter > 0 {
		gc := "(no forced GC: garbage included)"
		if m.AfterGC {
			gc = "(after a forced GC)"
		}
		r.printf("  server heap in use %s %s → %s, stacks %s → %s, goroutines %.0f → %.0f\n", gc,
			mib(m.HeapBefore), mib(m.HeapAfter), mib(m.StackBefore), mib(m.StackAfter), m.GoroutinesBefore, m.GoroutinesAfter)
	}
	if m.RSSAfter > 0 {
		r.printf("  server RSS %s → %s\n", mib(m.RSSBefore), mib(m.RSSAfter))
	}
	r.printf("  per open subscription: heap %.1f KiB, stack %.1f KiB, %.2f goroutines", m.HeapPerSub/1024, m.StackPerSub/1024, m.GoroutinesPerSub)
	if m.RSSAfter > 0 {
		r.printf(", RSS %.1f KiB", m.RSSPerSub/1024)
	}
	r.printf("\n")
	if r.json.Subscriptions == nil {
		r.json.Subscriptions = map[string]subMemory{}
	}
	r.json.Subscriptions[target] = m
}

func (r *report) broadcast(target string, b *broadcastResult) {
	r.printf("delivery to %d subscribers (latency: push received − mutation sent, both on CLOCK_MONOTONIC; load average %s):\n", b.Subs, loadAvg())
	jb := jsonBroadcast{Subs: b.Subs, Phases: map[string]jsonDelivery{}, CPUPerPushUs: -1, ToolCPUPerMsg: us(b.ToolCPUPerMsg),
		AllWithin1s: b.AllWithin1s, Codes: b.Codes, Stray: b.Stray}
	phases := slices.Sorted(maps.Keys(b.Expected))
	for _, ph := range phases {
		h := b.Delivery[ph]
		if h == nil {
			h = &hist{}
		}
		r.printf("  %-6s %d/%d delivered, p50 %s, p99 %s, p999 %s, max %s, later than 1 s: %d\n", ph, h.n, b.Expected[ph],
			dur(h.quantile(0.5)), dur(h.quantile(0.99)), dur(h.quantile(0.999)), dur(time.Duration(h.max)), b.Late[ph])
		jb.Phases[ph] = jsonDelivery{Expected: b.Expected[ph], Delivered: h.n, Late: b.Late[ph],
			P50us: us(h.quantile(0.5)), P99us: us(h.quantile(0.99)), P999us: us(h.quantile(0.999)), MaxUs: us(time.Duration(h.max))}
	}
	for i, rr := range b.Rounds {
		r.printf("  quiet round %d (%s): %d delivered, last after %s, server CPU %s, tool CPU %s (its subscriber processes included)\n", i+1, rr.Kind, rr.Delivered,
			dur(rr.Max), dur(rr.ServerCPU), dur(rr.ToolCPU))
		jb.Rounds = append(jb.Rounds, map[string]any{"kind": rr.Kind, "delivered": rr.Delivered, "max_us": us(rr.Max),
			"server_cpu_us": us(rr.ServerCPU), "tool_cpu_us": us(rr.ToolCPU)})
	}
	if b.CPUPerPush >= 0 {
		jb.CPUPerPushUs = us(b.CPUPerPush)
		r.printf("  server CPU per push %s (broadcast rounds' CPU over pushes delivered; /proc/<pid>/stat has 10 ms ticks); tool CPU per message %s\n",
			dur(b.CPUPerPush), dur(b.ToolCPUPerMsg))
	}
	if len(b.Codes) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(b.Codes)) {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, b.Codes[k]))
		}
		r.printf("  subscriptions failed or ended: %s\n", strings.Join(parts, ", "))
	}
	if b.Stray > 0 {
		r.printf("  %d pushes no broadcast of this run explains (another client changed these users' badges?)\n", b.Stray)
	}
	r.printf("  every subscriber had every broadcast and like within 1 s: %s\n", map[bool]string{true: "yes", false: "NO"}[b.AllWithin1s])
	if r.json.Broadcast == nil {
		r.json.Broadcast = map[string]jsonBroadcast{}
	}
	r.json.Broadcast[target] = jb
}

func (r *report) exactness(target string, ex exactness) {
	state := "exact"
	switch {
	case !ex.Exact:
		state = "MISMATCH"
	case ex.Ambiguous > 0:
		state = fmt.Sprintf("consistent (%d writes without a definite answer, each counted at most once)", ex.Ambiguous)
	}
	r.printf("exactness: %s — %d values checked (likes, favorites, comments, views per post; authors' posts, followers, followings) against %d acknowledged likes, %d favorites, %d comments, %d views\n",
		state, ex.Checked, ex.Likes, ex.Favorites, ex.Comments, ex.Views)
	if ex.Reactions != nil {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(ex.Reactions)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, ex.Reactions[k]))
		}
		r.printf("  every kind's count per post against the reactions standing (%s), and the viewer's kind on %d (user, post) pairs\n", strings.Join(parts, ", "), ex.Viewers)
	} else {
		r.printf("  viewerHasLiked on %d (user, post) pairs (the server serves no reactions)\n", ex.Viewers)
	}
	for _, m := range ex.Mismatches {
		r.printf("  %s\n", m)
	}
	if r.json.Exactness == nil {
		r.json.Exactness = map[string]exactness{}
	}
	r.json.Exactness[target] = ex
}

func (r *report) compare(results []*phaseResult, cfg config) {
	r.printf("\n== feed page of %d posts (counts, both viewer flags, author counts), %d clients, %s each, one after another\n",
		cfg.comparePage, cfg.clients, cfg.compare)
	r.printf("   (server CPU of tally-redis includes its redis-server's, of postgres its cluster's, shown apart as the store's; CPU per page is the server side's cost, which the tool's own load on a shared machine does not skew; only successful pages count)\n")
	for _, p := range results {
		r.phase(p)
	}
	r.printf("\n  %-16s %10s %9s %9s %9s %12s %12s %16s\n", "server", "pages/s", "p50", "p99", "p999", "server CPU", "CPU/page", "of which store")
	byName := map[string]*phaseResult{}
	for _, p := range results {
		h := &p.Kinds[kFeed].lat
		cpu, perPage, store := "?", "?", "-"
		if ok := p.Kinds[kFeed].ok; p.ServerCPU >= 0 && ok > 0 {
			cpu = fmt.Sprintf("%.2f cores", p.ServerCPU.Seconds()/p.Elapsed.Seconds())
			perPage = dur(p.ServerCPU / time.Duration(ok))
			if p.StoreCPU >= 0 {
				store = dur(p.StoreCPU / time.Duration(ok))
			}
		}
		r.printf("  %-16s %10.1f %9s %9s %9s %12s %12s %16s\n", p.Target, p.rate(kFeed), dur(h.quantile(0.5)), dur(h.quantile(0.99)), dur(h.quantile(0.999)), cpu, perPage, store)
		byName[p.Target] = p
	}
	r.json.Ratios = map[string]float64{}
	ratio := func(a, b string) {
		pa, pb := byName[a], byName[b]
		if pa == nil || pb == nil || pb.rate(kFeed) == 0 {
			return
		}
		x := pa.rate(kFeed) / pb.rate(kFeed)
		r.printf("  ratio %s / %s: %.2f× the pages per second (p99 %s vs %s)\n", a, b, x,
			dur(pa.Kinds[kFeed].lat.quantile(0.99)), dur(pb.Kinds[kFeed].lat.quantile(0.99)))
		r.json.Ratios[a+"/"+b] = x
		if pa.ServerCPU > 0 && pb.ServerCPU > 0 {
			ca := pa.ServerCPU.Seconds() / float64(pa.Kinds[kFeed].ok)
			cb := pb.ServerCPU.Seconds() / float64(pb.Kinds[kFeed].ok)
			r.printf("  %*s server CPU per page %s vs %s: %s costs %.2f× what %s costs\n", len("ratio "), "", dur(time.Duration(ca*1e9)), dur(time.Duration(cb*1e9)), a, ca/cb, b)
			r.json.Ratios[a+"/"+b+" cpu_per_page"] = ca / cb
		}
	}
	first := results[0].Target
	ratio(first, "reference")
	ratio("tally-embedded", "tally-redis")
	ratio("tally-redis", "reference")
	ratio("tally-embedded", "postgres")
	ratio("tally-redis", "postgres")
	ratio("postgres", "reference")
}
