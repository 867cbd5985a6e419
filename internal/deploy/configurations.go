package deploy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kilnhq/kiln/internal/deploy/spec"
	"github.com/kilnhq/kiln/internal/ids"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// Errors of the configuration calls; the API maps each to one code.
var (
	ErrNotFound        = errors.New("configuration not found")
	ErrVersionNotFound = errors.New("configuration version not found")
	ErrNameTaken       = errors.New("the team already has a configuration of that name")
	ErrInUse           = errors.New("the configuration still owns deployed resources; remove them from its spec and apply it first")
	ErrBusy            = errors.New("a run of the configuration is queued or executing; cancel it or wait for it to finish")
)

// Limits of the configuration fields (api.md §2; doc.go for the ones the
// contract leaves open).
const (
	MaxName        = 100  // characters
	MaxDescription = 1000 // characters
	MaxPushMessage = 1000 // characters (seed-api.md §7)
	MaxList        = 1000 // configurations in one list answer
	MaxPage        = 200  // versions in one page
	DefaultPage    = 50
)

// Configuration is a team's deployment configuration: its current YAML
// (always a valid spec) and, once pushed, its latest version.
type Configuration struct {
	ID            string
	TeamID        string
	Name          string
	Description   string
	YAML          string
	SpecHash      string
	ResourceCount int
	CreatedAt     int64
	UpdatedAt     int64
	Latest        *Version // nil before the first push
}

// Version is an immutable pushed copy of a configuration's YAML.
type Version struct {
	ID              string
	ConfigurationID string
	Number          int
	YAML            string
	SpecHash        string
	ResourceCount   int
	PushedBy        string
	PushedAt        int64
	PushMessage     string
	BaseVersionID   string // "" for the first version
}

// Service keeps configurations and versions in the database.
type Service struct {
	db    *store.DB
	cat   spec.Catalog
	ports node.PortRange
	now   func() int64
}

// New returns a Service on db, checking specs against cat and proxies'
// requested ports against ports, the node's game ports (kiln serve's
// --port-range; the zero range checks none).
func New(db *store.DB, cat spec.Catalog, ports node.PortRange) *Service {
	return &Service{db: db, cat: cat, ports: ports, now: store.Now}
}

// checkText validates a free-text field: at most max characters, no
// control characters (a newline is allowed when multiline).
func checkText(c *validate.Collector, field, v string, max int, required, multiline bool) {
	switch {
	case required && strings.TrimSpace(v) == "":
		c.Add(field, "is required")
	case !utf8.ValidString(v):
		c.Add(field, "must be UTF-8 text")
	case utf8.RuneCountInString(v) > max:
		c.Add(field, "must be at most %d characters", max)
	case strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t')) }):
		c.Add(field, "must not contain control characters")
	}
}

// parse checks yaml as a spec. Its issues keep the spec's own paths
// ("servers.lobby.memory", as api.md's example shows); one about the
// whole spec (a syntax error, too many resources) is at "yaml". A value
// written literally in a secret variable is refused (spec.LiteralSecrets),
// the nodes a spec names must exist, and a proxy's port must be within the
// game ports of the node it names (of the local node when it names
// none); the error is the database's, reading the nodes.
func (s *Service) parse(ctx context.Context, c *validate.Collector, yaml string) (*spec.Spec, error) {
	if strings.TrimSpace(yaml) == "" {
		c.Add("yaml", "is required")
		return nil, nil
	}
	sp, err := spec.Parse([]byte(yaml), s.cat)
	var ve *validate.Error
	switch {
	case errors.As(err, &ve):
		for _, is := range ve.Issues {
			at := is.Path
			if at == "" {
				at = "yaml"
			}
			c.Add(at, "%s", is.Message)
		}
		return nil, nil
	case err != nil:
		c.Add("yaml", "%v", err)
		return nil, nil
	}
	if err := spec.LiteralSecrets(sp, s.cat); err != nil {
		ve, ok := errors.AsType[*validate.Error](err)
		if !ok {
			return nil, err
		}
		for _, is := range ve.Issues {
			c.Add(is.Path, "%s", is.Message)
		}
		return nil, nil
	}
	ranges, ok, err := s.checkNodes(ctx, c, sp)
	if err != nil || !ok {
		return nil, err
	}
	if !s.checkPorts(c, specPorts(sp), ranges) {
		return nil, nil
	}
	return sp, nil
}

