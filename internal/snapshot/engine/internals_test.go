package engine

// Internals the external tests (package engine_test, which may import
// internal/snapshot/restore to check what Create stored) read.
var (
	SlabCount   = slabCount
	FileCutters = fileCutters
	WalkCmp     = walkCmp
)

const (
	SlabSize      = slabSize
	InFlightBytes = inFlightBytes
	OutPoolLimit  = outPoolLimit
	ParentWindow  = parentWindow
)
