package zstdfast

// Cur returns e's position counter (fastBase.cur), for tests of its
// reset.
func Cur(e *Encoder) int32 { return e.enc.cur }