// Create adds a configuration to the team. Errors: *validate.Error (name,
// description, and every broken rule of the spec at its path),
// ErrNameTaken.
func (s *Service) Create(ctx context.Context, teamID, name, description, yaml string) (Configuration, error) {
	var c validate.Collector
	checkText(&c, "name", name, MaxName, true, false)
	checkText(&c, "description", description, MaxDescription, false, true)
	sp, err := s.parse(ctx, &c, yaml)
	if err != nil {
		return Configuration{}, err
	}
	if err := c.Err(); err != nil {
		return Configuration{}, err
	}
	hash, err := sp.Hash()
	if err != nil {
		return Configuration{}, err
	}
	now := s.now()
	cfg := Configuration{
		ID: ids.New("cfg"), TeamID: teamID, Name: name, Description: description, YAML: yaml,
		SpecHash: hash, ResourceCount: sp.ResourceCount(), CreatedAt: now, UpdatedAt: now,
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		taken, err := nameTaken(ctx, tx, teamID, name, "")
		if err != nil {
			return err
		}
		if taken {
			return ErrNameTaken
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO configurations
			(id, team_id, name, description, yaml, spec_hash, resource_count, latest_version_id, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $8)`,
			cfg.ID, teamID, name, description, yaml, hash, cfg.ResourceCount, now)
		return err
	})
	if err != nil {
		return Configuration{}, s.insertError(err)
	}
	return cfg, nil
}

// nameTaken tells whether another configuration of the team (not except)
// has name.
func nameTaken(ctx context.Context, tx *sql.Tx, teamID, name, except string) (bool, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM configurations WHERE team_id = $1 AND name = $2 AND id <> $3`,
		teamID, name, except).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("check configuration name: %w", err)
	}
	return n > 0, nil
}

// insertError turns a failed write into ErrNameTaken when the name was
// taken meanwhile (two replicas creating the same name: the unique index
// refuses the second, recognised by the driver's code), else wraps it.
func (s *Service) insertError(err error) error {
	if errors.Is(err, ErrNameTaken) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInUse) {
		return err
	}
	if store.IsUniqueViolation(err) {
		return ErrNameTaken
	}
	return fmt.Errorf("save configuration: %w", err)
}

const configColumns = `c.id, c.team_id, c.name, c.description, c.yaml, c.spec_hash, c.resource_count, c.created_at, c.updated_at,
	v.id, v.version_number, v.spec_hash, v.pushed_at`

const configFrom = ` FROM configurations c LEFT JOIN configuration_versions v ON v.id = c.latest_version_id`

type scanner interface{ Scan(dest ...any) error }

func scanConfig(r scanner) (Configuration, error) {
	var c Configuration
	var vid, vhash sql.NullString
	var vnum, vat sql.NullInt64
	err := r.Scan(&c.ID, &c.TeamID, &c.Name, &c.Description, &c.YAML, &c.SpecHash, &c.ResourceCount,
		&c.CreatedAt, &c.UpdatedAt, &vid, &vnum, &vhash, &vat)
	if vid.Valid {
		c.Latest = &Version{ID: vid.String, ConfigurationID: c.ID, Number: int(vnum.Int64), SpecHash: vhash.String, PushedAt: vat.Int64}
	}
	return c, err
}

