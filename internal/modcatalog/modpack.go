package modcatalog

import (
	"archive/zip"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/servers"
	"github.com/kilnhq/kiln/internal/validate"
)

// DefaultModpackOrigins are where a .mrpack's files may be downloaded
// from: the hosts Modrinth's format allows, over https.
var DefaultModpackOrigins = []string{
	"https://cdn.modrinth.com",
	"https://github.com",
	"https://raw.githubusercontent.com",
	"https://gitlab.com",
}

// Limits of a modpack install.
const (
	// MaxPackIndex bounds modrinth.index.json (a pack of 500 mods has an
	// index of about 400 KiB).
	MaxPackIndex = 8 << 20
	// MaxPackFiles bounds the files an index lists.
	MaxPackFiles = 10_000
	// MaxPackEntries bounds the entries of the .mrpack archive itself.
	MaxPackEntries = 100_000
)

// Errors of modpack installs, besides *validate.Error, servers.ErrNotFound,
// servers.ErrInstalling, ErrNotFound, *UpstreamError and ErrClosed.
var (
	// ErrModpackNotFound: no install of that id on that server (it never
	// existed, belongs to another server, or was forgotten; map to 404).
	ErrModpackNotFound = errors.New("modpack install not found")
	// ErrModpackBusy: a modpack is already being installed on the server,
	// or Kiln runs ModpackOptions.MaxRunning installs already (map to 409
	// CONFLICT).
	ErrModpackBusy = errors.New("a modpack install is already running")
)

// ModpackServers is what modpack installs need of the servers package;
// *servers.Service implements it.
type ModpackServers interface {
	// Get returns one of the team's servers (servers.ErrNotFound).
	Get(ctx context.Context, teamID, id string) (servers.Server, error)
	// Access returns the server's root and, with write, its disk ledger
	// (servers.ErrNotFound, servers.ErrInstalling).
	Access(ctx context.Context, teamID, id string, write bool) (servers.Access, error)
}

// ModpackOptions configure Modpacks; zero values take the defaults.
type ModpackOptions struct {
	// Origins are the scheme://host[:port] a pack's files may come from
	// (default DefaultModpackOrigins). Tests add their loopback stand-in.
	Origins []string
	// Parallel is how many files are downloaded at once (default 8).
	Parallel int
	// FileTimeout bounds the download of one file (default 5 min).
	FileTimeout time.Duration
	// MaxRunning is how many installs may run at once (default 4).
	MaxRunning int
	// MaxKept is how many finished installs are remembered for polling
	// (default 100; the oldest finished is forgotten first).
	MaxKept int
}

func (o *ModpackOptions) defaults() {
	if o.Origins == nil {
		o.Origins = DefaultModpackOrigins
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.FileTimeout <= 0 {
		o.FileTimeout = 5 * time.Minute
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = 4
	}
	if o.MaxKept <= 0 {
		o.MaxKept = 100
	}
}

// ModpackRequest is the body of POST /servers/{id}/modpack: exactly one of
// VersionID (a Modrinth version whose file is an .mrpack) and File (an
// .mrpack in the server's files, a path inside its root).
type ModpackRequest struct {
	VersionID string `json:"version_id,omitempty"`
	File      string `json:"file,omitempty"`
}

// PackStatus is where an install stands.
type PackStatus string

// The states of an install: running, then done or failed.
const (
	PackRunning PackStatus = "running"
	PackDone    PackStatus = "done"
	PackFailed  PackStatus = "failed"
)

// PackInfo describes the pack, from its modrinth.index.json.
type PackInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Dependencies are the index's: minecraft, fabric-loader, forge,
	// neoforge, quilt-loader, with their versions.
	Dependencies map[string]string `json:"dependencies"`
}

// ModpackInstall is an install as the API answers it.
type ModpackInstall struct {
	ID     string     `json:"id"`
	Status PackStatus `json:"status"`
	// FilesTotal is how many files the pack puts in the server (downloads
	// and overrides; 0 until the index is read); FilesDone how many are
	// staged so far.
	FilesTotal int `json:"files_total"`
	FilesDone  int `json:"files_done"`
	// Error says why the install failed (nothing was changed); null
	// otherwise.
	Error *string `json:"error"`
	// Pack is null until the index has been read.
	Pack *PackInfo `json:"pack"`
	// Installed lists the paths put in place (root-relative, sorted) once
	// done; Skipped the index's files not meant for servers
	// (env.server "unsupported"). Both are [] until then, and hold at most
	// MaxListed paths (the first ones); the counts say how many there are.
	Installed      []string `json:"installed"`
	Skipped        []string `json:"skipped"`
	InstalledCount int      `json:"installed_count"`
	SkippedCount   int      `json:"skipped_count"`
}

