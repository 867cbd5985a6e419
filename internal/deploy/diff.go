package deploy

import (
	"context"
	"errors"
	"strconv"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"

	"github.com/kilnhq/kiln/internal/validate"
)

// ErrNotPushed is a call that needs a pushed version before the first
// push.
var ErrNotPushed = errors.New("the configuration has no pushed version yet; push it first")

// MaxDiff is how much unified diff text Diff returns; the rest is cut
// (Truncated) but counted in Added and Removed.
const MaxDiff = 256 << 10

// Diff is the difference between two versions' YAML.
type Diff struct {
	From, To       int // From 0: the empty text (To is the first version)
	Unified        string
	Truncated      bool
	Added, Removed int // lines
}

// Diff compares version from with version to of a configuration. to 0 is
// the latest version; from 0 is the version before to (nothing before
// the first). Errors: ErrNotFound, ErrVersionNotFound, ErrNotPushed,
// *validate.Error (a negative number). from may be after to: the diff
// then reads backwards.
func (s *Service) Diff(ctx context.Context, teamID, id string, from, to int) (Diff, error) {
	var c validate.Collector
	if from < 0 {
		c.Add("from", "must be a version number (1, 2, …)")
	}
	if to < 0 {
		c.Add("to", "must be a version number (1, 2, …)")
	}
	if err := c.Err(); err != nil {
		return Diff{}, err
	}
	cfg, err := s.Get(ctx, teamID, id)
	if err != nil {
		return Diff{}, err
	}
	if cfg.Latest == nil {
		return Diff{}, ErrNotPushed
	}
	if to == 0 {
		to = cfg.Latest.Number
	}
	if from == 0 {
		from = to - 1
	}
	newer, err := s.version(ctx, s.db.Read(), teamID, id, to)
	if err != nil {
		return Diff{}, err
	}
	old := ""
	if from > 0 {
		v, err := s.version(ctx, s.db.Read(), teamID, id, from)
		if err != nil {
			return Diff{}, err
		}
		old = v.YAML
	}
	u, err := udiff.ToUnifiedDiff("v"+strconv.Itoa(from)+".yaml", "v"+strconv.Itoa(to)+".yaml",
		old, udiff.Lines(old, newer.YAML), udiff.DefaultContextLines)
	if err != nil {
		return Diff{}, err
	}
	d := Diff{From: from, To: to, Unified: u.String()}
	for _, h := range u.Hunks {
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Insert:
				d.Added++
			case udiff.Delete:
				d.Removed++
			}
		}
	}
	if len(d.Unified) > MaxDiff {
		// Cut after a whole line (never inside a UTF-8 sequence).
		cut := strings.LastIndexByte(d.Unified[:MaxDiff], '\n') + 1
		d.Unified, d.Truncated = d.Unified[:cut], true
	}
	return d, nil
}