// List returns the team's configurations, newest first, at most MaxList.
func (s *Service) List(ctx context.Context, teamID string) ([]Configuration, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+configColumns+configFrom+`
		WHERE c.team_id = $1 ORDER BY c.created_at DESC, c.id DESC LIMIT $2`, teamID, MaxList)
	if err != nil {
		return nil, fmt.Errorf("list configurations: %w", err)
	}
	defer rows.Close()
	out := []Configuration{}
	for rows.Next() {
		c, err := scanConfig(rows)
		if err != nil {
			return nil, fmt.Errorf("list configurations: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Get returns one of the team's configurations; ErrNotFound for any other
// (absent, or another team's).
func (s *Service) Get(ctx context.Context, teamID, id string) (Configuration, error) {
	return s.get(ctx, s.db.Read(), teamID, id)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Service) get(ctx context.Context, q querier, teamID, id string) (Configuration, error) {
	c, err := scanConfig(q.QueryRowContext(ctx, `SELECT `+configColumns+configFrom+`
		WHERE c.id = $1 AND c.team_id = $2`, id, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return Configuration{}, ErrNotFound
	}
	if err != nil {
		return Configuration{}, fmt.Errorf("get configuration: %w", err)
	}
	return c, nil
}

// Patch is a partial update: nil fields are left as they are.
type Patch struct {
	Name, Description, YAML *string
}

// Update changes a configuration's name, description or YAML (checked
// as at Create); updated_at moves only when one of them changes. Errors:
// ErrNotFound, *validate.Error, ErrNameTaken.
func (s *Service) Update(ctx context.Context, teamID, id string, p Patch) (Configuration, error) {
	var c validate.Collector
	if p.Name != nil {
		checkText(&c, "name", *p.Name, MaxName, true, false)
	}
	if p.Description != nil {
		checkText(&c, "description", *p.Description, MaxDescription, false, true)
	}
	var sp *spec.Spec
	if p.YAML != nil {
		var err error
		if sp, err = s.parse(ctx, &c, *p.YAML); err != nil {
			return Configuration{}, err
		}
	}
	if err := c.Err(); err != nil {
		return Configuration{}, err
	}
	var out Configuration
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		cfg, err := s.get(ctx, tx, teamID, id)
		if err != nil {
			return err
		}
		before := cfg
		if p.Name != nil && *p.Name != cfg.Name {
			taken, err := nameTaken(ctx, tx, teamID, *p.Name, id)
			if err != nil {
				return err
			}
			if taken {
				return ErrNameTaken
			}
			cfg.Name = *p.Name
		}
		if p.Description != nil {
			cfg.Description = *p.Description
		}
		if sp != nil {
			hash, err := sp.Hash()
			if err != nil {
				return err
			}
			cfg.YAML, cfg.SpecHash, cfg.ResourceCount = *p.YAML, hash, sp.ResourceCount()
		}
		if cfg.Name == before.Name && cfg.Description == before.Description && cfg.YAML == before.YAML {
			out = cfg // nothing changes: updated_at stays
			return nil
		}
		cfg.UpdatedAt = s.now()
		_, err = tx.ExecContext(ctx, `UPDATE configurations
			SET name = $1, description = $2, yaml = $3, spec_hash = $4, resource_count = $5, updated_at = $6
			WHERE id = $7 AND team_id = $8`,
			cfg.Name, cfg.Description, cfg.YAML, cfg.SpecHash, cfg.ResourceCount, cfg.UpdatedAt, id, teamID)
		out = cfg
		return err
	})
	if err != nil {
		return Configuration{}, s.insertError(err)
	}
	return out, nil
}

// Check reads yaml as an edit of one of the team's configurations would
// be read, changing nothing: the spec it holds, or every broken rule at
// its path as Create and Update give them (a plan of an unsaved edit).
// Errors: ErrNotFound, *validate.Error.
func (s *Service) Check(ctx context.Context, teamID, id, yaml string) (*spec.Spec, error) {
	if _, err := s.Get(ctx, teamID, id); err != nil {
		return nil, err
	}
	var c validate.Collector
	sp, err := s.parse(ctx, &c, yaml)
	if err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return sp, nil
}

// Delete removes a configuration and its versions (and its finished runs,
// which cascade). Errors: ErrNotFound, ErrBusy while one of its runs is
// queued or executing (the delete would take it from under its
// executor), ErrInUse while a server, proxy or database (dbservice)
// created by one of its runs still exists.
func (s *Service) Delete(ctx context.Context, teamID, id string) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		if s.db.Dialect() == store.Postgres {
			// A run queued meanwhile checks its configuration's key (FOR
			// KEY SHARE), which this lock makes wait: it is seen by the
			// count below, or it fails because the configuration is gone.
			// SQLite has one writer anyway.
			if _, err := tx.ExecContext(ctx, `SELECT id FROM configurations WHERE id = $1 FOR UPDATE`, id); err != nil {
				return fmt.Errorf("lock configuration: %w", err)
			}
		}
		if _, err := s.get(ctx, tx, teamID, id); err != nil {
			return err
		}
		var open int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE configuration_id = $1
			AND status IN ('queued', 'planning', 'executing', 'finalizing')`, id).Scan(&open); err != nil {
			return fmt.Errorf("count open runs: %w", err)
		}
		if open > 0 {
			return ErrBusy
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM servers WHERE configuration_id = $1)
			+ (SELECT count(*) FROM db_services WHERE configuration_id = $1)`, id).Scan(&n); err != nil {
			return fmt.Errorf("count owned servers: %w", err)
		}
		if n > 0 {
			return ErrInUse
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM configuration_versions WHERE configuration_id = $1`, id); err != nil {
			return fmt.Errorf("delete versions: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM configurations WHERE id = $1 AND team_id = $2`, id, teamID); err != nil {
			return fmt.Errorf("delete configuration: %w", err)
		}
		return nil
	})
}

