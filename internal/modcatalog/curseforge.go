package modcatalog

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// CurseForge's fixed values (docs.curseforge.com, Core API v1).
const (
	// MinecraftGameID is CurseForge's gameId of Minecraft.
	MinecraftGameID = 432
	// Class ids Kiln searches.
	ClassMods       = 6
	ClassModpacks   = 4471
	ClassPlugins    = 5 // Bukkit plugins
	DefaultClassID  = ClassModpacks
	MaxPageSize     = 50     // CurseForge's largest page
	MaxResultWindow = 10_000 // index + pageSize may not pass it
)

// CurseForgeSortFields maps the names accepted in sortField to
// CurseForge's ModsSearchSortField numbers; the numbers are accepted too.
var curseForgeSortFields = map[string]int{
	"featured": 1, "popularity": 2, "lastupdated": 3, "name": 4, "author": 5,
	"totaldownloads": 6, "category": 7, "gameversion": 8, "earlyaccess": 9,
	"featuredreleased": 10, "releaseddate": 11, "rating": 12,
}

// distributionNote is the sentence shown where a download URL is null.
const distributionNote = "The author does not allow third-party downloads of this file: get it from the CurseForge website."

// CurseForgeSearch is the answer of GET /curseforge/search.
type CurseForgeSearch struct {
	// Count is the number of items in Results.
	Count int `json:"count"`
	// TotalCount is the number of matches CurseForge reports (it serves
	// at most the first 10,000 of them).
	TotalCount int64           `json:"total_count"`
	Index      int             `json:"index"`
	PageSize   int             `json:"page_size"`
	Results    []CurseForgeHit `json:"results"`
}

// CurseForgeHit is one project of a search: a CurseForgeProject whose
// latest files are summed up as the game versions and loaders they cover
// (GET /curseforge/projects/{id} lists them). A popular mod has dozens of
// them, one per game version and loader: a page of 10 would weigh 50 KB
// in the cache and on the wire instead of 10.
type CurseForgeHit struct {
	CurseForgeProjectInfo
	// GameVersions and Loaders are the distinct game versions and mod
	// loaders (forge, fabric, quilt, neoforge, …) of the project's latest
	// files, in CurseForge's order.
	GameVersions []string `json:"game_versions"`
	Loaders      []string `json:"loaders"`
	CurseForgeDates
}

// CurseForgeProjectInfo is what a search hit and a project say alike.
// Optional values are null when CurseForge gives none.
type CurseForgeProjectInfo struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Slug    string `json:"slug"`
	Summary string `json:"summary"`
	ClassID *int   `json:"class_id"`
	// Kind follows from ClassID: mod, modpack, plugin, resourcepack,
	// shader or other.
	Kind          string   `json:"kind"`
	DownloadCount int64    `json:"download_count"`
	Authors       []string `json:"authors"`
	Categories    []string `json:"categories"`
	LogoURL       *string  `json:"logo_url"`
	WebsiteURL    *string  `json:"website_url"`
	MainFileID    *int64   `json:"main_file_id"`
	// AllowDistribution is false when the author forbids third-party
	// downloads: the files' download URLs are then null and
	// DistributionNote says so.
	AllowDistribution bool    `json:"allow_distribution"`
	DistributionNote  *string `json:"distribution_note"`
}

// CurseForgeDates are a project's dates as CurseForge gives them (null
// when it gives none); they close both shapes.
type CurseForgeDates struct {
	DateCreated  *string `json:"date_created"`
	DateModified *string `json:"date_modified"`
	DateReleased *string `json:"date_released"`
}

// CurseForgeProject is one CurseForge project (a mod, modpack or plugin).
type CurseForgeProject struct {
	CurseForgeProjectInfo
	LatestFiles []CurseForgeFileIndex `json:"latest_files"`
	CurseForgeDates
}

// CurseForgeFileIndex is an entry of a project's latestFilesIndexes: the
// newest file for one game version and loader.
type CurseForgeFileIndex struct {
	FileID      int64   `json:"file_id"`
	Filename    string  `json:"filename"`
	GameVersion string  `json:"game_version"`
	Loader      *string `json:"loader"`
	ReleaseType string  `json:"release_type"`
}

