package servers

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/runtime"
)

type noEnv struct{}

func (noEnv) InjectedEnv(context.Context, string, string) (map[string]string, error) { return nil, nil }

// TestOptionsLifecycle: every field of gameserver.Options is passed on
// from Options (a field added there and forgotten in lifecycle() would
// leave the node's Host on its default whatever kiln serve says).
func TestOptionsLifecycle(t *testing.T) {
	o := Options{
		KilnBinary: "/kiln", PublicHost: "127.0.0.2", BindHost: "127.0.0.3", StopTimeout: time.Second,
		PingInterval: time.Second, SampleInterval: time.Second, DiskInterval: time.Second, DiskFresh: time.Second,
		RestartBackoff: time.Second, After: time.After, TempNames: quota.NewTempNames([]byte("key")),
		Users: UIDRange{First: 1, Last: 2}, Injected: noEnv{}, StopServersOnExit: true, Javas: &runtime.Javas{},
	}
	got := reflect.ValueOf(o.lifecycle())
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		if got.Field(i).IsZero() {
			t.Errorf("Options.lifecycle() leaves %s zero", name)
			continue
		}
		if f := reflect.ValueOf(o).FieldByName(name); f.Kind() != reflect.Func && !reflect.DeepEqual(f.Interface(), got.Field(i).Interface()) {
			t.Errorf("Options.lifecycle().%s = %v, want %v", name, got.Field(i).Interface(), f.Interface())
		}
	}
}