// MaxListed is how many paths a finished install keeps of what it
// installed and of what it skipped: what a finished install holds (up to
// MaxKept of them) stays small whatever the pack (four installs of a
// 100,000-file pack kept 600 MiB before); the counts are exact.
const MaxListed = 1000

// capped is list's first MaxListed paths, in a slice of its own (the
// rest of list's array is freed with it).
func capped(list []string) []string {
	if len(list) <= MaxListed {
		return list
	}
	out := make([]string, MaxListed)
	copy(out, list)
	return out
}

// Modpacks installs Modrinth modpacks (.mrpack) into servers, all or
// nothing, in the background (POST /servers/{id}/modpack). It is safe for
// concurrent use; Close stops the installs and waits for them.
//
// Decisions (doc.go belongs to the single-mod installs; these are the
// modpack's):
//   - All or nothing: the files are built in a files.Stager in the
//     server's root (a private ".kiln-tmp-stage-…" directory, through
//     files.Writing, so every byte is reserved from the disk limit) and
//     moved into place by Stager.Commit only when every download has been
//     verified and every override extracted. Any refusal closes the
//     stager, which removes the staging directory: the root is as before.
//     A Modrinth version's .mrpack is downloaded (sha512 verified) into a
//     second staging directory, removed at the end, its bytes given back
//     to the ledger.
//   - Checks before any write: the index (at most MaxPackIndex bytes,
//     formatVersion 1, game minecraft, a minecraft dependency, only the
//     dependencies the format defines), every path of files[] and of
//     overrides/ and server-overrides/ (refused, never repaired: "..",
//     absolute, backslashes, drive letters, Kiln's temporary names, a file
//     where another needs a directory, a path listed twice), every
//     download URL's origin (all of a file's URLs, not only the first),
//     and the hashes' form. A pack of the server's files is checked by the
//     request (400); a version's when its .mrpack has arrived (the install
//     fails). Overrides that are not regular files (symlinks) are refused.
//   - Fit: fabric-loader needs a fabric server, forge forge, neoforge
//     neoforge; quilt-loader is refused (Kiln runs no Quilt server); a
//     pack without a loader fits any software. The minecraft dependency
//     must equal the server's version; "latest" does not match a pinned
//     pack: the sentence names the server to pick.
//   - Files: env.server "unsupported" is skipped (listed in skipped);
//     "required", "optional" and no env are installed (a server has no
//     one to ask). Precedence: server-overrides over overrides over
//     files[], whatever the order of the archive's entries; a file that
//     an override replaces is not downloaded. client-overrides/ is
//     ignored.
//   - Downloads: only from Options.Origins (scheme, host and port as
//     listed: https://cdn.modrinth.com, github.com,
//     raw.githubusercontent.com, gitlab.com by default), through the
//     catalog Service's netguard client and User-Agent. Redirects are
//     followed as netguard allows (GitHub release assets redirect to
//     another host); the content is what the hashes say or refused. A
//     file's URLs are tried in order when one fails; a size or hash
//     mismatch refuses the pack at once. At most Options.Parallel (8)
//     files are downloaded or extracted at once, each through one
//     io.Copy buffer; each download is bounded by FileTimeout.
//   - Installs live in memory: at most MaxRunning (4) at once and one per
//     server (ErrModpackBusy), and the MaxKept (100) most recent finished
//     ones for polling; a restart forgets them (an interrupted install
//     left only its staging directory, which the disk walk removes).
//     Installing into a running server is allowed: the game loads the
//     files at its next start.
type Modpacks struct {
	cat     *Service
	servers ModpackServers
	opts    ModpackOptions
	origins map[string]bool
	log     *slog.Logger

	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	jobs    map[string]*packJob
	order   []*packJob // oldest first
	running int
}

// NewModpacks returns Modpacks resolving versions and downloading files
// through cat's catalog and netguard client. It returns an error for an
// origin that is not scheme://host[:port].
func NewModpacks(cat *Service, srv ModpackServers, opts ModpackOptions, log *slog.Logger) (*Modpacks, error) {
	opts.defaults()
	origins := map[string]bool{}
	for _, o := range opts.Origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("modpack origin %q: must be scheme://host[:port]", o)
		}
		origins[u.Scheme+"://"+strings.ToLower(u.Host)] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Modpacks{cat: cat, servers: srv, opts: opts, origins: origins, log: log,
		base: ctx, cancel: cancel, jobs: map[string]*packJob{}}, nil
}