// CurseForgeFiles is the answer of GET /curseforge/projects/{id}/versions.
type CurseForgeFiles struct {
	Count      int              `json:"count"`
	TotalCount int64            `json:"total_count"`
	Index      int              `json:"index"`
	PageSize   int              `json:"page_size"`
	Results    []CurseForgeFile `json:"results"`
}

// CurseForgeFile is one file of a CurseForge project.
type CurseForgeFile struct {
	ID          int64  `json:"id"`
	ProjectID   int64  `json:"project_id"`
	DisplayName string `json:"display_name"`
	Filename    string `json:"filename"`
	// ReleaseType is release, beta or alpha.
	ReleaseType   string  `json:"release_type"`
	Date          *string `json:"date"`
	Size          int64   `json:"size"`
	DownloadCount int64   `json:"download_count"`
	// DownloadURL is null when the author forbids third-party downloads;
	// DownloadNote then says so.
	DownloadURL  *string          `json:"download_url"`
	DownloadNote *string          `json:"download_note"`
	Hashes       CurseForgeHashes `json:"hashes"`
	// GameVersions are the Minecraft versions; Loaders the mod loaders
	// (forge, fabric, quilt, neoforge, …) CurseForge lists for the file.
	GameVersions []string               `json:"game_versions"`
	Loaders      []string               `json:"loaders"`
	Dependencies []CurseForgeDependency `json:"dependencies"`
	Available    bool                   `json:"available"`
	IsServerPack bool                   `json:"is_server_pack"`
	// ServerPackFileID is the id of the server pack of a modpack file,
	// null when there is none.
	ServerPackFileID *int64 `json:"server_pack_file_id"`
}

// CurseForgeHashes are the hex digests CurseForge publishes for a file.
type CurseForgeHashes struct {
	SHA1 *string `json:"sha1"`
	MD5  *string `json:"md5"`
}

// CurseForgeDependency is another project a file relates to. Type is
// required, optional, embedded, tool, incompatible or include.
type CurseForgeDependency struct {
	ProjectID int64  `json:"project_id"`
	Type      string `json:"type"`
}

// cfMod, cfFile and cfPage are the documented shapes of the Core API
// (Mod, File, Pagination).
type cfMod struct {
	ID      int64  `json:"id"`
	GameID  int    `json:"gameId"`
	Name    string `json:"name"`
	Slug    string `json:"slug"`
	Summary string `json:"summary"`
	Links   struct {
		WebsiteURL string `json:"websiteUrl"`
	} `json:"links"`
	DownloadCount float64 `json:"downloadCount"`
	Categories    []struct {
		Name string `json:"name"`
	} `json:"categories"`
	ClassID *int `json:"classId"`
	Authors []struct {
		Name string `json:"name"`
	} `json:"authors"`
	Logo *struct {
		URL          string `json:"url"`
		ThumbnailURL string `json:"thumbnailUrl"`
	} `json:"logo"`
	MainFileID           int64         `json:"mainFileId"`
	LatestFilesIndexes   []cfFileIndex `json:"latestFilesIndexes"`
	DateCreated          string        `json:"dateCreated"`
	DateModified         string        `json:"dateModified"`
	DateReleased         string        `json:"dateReleased"`
	AllowModDistribution *bool         `json:"allowModDistribution"`
}

type cfFileIndex struct {
	GameVersion string `json:"gameVersion"`
	FileID      int64  `json:"fileId"`
	Filename    string `json:"filename"`
	ReleaseType int    `json:"releaseType"`
	ModLoader   *int   `json:"modLoader"`
}

type cfFile struct {
	ID          int64  `json:"id"`
	GameID      int    `json:"gameId"`
	ModID       int64  `json:"modId"`
	IsAvailable bool   `json:"isAvailable"`
	DisplayName string `json:"displayName"`
	FileName    string `json:"fileName"`
	ReleaseType int    `json:"releaseType"`
	Hashes      []struct {
		Value string `json:"value"`
		Algo  int    `json:"algo"`
	} `json:"hashes"`
	FileDate      string   `json:"fileDate"`
	FileLength    int64    `json:"fileLength"`
	DownloadCount float64  `json:"downloadCount"`
	DownloadURL   *string  `json:"downloadUrl"`
	GameVersions  []string `json:"gameVersions"`
	Dependencies  []struct {
		ModID        int64 `json:"modId"`
		RelationType int   `json:"relationType"`
	} `json:"dependencies"`
	IsServerPack     *bool  `json:"isServerPack"`
	ServerPackFileID *int64 `json:"serverPackFileId"`
}

