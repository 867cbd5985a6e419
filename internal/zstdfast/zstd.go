package zstdfast

import (
	"github.com/kilnhq/kiln/internal/zstdfast/internal/le"
)

// force encoder to use predefined tables.
const forcePreDef = false

// zstdMinMatch is the minimum zstd match length.
const zstdMinMatch = 3

func load3232(b []byte, i int32) uint32 {
	return le.Load32(b, i)
}

func load6432(b []byte, i int32) uint64 {
	return le.Load64(b, i)
}
