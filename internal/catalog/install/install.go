package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/catalog/install/upstream"
	"github.com/kilnhq/kiln/internal/netguard"
	"github.com/kilnhq/kiln/internal/validate"
)

// ErrVersionNotFound is returned when the upstream does not have the
// requested version, build or loader version (or has no stable build of
// it).
var ErrVersionNotFound = upstream.ErrVersionNotFound

// ErrTooLarge is returned when an upstream answer is larger than allowed
// (16 MiB of metadata, 512 MiB for an artifact).
var ErrTooLarge = upstream.ErrTooLarge

// ErrNoJava is returned when the Forge or NeoForge installer must run and
// there is no java on the host.
var ErrNoJava = errors.New("java not found on the host")

// ChecksumError reports a download whose content does not match what the
// upstream published. Nothing of it was kept.
type ChecksumError = upstream.ChecksumError

// UpstreamError reports an upstream answer that is not 2xx.
type UpstreamError = upstream.StatusError

// UserAgent returns the User-Agent Kiln sends upstream; PaperMC requires
// one naming the software and a contact.
func UserAgent(version string) string {
	return "Kiln/" + version + " (+https://github.com/kilnhq/kiln)"
}

// Options configure an Installer.
type Options struct {
	// MirrorURL, when set, replaces every upstream: see upstream.Fetcher.Target.
	MirrorURL string
	// CacheDir is a local directory for downloads in flight; required.
	// Without Artifacts it also holds the artifact cache itself.
	CacheDir string
	// Artifacts keeps the content-addressed artifact cache, under keys
	// starting "artifacts/": cmd/kiln passes the blob store of --blob-url,
	// so replicas sharing an S3 bucket share their downloads too. nil
	// means a file blob store in CacheDir.
	Artifacts blob.Store
	// HTTPClient makes the requests; nil means a client with dial, TLS and
	// response-header timeouts.
	HTTPClient *http.Client
	// UserAgent is sent with every request; empty means UserAgent("dev").
	UserAgent string
	Log       *slog.Logger
	// Runner runs the Forge and NeoForge installers; nil runs them on this
	// host with os/exec (java from PATH).
	Runner Runner
	// UserURLs guards the URLs users give (a custom jar's JAR_URL): every
	// address they, and their redirects, connect to is checked. nil allows
	// public addresses only (netguard.NewPolicy(nil, nil)).
	UserURLs *netguard.Policy
	// UserURLBase is the transport the guarded client takes its TLS and
	// timeout settings from (netguard.Policy.Transport); nil for the
	// defaults. Tests trust their TLS stand-in's certificate with it.
	UserURLBase *http.Transport
}

// Installer installs server software into server roots. It is safe for
// concurrent use, but two installs into the same root must not overlap.
type Installer struct {
	fetch       upstream.Fetcher
	userFetch   upstream.Fetcher // for URLs users give: guarded, never mirrored
	cache       cache
	log         *slog.Logger
	runner      Runner
	hostJava    bool // runner is the host's os/exec: look java up on PATH first
	artifactMax int64
	runTimeout  time.Duration
}

// New returns an Installer. It fails when CacheDir is empty or MirrorURL is
// not an absolute http(s) URL without query or fragment.
func New(opts Options) (*Installer, error) {
	if opts.CacheDir == "" {
		return nil, errors.New("installer: no cache directory")
	}
	artifacts, err := openArtifacts(opts)
	if err != nil {
		return nil, err
	}
	mirror := ""
	if opts.MirrorURL != "" {
		u, err := url.Parse(opts.MirrorURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("installer: mirror url %q must be an absolute http(s) url without query", opts.MirrorURL)
		}
		mirror = strings.TrimRight(u.String(), "/")
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}}
	}
	ua := opts.UserAgent
	if ua == "" {
		ua = UserAgent("dev")
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	runner := opts.Runner
	if runner == nil {
		runner = execRunner{}
	}
	guard := opts.UserURLs
	if guard == nil {
		guard = netguard.NewPolicy(nil, nil)
	}
	userBase := opts.UserURLBase
	if userBase == nil {
		userBase = &http.Transport{TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true}
	}
	return &Installer{
		fetch:       upstream.Fetcher{Client: client, UserAgent: ua, Mirror: mirror, MetaMax: upstream.DefaultMetaMax},
		userFetch:   upstream.Fetcher{Client: guard.Client(userBase), UserAgent: ua, MetaMax: upstream.DefaultMetaMax},
		cache:       cache{store: artifacts, prefix: "artifacts/", tmpDir: filepath.Join(opts.CacheDir, "~downloads")},
		log:         log,
		runner:      runner,
		hostJava:    opts.Runner == nil,
		artifactMax: upstream.DefaultArtifactMax,
		runTimeout:  30 * time.Minute,
	}, nil
}

// job carries one install through an installer.
type job struct {
	p       catalog.Profile
	version string            // requested version, never empty ("latest" at least)
	env     map[string]string // the full environment (catalog.Profile.Env)
	root    *os.Root
	rootDir string
}

// setting returns an installer variable: its value, "latest" if unset.
func (j job) setting(key string) string {
	if v := j.env[key]; v != "" {
		return v
	}
	return "latest"
}

