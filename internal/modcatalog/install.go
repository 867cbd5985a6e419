package modcatalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/pull"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/validate"
)

// Catalog names of an install request.
const (
	CatalogCurseForge = "curseforge"
	CatalogModrinth   = "modrinth"
)

// Servers is what installs need of the servers package; *servers.Service
// implements it.
type Servers interface {
	// Get returns one of the team's servers (servers.ErrNotFound).
	Get(ctx context.Context, teamID, id string) (servers.Server, error)
}

// Profiles are the software profiles; *catalog.Catalog implements it.
type Profiles interface {
	Get(typ string) (catalog.Profile, bool)
}

// Downloads starts verified remote downloads; *pull.Manager implements it.
type Downloads interface {
	StartVerified(ctx context.Context, teamID, serverID, rawURL, directory, filename string, sum pull.Checksum) (pull.Download, error)
}

// Installer puts a catalog's file into a server (POST /servers/{id}/mods).
type Installer struct {
	cat       *Service
	servers   Servers
	profiles  Profiles
	downloads Downloads
}

// NewInstaller returns an Installer resolving files through cat and
// downloading them through downloads.
func NewInstaller(cat *Service, srv Servers, profiles Profiles, downloads Downloads) *Installer {
	return &Installer{cat: cat, servers: srv, profiles: profiles, downloads: downloads}
}

// ID is a catalog identifier given as a JSON string or number
// (CurseForge's ids are numbers, Modrinth's strings).
type ID string

// UnmarshalJSON accepts "abc" and 123.
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*id = ID(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("must be a string or a number")
	}
	*id = ID(n.String())
	return nil
}

// InstallRequest is the body of POST /servers/{id}/mods.
type InstallRequest struct {
	Catalog   string `json:"catalog"`
	ProjectID ID     `json:"project_id"`
	FileID    ID     `json:"file_id"`    // CurseForge
	VersionID ID     `json:"version_id"` // Modrinth
}

// Dependency is a required dependency of the installed file, which Kiln
// does not install by itself.
type Dependency struct {
	Catalog   string  `json:"catalog"`
	ProjectID string  `json:"project_id"`
	VersionID *string `json:"version_id"`
	FileName  *string `json:"file_name"`
}

// Installed is what Install started.
type Installed struct {
	// Download is the remote download (GET /servers/{id}/files/pull).
	Download pull.Download
	// Dependencies are the file's required dependencies, for the user to
	// install ([] when none).
	Dependencies []Dependency
}

// target is a resolved file: where it comes from, what it must hash to,
// and what it runs on.
type target struct {
	url, filename string
	sum           pull.Checksum
	loaders       []string // Modrinth loaders or CurseForge mod loaders
	plugin        bool     // a Bukkit plugin (CurseForge class 5)
	gameVersions  []string
	deps          []Dependency
	field         string // the request field that named the file
}

