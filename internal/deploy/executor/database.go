package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kilnhq/kiln/internal/dbservice"
	"github.com/kilnhq/kiln/internal/deploy/plan"
	"github.com/kilnhq/kiln/internal/deploy/runs"
	"github.com/kilnhq/kiln/internal/deploy/spec"
)

// applyDatabase does one attempt of a dbservice's step: its database and
// user made (or found) on a host of its engine with its attachments
// recorded, or dropped. Replace never gets here (refused at planning).
func (x *exec) applyDatabase(ctx context.Context, st plan.Step, res *runs.Resource) (string, *stepError) {
	r := x.run
	o := dbservice.Owner{ConfigurationID: r.ConfigurationID, ResourceKey: st.Key}
	if x.e.opts.Databases == nil {
		return "", fail(runs.FailValidation, "this Kiln process was started without database support")
	}
	switch st.Action {
	case plan.Noop:
		return "", nil
	case plan.Delete:
		if err := x.e.opts.Databases.Drop(ctx, r.TeamID, o); err != nil {
			return "", classify(err)
		}
		res.Log = append(res.Log, "database and user dropped")
		return "", nil
	case plan.Create, plan.Update:
	default:
		return "", fail(runs.FailInternal, "a dbservice cannot be %sd", st.Action)
	}
	var want spec.DBService
	if err := json.Unmarshal(st.Desired, &want); err != nil {
		return "", fail(runs.FailInternal, "the desired state cannot be read: %v", err)
	}
	d, err := x.e.opts.Databases.Ensure(ctx, r.TeamID, o, want.Engine, want.Attach, want.Connections())
	if errors.Is(err, dbservice.ErrNoHost) {
		return "", fail(runs.FailCapacity, "no %s database host is registered; an operator adds one with `kiln admin dbhost add NAME --engine %s --dsn URL`", want.Engine, want.Engine)
	}
	if err != nil {
		return "", classify(err)
	}
	res.Log = append(res.Log, fmt.Sprintf("database %s on host %s (%s), at most %d connections", d.Name, d.HostName, d.Address, want.Connections()))
	return d.ID, nil
}