// Install fetches the profile's software into root (created if missing),
// verifying every checksum the upstream publishes, and writes eula.txt when
// the profile has an EULA variable. Artifacts come from the shared cache
// when it already holds them.
//
// version is the game version (the proxy version for proxies, the Jenkins
// build for BungeeCord) or "latest"; empty falls back to the profile's
// version variable in env, then "latest". env holds the server's profile
// variables as the user set them (nil for none); the installer reads its
// own (BUILD_NUMBER, LOADER_VERSION, INSTALLER_VERSION, FORGE_VERSION,
// NEOFORGE_VERSION, JAR_URL and JAR_SHA256 for custom, EULA, MOTD for
// kiln-test), defaults filling the rest.
//
// Errors: *validate.Error for a bad environment or a malformed version;
// ErrVersionNotFound; *UpstreamError; *ChecksumError; ErrTooLarge; ErrNoJava
// (Forge, NeoForge); the context's error when ctx ends. On error the root
// holds no half-written file: each file is written whole or not at all.
func (i *Installer) Install(ctx context.Context, p catalog.Profile, version, root string, env map[string]string) (catalog.Result, error) {
	env, err := p.Env(env)
	if err != nil {
		return catalog.Result{}, err
	}
	if version == "" && p.VersionVar != "" {
		version = env[p.VersionVar]
	}
	if version == "" {
		version = "latest"
	}
	if !upstream.ValidToken(version) {
		return catalog.Result{}, validate.Errorf("version", "%q is not a version", version)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return catalog.Result{}, fmt.Errorf("install %s: %w", p.Type, err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return catalog.Result{}, fmt.Errorf("install %s: %w", p.Type, err)
	}
	defer r.Close()
	j := job{p: p, version: version, env: env, root: r, rootDir: root}

	var res catalog.Result
	switch p.Installer.Kind {
	case catalog.InstallFill:
		res, err = i.fill(ctx, j)
	case catalog.InstallPurpur:
		res, err = i.purpur(ctx, j)
	case catalog.InstallMojang:
		res, err = i.vanilla(ctx, j)
	case catalog.InstallFabric:
		res, err = i.fabric(ctx, j)
	case catalog.InstallQuilt:
		res, err = i.quilt(ctx, j)
	case catalog.InstallForge:
		res, err = i.forge(ctx, j)
	case catalog.InstallNeoForge:
		res, err = i.neoforge(ctx, j)
	case catalog.InstallBungeeCord:
		res, err = i.bungeecord(ctx, j)
	case catalog.InstallTestServer:
		res, err = i.testserver(ctx, j)
	case catalog.InstallCustom:
		res, err = i.custom(ctx, j)
	default:
		err = fmt.Errorf("no installer of kind %q", p.Installer.Kind)
	}
	if err != nil {
		return catalog.Result{}, fmt.Errorf("install %s %s: %w", p.Type, version, err)
	}
	if _, ok := p.Var("EULA"); ok {
		eula := "# Written by Kiln from the EULA variable: https://aka.ms/MinecraftEULA\neula=" + env["EULA"] + "\n"
		if err := writeRoot(r, "eula.txt", 0o644, func(w io.Writer) error { _, err := w.Write([]byte(eula)); return err }); err != nil {
			return catalog.Result{}, fmt.Errorf("install %s: write eula.txt: %w", p.Type, err)
		}
	}
	i.log.InfoContext(ctx, "software installed", "software", p.Type, "version", res.Version,
		"build", res.Build, "sha256", res.SHA256, "checksum", res.Checksum)
	return res, nil
}

// artifactInto makes sure a is in the cache (downloading and verifying it
// if not) and copies it into the root as name. It returns the SHA-256.
func (i *Installer) artifactInto(ctx context.Context, j job, a upstream.Artifact, name string) (string, error) {
	return i.placeArtifact(ctx, j, a, name, true)
}

// placeArtifact copies artifact a into the root as name and returns its
// SHA-256: from the cache if fromCache and the cache holds it, else
// downloaded and verified (and stored in the cache on the way). A user's
// jar (custom) passes fromCache false: it is downloaded at every install.
// A cached copy that place finds not to hash to its name (the disk
// spoiled it; or a download's put-if-absent kept an earlier, spoiled
// copy) is dropped by place and downloaded again, once.
func (i *Installer) placeArtifact(ctx context.Context, j job, a upstream.Artifact, name string, fromCache bool) (string, error) {
	var sha string
	cached := false
	if fromCache {
		sha, cached = i.cache.find(ctx, a)
	}
	if !cached {
		var err error
		if sha, err = i.download(ctx, a); err != nil {
			return "", err
		}
	}
	i.log.DebugContext(ctx, "artifact", "url", a.URL, "sha256", sha, "cached", cached)
	err := i.place(ctx, j.root, name, sha)
	if errors.Is(err, errCorrupt) {
		i.log.WarnContext(ctx, "cached artifact corrupt, downloading again", "url", a.URL, "sha256", sha)
		if sha, err = i.download(ctx, a); err != nil {
			return "", err
		}
		err = i.place(ctx, j.root, name, sha)
	}
	if err != nil {
		return "", err
	}
	return sha, nil
}
