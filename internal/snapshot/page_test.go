package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
	"github.com/kilnhq/kiln/internal/validate"
)

// TestSnapshotPages: a team's snapshots page by page, newest first (ties
// on the creation time by id), each page after the one before whatever
// is deleted meanwhile, the other team's never; limit and cursor checked.
func TestSnapshotPages(t *testing.T) {
	storetest.Each(t, testSnapshotPages)
}

func testSnapshotPages(t *testing.T, db *store.DB) {
	e := newSvcEnv(t, db)
	ctx := t.Context()
	server := "11111111-1111-4111-8111-111111111111"
	other := "22222222-2222-4222-8222-222222222222"
	for i, at := range []int64{5, 5, 5, 4, 3, 3, 1} {
		id := fmt.Sprintf("snap_%020d", i)
		src := server
		if i == 3 {
			src = other
		}
		if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore, status, created_at, updated_at)
			VALUES ($1, $2, 'team_a', $3, $1, '', 'failed', $4, $4)`, id, fmt.Sprintf("00000000-0000-4000-8000-%012d", i), src, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.db.Write().ExecContext(ctx, `INSERT INTO snapshots (id, uuid, team_id, source_server_id, name, ignore, status, created_at, updated_at)
		VALUES ('snap_BBBBBBBBBBBBBBBBBBBB', '00000000-0000-4000-8000-999999999999', 'team_b', $1, 'b', '', 'failed', 9, 9)`, server); err != nil {
		t.Fatal(err)
	}
	// Newest first; among equal times, the greater id first.
	order := []string{"snap_00000000000000000002", "snap_00000000000000000001", "snap_00000000000000000000",
		"snap_00000000000000000003", "snap_00000000000000000005", "snap_00000000000000000004", "snap_00000000000000000006"}

	walk := func(serverID string, limit int, between func(page int)) []string {
		t.Helper()
		var got []string
		cursor := ""
		for page := 0; ; page++ {
			list, next, err := e.svc.Page(ctx, "team_a", serverID, limit, cursor)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) > limit {
				t.Fatalf("page %d holds %d, limit %d", page, len(list), limit)
			}
			for _, s := range list {
				got = append(got, s.ID)
			}
			if next == "" {
				return got
			}
			if len(list) != limit {
				t.Fatalf("page %d holds %d of %d and has a next cursor", page, len(list), limit)
			}
			if between != nil {
				between(page)
			}
			cursor = next
		}
	}
	for _, limit := range []int{1, 2, 3, 7, 1000} {
		if got := walk("", limit, nil); !slices.Equal(got, order) {
			t.Errorf("pages of %d: %v, want %v", limit, got, order)
		}
	}
	if got := walk(server, 2, nil); !slices.Equal(got, slices.DeleteFunc(slices.Clone(order), func(id string) bool { return id == "snap_00000000000000000003" })) {
		t.Errorf("pages of one server: %v", got)
	}
	// A snapshot deleted after the first page, and one of that page: the
	// rest is listed once each.
	got := walk("", 2, func(page int) {
		if page == 0 {
			for _, id := range []string{"snap_00000000000000000001", "snap_00000000000000000005"} {
				if _, err := e.svc.Delete(ctx, "team_a", id); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	wantAfter := []string{"snap_00000000000000000002", "snap_00000000000000000001", "snap_00000000000000000000",
		"snap_00000000000000000003", "snap_00000000000000000004", "snap_00000000000000000006"}
	if !slices.Equal(got, wantAfter) {
		t.Errorf("pages with deletes between them: %v, want %v", got, wantAfter)
	}
	if list, _, _ := e.svc.Page(ctx, "team_b", "", 0, ""); len(list) != 1 || list[0].ID != "snap_BBBBBBBBBBBBBBBBBBBB" {
		t.Errorf("team_b's list = %v", list)
	}

	for _, c := range []struct {
		limit  int
		cursor string
		field  string
	}{
		{-1, "", "limit"}, {1001, "", "limit"},
		{1, "x", "cursor"}, {1, "c5", "cursor"}, {1, "c5.snap_short", "cursor"}, {1, "c-1.snap_00000000000000000001", "cursor"},
		{1, "cx.snap_00000000000000000001", "cursor"}, {1, "5.snap_00000000000000000001", "cursor"},
	} {
		_, _, err := e.svc.Page(ctx, "team_a", "", c.limit, c.cursor)
		if ve, ok := errors.AsType[*validate.Error](err); !ok || !strings.Contains(ve.Error(), c.field) {
			t.Errorf("Page(limit %d, cursor %q) = %v, want a validation error naming %s", c.limit, c.cursor, err, c.field)
		}
	}
}