// Close cancels the installs in flight (each fails, its server
// unchanged) and waits for them.
func (m *Modpacks) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// packJob is one install.
type packJob struct {
	id, teamID, serverID string
	total, done          atomic.Int64

	mu        sync.Mutex
	status    PackStatus
	err       *string
	pack      *PackInfo
	installed []string // at most MaxListed (capped)
	skipped   []string
	counts    [2]int // installed, skipped
}

func (j *packJob) answer() ModpackInstall {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := ModpackInstall{ID: j.id, Status: j.status, FilesTotal: int(j.total.Load()), FilesDone: int(j.done.Load()),
		Error: j.err, Pack: j.pack, Installed: j.installed, Skipped: j.skipped,
		InstalledCount: j.counts[0], SkippedCount: j.counts[1]}
	if out.Installed == nil {
		out.Installed = []string{}
	}
	if out.Skipped == nil {
		out.Skipped = []string{}
	}
	return out
}

// packSource is where a pack comes from: a file of the server, or a
// verified download.
type packSource struct {
	field string // "file" or "version_id": where refusals point
	file  string // cleaned, root-relative
	dl    packDownload
}

// Install checks the request and the pack's fit with the server, then
// starts installing it in the background and returns the install
// (status running). For a file, the pack is read now: a pack that is
// malformed, lists a path that escapes or a host outside the allowed
// origins, or needs another software or game version is refused here.
// For a version, Modrinth's record is checked now and the index once the
// pack is downloaded (the install then fails).
//
// Errors: *validate.Error (at "version_id" or "file"), servers.ErrNotFound,
// servers.ErrInstalling, files.ErrNotFound, files.ErrNotFile,
// files.ErrHardLink, ErrNotFound, *UpstreamError, ErrModpackBusy,
// ErrClosed.
func (m *Modpacks) Install(ctx context.Context, teamID, serverID string, req ModpackRequest) (ModpackInstall, error) {
	switch {
	case req.VersionID == "" && req.File == "":
		return ModpackInstall{}, validate.Errorf("version_id", "or file is required: a Modrinth version id, or the path of an .mrpack in the server's files")
	case req.VersionID != "" && req.File != "":
		return ModpackInstall{}, validate.Errorf("file", "must not be given with version_id: name one pack")
	case req.VersionID != "" && !validVersionID(req.VersionID):
		return ModpackInstall{}, validate.Errorf("version_id", "must be a Modrinth version id (8 letters and digits, as in a version page's address)")
	}
	src := packSource{field: "version_id"}
	if req.File != "" {
		rel, err := files.Clean("file", req.File)
		if err != nil {
			return ModpackInstall{}, err
		}
		if rel == "." {
			return ModpackInstall{}, validate.Errorf("file", "must name an .mrpack file, not the server's root")
		}
		src = packSource{field: "file", file: rel}
	}
	sv, err := m.servers.Get(ctx, teamID, serverID)
	if err != nil {
		return ModpackInstall{}, err
	}
	a, err := m.servers.Access(ctx, teamID, serverID, true)
	if err != nil {
		return ModpackInstall{}, err
	}
	if src.file != "" {
		if err := m.checkFile(a, src, sv); err != nil {
			return ModpackInstall{}, err
		}
	} else {
		dl, err := m.packVersion(ctx, req.VersionID, sv)
		if err != nil {
			return ModpackInstall{}, err
		}
		src.dl = dl
	}
	j, err := m.start(teamID, serverID)
	if err != nil {
		return ModpackInstall{}, err
	}
	go func() {
		defer m.wg.Done()
		m.run(j, a, sv, src)
	}()
	return j.answer(), nil
}

// Get returns an install of the server.
//
// Errors: servers.ErrNotFound, ErrModpackNotFound.
func (m *Modpacks) Get(ctx context.Context, teamID, serverID, id string) (ModpackInstall, error) {
	if _, err := m.servers.Get(ctx, teamID, serverID); err != nil {
		return ModpackInstall{}, err
	}
	m.mu.Lock()
	j := m.jobs[id]
	m.mu.Unlock()
	if j == nil || j.teamID != teamID || j.serverID != serverID {
		return ModpackInstall{}, ErrModpackNotFound
	}
	return j.answer(), nil
}

