package testserver

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"time"
)

// NBT tag types used in level.dat.
const (
	tagEnd      = 0
	tagInt      = 3
	tagLong     = 4
	tagString   = 8
	tagCompound = 10
)

// anvilVersion is level.dat's "version": the Anvil format, 19133 since 1.2.
const anvilVersion = 19133

// prepareWorld creates the level directory, its region directory and a
// level.dat when they are missing. An existing level.dat is kept.
func prepareWorld(root *os.Root, level string, now time.Time) error {
	if err := root.MkdirAll(path.Join(level, "region"), 0o755); err != nil {
		return fmt.Errorf("create world: %w", err)
	}
	_, err := root.Stat(path.Join(level, "level.dat"))
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("create world: %w", err)
	}
	return saveWorld(root, level, now)
}

// saveWorld writes level.dat (through a temporary file and a rename, so a
// reader never sees half of it), as vanilla does on every save.
func saveWorld(root *os.Root, level string, now time.Time) error {
	dat, err := levelDat(level, now)
	if err != nil {
		return fmt.Errorf("save world: %w", err)
	}
	tmp := path.Join(level, "level.dat_new")
	if err := root.WriteFile(tmp, dat, 0o644); err != nil {
		return fmt.Errorf("save world: %w", err)
	}
	if err := root.Rename(tmp, path.Join(level, "level.dat")); err != nil {
		return fmt.Errorf("save world: %w", err)
	}
	return nil
}

// levelDat is a small real level.dat: gzip-compressed NBT, a root compound
// holding Data{LevelName, LastPlayed, version}. Tools that open level.dat
// to read the level name find one.
func levelDat(level string, now time.Time) ([]byte, error) {
	var nbt []byte
	named := func(tag byte, name string) {
		nbt = append(nbt, tag)
		nbt = binary.BigEndian.AppendUint16(nbt, uint16(len(name)))
		nbt = append(nbt, name...)
	}
	named(tagCompound, "")
	named(tagCompound, "Data")
	named(tagString, "LevelName")
	nbt = binary.BigEndian.AppendUint16(nbt, uint16(min(len(level), 0xFFFF)))
	nbt = append(nbt, level[:min(len(level), 0xFFFF)]...)
	named(tagLong, "LastPlayed")
	nbt = binary.BigEndian.AppendUint64(nbt, uint64(now.UnixMilli()))
	named(tagInt, "version")
	nbt = binary.BigEndian.AppendUint32(nbt, anvilVersion)
	nbt = append(nbt, tagEnd, tagEnd)

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(nbt); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
