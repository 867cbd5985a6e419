package modcatalog

import (
	"encoding/json"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/kilnhq/kiln/internal/validate"
)

// maxText bounds free-text parameters (searchFilter, query).
const maxText = 256

// maxList bounds the items of a comma-separated parameter (versions,
// loaders, game_versions).
const maxList = 20

var (
	// gameVersionRe accepts Minecraft version names: "1.21.4",
	// "1.20.5-pre1", "24w14a".
	gameVersionRe = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._+\- ]{0,31}$`)
	// loaderRe accepts Modrinth loader names ("fabric", "neoforge",
	// "bungeecord").
	loaderRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_\-]{0,31}$`)
)

// query reads one request's query parameters and collects every issue,
// each naming its parameter.
type query struct {
	v url.Values
	c validate.Collector
}

// newQuery refuses parameters not in allowed and parameters given more
// than once.
func newQuery(v url.Values, allowed ...string) *query {
	q := &query{v: v}
	for _, k := range slices.Sorted(maps.Keys(v)) {
		switch {
		case !slices.Contains(allowed, k):
			q.c.Add(k, "is not a parameter of this endpoint (allowed: %s)", strings.Join(allowed, ", "))
		case len(v[k]) > 1:
			q.c.Add(k, "must be given once")
		}
	}
	return q
}

// get returns the parameter's value and whether it was given (an empty
// value counts as not given).
func (q *query) get(name string) (string, bool) {
	s := q.v.Get(name)
	return s, s != ""
}

// text is free text of at most maxText characters without control
// characters.
func (q *query) text(name string) string {
	s, ok := q.get(name)
	if !ok {
		return ""
	}
	switch {
	case len([]rune(s)) > maxText:
		q.c.Add(name, "must be at most %d characters", maxText)
	case strings.ContainsFunc(s, unicode.IsControl):
		q.c.Add(name, "must not contain control characters")
	default:
		return s
	}
	return ""
}

// integer is an integer in [lo, hi] (hi < 0: no upper bound), def when
// the parameter is absent.
func (q *query) integer(name string, def, lo, hi int) int {
	s, ok := q.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		q.c.Add(name, "must be an integer")
	case hi >= 0 && (n < lo || n > hi):
		q.c.Add(name, "must be between %d and %d", lo, hi)
	case n < lo:
		q.c.Add(name, "must be at least %d", lo)
	default:
		return n
	}
	return def
}

// enum is one of allowed, def when absent.
func (q *query) enum(name, def string, allowed ...string) string {
	s, ok := q.get(name)
	if !ok {
		return def
	}
	if !slices.Contains(allowed, s) {
		q.c.Add(name, "must be one of %s", strings.Join(allowed, ", "))
		return def
	}
	return s
}

// list is a comma-separated list of at most maxList items, each matching
// re; nil when absent.
func (q *query) list(name string, re *regexp.Regexp, what string) []string {
	s, ok := q.get(name)
	if !ok {
		return nil
	}
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !re.MatchString(item) {
			q.c.Add(name, "%q is not a %s", item, what)
			return nil
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	if len(out) > maxList {
		q.c.Add(name, "must list at most %d values", maxList)
		return nil
	}
	return out
}

// boolean is true or false; nil when absent.
func (q *query) boolean(name string) *bool {
	s, ok := q.get(name)
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil || (s != "true" && s != "false") {
		q.c.Add(name, "must be true or false")
		return nil
	}
	return &b
}

func (q *query) add(name, format string, args ...any) { q.c.Add(name, format, args...) }

func (q *query) err() error { return q.c.Err() }

// positiveID parses a path identifier that must be a positive integer
// (CurseForge project and file ids).
func positiveID(name, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > 1<<53 {
		return 0, validate.Errorf(name, "must be a positive integer")
	}
	return n, nil
}

// jsonList renders a list as Modrinth's query arrays: ["a","b"].
func jsonList(items []string) string {
	b, _ := json.Marshal(items) // strings always marshal
	return string(b)
}

// errorf is validate.Errorf as an error.
func errorf(path, format string, args ...any) error { return validate.Errorf(path, format, args...) }