type cfPage struct {
	Index       int   `json:"index"`
	PageSize    int   `json:"pageSize"`
	ResultCount int   `json:"resultCount"`
	TotalCount  int64 `json:"totalCount"`
}

// curseForgeSearchQuery validates the parameters of GET /curseforge/search
// and returns the upstream query (canonical: the cache key), the index
// and the page size. Errors: *validate.Error naming every bad parameter.
func curseForgeSearchQuery(v url.Values) (up url.Values, index, size int, err error) {
	q := newQuery(v, "searchFilter", "classId", "gameVersion", "sortField", "sortOrder", "pageSize", "index")
	up = url.Values{"gameId": {strconv.Itoa(MinecraftGameID)}}
	if f := q.text("searchFilter"); f != "" {
		up.Set("searchFilter", f)
	}
	class := q.integer("classId", DefaultClassID, 1, -1)
	if _, given := q.get("classId"); given && class != ClassMods && class != ClassModpacks && class != ClassPlugins {
		q.add("classId", "must be %d (mods), %d (modpacks) or %d (Bukkit plugins)", ClassMods, ClassModpacks, ClassPlugins)
	}
	up.Set("classId", strconv.Itoa(class))
	if gv, ok := q.get("gameVersion"); ok {
		if !gameVersionRe.MatchString(gv) {
			q.add("gameVersion", "%q is not a game version", gv)
		}
		up.Set("gameVersion", gv)
	}
	if sf, ok := q.get("sortField"); ok {
		n, err := strconv.Atoi(sf)
		if err != nil {
			n = curseForgeSortFields[strings.ToLower(sf)]
		}
		if n < 1 || n > 12 {
			q.add("sortField", "must be a CurseForge sort field: 1 to 12, or featured, popularity, lastUpdated, name, author, totalDownloads, category, gameVersion, earlyAccess, featuredReleased, releasedDate or rating")
		}
		up.Set("sortField", strconv.Itoa(n))
	}
	if so := q.enum("sortOrder", "", "asc", "desc"); so != "" {
		up.Set("sortOrder", so)
	}
	size = q.integer("pageSize", 10, 1, MaxPageSize)
	index = q.integer("index", 0, 0, -1)
	if index > MaxResultWindow-size { // not index+size: that can overflow
		q.add("index", "index + pageSize must be at most %d (CurseForge serves no result past the first %d)", MaxResultWindow, MaxResultWindow)
	}
	up.Set("pageSize", strconv.Itoa(size))
	up.Set("index", strconv.Itoa(index))
	if err := q.err(); err != nil {
		return nil, 0, 0, err
	}
	return up, index, size, nil
}

// SearchCurseForge answers GET /curseforge/search. Parameters: searchFilter,
// classId (6 mods, 4471 modpacks (default), 5 Bukkit plugins), gameVersion,
// sortField (1–12 or a name: featured, popularity, lastUpdated, name,
// author, totalDownloads, category, gameVersion, earlyAccess,
// featuredReleased, releasedDate, rating), sortOrder (asc, desc), pageSize
// (1–50, default 10), index (≥ 0, index + pageSize ≤ 10,000).
//
// Errors: *validate.Error (before any upstream call), ErrNotConfigured,
// *UpstreamError (ErrUpstream), the context's error.
func (s *Service) SearchCurseForge(ctx context.Context, v url.Values) (CurseForgeSearch, error) {
	up, index, size, err := curseForgeSearchQuery(v)
	if err != nil {
		return CurseForgeSearch{}, err
	}
	if s.curseforge == nil {
		return CurseForgeSearch{}, ErrNotConfigured
	}
	return fetch(ctx, s, s.curseforge, "cf:search?"+up.Encode(), func(ctx context.Context) (CurseForgeSearch, error) {
		var raw struct {
			Data       []cfMod `json:"data"`
			Pagination cfPage  `json:"pagination"`
		}
		err := s.curseforge.getJSON(ctx, "/v1/mods/search", up, &raw)
		if err != nil {
			return CurseForgeSearch{}, err
		}
		out := CurseForgeSearch{
			Count: len(raw.Data), TotalCount: raw.Pagination.TotalCount, Index: index, PageSize: size,
			Results: make([]CurseForgeHit, 0, len(raw.Data)),
		}
		// The hits of a page share their game versions' strings.
		seen := map[string]string{}
		for _, m := range raw.Data {
			out.Results = append(out.Results, m.hit(seen))
		}
		return out, nil
	})
}

