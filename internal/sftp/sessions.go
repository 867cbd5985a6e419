package sftp

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// session is one logged-in SSH connection.
type session struct {
	cred       credRow
	srv        *Server      // the server it is connected to
	lastActive atomic.Int64 // Unix ns of the last SFTP packet
	handles    atomic.Int32 // open SFTP handles, across its channels
	closeOnce  sync.Once
	close      func(reason string) // ends the connection (set before registering)
}

// end closes the session's connection once, for reason.
func (se *session) end(reason string) {
	se.closeOnce.Do(func() { se.close(reason) })
}

// touch records activity.
func (se *session) touch(now time.Time) { se.lastActive.Store(now.UnixNano()) }

// registry is the live sessions, by credential. A mutex around a map:
// sessions come and go at human pace.
type registry struct {
	mu     sync.Mutex
	byCred map[string]map[*session]struct{}
	byTeam map[string]int
	total  int
	// closed holds the servers being deleted: no session opens on them
	// (closeServer; forget once the delete failed or the row is gone).
	closed map[string]bool
}

func newRegistry() *registry {
	return &registry{byCred: map[string]map[*session]struct{}{}, byTeam: map[string]int{}, closed: map[string]bool{}}
}

// errServerClosed refuses a session on a server being deleted;
// errTooManySessions one over a credential's limit, errTeamSessions over
// its team's, errNodeSessions over the node's.
var (
	errServerClosed    = errors.New("sftp: the server is being deleted")
	errTooManySessions = errors.New("sftp: too many sessions for this login")
	errTeamSessions    = errors.New("sftp: too many sessions for this team")
	errNodeSessions    = errors.New("sftp: too many sessions on this node")
)

// sessionLimits bound the sessions open at once: per credential, per team
// (so one team's logins cannot take the node's), per node (each session
// holds buffers: Config.MaxInFlight requests of up to MaxTxPacket).
type sessionLimits struct{ perCred, perTeam, total int }

// add registers se unless its server is being deleted (errServerClosed)
// or a limit is reached (errTooManySessions, errTeamSessions,
// errNodeSessions).
func (g *registry) add(se *session, lim sessionLimits) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed[se.cred.serverID] {
		return errServerClosed
	}
	set := g.byCred[se.cred.id]
	switch {
	case len(set) >= lim.perCred:
		return errTooManySessions
	case g.byTeam[se.cred.teamID] >= lim.perTeam:
		return errTeamSessions
	case g.total >= lim.total:
		return errNodeSessions
	}
	if set == nil {
		set = map[*session]struct{}{}
		g.byCred[se.cred.id] = set
	}
	set[se] = struct{}{}
	g.byTeam[se.cred.teamID]++
	g.total++
	return nil
}

// isClosed says whether serverID is being deleted.
func (g *registry) isClosed(serverID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed[serverID]
}

// closeServer refuses every new session on serverID and ends its open
// ones. The mark and the sessions it ends are taken under one lock, so a
// session registered concurrently is either refused or ended.
func (g *registry) closeServer(serverID, reason string) int {
	g.mu.Lock()
	g.closed[serverID] = true
	found := g.matchingLocked(func(se *session) bool { return se.cred.serverID == serverID })
	g.mu.Unlock()
	for _, se := range found {
		se.end(reason)
	}
	return len(found)
}

// forget drops closeServer's mark: the delete failed and the server
// stays, or its row is gone and a login finds no server anyway.
func (g *registry) forget(serverID string) {
	g.mu.Lock()
	delete(g.closed, serverID)
	g.mu.Unlock()
}

// remove forgets se.
func (g *registry) remove(se *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	set := g.byCred[se.cred.id]
	if _, ok := set[se]; !ok {
		return
	}
	delete(set, se)
	g.total--
	if g.byTeam[se.cred.teamID]--; g.byTeam[se.cred.teamID] <= 0 {
		delete(g.byTeam, se.cred.teamID)
	}
	if len(set) == 0 {
		delete(g.byCred, se.cred.id)
	}
}

// matching returns the sessions for which match is true.
func (g *registry) matching(match func(*session) bool) []*session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.matchingLocked(match)
}

// matchingLocked is matching with g.mu held.
func (g *registry) matchingLocked(match func(*session) bool) []*session {
	var out []*session
	for _, set := range g.byCred {
		for se := range set {
			if match(se) {
				out = append(out, se)
			}
		}
	}
	return out
}

// cut ends the sessions for which match is true, at once.
func (g *registry) cut(match func(*session) bool, reason string) int {
	found := g.matching(match)
	for _, se := range found {
		se.end(reason)
	}
	return len(found)
}
