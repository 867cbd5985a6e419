package servers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/google/uuid"

	"github.com/kilnhq/kiln/internal/catalog"
	"github.com/kilnhq/kiln/internal/cluster"
	"github.com/kilnhq/kiln/internal/nodes"
	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/validate"
)

// NewServer is what a caller asks for when creating a server by hand.
type NewServer struct {
	Name       string
	Software   string
	Version    string // "" = latest
	MemoryMB   int
	DiskMB     int
	CPUPercent int // 0 = 100
	Env        map[string]string
	// Image is one of the profile's docker images ("" lets the profile
	// pick by Java version).
	Image string
	// Port is the game port asked for (a deployment's proxy port); 0 for
	// the lowest free one of the node's range.
	Port int
	// Node is the node asked for; "" lets placement choose.
	Node string
}

// Limits of api.md §3 / deployment-spec.md §1.
const (
	MinMemoryMB, MaxMemoryMB = 256, 64 << 10
	MinDiskMB, MaxDiskMB     = 1 << 10, 2 << 20
	MinCPU, MaxCPU           = 10, 6400
	maxNameLen               = 100
)

var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

func validationf(path, format string, args ...any) error {
	return validate.Errorf(path, format, args...)
}

func validName(name string) bool {
	if name == "" || len([]rune(name)) > maxNameLen || strings.TrimSpace(name) != name {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// checkSpec validates what is asked and fills defaults. Errors are
// *validate.Error with every issue.
func (s *Service) checkSpec(ns *NewServer) (catalog.Profile, error) {
	var c validate.Collector
	if !validName(ns.Name) {
		c.Add("name", "must be 1-%d characters without control characters or surrounding spaces", maxNameLen)
	}
	p, ok := s.catalog.Get(ns.Software)
	if !ok {
		c.Add("software", "unknown software %q; GET /servers/software lists the catalog", ns.Software)
	}
	if ns.Version == "" {
		ns.Version = "latest"
	}
	if !versionRE.MatchString(ns.Version) {
		c.Add("version", `must be a game version like "1.21.4" or "latest"`)
	}
	if ns.MemoryMB < MinMemoryMB || ns.MemoryMB > MaxMemoryMB {
		c.Add("memory_mb", "must be between %d and %d", MinMemoryMB, MaxMemoryMB)
	}
	if ns.DiskMB < MinDiskMB || ns.DiskMB > MaxDiskMB {
		c.Add("disk_mb", "must be between %d and %d", MinDiskMB, MaxDiskMB)
	}
	if ns.CPUPercent == 0 {
		ns.CPUPercent = 100
	}
	if ns.CPUPercent < MinCPU || ns.CPUPercent > MaxCPU {
		c.Add("cpu_percent", "must be between %d and %d", MinCPU, MaxCPU)
	}
	if ns.Node != "" && cluster.ValidName(ns.Node) != nil {
		c.Add("node", "must be a node's name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if r := s.node.Ports(); ns.Port != 0 && (ns.Port < r.First || ns.Port > r.Last) {
		c.Add("port", "must be within the node's port range %d-%d", r.First, r.Last)
	}
	if ns.Image != "" && ok && !slices.ContainsFunc(p.DockerImages, func(im catalog.ImageChoice) bool { return im.Value == ns.Image }) {
		c.Add("image", "%s has no image %q", ns.Software, ns.Image)
	}
	if ok {
		// The profile checks keys, required variables, types and control
		// characters; only what the user set is stored, so a default that
		// changes in a later Kiln applies to existing servers too.
		if _, err := p.Env(ns.Env); err != nil {
			if ve, isVE := errors.AsType[*validate.Error](err); isVE {
				for _, is := range ve.Issues {
					c.Add(is.Path, "%s", is.Message)
				}
			} else {
				c.Add("env", "%v", err)
			}
		}
		for k, v := range ns.Env {
			if strings.ContainsAny(v, "\x00\n\r") {
				c.Add("env."+k, "must not contain NUL or line breaks")
			}
		}
	}
	return p, c.Err()
}

// Create records a new server on the node and port placement chooses
// (Options.Placement), makes its root, and installs its software in the
// background (status installing → offline). Errors: *validate.Error,
// *nodes.UnknownNodeError (the node asked for), *nodes.NoCapacityError,
// *TeamLimitError.
func (s *Service) Create(ctx context.Context, teamID string, ns NewServer) (Server, error) {
	sv, _, err := s.create(ctx, teamID, ns, nil)
	return sv, err
}

// create is Create, and CreateOwned with owner: the server of a
// configuration's resource key, or the one already made for it (created
// false).
func (s *Service) create(ctx context.Context, teamID string, ns NewServer, owner *Owner) (Server, bool, error) {
	if owner != nil {
		if sv, err := s.FindOwned(ctx, teamID, *owner); err == nil {
			return sv, false, nil
		} else if !errors.Is(err, ErrNotFound) {
			return Server{}, false, err
		}
	}
	if _, err := s.checkSpec(&ns); err != nil {
		return Server{}, false, err
	}
	if s.opts.Placement == nil {
		return Server{}, false, errors.New("servers: no placement (Options.Placement) to create servers with")
	}
	req := nodes.Request{MemoryMB: ns.MemoryMB, DiskMB: ns.DiskMB, Port: ns.Port, Node: ns.Node, Taken: map[string]map[int]bool{}}
	if owner != nil {
		req.Spread = owner.ConfigurationID // a network's servers spread over the nodes
	}
	pl, err := s.place(ctx, req)
	if err != nil {
		return Server{}, false, err
	}
	env, err := s.storedEnv(ns.Software, ns.Env)
	if err != nil {
		return Server{}, false, err
	}
	id := uuid.NewString()
	// On this machine, the root first: a server whose row exists has a
	// root. A failure here leaves nothing; a failure of the insert below
	// removes the root again (an empty directory no row names). An
	// agent makes the root of a server placed there when it installs it.
	local := pl.Node == s.node.Name()
	if local {
		if err := os.Mkdir(s.node.Root(id), 0o750); err != nil {
			return Server{}, false, fmt.Errorf("create server root: %w", err)
		}
	}
	inserted := false
	defer func() {
		if !inserted && local {
			_ = os.Remove(s.node.Root(id))
		}
	}()
	now := store.Now()
	var cfgID, key sql.NullString
	if owner != nil {
		cfgID = sql.NullString{String: owner.ConfigurationID, Valid: true}
		key = sql.NullString{String: owner.ResourceKey, Valid: true}
	}
	// Placement reads, and the host is probed for the port, before the
	// transaction, never inside it (a probe holds the single SQLite
	// writer, or a PostgreSQL row lock, for nothing). In it, Reserve
	// checks the node's room again under the node's lock; a port taken
	// between the probe and the insert — by another request or replica —
	// fails the insert on the unique (node, port) index. Either way
	// placement is asked again. An owned server made meanwhile for the
	// same key fails it on servers_owned: that one is the answer.
	for attempt := 0; ; attempt++ {
		err = s.db.Tx(ctx, func(tx *sql.Tx) error {
			if err := s.checkTeamLimits(ctx, tx, teamID, ns.MemoryMB, ns.DiskMB); err != nil {
				return err
			}
			if err := s.opts.Placement.Reserve(ctx, tx, pl, req); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `
				INSERT INTO servers (id, team_id, name, software, version, status, node, port, memory_mb, disk_mb,
				                     cpu_percent, env, desired_state, created_at, updated_at, configuration_id, resource_key, image)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'stopped', $13, $13, $14, $15, $16)`,
				id, teamID, ns.Name, ns.Software, ns.Version, StatusInstalling, pl.Node, pl.Port,
				ns.MemoryMB, ns.DiskMB, ns.CPUPercent, env, now, cfgID, key, ns.Image)
			if err != nil {
				return fmt.Errorf("insert server: %w", err)
			}
			return nil
		})
		if store.IsUniqueViolation(err) && owner != nil {
			if sv, ferr := s.FindOwned(ctx, teamID, *owner); ferr == nil {
				return sv, false, nil
			}
		}
		if (store.IsUniqueViolation(err) || errors.Is(err, nodes.ErrNoLongerFits)) && attempt < 20 {
			if store.IsUniqueViolation(err) {
				markTaken(req, pl)
			}
			if pl, err = s.place(ctx, req); err != nil {
				return Server{}, false, err
			}
			continue
		}
		if err != nil {
			return Server{}, false, err
		}
		break
	}
	inserted = true
	// Read the record before the install starts: the answer shows the
	// server as created (installing), however fast the install is.
	sv, err := s.Get(ctx, teamID, id)
	if d, derr := s.driverOf(sv.Node); derr == nil {
		d.Install(id, false)
	} else if err == nil {
		err = derr
	}
	return sv, true, err
}

// place asks placement for a node and port for req and probes the port
// on this host (every interface): one something listens on that no
// report called busy yet is marked taken in req and placement asked
// again (each time one port more is taken, so this ends: with a port, or
// placement's *nodes.NoCapacityError). The node must be one this service
// drives (placement's candidates); an agent's ports are its reports'
// (the agent probes its host when it starts the server).
func (s *Service) place(ctx context.Context, req nodes.Request) (nodes.Placement, error) {
	for {
		pl, err := s.opts.Placement.Place(ctx, req)
		if err != nil {
			return nodes.Placement{}, err
		}
		if _, err := s.driverOf(pl.Node); err != nil {
			return nodes.Placement{}, fmt.Errorf("servers: placement chose node %q, which this process does not drive", pl.Node)
		}
		if pl.Node != s.node.Name() || portFree(pl.Port) {
			return pl, nil
		}
		markTaken(req, pl)
	}
}

// markTaken records in req that pl's port is taken.
func markTaken(req nodes.Request, pl nodes.Placement) {
	if req.Taken[pl.Node] == nil {
		req.Taken[pl.Node] = map[int]bool{}
	}
	req.Taken[pl.Node][pl.Port] = true
}

// checkNodeDisk refuses a disk_mb larger than the node's disk: a limit
// the node could never hold is no limit (a server's new limits; a new
// server's are placement's).
func (s *Service) checkNodeDisk(ctx context.Context, diskMB int) error {
	c, err := s.node.Capacity(ctx)
	if err != nil || c.DiskBytes <= 0 {
		return nil // unknown: the ledger and ENOSPC still bound writes
	}
	if max := c.DiskBytes >> 20; int64(diskMB) > max {
		return validationf("disk_mb", "must be at most %d: that is all the node's disk holds", max)
	}
	return nil
}

// checkPort refuses a game port that a server of this node holds or that
// another program of the host listens on (probed on every interface), for
// a server of this node moving to it. It reads the database outside any
// transaction; the update's unique (node, port) index settles a race.
func (s *Service) checkPort(ctx context.Context, port int) error {
	var n int
	err := s.db.Read().QueryRowContext(ctx, `SELECT count(*) FROM servers WHERE node = $1 AND port = $2`, s.node.Name(), port).Scan(&n)
	if err != nil {
		return fmt.Errorf("read used ports: %w", err)
	}
	if n > 0 || !portFree(port) {
		return &PortTakenError{Port: port}
	}
	return nil
}

// PortTakenError refuses a port asked for that another server (or another
// program of the host) holds.
type PortTakenError struct{ Port int }

func (e *PortTakenError) Error() string {
	return fmt.Sprintf("port %d is taken on this node", e.Port)
}

// portFree reports whether nothing listens on TCP port p of this host.
func portFree(p int) bool {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// Reinstall changes software and/or version and reruns the installer,
// keeping world files; a running server is stopped first and started again
// afterwards. Errors: ErrNotFound, ErrInstalling, ErrRestoring,
// ErrSnapshotting (a snapshot is reading the root: Reading), ErrOwned,
// *validate.Error.
func (s *Service) Reinstall(ctx context.Context, teamID, id, software, version string) error {
	sv, d, err := s.target(ctx, teamID, id)
	if err != nil {
		return err
	}
	if sv.Status == StatusInstalling {
		return ErrInstalling
	}
	if software == "" {
		software = sv.Software
	}
	// Variables the new software does not know are dropped: they meant
	// something only to the old one.
	env := map[string]string{}
	if p, ok := s.catalog.Get(software); ok {
		for k, v := range sv.Env {
			if _, known := p.Var(k); known {
				env[k] = v
			}
		}
	}
	ns := NewServer{Name: sv.Name, Software: software, Version: version, MemoryMB: sv.MemoryMB,
		DiskMB: sv.DiskMB, CPUPercent: sv.CPUPercent, Env: env}
	if _, err := s.checkSpec(&ns); err != nil {
		return err
	}
	// Sealed here too, to refuse a secret this process cannot seal before
	// the node marks anything (the records seal it again to store it).
	if _, err := s.storedEnv(ns.Software, ns.Env); err != nil {
		return err
	}
	return d.Reinstall(ctx, id, ns.Software, ns.Version, ns.Env, sv.DesiredState == "running")
}

// SetEnv changes the environment variables of a server made by hand:
// set maps a variable to its new value, or to nil to unset it (its
// default applies again); variables not named keep their value. The
// result is checked as Create checks env. It takes effect at the next
// start (a running server keeps running as it is; restart it), and for
// the installer's variables at the next reinstall. A concurrent change
// is never lost: the update applies to the environment it was computed
// from, or is computed again. Errors: ErrNotFound, ErrOwned (a
// deployment owns the server: change its spec), *validate.Error.
func (s *Service) SetEnv(ctx context.Context, teamID, id string, set map[string]*string) (Server, error) {
	for attempt := 0; ; attempt++ {
		sv, err := s.getLocal(ctx, teamID, id)
		if err != nil {
			return Server{}, err
		}
		if sv.ConfigurationID != nil {
			return Server{}, &OwnedError{ConfigurationID: *sv.ConfigurationID, ResourceKey: sv.resourceKey.String}
		}
		env := maps.Clone(sv.Env)
		if env == nil {
			env = map[string]string{}
		}
		for k, v := range set {
			if v == nil {
				delete(env, k)
			} else {
				env[k] = *v
			}
		}
		ns := NewServer{Name: sv.Name, Software: sv.Software, Version: sv.Version, MemoryMB: sv.MemoryMB,
			DiskMB: sv.DiskMB, CPUPercent: sv.CPUPercent, Env: env, Image: sv.Image}
		if _, err := s.checkSpec(&ns); err != nil {
			return Server{}, err
		}
		// The compare-and-swap is on the text the row held when read:
		// sealed secrets make a re-marshalled map differ from it.
		newJSON, err := s.storedEnv(sv.Software, env)
		if err != nil {
			return Server{}, err
		}
		res, err := s.db.Write().ExecContext(ctx,
			`UPDATE servers SET env = $1, updated_at = $2 WHERE id = $3 AND team_id = $4 AND env = $5`,
			newJSON, store.Now(), id, teamID, sv.envStored)
		if err != nil {
			return Server{}, fmt.Errorf("set env of %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 1 || attempt >= 10 {
			if n != 1 {
				return Server{}, fmt.Errorf("set env of %s: changed concurrently too often; try again", id)
			}
			return s.Get(ctx, teamID, id)
		}
	}
}

// Delete stops the server (killing it), forgets it and removes its files.
// The row goes first: a crash afterwards leaves only a root directory that
// no server owns, which Run removes at the next start. Errors: ErrNotFound,
// ErrOwned.
func (s *Service) Delete(ctx context.Context, teamID, id string) error {
	sv, err := s.getLocal(ctx, teamID, id)
	if err != nil {
		return err
	}
	if sv.ConfigurationID != nil {
		return &OwnedError{ConfigurationID: *sv.ConfigurationID, ResourceKey: sv.resourceKey.String}
	}
	return s.remove(ctx, teamID, sv)
}

// remove stops a server, forgets it and removes its files (Delete's work
// once the server may go).
func (s *Service) remove(ctx context.Context, teamID string, sv Server) error {
	id := sv.ID
	d, err := s.driverOf(sv.Node)
	if err != nil {
		return err
	}
	// Once begun, a delete goes on to its end if its caller goes away (a
	// client that hangs up, a run canceled): half of one would leave a
	// server stopped, its sessions and downloads ended, yet still there.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	defer func() {
		// The server stays (a failure before its row went: what the
		// hooks ended may go on) or no look-up finds it any more: either
		// way what they hold to refuse work on it can go.
		for _, fn := range s.onEnded {
			fn(id)
		}
	}()
	for _, fn := range s.onDelete {
		if err := fn(ctx, id); err != nil {
			return fmt.Errorf("delete server %s: %w", id, err)
		}
	}
	// The node stops the server and removes its runtime state, the row
	// goes, then the node forgets it and removes its files: a crash
	// between the two leaves a root no row names, which the node removes
	// at its next start.
	if err := d.Remove(ctx, id); err != nil {
		return err
	}
	res, err := s.db.Write().ExecContext(ctx, `DELETE FROM servers WHERE id = $1 AND team_id = $2`, id, teamID)
	if err != nil {
		return fmt.Errorf("delete server %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	d.Forget(id)
	return nil
}

// OnDelete registers fn to run when a server is about to be deleted, after
// the checks and before anything is stopped or removed (other packages end
// their work on the server: remote downloads). Call it before Run.
func (s *Service) OnDelete(fn func(ctx context.Context, id string) error) {
	s.onDelete = append(s.onDelete, fn)
}

// OnDeleteEnded registers fn to run when a delete that ran the OnDelete
// hooks (some or all of them) ends, whichever way: it failed and the
// server stays, or its row is gone and no look-up finds it any more
// (then after its files were removed). Either way the marks a hook keeps
// to refuse work on the server while it is deleted (SFTP logins,
// restores) can go: on a kept server that work may start again, and on a
// deleted one a mark would only be memory kept for the process's life.
// Call it before Run.
func (s *Service) OnDeleteEnded(fn func(id string)) {
	s.onEnded = append(s.onEnded, fn)
}