// start records a new running install, unless the server has one or too
// many run; the caller runs it (m.wg is counted).
func (m *Modpacks) start(teamID, serverID string) (*packJob, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	j := &packJob{id: hex.EncodeToString(b[:]), teamID: teamID, serverID: serverID, status: PackRunning}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.running >= m.opts.MaxRunning {
		return nil, fmt.Errorf("%w: Kiln is installing %d modpacks, the most it runs at once", ErrModpackBusy, m.running)
	}
	for _, o := range m.jobs {
		if o.serverID == serverID && o.answer().Status == PackRunning {
			return nil, fmt.Errorf("%w on this server (%s)", ErrModpackBusy, o.id)
		}
	}
	m.running++
	m.jobs[j.id] = j
	m.order = append(m.order, j)
	m.wg.Add(1)
	return j, nil
}

// finish records the end of an install and forgets the oldest finished
// ones beyond MaxKept.
func (m *Modpacks) finish(j *packJob, err error, installed, skipped []string) {
	j.mu.Lock()
	if err != nil {
		msg := err.Error()
		if ve, ok := errors.AsType[*validate.Error](err); ok && len(ve.Issues) > 0 {
			msg = ve.Issues[0].Message
		}
		if errors.Is(err, files.ErrQuota) {
			msg = "the server's disk limit would be exceeded"
		}
		msg += "; nothing was installed"
		j.status, j.err = PackFailed, &msg
	} else {
		j.status, j.installed, j.skipped = PackDone, capped(installed), capped(skipped)
		j.counts = [2]int{len(installed), len(skipped)}
	}
	j.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running--
	finished := len(m.order) - m.running
	kept := m.order[:0]
	for _, o := range m.order {
		if finished > m.opts.MaxKept && o.answer().Status != PackRunning {
			delete(m.jobs, o.id)
			finished--
			continue
		}
		kept = append(kept, o)
	}
	clear(m.order[len(kept):])
	m.order = kept
}

// checkFile reads a pack of the server's files now, so that a pack that
// cannot be installed is refused by the request.
func (m *Modpacks) checkFile(a servers.Access, src packSource, sv servers.Server) error {
	r, err := files.Open(a.Root)
	if err != nil {
		return err
	}
	defer r.Close()
	f, e, err := r.OpenRead(src.file)
	if err != nil {
		return err
	}
	defer f.Close()
	p, err := m.readPack(f, e.Size, src.field)
	if err != nil {
		return err
	}
	return packFits(src.field, p.needs(), []string{p.index.Dependencies["minecraft"]}, sv)
}

// packVersion finds the .mrpack of a Modrinth version and checks the
// version's loaders and game versions against the server.
func (m *Modpacks) packVersion(ctx context.Context, versionID string, sv servers.Server) (packDownload, error) {
	v, err := m.cat.ModrinthVersion(ctx, versionID)
	if err != nil {
		return packDownload{}, err
	}
	isPack := func(f ModrinthFile) bool { return strings.HasSuffix(strings.ToLower(f.Filename), ".mrpack") }
	i := slices.IndexFunc(v.Files, func(f ModrinthFile) bool { return f.Primary && isPack(f) })
	if i < 0 {
		i = slices.IndexFunc(v.Files, isPack)
	}
	if i < 0 {
		return packDownload{}, validate.Errorf("version_id", "version %s is not a modpack: it has no .mrpack file", v.ID)
	}
	f := v.Files[i]
	if f.Hashes.SHA512 == nil {
		return packDownload{}, validate.Errorf("version_id", "Modrinth publishes no sha512 for %s, so Kiln cannot verify it", f.Filename)
	}
	dl := packDownload{path: "pack.mrpack", urls: []string{f.URL}, size: -1}
	if dl.sha512, err = hexSum(*f.Hashes.SHA512, sha512.Size); err != nil {
		return packDownload{}, &UpstreamError{Catalog: "Modrinth", Reason: "sent a malformed sha512", Err: err}
	}
	if f.Size > 0 {
		dl.size = f.Size
	}
	if !m.allowed(f.URL) {
		return packDownload{}, validate.Errorf("version_id", "the pack's file is served from %s, which is not a host Kiln downloads packs from", hostOf(f.URL))
	}
	var needs []string
	for _, l := range v.Loaders {
		if sw, ok := loaderSoftware[l]; ok {
			needs = append(needs, sw)
		}
	}
	return dl, packFits("version_id", needs, v.GameVersions, sv)
}

// dependencyLoaders maps the index's loader dependencies to the server
// software that runs them ("" when Kiln has none).
var dependencyLoaders = map[string]string{
	"fabric-loader": "fabric",
	"forge":         "forge",
	"neoforge":      "neoforge",
	"quilt-loader":  "",
}