// CurseForgeProject answers GET /curseforge/projects/{projectId}.
//
// Errors: *validate.Error ("projectId"), ErrNotConfigured, ErrNotFound
// (no such project, or not a Minecraft one), *UpstreamError, the
// context's error.
func (s *Service) CurseForgeProject(ctx context.Context, projectID string) (CurseForgeProject, error) {
	id, err := positiveID("projectId", projectID)
	if err != nil {
		return CurseForgeProject{}, err
	}
	if s.curseforge == nil {
		return CurseForgeProject{}, ErrNotConfigured
	}
	return fetch(ctx, s, s.curseforge, "cf:mod:"+strconv.FormatInt(id, 10), func(ctx context.Context) (CurseForgeProject, error) {
		var raw struct {
			Data cfMod `json:"data"`
		}
		err := s.curseforge.getJSON(ctx, "/v1/mods/"+strconv.FormatInt(id, 10), nil, &raw)
		if err != nil {
			return CurseForgeProject{}, err
		}
		if raw.Data.GameID != 0 && raw.Data.GameID != MinecraftGameID {
			return CurseForgeProject{}, ErrNotFound
		}
		return raw.Data.normalize(), nil
	})
}

// curseForgeFilesQuery validates the project id and parameters of GET
// /curseforge/projects/{projectId}/versions. Errors: *validate.Error.
func curseForgeFilesQuery(projectID string, v url.Values) (id int64, up url.Values, index, size int, err error) {
	q := newQuery(v, "gameVersion", "pageSize", "index")
	id, err = positiveID("projectId", projectID)
	if err != nil {
		q.add("projectId", "must be a positive integer")
	}
	up = url.Values{}
	if gv, ok := q.get("gameVersion"); ok {
		if !gameVersionRe.MatchString(gv) {
			q.add("gameVersion", "%q is not a game version", gv)
		}
		up.Set("gameVersion", gv)
	}
	size = q.integer("pageSize", MaxPageSize, 1, MaxPageSize)
	index = q.integer("index", 0, 0, -1)
	if index > MaxResultWindow-size { // not index+size: that can overflow
		q.add("index", "index + pageSize must be at most %d", MaxResultWindow)
	}
	up.Set("pageSize", strconv.Itoa(size))
	up.Set("index", strconv.Itoa(index))
	if err := q.err(); err != nil {
		return 0, nil, 0, 0, err
	}
	return id, up, index, size, nil
}

// CurseForgeVersions answers GET /curseforge/projects/{projectId}/versions:
// the project's files, newest first as CurseForge orders them. Optional
// parameters: gameVersion, pageSize (1–50, default 50), index (≥ 0,
// index + pageSize ≤ 10,000).
//
// Errors: *validate.Error, ErrNotConfigured, ErrNotFound, *UpstreamError,
// the context's error.
func (s *Service) CurseForgeVersions(ctx context.Context, projectID string, v url.Values) (CurseForgeFiles, error) {
	id, up, index, size, err := curseForgeFilesQuery(projectID, v)
	if err != nil {
		return CurseForgeFiles{}, err
	}
	if s.curseforge == nil {
		return CurseForgeFiles{}, ErrNotConfigured
	}
	path := "/v1/mods/" + strconv.FormatInt(id, 10) + "/files"
	return fetch(ctx, s, s.curseforge, "cf:files:"+path+"?"+up.Encode(), func(ctx context.Context) (CurseForgeFiles, error) {
		var raw struct {
			Data       []cfFile `json:"data"`
			Pagination cfPage   `json:"pagination"`
		}
		err := s.curseforge.getJSON(ctx, path, up, &raw)
		if err != nil {
			return CurseForgeFiles{}, err
		}
		out := CurseForgeFiles{
			Count: len(raw.Data), TotalCount: raw.Pagination.TotalCount, Index: index, PageSize: size,
			Results: make([]CurseForgeFile, 0, len(raw.Data)),
		}
		for _, f := range raw.Data {
			out.Results = append(out.Results, f.normalize())
		}
		return out, nil
	})
}

