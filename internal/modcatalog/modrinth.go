package modcatalog

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Modrinth's limits and names (docs.modrinth.com, API v2).
const (
	MaxModrinthLimit = 100
)

// modrinthProjectTypes are the project_type values of Modrinth's search.
var modrinthProjectTypes = []string{"mod", "modpack", "plugin", "datapack", "resourcepack", "shader"}

// slugRe accepts Modrinth project ids (8 base62 characters) and slugs.
var slugRe = regexp.MustCompile(`^[A-Za-z0-9!@$()'.+,_\-]{1,64}$`)

// validSlug reports whether s is a Modrinth id or slug: slugRe, and not
// made of dots only, which would be a path step ("..") in the upstream
// URL rather than a name.
func validSlug(s string) bool { return slugRe.MatchString(s) && strings.Trim(s, ".") != "" }

// versionIDRe is a Modrinth version id: like every Modrinth id, 8 base62
// digits (docs.modrinth.com, "identifiers"). Versions have no slug, so
// anything else ("null" from a script whose lookup found nothing, a
// version number such as "5.4.102") is refused here, with a sentence,
// rather than answered 404 by the upstream.
var versionIDRe = regexp.MustCompile(`^[0-9A-Za-z]{8}$`)

// validVersionID reports whether s is a Modrinth version id.
func validVersionID(s string) bool { return versionIDRe.MatchString(s) }

// ModrinthSearch is the answer of GET /modrinth/search.
type ModrinthSearch struct {
	// Count is the number of items in Results.
	Count     int               `json:"count"`
	TotalHits int64             `json:"total_hits"`
	Offset    int               `json:"offset"`
	Limit     int               `json:"limit"`
	Results   []ModrinthProject `json:"results"`
}