// loaderSoftware maps a Modrinth version's loaders to server software.
var loaderSoftware = map[string]string{
	"fabric": "fabric", "forge": "forge", "neoforge": "neoforge", "quilt": "",
}

// packFits refuses a pack made for another loader or game version than
// the server's, with a sentence saying which server to pick. needs lists
// the software any of which runs the pack ("" for one Kiln has not; none:
// any); mcs the pack's game versions.
func packFits(field string, needs []string, mcs []string, sv servers.Server) error {
	mcs = slices.DeleteFunc(slices.Clone(mcs), func(s string) bool { return s == "" })
	mc := strings.Join(mcs, " or ")
	okSoftware := len(needs) == 0 || slices.Contains(needs, sv.Software)
	okVersion := len(mcs) == 0 || slices.Contains(mcs, sv.Version)
	if okSoftware && okVersion {
		return nil
	}
	if slices.Contains(needs, "") && !slices.ContainsFunc(needs, func(s string) bool { return s != "" }) {
		return validate.Errorf(field, "this pack needs Quilt, which Kiln cannot run")
	}
	want := strings.Join(slices.DeleteFunc(slices.Clone(needs), func(s string) bool { return s == "" }), " or ")
	if want == "" {
		want = sv.Software
	}
	if mc == "" {
		mc = sv.Version
	}
	return validate.Errorf(field, "this pack is for %s on Minecraft %s; the server runs %s %s: pick a %s server on Minecraft %s",
		want, mc, sv.Software, sv.Version, want, mc)
}

// run installs the pack: everything in a staging directory of the root,
// moved into place only when every file is verified.
func (m *Modpacks) run(j *packJob, a servers.Access, sv servers.Server, src packSource) {
	log := m.log.With("server_id", j.serverID, "modpack_install", j.id)
	var installed, skipped []string
	err := files.Writing(a, func(r *files.Root, res *quota.Reservation) error {
		var err error
		installed, skipped, err = m.install(m.base, j, r, res, sv, src)
		return err
	})
	if err == nil {
		a.Disk.Stale() // staged files may have replaced others: measure again
		log.InfoContext(m.base, "modpack installed", "files", len(installed))
	} else {
		if m.base.Err() != nil {
			err = ErrClosed
		}
		log.WarnContext(m.base, "modpack install failed", "err", err)
	}
	m.finish(j, err, installed, skipped)
}

