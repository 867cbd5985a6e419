package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"

	"github.com/kilnhq/kiln/internal/catalog"
)

// Catalog is what Parse needs of the software catalog (*catalog.Catalog).
type Catalog interface {
	Get(typ string) (catalog.Profile, bool)
}

// Spec is a parsed, checked and normalized deployment spec: every default
// filled in, sizes in bytes. Its JSON form (the field tags) is what
// Hash canonicalizes; changing it changes every stored hash.
type Spec struct {
	Version    int                  `json:"version"`
	Servers    map[string]Server    `json:"servers"`
	Proxies    map[string]Proxy     `json:"proxies"`
	DBServices map[string]DBService `json:"dbservices"`
}

// Server is a game server of the spec (and the common part of a proxy).
type Server struct {
	Software string `json:"software"`
	// Version is the game version, "latest" when not given (resolved and
	// pinned when a run applies the spec, not here).
	Version string `json:"version"`
	Memory  int64  `json:"memory"` // bytes
	Disk    int64  `json:"disk"`   // bytes
	CPU     int    `json:"cpu"`    // percent of one core
	// Image is the value of one of the profile's docker images (a label
	// is turned into its value); "" leaves the choice to the profile.
	Image      string            `json:"image"`
	Env        map[string]string `json:"env"`
	Properties map[string]string `json:"properties"`
	Files      []File            `json:"files"` // sorted by path
	State      string            `json:"state"` // StateRunning or StateStopped
	// Node names the node to run on; "" leaves it to placement, which
	// spreads a configuration's servers. Left out of the JSON form when
	// empty, so the hash of a spec that names no node is what it was
	// before nodes could be named.
	Node string `json:"node,omitempty"`
}

// Proxy is a proxy of the spec: a server of a proxy profile (without
// server.properties) plus its backends.
type Proxy struct {
	Server
	Port       int      `json:"port"`    // requested public port; 0 for any
	Backends   []string `json:"servers"` // as written
	Try        []string `json:"try"`
	Forwarding string   `json:"forwarding"`
}

// DBService is a database of the spec.
type DBService struct {
	Engine string   `json:"engine"`
	Attach []string `json:"attach"` // sorted
	// MaxConnections is how many connections its user may hold at once,
	// 0 for the default (DefaultMaxConnections, which is normalized to 0:
	// left out of the JSON, so specs written before the field keep their
	// hash and their applied state).
	MaxConnections int `json:"max_connections,omitempty"`
}

// Connections is the dbservice's connection limit, its default filled in.
func (d DBService) Connections() int {
	if d.MaxConnections == 0 {
		return DefaultMaxConnections
	}
	return d.MaxConnections
}

// A dbservice's max_connections: 1 to MaxMaxConnections, by default
// DefaultMaxConnections (internal/dbservice.MaxConnections).
const (
	DefaultMaxConnections = 20
	MaxMaxConnections     = 100
)

// File is a file written into a server's root on create and update.
type File struct {
	Path    string `json:"path"` // relative, cleaned
	Content string `json:"content"`
}

// Values of the enumerated fields.
const (
	StateRunning = "running"
	StateStopped = "stopped"

	ForwardingModern = "modern"
	ForwardingLegacy = "legacy"
	ForwardingNone   = "none"

	EnginePostgres = "postgres"
	EngineMariaDB  = "mariadb"
)

// ResourceCount is the number of resources: servers, proxies and
// dbservices.
func (s *Spec) ResourceCount() int {
	return len(s.Servers) + len(s.Proxies) + len(s.DBServices)
}

// Hash is "sha256:" and the hex SHA-256 of the RFC 8785 canonical JSON of
// the spec: comments, key order, whitespace and the spelling of sizes do
// not change it; any change of meaning does.
func (s *Spec) Hash() (string, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("spec hash: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("spec hash: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