// Install resolves the file in the catalog, checks it fits the server's
// software and game version, and starts its download into mods/ or
// plugins/, kept only if its hash matches the catalog's.
//
// Errors: *validate.Error (a bad request, or a file that does not fit the
// server: another loader or game version, no download allowed, no hash
// published, a modpack), servers.ErrNotFound, ErrNotConfigured,
// ErrNotFound, *UpstreamError, and pull's errors (servers.ErrInstalling,
// pull.ErrTooMany, pull.ErrClosed).
func (in *Installer) Install(ctx context.Context, teamID, serverID string, req InstallRequest) (Installed, error) {
	var c validate.Collector
	switch req.Catalog {
	case CatalogCurseForge:
		if req.VersionID != "" {
			c.Add("version_id", "is for Modrinth; CurseForge files are named by file_id")
		}
		if _, err := positiveID("project_id", string(req.ProjectID)); err != nil {
			c.Add("project_id", "must be a CurseForge project id (a positive integer)")
		}
		if _, err := positiveID("file_id", string(req.FileID)); err != nil {
			c.Add("file_id", "must be a CurseForge file id (a positive integer)")
		}
	case CatalogModrinth:
		if req.FileID != "" {
			c.Add("file_id", "is for CurseForge; Modrinth versions are named by version_id")
		}
		if !validSlug(string(req.ProjectID)) {
			c.Add("project_id", "must be a Modrinth project id or slug")
		}
		if !validVersionID(string(req.VersionID)) {
			c.Add("version_id", "must be a Modrinth version id (8 letters and digits, as in a version page's address)")
		}
	default:
		c.Add("catalog", "must be curseforge or modrinth")
	}
	if err := c.Err(); err != nil {
		return Installed{}, err
	}
	sv, err := in.servers.Get(ctx, teamID, serverID)
	if err != nil {
		return Installed{}, err
	}
	prof, ok := in.profiles.Get(sv.Software)
	if !ok || prof.PluginDir == "" {
		return Installed{}, validate.Errorf("catalog", "the server runs %s, which loads neither mods nor plugins", sv.Software)
	}
	var t target
	if req.Catalog == CatalogCurseForge {
		t, err = in.curseForge(ctx, req)
	} else {
		t, err = in.modrinth(ctx, req)
	}
	if err != nil {
		return Installed{}, err
	}
	if err := fits(t, sv); err != nil {
		return Installed{}, err
	}
	d, err := in.downloads.StartVerified(ctx, teamID, serverID, t.url, "/"+prof.PluginDir, t.filename, t.sum)
	if err != nil {
		return Installed{}, err
	}
	if t.deps == nil {
		t.deps = []Dependency{}
	}
	return Installed{Download: d, Dependencies: t.deps}, nil
}

func (in *Installer) curseForge(ctx context.Context, req InstallRequest) (target, error) {
	pid, _ := positiveID("project_id", string(req.ProjectID))
	fid, _ := positiveID("file_id", string(req.FileID))
	proj, err := in.cat.CurseForgeProject(ctx, string(req.ProjectID))
	if err != nil {
		return target{}, err
	}
	switch proj.Kind {
	case "mod", "plugin":
	case "modpack":
		return target{}, validate.Errorf("project_id", "%s is a modpack: modpacks are installed with POST /servers/{id}/modpack", proj.Name)
	default:
		return target{}, validate.Errorf("project_id", "%s is a %s, not a mod or a plugin", proj.Name, proj.Kind)
	}
	f, err := in.cat.CurseForgeFile(ctx, pid, fid)
	if err != nil {
		return target{}, err
	}
	if f.DownloadURL == nil {
		return target{}, validate.Errorf("file_id", "%s", distributionNote)
	}
	t := target{url: *f.DownloadURL, filename: f.Filename, loaders: f.Loaders, plugin: proj.Kind == "plugin", gameVersions: f.GameVersions, field: "file_id"}
	switch {
	case f.Hashes.SHA1 != nil:
		t.sum = pull.Checksum{Algorithm: "sha1", Hex: *f.Hashes.SHA1}
	case f.Hashes.MD5 != nil:
		t.sum = pull.Checksum{Algorithm: "md5", Hex: *f.Hashes.MD5}
	default:
		return target{}, validate.Errorf("file_id", "CurseForge publishes no sha1 or md5 for %s, so Kiln cannot verify it", f.Filename)
	}
	for _, d := range f.Dependencies {
		if d.Type == "required" {
			t.deps = append(t.deps, Dependency{Catalog: CatalogCurseForge, ProjectID: fmt.Sprint(d.ProjectID)})
		}
	}
	return t, nil
}

