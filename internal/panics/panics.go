package panics

import (
	"fmt"
	"runtime/debug"
)

// Error is a panic recovered by Catch: the value passed to panic and the
// stack of the goroutine that panicked.
type Error struct {
	Value any
	Stack []byte
}

func (e *Error) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error (so
// errors.Is(err, http.ErrAbortHandler) works), else nil.
func (e *Error) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Catch calls fn and returns its error; when fn panics, it returns the
// panic as an *Error instead. runtime.Goexit is not a panic and is not
// caught.
func Catch(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &Error{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}
