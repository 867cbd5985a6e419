// Package panics turns a panic in a goroutine into an error its owner
// handles. A panic that is not recovered in the goroutine where it happens
// ends the whole process — net/http recovers its handlers' panics, not
// those of goroutines a handler starts — so every goroutine started for a
// request runs its work through Catch (or Go) and hands the error to
// the request, which answers it or logs it.
//
// It must never swallow a panic: the value and the stack travel in the
// *Error, and the owner decides what to do with them.
package panics
