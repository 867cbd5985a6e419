package archive

import "github.com/kilnhq/kiln/internal/quota"

// budget is a reservation of a fresh disk ledger with free bytes free.
func budget(free int64) *quota.Reservation {
	r, _ := quota.NewAccount(free, quota.TempNames{}).Reserve(0)
	return r
}