// CurseForgeFile returns one file of a project (for installs).
//
// Errors: ErrNotConfigured, ErrNotFound, *UpstreamError, the context's
// error.
func (s *Service) CurseForgeFile(ctx context.Context, projectID, fileID int64) (CurseForgeFile, error) {
	if s.curseforge == nil {
		return CurseForgeFile{}, ErrNotConfigured
	}
	path := fmt.Sprintf("/v1/mods/%d/files/%d", projectID, fileID)
	return fetch(ctx, s, s.curseforge, "cf:file:"+path, func(ctx context.Context) (CurseForgeFile, error) {
		var raw struct {
			Data cfFile `json:"data"`
		}
		err := s.curseforge.getJSON(ctx, path, nil, &raw)
		if err != nil {
			return CurseForgeFile{}, err
		}
		if raw.Data.ModID != projectID {
			return CurseForgeFile{}, ErrNotFound
		}
		return raw.Data.normalize(), nil
	})
}

func (m cfMod) normalize() CurseForgeProject {
	p := CurseForgeProject{
		CurseForgeProjectInfo: CurseForgeProjectInfo{
			ID: m.ID, Name: m.Name, Slug: m.Slug, Summary: m.Summary, ClassID: m.ClassID,
			Kind:          classKind(m.ClassID),
			DownloadCount: int64(m.DownloadCount),
			Authors:       make([]string, 0, len(m.Authors)),
			Categories:    make([]string, 0, len(m.Categories)),
			WebsiteURL:    nonEmpty(m.Links.WebsiteURL),
			// allowModDistribution is null for projects older than the
			// setting; CurseForge treats null as allowed.
			AllowDistribution: m.AllowModDistribution == nil || *m.AllowModDistribution,
		},
		LatestFiles: make([]CurseForgeFileIndex, 0, len(m.LatestFilesIndexes)),
		CurseForgeDates: CurseForgeDates{
			DateCreated:  nonEmpty(m.DateCreated),
			DateModified: nonEmpty(m.DateModified),
			DateReleased: nonEmpty(m.DateReleased),
		},
	}
	for _, a := range m.Authors {
		p.Authors = append(p.Authors, a.Name)
	}
	for _, c := range m.Categories {
		p.Categories = append(p.Categories, c.Name)
	}
	if m.Logo != nil {
		p.LogoURL = nonEmpty(m.Logo.URL)
	}
	if m.MainFileID > 0 {
		p.MainFileID = &m.MainFileID
	}
	if !p.AllowDistribution {
		note := distributionNote
		p.DistributionNote = &note
	}
	for _, fi := range m.LatestFilesIndexes {
		idx := CurseForgeFileIndex{FileID: fi.FileID, Filename: fi.Filename, GameVersion: fi.GameVersion, ReleaseType: releaseType(fi.ReleaseType)}
		if fi.ModLoader != nil {
			if l := cfModLoaders[*fi.ModLoader]; l != "" {
				idx.Loader = &l
			}
		}
		p.LatestFiles = append(p.LatestFiles, idx)
	}
	return p
}

