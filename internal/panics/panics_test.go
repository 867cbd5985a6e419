package panics

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCatch(t *testing.T) {
	want := errors.New("plain failure")
	if err := Catch(func() error { return want }); err != want {
		t.Errorf("Catch(return err) = %v, want %v", err, want)
	}
	if err := Catch(func() error { return nil }); err != nil {
		t.Errorf("Catch(return nil) = %v, want nil", err)
	}

	err := Catch(func() error { panic("kaboom") })
	pe, ok := errors.AsType[*Error](err)
	if !ok || pe.Value != "kaboom" || err.Error() != "panic: kaboom" {
		t.Fatalf("Catch(panic) = %#v, want an *Error with the value", err)
	}
	if !strings.Contains(string(pe.Stack), "TestCatch") {
		t.Errorf("Catch(panic): the stack does not name the panicking function:\n%s", pe.Stack)
	}

	err = Catch(func() error { panic(http.ErrAbortHandler) })
	if !errors.Is(err, http.ErrAbortHandler) {
		t.Errorf("Catch(panic(ErrAbortHandler)) = %v, want it to wrap ErrAbortHandler", err)
	}

	var nilMap map[string]int
	err = Catch(func() error { nilMap["x"] = 1; return nil })
	if _, ok := errors.AsType[*Error](err); !ok {
		t.Errorf("Catch(runtime error) = %v, want an *Error", err)
	}
}

// TestCatchInGoroutine: a panic in a goroutine comes back as its error
// rather than ending the process.
func TestCatchInGoroutine(t *testing.T) {
	done := make(chan error)
	go func() { done <- Catch(func() error { var p *int; return errors.New(string(rune(*p))) }) }()
	if err := <-done; err == nil {
		t.Fatal("Catch in a goroutine returned nil after a nil dereference")
	}
}