func (m *Modpacks) install(ctx context.Context, j *packJob, r *files.Root, res *quota.Reservation, sv servers.Server, src packSource) (installed, skipped []string, err error) {
	var f *os.File
	var size int64
	if src.file != "" {
		var e files.Entry
		if f, e, err = r.OpenRead(src.file); err != nil {
			return nil, nil, err
		}
		size = e.Size
	} else {
		// The pack is downloaded into a staging directory of its own,
		// removed at the end: it counts against the disk limit meanwhile.
		scratch, err := r.Stage(".", res)
		if err != nil {
			return nil, nil, err
		}
		before := res.Change()
		defer func() {
			_ = scratch.Close()
			res.Changed(before - res.Change())
		}()
		if err := m.download(ctx, scratch, src.dl); err != nil {
			return nil, nil, fmt.Errorf("the pack: %w", err)
		}
		if f, err = scratch.Open(src.dl.path); err != nil {
			return nil, nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		size = fi.Size()
	}
	defer f.Close()
	p, err := m.readPack(f, size, src.field)
	if err != nil {
		return nil, nil, err
	}
	j.mu.Lock()
	j.pack = &PackInfo{Name: p.index.Name, Version: p.index.VersionID, Dependencies: p.index.Dependencies}
	j.mu.Unlock()
	if err := packFits(src.field, p.needs(), []string{p.index.Dependencies["minecraft"]}, sv); err != nil {
		return nil, nil, err
	}
	j.total.Store(int64(len(p.downloads) + len(p.overrides)))

	st, err := r.Stage(".", res)
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	for _, d := range p.dirs {
		if err := st.Mkdir(d, 0o755); err != nil {
			return nil, nil, fmt.Errorf("override %s: %w", d, err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(m.opts.Parallel)
	for _, d := range p.downloads {
		g.Go(func() error {
			if err := m.download(gctx, st, d); err != nil {
				return fmt.Errorf("%s: %w", d.path, err)
			}
			j.done.Add(1)
			return nil
		})
	}
	for _, o := range p.overrides {
		g.Go(func() error {
			rc, err := o.zf.Open()
			if err != nil {
				return fmt.Errorf("override %s: %w", o.path, err)
			}
			defer rc.Close()
			if _, err := st.Create(o.path, rc, 0o644); err != nil {
				return fmt.Errorf("override %s: %w", o.path, err)
			}
			j.done.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	if err := st.Commit(ctx); err != nil {
		return nil, nil, err
	}
	for _, d := range p.downloads {
		installed = append(installed, d.path)
	}
	for _, o := range p.overrides {
		installed = append(installed, o.path)
	}
	slices.Sort(installed)
	return installed, p.skipped, nil
}

// mrIndex is modrinth.index.json.
type mrIndex struct {
	FormatVersion int               `json:"formatVersion"`
	Game          string            `json:"game"`
	VersionID     string            `json:"versionId"`
	Name          string            `json:"name"`
	Files         []mrFile          `json:"files"`
	Dependencies  map[string]string `json:"dependencies"`
}

type mrFile struct {
	Path      string            `json:"path"`
	Hashes    map[string]string `json:"hashes"`
	Env       map[string]string `json:"env"`
	Downloads []string          `json:"downloads"`
	FileSize  *int64            `json:"fileSize"`
}

// packDownload is one file to download and verify.
type packDownload struct {
	path   string
	urls   []string
	sha512 []byte
	sha1   []byte // nil when the index gives none
	size   int64  // -1 when unknown
}

// packOverride is one file of overrides/ or server-overrides/.
type packOverride struct {
	path string
	zf   *zip.File
}

// pack is a read and checked .mrpack: what to put where.
type pack struct {
	index     mrIndex
	downloads []packDownload
	overrides []packOverride
	dirs      []string
	skipped   []string
}

// needs lists the software that runs the pack (none: any).
func (p *pack) needs() []string {
	var out []string
	for dep := range p.index.Dependencies {
		if sw, ok := dependencyLoaders[dep]; ok {
			out = append(out, sw)
		}
	}
	slices.Sort(out)
	return out
}

// readPack reads and checks a .mrpack: the index (bounded, format 1,
// game minecraft, known dependencies), every path (no "..", not absolute,
// no Kiln temporary name, no file where another needs a directory), every
// download's origin and hashes, and the overrides (server-overrides win
// over overrides, which win over the index's files). Nothing is written.
func (m *Modpacks) readPack(f io.ReaderAt, size int64, field string) (*pack, error) {
	zr, err := zip.NewReader(f, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // names are checked below
		return nil, validate.Errorf(field, "is not an .mrpack: not a zip archive")
	}
	if len(zr.File) > MaxPackEntries {
		return nil, validate.Errorf(field, "the pack has more than %d entries", MaxPackEntries)
	}
	bad := func(format string, args ...any) error {
		return validate.Errorf(field, "the pack is refused: "+format, args...)
	}
	var idx *zip.File
	for _, zf := range zr.File {
		if zf.Name == "modrinth.index.json" {
			if idx != nil {
				return nil, bad("modrinth.index.json appears twice")
			}
			idx = zf
		}
	}
	if idx == nil {
		return nil, validate.Errorf(field, "is not an .mrpack: it has no modrinth.index.json")
	}
	if idx.UncompressedSize64 > MaxPackIndex {
		return nil, bad("modrinth.index.json is larger than %d MiB", MaxPackIndex>>20)
	}
	rc, err := idx.Open()
	if err != nil {
		return nil, bad("modrinth.index.json cannot be read")
	}
	raw, err := io.ReadAll(io.LimitReader(rc, MaxPackIndex+1))
	rc.Close()
	if err != nil || len(raw) > MaxPackIndex {
		return nil, bad("modrinth.index.json cannot be read, or is larger than %d MiB", MaxPackIndex>>20)
	}
	p := &pack{}
	if err := json.Unmarshal(raw, &p.index); err != nil {
		return nil, bad("modrinth.index.json is not valid JSON of the format")
	}
	ix := &p.index
	switch {
	case ix.FormatVersion != 1:
		return nil, bad("its format version is %d; Kiln reads version 1", ix.FormatVersion)
	case ix.Game != "minecraft":
		return nil, bad("it is for the game %q, not minecraft", ix.Game)
	case ix.Dependencies["minecraft"] == "":
		return nil, bad("it does not say which Minecraft version it needs")
	case len(ix.Files) > MaxPackFiles:
		return nil, bad("it lists more than %d files", MaxPackFiles)
	}
	for dep := range ix.Dependencies {
		if _, ok := dependencyLoaders[dep]; !ok && dep != "minecraft" {
			return nil, bad("it depends on %q, which Kiln does not know", dep)
		}
	}
	type placed struct {
		layer int // 0 files, 1 overrides, 2 server-overrides
		i     int
	}
	at := map[string]placed{}
	for i, fl := range ix.Files {
		name, err := packPath(fl.Path)
		if err != nil {
			return nil, bad("files[%d].path %q %s", i, fl.Path, err)
		}
		if strings.EqualFold(fl.Env["server"], "unsupported") {
			p.skipped = append(p.skipped, name)
			continue
		}
		if _, dup := at[name]; dup {
			return nil, bad("%s is listed twice", name)
		}
		d := packDownload{path: name, size: -1}
		if d.sha512, err = hexSum(fl.Hashes["sha512"], sha512.Size); err != nil {
			return nil, bad("%s has no valid sha512", name)
		}
		if s, ok := fl.Hashes["sha1"]; ok {
			if d.sha1, err = hexSum(s, sha1.Size); err != nil {
				return nil, bad("%s has an invalid sha1", name)
			}
		}
		if fl.FileSize != nil {
			if *fl.FileSize < 0 {
				return nil, bad("%s has a negative fileSize", name)
			}
			d.size = *fl.FileSize
		}
		if len(fl.Downloads) == 0 {
			return nil, bad("%s has no download URL", name)
		}
		for _, u := range fl.Downloads {
			if !m.allowed(u) {
				return nil, bad("%s is downloaded from %s, which is not a host Modrinth packs may use", name, hostOf(u))
			}
		}
		d.urls = fl.Downloads
		at[name] = placed{0, len(p.downloads)}
		p.downloads = append(p.downloads, d)
	}
	var overrides []packOverride
	dirs := map[string]bool{}
	for _, zf := range zr.File {
		var layer int
		var rest string
		switch {
		case strings.HasPrefix(zf.Name, "overrides/"):
			layer, rest = 1, strings.TrimPrefix(zf.Name, "overrides/")
		case strings.HasPrefix(zf.Name, "server-overrides/"):
			layer, rest = 2, strings.TrimPrefix(zf.Name, "server-overrides/")
		default:
			continue // the index, client-overrides/, anything else
		}
		mode := zf.Mode()
		isDir := mode.IsDir() || strings.HasSuffix(rest, "/")
		if isDir && strings.Trim(rest, "/") == "" {
			continue // the overrides directory itself
		}
		name, err := packPath(strings.TrimSuffix(rest, "/"))
		if err != nil {
			return nil, bad("override %q %s", zf.Name, err)
		}
		switch {
		case isDir:
			dirs[name] = true
			continue
		case !mode.IsRegular():
			return nil, bad("override %q is not a regular file", zf.Name)
		}
		if old, ok := at[name]; ok {
			switch {
			case old.layer == layer:
				return nil, bad("override %q appears twice", zf.Name)
			case old.layer > layer:
				continue // server-overrides win
			case old.layer == 0:
				p.downloads[old.i].path = "" // the override replaces the download
			default:
				overrides[old.i].path = ""
			}
		}
		at[name] = placed{layer, len(overrides)}
		overrides = append(overrides, packOverride{path: name, zf: zf})
	}
	p.downloads = slices.DeleteFunc(p.downloads, func(d packDownload) bool { return d.path == "" })
	p.overrides = slices.DeleteFunc(overrides, func(o packOverride) bool { return o.path == "" })
	// A file where another file needs a directory cannot be built.
	for name := range at {
		for d := parentOf(name); d != ""; d = parentOf(d) {
			if _, ok := at[d]; ok {
				return nil, bad("%s is a file, and %s needs it to be a directory", d, name)
			}
		}
	}
	for d := range dirs {
		if _, ok := at[d]; ok {
			return nil, bad("%s is both a file and a directory", d)
		}
		p.dirs = append(p.dirs, d)
	}
	slices.Sort(p.dirs)
	slices.Sort(p.skipped)
	return p, nil
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// packPath cleans a path of the pack, refusing rather than repairing it:
// the sentence's end when refused.
func packPath(raw string) (string, error) {
	switch {
	case raw == "":
		return "", errors.New("is empty")
	case strings.HasPrefix(raw, "/"):
		return "", errors.New("is an absolute path")
	case strings.ContainsRune(raw, '\\'):
		return "", errors.New("contains a backslash")
	case len(raw) >= 2 && raw[1] == ':':
		return "", errors.New("is a Windows absolute path")
	}
	for seg := range strings.SplitSeq(raw, "/") {
		if seg == ".." {
			return "", errors.New("leads out of the server's root (\"..\")")
		}
		if quota.Reserved(seg) {
			return "", errors.New("uses a name Kiln keeps for its temporary files")
		}
	}
	name, err := files.Clean("path", raw)
	if err != nil {
		if ve, ok := errors.AsType[*validate.Error](err); ok && len(ve.Issues) > 0 {
			return "", errors.New(ve.Issues[0].Message)
		}
		return "", errors.New("is not a valid path")
	}
	if name == "." {
		return "", errors.New("names the server's root")
	}
	return name, nil
}

// allowed tells whether a download URL is on an allowed origin.
func (m *Modpacks) allowed(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Host == "" {
		return false
	}
	return m.origins[u.Scheme+"://"+strings.ToLower(u.Host)]
}

// hostOf is a URL's host for a message.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return fmt.Sprintf("%q", raw)
}

func hexSum(s string, size int) ([]byte, error) {
	b, err := hex.DecodeString(strings.ToLower(s))
	if err != nil || len(b) != size {
		return nil, errors.New("malformed digest")
	}
	return b, nil
}

// errMismatch: a downloaded file is not what the pack says.
var errMismatch = errors.New("does not match the pack's hash")

// download fetches d into st from its URLs in order (the next when one
// cannot be reached or answers other than 200); a file whose size or
// hash is not the pack's is refused at once. Through the catalog's
// netguard client; one buffer of io.Copy per download.
func (m *Modpacks) download(ctx context.Context, st *files.Stager, d packDownload) error {
	var last error
	for _, u := range d.urls {
		err := m.fetchFile(ctx, st, d, u)
		if err == nil {
			return nil
		}
		if errors.Is(err, errMismatch) || errors.Is(err, files.ErrQuota) || ctx.Err() != nil {
			return err
		}
		last = err
	}
	return last
}

func (m *Modpacks) fetchFile(ctx context.Context, st *files.Stager, d packDownload, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.FileTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return fmt.Errorf("download from %s: %w", hostOf(rawURL), err)
	}
	req.Header.Set("User-Agent", m.cat.opts.UserAgent)
	resp, err := m.cat.client.Do(req)
	if err != nil {
		// The user's sentence names the host; the cause is logged here.
		m.log.WarnContext(ctx, "modpack download failed", "url", rawURL, "err", err)
		return fmt.Errorf("download from %s failed", hostOf(rawURL))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download from %s answered HTTP %s", hostOf(rawURL), statusLine(resp.StatusCode))
	}
	vr := &verifyingReader{r: resp.Body, d: d, s512: sha512.New()}
	if d.sha1 != nil {
		vr.s1 = sha1.New()
	}
	if _, err := st.Create(d.path, vr, 0o644); err != nil {
		if vr.fail != nil {
			return vr.fail
		}
		if errors.Is(err, files.ErrQuota) {
			return files.ErrQuota
		}
		m.log.WarnContext(ctx, "modpack download failed", "url", rawURL, "err", err)
		return fmt.Errorf("download from %s failed", hostOf(rawURL))
	}
	return nil
}

// verifyingReader hashes what it reads and, at the end, answers
// errMismatch instead of io.EOF when the size or a hash is not the
// pack's, so Stager.Create removes the file.
type verifyingReader struct {
	r    io.Reader
	d    packDownload
	s512 hash.Hash
	s1   hash.Hash // nil: no sha1 given
	n    int64
	fail error // the mismatch found
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.d.size >= 0 && int64(len(p)) > v.d.size-v.n+1 {
		p = p[:v.d.size-v.n+1] // never read more than one byte past the size
	}
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.s512.Write(p[:n])
	if v.s1 != nil {
		v.s1.Write(p[:n])
	}
	if v.d.size >= 0 && v.n > v.d.size {
		v.fail = fmt.Errorf("is larger than the pack's %d bytes: %w", v.d.size, errMismatch)
		return n, v.fail
	}
	if err == io.EOF {
		switch {
		case v.d.size >= 0 && v.n != v.d.size:
			v.fail = fmt.Errorf("has %d bytes, not the pack's %d: %w", v.n, v.d.size, errMismatch)
		case string(v.s512.Sum(nil)) != string(v.d.sha512):
			v.fail = fmt.Errorf("sha512 %w", errMismatch)
		case v.s1 != nil && string(v.s1.Sum(nil)) != string(v.d.sha1):
			v.fail = fmt.Errorf("sha1 %w", errMismatch)
		}
		if v.fail != nil {
			return n, v.fail
		}
	}
	return n, err
}