// hit is the project as a search result; intern keeps one copy of each
// game version string.
func (m cfMod) hit(intern map[string]string) CurseForgeHit {
	var files []cfFileIndex
	files, m.LatestFilesIndexes = m.LatestFilesIndexes, nil
	p := m.normalize()
	h := CurseForgeHit{CurseForgeProjectInfo: p.CurseForgeProjectInfo, GameVersions: []string{}, Loaders: []string{},
		CurseForgeDates: p.CurseForgeDates}
	for _, fi := range files {
		if gv := fi.GameVersion; gv != "" && !slices.Contains(h.GameVersions, gv) {
			if s, ok := intern[gv]; ok {
				gv = s
			} else {
				intern[gv] = gv
			}
			h.GameVersions = append(h.GameVersions, gv)
		}
		if fi.ModLoader != nil {
			if l := cfModLoaders[*fi.ModLoader]; l != "" && !slices.Contains(h.Loaders, l) {
				h.Loaders = append(h.Loaders, l)
			}
		}
	}
	return h
}

func (f cfFile) normalize() CurseForgeFile {
	out := CurseForgeFile{
		ID: f.ID, ProjectID: f.ModID, DisplayName: f.DisplayName, Filename: f.FileName,
		ReleaseType: releaseType(f.ReleaseType), Date: nonEmpty(f.FileDate), Size: f.FileLength,
		DownloadCount: int64(f.DownloadCount), Available: f.IsAvailable,
		GameVersions: []string{}, Loaders: []string{},
		Dependencies:     make([]CurseForgeDependency, 0, len(f.Dependencies)),
		IsServerPack:     f.IsServerPack != nil && *f.IsServerPack,
		ServerPackFileID: f.ServerPackFileID,
	}
	if out.ServerPackFileID != nil && *out.ServerPackFileID <= 0 {
		out.ServerPackFileID = nil
	}
	if f.DownloadURL != nil && *f.DownloadURL != "" {
		out.DownloadURL = f.DownloadURL
	} else {
		note := distributionNote
		out.DownloadNote = &note
	}
	for _, h := range f.Hashes {
		v := strings.ToLower(h.Value)
		switch {
		case h.Algo == 1 && sha1Re.MatchString(v):
			out.Hashes.SHA1 = &v
		case h.Algo == 2 && md5Re.MatchString(v):
			out.Hashes.MD5 = &v
		}
	}
	for _, gv := range f.GameVersions {
		if l, ok := cfLoaderNames[strings.ToLower(gv)]; ok {
			out.Loaders = append(out.Loaders, l)
		} else if mcVersionRe.MatchString(gv) {
			out.GameVersions = append(out.GameVersions, gv)
		}
	}
	for _, d := range f.Dependencies {
		t := cfRelations[d.RelationType]
		if t == "" {
			t = "other"
		}
		out.Dependencies = append(out.Dependencies, CurseForgeDependency{ProjectID: d.ModID, Type: t})
	}
	return out
}

var (
	sha1Re   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	md5Re    = regexp.MustCompile(`^[0-9a-f]{32}$`)
	sha512Re = regexp.MustCompile(`^[0-9a-f]{128}$`)
	// mcVersionRe picks the Minecraft versions out of a file's
	// gameVersions, which also lists loaders, "Client", "Server" and
	// "Java 17".
	mcVersionRe = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?(-[0-9A-Za-z.\-]+)?$`)
)

// cfModLoaders names CurseForge's ModLoaderType numbers.
var cfModLoaders = map[int]string{1: "forge", 2: "cauldron", 3: "liteloader", 4: "fabric", 5: "quilt", 6: "neoforge"}

// cfLoaderNames are the loader entries of a file's gameVersions.
var cfLoaderNames = map[string]string{
	"forge": "forge", "fabric": "fabric", "quilt": "quilt", "neoforge": "neoforge",
	"liteloader": "liteloader", "rift": "rift", "cauldron": "cauldron",
}

// cfRelations names CurseForge's FileRelationType numbers.
var cfRelations = map[int]string{1: "embedded", 2: "optional", 3: "required", 4: "tool", 5: "incompatible", 6: "include"}

func releaseType(n int) string {
	switch n {
	case 1:
		return "release"
	case 2:
		return "beta"
	case 3:
		return "alpha"
	}
	return "unknown"
}

func classKind(id *int) string {
	if id == nil {
		return "other"
	}
	switch *id {
	case ClassMods:
		return "mod"
	case ClassModpacks:
		return "modpack"
	case ClassPlugins:
		return "plugin"
	case 12:
		return "resourcepack"
	case 6552:
		return "shader"
	}
	return "other"
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
