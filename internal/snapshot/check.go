package snapshot

import (
	"context"
	"fmt"

	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/manifest"
)

// CheckOptions tune Check.
type CheckOptions struct {
	// ReadData reads every chunk and checks it against its name (its
	// SHA-256), not only that it is in the store.
	ReadData bool
}

// CheckReport is what Check found.
type CheckReport struct {
	Snapshots int   // ready snapshots checked
	Chunks    int   // distinct chunks looked up (or read, with ReadData)
	ReadBytes int64 // stored bytes of the chunks read (ReadData)
	// Damaged are the snapshots found damaged, now marked so, oldest
	// first.
	Damaged []DamagedSnapshot
	// Quarantined are the corrupt chunks moved aside (ReadData).
	Quarantined []QuarantinedChunk
	// Healed counts the snapshots marked damaged before and found whole
	// (a later snapshot stored the chunks they missed): no longer marked.
	Healed int
}

// DamagedSnapshot is a snapshot a check found damaged.
type DamagedSnapshot struct {
	ID, UUID, TeamID, TeamName, ServerID, Name string
	// Reason is the sentence its record now holds (Snapshot.Damage).
	Reason string
	// ManifestMissing and ManifestCorrupt: its manifest is not in the
	// store, or does not read whole (its chunks are then unknown).
	ManifestMissing, ManifestCorrupt bool
	// MissingChunks and CorruptChunks count the chunks it references that
	// are not in the store, and that were read and not what their name
	// says (now moved aside).
	MissingChunks, CorruptChunks int
}

// QuarantinedChunk is a corrupt chunk a check moved aside: Key, where it
// was, To, where it is (engine.QuarantineKey).
type QuarantinedChunk struct{ Key, To string }

// Check verifies the snapshot store as restic check does, for every
// ready snapshot of every team: its manifest is there and valid (read
// whole, every entry checked as a restore checks it), and every chunk it
// references is there — with ReadData, read and checked against its name.
// A snapshot found damaged is marked (Snapshot.Damage: a restore or a
// download of it is refused with that sentence), a corrupt chunk moved
// aside (so the next snapshot holding its data stores it again), and a
// snapshot marked before and now whole loses its mark. Each chunk is
// checked once however many snapshots share it; what was found of each
// is kept until the end (a map of the store's distinct chunk keys, about
// 150 bytes each). It runs beside kiln serve: a snapshot deleted during
// the check is not reported, and one a chunk is stored again for while
// it runs may be reported damaged though it is whole (a restore of it
// checks again and drops the mark). Errors: the store's or the
// database's, when they fail (nothing is then known of what is left).
func (s *Service) Check(ctx context.Context, opts CheckOptions) (CheckReport, error) {
	var rep CheckReport
	snaps, err := s.readySnapshots(ctx)
	if err != nil {
		return rep, err
	}
	const (
		found = iota + 1
		missing
		corrupt
	)
	seen := map[string]uint8{}
	for _, sn := range snaps {
		rep.Snapshots++
		reason := ""
		var nMissing, nCorrupt int
		info, refs, err := engine.ChunkRefs(ctx, s.store, manifest.Key(sn.UUID))
		if err != nil {
			if reason, _ = damageOf(err); reason == "" {
				return rep, fmt.Errorf("check snapshot %s: %w", sn.ID, err)
			}
		}
		var todo []manifest.ChunkRef
		for _, ref := range refs {
			if _, ok := seen[manifest.ChunkKey(info.Space, ref.Sum)]; !ok {
				todo = append(todo, ref) // refs holds each chunk once
			}
		}
		for _, st := range s.lookUp(ctx, info.Space, todo, opts.ReadData) {
			if st.err != nil {
				return rep, fmt.Errorf("check snapshot %s: chunk %s: %w", sn.ID, st.key, st.err)
			}
			rep.Chunks++
			rep.ReadBytes += st.read
			switch {
			case st.corrupt:
				seen[st.key] = corrupt
				to, err := s.quarantine(ctx, st.key, st.ref)
				if err != nil {
					return rep, fmt.Errorf("check snapshot %s: %w", sn.ID, err)
				}
				if to != "" {
					rep.Quarantined = append(rep.Quarantined, QuarantinedChunk{Key: st.key, To: to})
				}
			case st.missing:
				seen[st.key] = missing
			default:
				seen[st.key] = found
			}
		}
		for _, ref := range refs {
			switch seen[manifest.ChunkKey(info.Space, ref.Sum)] {
			case missing:
				nMissing++
			case corrupt:
				nCorrupt++
			}
		}
		if reason == "" && nMissing+nCorrupt > 0 {
			reason = damageChunks
		}
		if reason == "" {
			if sn.damage != nil {
				s.clearDamage(ctx, sn.UUID)
				rep.Healed++
			}
			continue
		}
		marked, err := s.markDamaged(ctx, sn.UUID, reason)
		if err != nil {
			return rep, err
		}
		if !marked {
			rep.Snapshots-- // deleted during the check
			continue
		}
		rep.Damaged = append(rep.Damaged, DamagedSnapshot{ID: sn.ID, UUID: sn.UUID, TeamID: sn.TeamID, TeamName: sn.teamName,
			ServerID: sn.SourceServerID, Name: sn.Name, Reason: reason, ManifestMissing: reason == damageManifestMissing,
			ManifestCorrupt: reason == damageManifestCorrupt, MissingChunks: nMissing, CorruptChunks: nCorrupt})
	}
	return rep, nil
}

// checkedSnapshot is a ready snapshot as Check reads it.
type checkedSnapshot struct {
	ID, UUID, TeamID, SourceServerID, Name string
	teamName                               string
	damage                                 *string
}

// readySnapshots lists every ready snapshot, oldest first, with its
// team's name.
func (s *Service) readySnapshots(ctx context.Context) ([]checkedSnapshot, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT s.id, s.uuid, s.team_id, t.name, s.source_server_id, s.name, s.damage
		FROM snapshots s JOIN teams t ON t.id = s.team_id WHERE s.status = $1 ORDER BY s.created_at, s.id`, StatusReady)
	if err != nil {
		return nil, fmt.Errorf("list the ready snapshots: %w", err)
	}
	defer rows.Close()
	var out []checkedSnapshot
	for rows.Next() {
		var c checkedSnapshot
		if err := rows.Scan(&c.ID, &c.UUID, &c.TeamID, &c.teamName, &c.SourceServerID, &c.Name, &c.damage); err != nil {
			return nil, fmt.Errorf("list the ready snapshots: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the ready snapshots: %w", err)
	}
	return out, nil
}