// ModrinthProject is one search hit.
type ModrinthProject struct {
	ProjectID   string `json:"project_id"`
	Slug        string `json:"slug"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// ProjectType is Modrinth's: mod, modpack, resourcepack or shader in
	// its published API v2 (a plugin is a "mod" whose categories name its
	// platforms: bukkit, paper, …).
	ProjectType string `json:"project_type"`
	Author      string `json:"author"`
	Downloads   int64  `json:"downloads"`
	Follows     int64  `json:"follows"`
	// Categories include the loaders (fabric, paper, …).
	Categories []string `json:"categories"`
	// Versions are the game versions the project supports.
	Versions      []string `json:"versions"`
	LatestVersion *string  `json:"latest_version"`
	IconURL       *string  `json:"icon_url"`
	ClientSide    *string  `json:"client_side"`
	ServerSide    *string  `json:"server_side"`
	License       *string  `json:"license"`
	DateCreated   *string  `json:"date_created"`
	DateModified  *string  `json:"date_modified"`
}

// ModrinthVersions is the answer of GET /modrinth/projects/{slug}/versions.
type ModrinthVersions struct {
	Count   int               `json:"count"`
	Results []ModrinthVersion `json:"results"`
}

// ModrinthVersion is one version of a Modrinth project.
type ModrinthVersion struct {
	ID            string `json:"id"`
	ProjectID     string `json:"project_id"`
	Name          string `json:"name"`
	VersionNumber string `json:"version_number"`
	// VersionType is release, beta or alpha.
	VersionType   string               `json:"version_type"`
	Featured      bool                 `json:"featured"`
	DatePublished *string              `json:"date_published"`
	Downloads     int64                `json:"downloads"`
	GameVersions  []string             `json:"game_versions"`
	Loaders       []string             `json:"loaders"`
	Files         []ModrinthFile       `json:"files"`
	Dependencies  []ModrinthDependency `json:"dependencies"`
}

// ModrinthFile is one file of a version.
type ModrinthFile struct {
	Filename string `json:"filename"`
	// URL is Modrinth's CDN address of the file.
	URL     string         `json:"url"`
	Size    int64          `json:"size"`
	Primary bool           `json:"primary"`
	Hashes  ModrinthHashes `json:"hashes"`
	// FileType is null, required-resource-pack or optional-resource-pack.
	FileType *string `json:"file_type"`
}

// ModrinthHashes are the hex digests Modrinth publishes for a file.
type ModrinthHashes struct {
	SHA1   *string `json:"sha1"`
	SHA512 *string `json:"sha512"`
}

// ModrinthDependency is another project or version a version relates to.
// Type is required, optional, incompatible or embedded.
type ModrinthDependency struct {
	ProjectID *string `json:"project_id"`
	VersionID *string `json:"version_id"`
	FileName  *string `json:"file_name"`
	Type      string  `json:"type"`
}

// mrHit and mrVersion are Modrinth's documented ProjectResult and Version.
type mrHit struct {
	ProjectID     string   `json:"project_id"`
	Slug          string   `json:"slug"`
	Title         string   `json:"title"`
	Description   string   `json:"description"`
	ProjectType   string   `json:"project_type"`
	Author        string   `json:"author"`
	Downloads     int64    `json:"downloads"`
	Follows       int64    `json:"follows"`
	Categories    []string `json:"categories"`
	Versions      []string `json:"versions"`
	LatestVersion string   `json:"latest_version"`
	IconURL       *string  `json:"icon_url"`
	ClientSide    string   `json:"client_side"`
	ServerSide    string   `json:"server_side"`
	License       string   `json:"license"`
	DateCreated   string   `json:"date_created"`
	DateModified  string   `json:"date_modified"`
}

type mrVersion struct {
	ID            string   `json:"id"`
	ProjectID     string   `json:"project_id"`
	Name          string   `json:"name"`
	VersionNumber string   `json:"version_number"`
	VersionType   string   `json:"version_type"`
	Featured      bool     `json:"featured"`
	DatePublished string   `json:"date_published"`
	Downloads     int64    `json:"downloads"`
	GameVersions  []string `json:"game_versions"`
	Loaders       []string `json:"loaders"`
	Files         []struct {
		Hashes   map[string]string `json:"hashes"`
		URL      string            `json:"url"`
		Filename string            `json:"filename"`
		Primary  bool              `json:"primary"`
		Size     int64             `json:"size"`
		FileType *string           `json:"file_type"`
	} `json:"files"`
	Dependencies []struct {
		VersionID      *string `json:"version_id"`
		ProjectID      *string `json:"project_id"`
		FileName       *string `json:"file_name"`
		DependencyType string  `json:"dependency_type"`
	} `json:"dependencies"`
}

// modrinthSearchQuery validates the parameters of GET /modrinth/search and
// returns the upstream query (canonical: the cache key), the limit and
// the offset. Errors: *validate.Error naming every bad parameter.
func modrinthSearchQuery(v url.Values) (up url.Values, limit, offset int, err error) {
	q := newQuery(v, "query", "limit", "offset", "index", "project_type", "versions", "loaders")
	up = url.Values{}
	if t := q.text("query"); t != "" {
		up.Set("query", t)
	}
	limit = q.integer("limit", 10, 1, MaxModrinthLimit)
	offset = q.integer("offset", 0, 0, -1)
	up.Set("limit", strconv.Itoa(limit))
	up.Set("offset", strconv.Itoa(offset))
	up.Set("index", q.enum("index", "relevance", "relevance", "downloads", "follows", "newest", "updated"))
	// Facets: inner arrays are OR, the outer one AND.
	var facets [][]string
	if pt := q.enum("project_type", "", modrinthProjectTypes...); pt != "" {
		facets = append(facets, []string{"project_type:" + pt})
	}
	if vs := q.list("versions", gameVersionRe, "game version"); len(vs) > 0 {
		facets = append(facets, prefixed("versions:", vs))
	}
	if ls := q.list("loaders", loaderRe, "loader name"); len(ls) > 0 {
		// Modrinth files loaders under categories.
		facets = append(facets, prefixed("categories:", ls))
	}
	if len(facets) > 0 {
		b, _ := json.Marshal(facets) // strings always marshal
		up.Set("facets", string(b))
	}
	if err := q.err(); err != nil {
		return nil, 0, 0, err
	}
	return up, limit, offset, nil
}

// SearchModrinth answers GET /modrinth/search. Parameters: query, limit
// (1–100, default 10), offset (≥ 0), index (relevance (default),
// downloads, follows, newest, updated), project_type (mod, modpack,
// plugin, datapack, resourcepack, shader), versions and loaders
// (comma-separated; any of the listed values matches).
//
// Errors: *validate.Error (before any upstream call), *UpstreamError
// (ErrUpstream), the context's error.
func (s *Service) SearchModrinth(ctx context.Context, v url.Values) (ModrinthSearch, error) {
	up, limit, offset, err := modrinthSearchQuery(v)
	if err != nil {
		return ModrinthSearch{}, err
	}
	return fetch(ctx, s, s.modrinth, "mr:search?"+up.Encode(), func(ctx context.Context) (ModrinthSearch, error) {
		var raw struct {
			Hits      []mrHit `json:"hits"`
			Offset    int     `json:"offset"`
			Limit     int     `json:"limit"`
			TotalHits int64   `json:"total_hits"`
		}
		err := s.modrinth.getJSON(ctx, "/v2/search", up, &raw)
		if err != nil {
			return ModrinthSearch{}, err
		}
		out := ModrinthSearch{Count: len(raw.Hits), TotalHits: raw.TotalHits, Offset: offset, Limit: limit, Results: make([]ModrinthProject, 0, len(raw.Hits))}
		for _, h := range raw.Hits {
			out.Results = append(out.Results, ModrinthProject{
				ProjectID: h.ProjectID, Slug: h.Slug, Title: h.Title, Description: h.Description,
				ProjectType: h.ProjectType, Author: h.Author, Downloads: h.Downloads, Follows: h.Follows,
				Categories: orEmpty(h.Categories), Versions: orEmpty(h.Versions),
				LatestVersion: nonEmpty(h.LatestVersion), IconURL: nilIfEmpty(h.IconURL),
				ClientSide: nonEmpty(h.ClientSide), ServerSide: nonEmpty(h.ServerSide), License: nonEmpty(h.License),
				DateCreated: nonEmpty(h.DateCreated), DateModified: nonEmpty(h.DateModified),
			})
		}
		return out, nil
	})
}

// modrinthVersionsQuery validates the slug and parameters of GET
// /modrinth/projects/{slug}/versions and returns the upstream path and
// query. Errors: *validate.Error.
func modrinthVersionsQuery(slug string, v url.Values) (path string, up url.Values, err error) {
	q := newQuery(v, "loaders", "game_versions", "featured")
	if !validSlug(slug) {
		q.add("slug", "must be a Modrinth project id or slug")
	}
	up = url.Values{}
	if ls := q.list("loaders", loaderRe, "loader name"); len(ls) > 0 {
		up.Set("loaders", jsonList(ls))
	}
	if gvs := q.list("game_versions", gameVersionRe, "game version"); len(gvs) > 0 {
		up.Set("game_versions", jsonList(gvs))
	}
	if f := q.boolean("featured"); f != nil {
		up.Set("featured", strconv.FormatBool(*f))
	}
	// Changelogs are not part of our answer and can be long: Modrinth
	// advises leaving them out.
	up.Set("include_changelog", "false")
	if err := q.err(); err != nil {
		return "", nil, err
	}
	return "/v2/project/" + url.PathEscape(slug) + "/version", up, nil
}

// ModrinthProjectVersions answers GET /modrinth/projects/{slug}/versions:
// the versions of a project (id or slug), newest first. Parameters:
// loaders and game_versions (comma-separated; any matches), featured
// (true, false).
//
// Errors: *validate.Error, ErrNotFound, *UpstreamError, the context's
// error.
func (s *Service) ModrinthProjectVersions(ctx context.Context, slug string, v url.Values) (ModrinthVersions, error) {
	path, up, err := modrinthVersionsQuery(slug, v)
	if err != nil {
		return ModrinthVersions{}, err
	}
	return fetch(ctx, s, s.modrinth, "mr:versions:"+path+"?"+up.Encode(), func(ctx context.Context) (ModrinthVersions, error) {
		var raw []mrVersion
		err := s.modrinth.getJSON(ctx, path, up, &raw)
		if err != nil {
			return ModrinthVersions{}, err
		}
		out := ModrinthVersions{Count: len(raw), Results: make([]ModrinthVersion, 0, len(raw))}
		for _, mv := range raw {
			out.Results = append(out.Results, mv.normalize())
		}
		return out, nil
	})
}

// ModrinthVersion returns one version by id (for installs).
//
// Errors: *validate.Error ("version_id"), ErrNotFound, *UpstreamError, the
// context's error.
func (s *Service) ModrinthVersion(ctx context.Context, versionID string) (ModrinthVersion, error) {
	if !validVersionID(versionID) {
		return ModrinthVersion{}, errorf("version_id", "must be a Modrinth version id (8 letters and digits, as in a version page's address)")
	}
	path := "/v2/version/" + url.PathEscape(versionID)
	return fetch(ctx, s, s.modrinth, "mr:version:"+path, func(ctx context.Context) (ModrinthVersion, error) {
		var raw mrVersion
		err := s.modrinth.getJSON(ctx, path, nil, &raw)
		if err != nil {
			return ModrinthVersion{}, err
		}
		return raw.normalize(), nil
	})
}

func (mv mrVersion) normalize() ModrinthVersion {
	out := ModrinthVersion{
		ID: mv.ID, ProjectID: mv.ProjectID, Name: mv.Name, VersionNumber: mv.VersionNumber,
		VersionType: mv.VersionType, Featured: mv.Featured, DatePublished: nonEmpty(mv.DatePublished),
		Downloads: mv.Downloads, GameVersions: orEmpty(mv.GameVersions), Loaders: orEmpty(mv.Loaders),
		Files:        make([]ModrinthFile, 0, len(mv.Files)),
		Dependencies: make([]ModrinthDependency, 0, len(mv.Dependencies)),
	}
	for _, f := range mv.Files {
		mf := ModrinthFile{Filename: f.Filename, URL: f.URL, Size: f.Size, Primary: f.Primary, FileType: f.FileType}
		if h := strings.ToLower(f.Hashes["sha1"]); sha1Re.MatchString(h) {
			mf.Hashes.SHA1 = &h
		}
		if h := strings.ToLower(f.Hashes["sha512"]); sha512Re.MatchString(h) {
			mf.Hashes.SHA512 = &h
		}
		out.Files = append(out.Files, mf)
	}
	for _, d := range mv.Dependencies {
		out.Dependencies = append(out.Dependencies, ModrinthDependency{
			ProjectID: d.ProjectID, VersionID: d.VersionID, FileName: d.FileName, Type: d.DependencyType,
		})
	}
	return out
}

func prefixed(prefix string, items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = prefix + s
	}
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nilIfEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}