func (in *Installer) modrinth(ctx context.Context, req InstallRequest) (target, error) {
	v, err := in.cat.ModrinthVersion(ctx, string(req.VersionID))
	if err != nil {
		return target{}, err
	}
	if string(req.ProjectID) != v.ProjectID {
		// project_id may be the slug: ask Modrinth for its id.
		id, err := in.cat.modrinthProjectID(ctx, string(req.ProjectID))
		if err != nil {
			return target{}, err
		}
		if id != v.ProjectID {
			return target{}, validate.Errorf("version_id", "version %s belongs to another project than %s", v.ID, req.ProjectID)
		}
	}
	i := slices.IndexFunc(v.Files, func(f ModrinthFile) bool { return f.Primary && f.FileType == nil })
	if i < 0 {
		i = slices.IndexFunc(v.Files, func(f ModrinthFile) bool { return f.FileType == nil })
	}
	if i < 0 {
		return target{}, validate.Errorf("version_id", "version %s has no file to install", v.ID)
	}
	f := v.Files[i]
	t := target{url: f.URL, filename: f.Filename, loaders: v.Loaders, gameVersions: v.GameVersions, field: "version_id"}
	switch {
	case f.Hashes.SHA512 != nil:
		t.sum = pull.Checksum{Algorithm: "sha512", Hex: *f.Hashes.SHA512}
	case f.Hashes.SHA1 != nil:
		t.sum = pull.Checksum{Algorithm: "sha1", Hex: *f.Hashes.SHA1}
	default:
		return target{}, validate.Errorf("version_id", "Modrinth publishes no sha512 or sha1 for %s, so Kiln cannot verify it", f.Filename)
	}
	for _, d := range v.Dependencies {
		if d.Type == "required" && d.ProjectID != nil {
			t.deps = append(t.deps, Dependency{Catalog: CatalogModrinth, ProjectID: *d.ProjectID, VersionID: d.VersionID, FileName: d.FileName})
		}
	}
	return t, nil
}

// runs lists, for each server software, the Modrinth loaders whose files
// it loads. kiln-test (the development test server) stands in for Paper.
var runs = map[string][]string{
	"paper":      {"paper", "spigot", "bukkit"},
	"purpur":     {"purpur", "paper", "spigot", "bukkit"},
	"folia":      {"folia"},
	"velocity":   {"velocity"},
	"bungeecord": {"bungeecord"},
	"waterfall":  {"waterfall", "bungeecord"},
	"fabric":     {"fabric"},
	"forge":      {"forge"},
	"neoforge":   {"neoforge"},
	"kiln-test":  {"paper", "spigot", "bukkit"},
}

// fits refuses a file made for another loader or game version than the
// server's, with a sentence naming both.
func fits(t target, sv servers.Server) error {
	accepted := runs[sv.Software]
	ok := false
	if t.plugin {
		ok = slices.Contains(accepted, "bukkit")
	} else {
		ok = slices.ContainsFunc(t.loaders, func(l string) bool { return slices.Contains(accepted, l) })
	}
	if !ok {
		made := strings.Join(t.loaders, ", ")
		if t.plugin {
			made = "Bukkit"
		}
		if made == "" {
			made = "no loader Kiln knows"
		}
		return validate.Errorf(t.field, "this file is made for %s; the server runs %s, which loads %s", made, sv.Software, loadsWhat(sv.Software, accepted))
	}
	if !mcVersionRe.MatchString(sv.Version) || len(t.gameVersions) == 0 {
		return nil // "latest", or a file without game versions: nothing to compare
	}
	for _, gv := range t.gameVersions {
		if gv == sv.Version || (t.plugin && strings.HasPrefix(sv.Version, gv+".")) {
			return nil
		}
	}
	return validate.Errorf(t.field, "this file is for Minecraft %s; the server runs %s", strings.Join(t.gameVersions, ", "), sv.Version)
}

func loadsWhat(software string, accepted []string) string {
	if len(accepted) == 0 {
		return "neither mods nor plugins Kiln can install"
	}
	return strings.Join(accepted, ", ") + " files"
}

// modrinthProjectID resolves a project id or slug to the project's id (for
// installs).
func (s *Service) modrinthProjectID(ctx context.Context, idOrSlug string) (string, error) {
	path := "/v2/project/" + url.PathEscape(idOrSlug)
	return fetch(ctx, s, s.modrinth, "mr:project:"+path, func(ctx context.Context) (string, error) {
		var raw struct {
			ID string `json:"id"`
		}
		err := s.modrinth.getJSON(ctx, path, nil, &raw)
		if err != nil {
			return "", err
		}
		return raw.ID, nil
	})
}