// Push freezes the configuration's current YAML as its next version, by
// actor (auth.Principal.Actor), unless the latest version already has
// this spec_hash: then it returns that version and created false. A
// proxy's port outside the node's range (changed since the YAML was set)
// is refused either way. Errors: ErrNotFound, *validate.Error
// (push_message, proxies.<name>.port).
func (s *Service) Push(ctx context.Context, teamID, id, actor, message string) (v Version, created bool, err error) {
	var c validate.Collector
	checkText(&c, "push_message", message, MaxPushMessage, false, true)
	if err := c.Err(); err != nil {
		return Version{}, false, err
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) (err error) {
		v, created, err = s.push(ctx, tx, teamID, id, actor, message)
		return err
	})
	if err != nil {
		return Version{}, false, err
	}
	return v, created, nil
}

// push is Push in the caller's transaction tx (message already checked).
func (s *Service) push(ctx context.Context, tx *sql.Tx, teamID, id, actor, message string) (v Version, created bool, err error) {
	if s.db.Dialect() == store.Postgres {
		// Pushes of one configuration wait for each other (SQLite has one
		// writer anyway); the unique (configuration, number) index stays
		// the last guard.
		if _, err := tx.ExecContext(ctx, `SELECT id FROM configurations WHERE id = $1 FOR UPDATE`, id); err != nil {
			return Version{}, false, fmt.Errorf("lock configuration: %w", err)
		}
	}
	cfg, err := s.get(ctx, tx, teamID, id)
	if err != nil {
		return Version{}, false, err
	}
	// The node's ports may have changed since the YAML was checked (a
	// restart with another --port-range): a version that could only fail
	// at apply is refused here.
	var c validate.Collector
	ports := yamlPorts(cfg.YAML)
	known, err := s.nodesOf(ctx, ports)
	if err != nil {
		return Version{}, false, fmt.Errorf("push: %w", err)
	}
	if !s.checkPorts(&c, ports, known) {
		return Version{}, false, c.Err()
	}
	number, base := 1, ""
	if cfg.Latest != nil {
		if cfg.Latest.SpecHash == cfg.SpecHash {
			v, err = s.version(ctx, tx, teamID, id, cfg.Latest.Number)
			return v, false, err
		}
		number, base = cfg.Latest.Number+1, cfg.Latest.ID
	}
	v = Version{
		ID: ids.New("ver"), ConfigurationID: id, Number: number, YAML: cfg.YAML, SpecHash: cfg.SpecHash,
		ResourceCount: cfg.ResourceCount, PushedBy: actor, PushedAt: s.now(), PushMessage: message, BaseVersionID: base,
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO configuration_versions
		(id, configuration_id, version_number, yaml, spec_hash, resource_count, pushed_by, pushed_at, push_message, base_version_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		v.ID, id, number, v.YAML, v.SpecHash, v.ResourceCount, actor, v.PushedAt, message, nullable(base)); err != nil {
		return Version{}, false, fmt.Errorf("insert version: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE configurations SET latest_version_id = $1 WHERE id = $2`, v.ID, id); err != nil {
		return Version{}, false, fmt.Errorf("point at the new version: %w", err)
	}
	return v, true, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const versionColumns = `v.id, v.configuration_id, v.version_number, v.yaml, v.spec_hash, v.resource_count,
	v.pushed_by, v.pushed_at, v.push_message, v.base_version_id`

func scanVersion(r scanner) (Version, error) {
	var v Version
	var base sql.NullString
	err := r.Scan(&v.ID, &v.ConfigurationID, &v.Number, &v.YAML, &v.SpecHash, &v.ResourceCount,
		&v.PushedBy, &v.PushedAt, &v.PushMessage, &base)
	v.BaseVersionID = base.String
	return v, err
}

// Version returns version number of one of the team's configurations.
// Errors: ErrNotFound (the configuration), ErrVersionNotFound.
func (s *Service) Version(ctx context.Context, teamID, id string, number int) (Version, error) {
	if _, err := s.Get(ctx, teamID, id); err != nil {
		return Version{}, err
	}
	return s.version(ctx, s.db.Read(), teamID, id, number)
}

func (s *Service) version(ctx context.Context, q querier, teamID, id string, number int) (Version, error) {
	v, err := scanVersion(q.QueryRowContext(ctx, `SELECT `+versionColumns+`
		FROM configuration_versions v JOIN configurations c ON c.id = v.configuration_id
		WHERE v.configuration_id = $1 AND c.team_id = $2 AND v.version_number = $3`, id, teamID, number))
	if errors.Is(err, sql.ErrNoRows) {
		return Version{}, ErrVersionNotFound
	}
	if err != nil {
		return Version{}, fmt.Errorf("get version: %w", err)
	}
	return v, nil
}

// Versions returns a page of a configuration's versions, newest first:
// at most limit (1–MaxPage, 0 for DefaultPage) after cursor ("" for the
// first page), and the cursor of the next page ("" on the last). A cursor
// is opaque to clients. Errors: ErrNotFound, *validate.Error (limit,
// cursor).
func (s *Service) Versions(ctx context.Context, teamID, id string, limit int, cursor string) ([]Version, string, error) {
	var c validate.Collector
	if limit == 0 {
		limit = DefaultPage
	}
	if limit < 1 || limit > MaxPage {
		c.Add("limit", "must be between 1 and %d", MaxPage)
	}
	before := int64(math.MaxInt32) // above every version number
	if cursor != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(cursor, "v"), 10, 32)
		if !strings.HasPrefix(cursor, "v") || err != nil || n < 1 {
			c.Add("cursor", "is not a cursor this API gave (use next_cursor as it is)")
		}
		before = n
	}
	if err := c.Err(); err != nil {
		return nil, "", err
	}
	if _, err := s.Get(ctx, teamID, id); err != nil {
		return nil, "", err
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+versionColumns+`
		FROM configuration_versions v WHERE v.configuration_id = $1 AND v.version_number < $2
		ORDER BY v.version_number DESC LIMIT $3`, id, before, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list versions: %w", err)
	}
	defer rows.Close()
	out := []Version{}
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list versions: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list versions: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = "v" + strconv.Itoa(out[limit-1].Number)
	}
	return out, next, nil
}
