package archive

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// archive/zip's NewReader keeps the whole central directory in memory (a
// *zip.File of ~200 bytes for each 46-byte record, plus its name and extra
// fields), and reads records until one does not parse, whatever count the
// end record declares (it compares only the low 16 bits). checkZipDirectory
// is run first: it finds the end of central directory record as Go 1.26's
// readDirectoryEnd does, refuses a declared count or size over the limits,
// then walks the records where Go will, counting them and their bytes
// without keeping any, and refuses past MaxEntries or zipMaxDirectory. Its
// answer, the bytes Go will read, then bounds what zip.NewReader may read
// (zipBudget): were this walk and Go's ever to disagree, NewReader fails
// rather than reading on.

// Zip record signatures and lengths (APPNOTE.TXT 4.3).
const (
	zipDirHeaderSig   = 0x02014b50
	zipDirEndSig      = 0x06054b50
	zipDir64LocSig    = 0x07064b50
	zipDir64EndSig    = 0x06064b50
	zipDirHeaderLen   = 46
	zipDirEndLen      = 22
	zipDir64LocLen    = 20
	zipDir64EndLen    = 56
	zipBudgetSlack    = 512 << 10 // what NewReader reads besides the records: end search, zip64 records, read-ahead
	zipDirReadBuffer  = 64 << 10
	zipMaxRecordExtra = 3 * 0xFFFF // name, extra and comment of one record
)

var errZipFormat = errors.New("zip: not a valid zip file")

// zipEnd is what the end of central directory records declare.
type zipEnd struct {
	records    uint64
	size       uint64
	offset     uint64
	baseOffset int64
}

// checkZipDirectory refuses a zip whose central directory declares or
// holds more than maxEntries records or zipMaxDirectory bytes, and returns
// how many bytes of records zip.NewReader will read.
func checkZipDirectory(ra io.ReaderAt, size int64, maxEntries int) (int64, error) {
	end, err := readZipEnd(ra, size, maxEntries)
	if err != nil {
		return 0, err
	}
	// Where Go reads: base offset + directory offset, or the directory
	// offset alone when a record is found there (readDirectoryEnd's
	// workaround for wrong base offsets). Both are walked.
	starts := []int64{end.baseOffset + int64(end.offset)}
	if end.baseOffset > 0 {
		starts = append(starts, int64(end.offset))
	}
	var most int64
	for _, start := range starts {
		n, err := walkZipDirectory(ra, size, start, maxEntries)
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	return most, nil
}

// walkZipDirectory counts the records from start as Go's Reader.init reads
// them (until one has no signature or is cut short) and returns their
// bytes.
func walkZipDirectory(ra io.ReaderAt, size, start int64, maxEntries int) (int64, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(ra, start, size-start), zipDirReadBuffer)
	var n int64
	var h [zipDirHeaderLen]byte
	for count := 0; ; count++ {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return n, nil
			}
			return 0, err
		}
		if binary.LittleEndian.Uint32(h[:]) != zipDirHeaderSig {
			return n, nil
		}
		rest := int(binary.LittleEndian.Uint16(h[28:])) + int(binary.LittleEndian.Uint16(h[30:])) + int(binary.LittleEndian.Uint16(h[32:]))
		if k, err := br.Discard(rest); err != nil {
			if k < rest && (err == io.EOF || err == io.ErrUnexpectedEOF) {
				return n, nil
			}
			return 0, err
		}
		if count == maxEntries {
			return 0, limitError("the archive's central directory holds more than %d entries; at most %d are allowed", maxEntries, maxEntries)
		}
		n += int64(zipDirHeaderLen + rest)
		if n > zipMaxDirectory {
			return 0, limitError("the archive's central directory is more than %s; at most %s is allowed",
				sizeString(zipMaxDirectory), sizeString(zipMaxDirectory))
		}
	}
}

// readZipEnd finds and reads the end of central directory record (and its
// zip64 counterpart) as archive/zip's readDirectoryEnd does, and refuses
// a declared count or size over the limits.
func readZipEnd(ra io.ReaderAt, size int64, maxEntries int) (zipEnd, error) {
	var buf []byte
	var endOffset int64
	for i, n := range []int64{1024, 65 * 1024} {
		n = min(n, size)
		buf = make([]byte, n)
		if _, err := ra.ReadAt(buf, size-n); err != nil && err != io.EOF {
			return zipEnd{}, err
		}
		if p := findZipEnd(buf); p >= 0 {
			buf = buf[p:]
			endOffset = size - n + int64(p)
			break
		}
		if i == 1 || n == size {
			return zipEnd{}, errZipFormat
		}
	}
	le := binary.LittleEndian
	d := zipEnd{
		records: uint64(le.Uint16(buf[10:])),
		size:    uint64(le.Uint32(buf[12:])),
		offset:  uint64(le.Uint32(buf[16:])),
	}
	if int(le.Uint16(buf[20:])) > len(buf)-zipDirEndLen {
		return zipEnd{}, errZipFormat // comment longer than what follows
	}
	if d.records == 0xffff || d.size == 0xffff || d.offset == 0xffffffff {
		p, err := findZip64End(ra, endOffset)
		if err == nil && p >= 0 {
			endOffset = p
			err = readZip64End(ra, p, &d)
		}
		if err != nil {
			return zipEnd{}, err
		}
	}
	if d.records > uint64(maxEntries) {
		return zipEnd{}, limitError("the archive's central directory declares %d entries; at most %d are allowed", d.records, maxEntries)
	}
	if d.size > zipMaxDirectory {
		return zipEnd{}, limitError("the archive's central directory is %s; at most %s is allowed",
			sizeString(d.size), sizeString(zipMaxDirectory))
	}
	const maxInt64 = 1<<63 - 1
	if d.size > maxInt64 || d.offset > maxInt64 {
		return zipEnd{}, errZipFormat
	}
	d.baseOffset = endOffset - int64(d.size) - int64(d.offset)
	if o := d.baseOffset + int64(d.offset); o < 0 || o >= size {
		return zipEnd{}, errZipFormat
	}
	return d, nil
}

// findZipEnd is archive/zip's findSignatureInBlock.
func findZipEnd(b []byte) int {
	for i := len(b) - zipDirEndLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(b[i:]) == zipDirEndSig {
			n := int(b[i+zipDirEndLen-2]) | int(b[i+zipDirEndLen-1])<<8
			if n+zipDirEndLen+i > len(b) {
				return -1 // a truncated comment
			}
			return i
		}
	}
	return -1
}

func findZip64End(ra io.ReaderAt, endOffset int64) (int64, error) {
	loc := endOffset - zipDir64LocLen
	if loc < 0 {
		return -1, nil
	}
	var b [zipDir64LocLen]byte
	if _, err := ra.ReadAt(b[:], loc); err != nil {
		return -1, err
	}
	le := binary.LittleEndian
	if le.Uint32(b[:]) != zipDir64LocSig || le.Uint32(b[4:]) != 0 || le.Uint32(b[16:]) != 1 {
		return -1, nil
	}
	return int64(le.Uint64(b[8:])), nil
}

func readZip64End(ra io.ReaderAt, offset int64, d *zipEnd) error {
	var b [zipDir64EndLen]byte
	if _, err := ra.ReadAt(b[:], offset); err != nil {
		return err
	}
	le := binary.LittleEndian
	if le.Uint32(b[:]) != zipDir64EndSig {
		return errZipFormat
	}
	d.records = le.Uint64(b[32:])
	d.size = le.Uint64(b[40:])
	d.offset = le.Uint64(b[48:])
	return nil
}

// zipBudget is the zip file as zip.NewReader sees it: it may read left
// bytes in all, then gets a refusal. Once NewReader returned, open lifts
// the bound (entries' data is read through it).
type zipBudget struct {
	ra   io.ReaderAt
	left int64
	open bool
}

func (z *zipBudget) ReadAt(p []byte, off int64) (int, error) {
	if z.open {
		return z.ra.ReadAt(p, off)
	}
	if int64(len(p)) > z.left {
		n, err := z.ra.ReadAt(p[:z.left], off)
		z.left -= int64(n)
		if err == nil {
			err = limitError("the archive's central directory is larger than its records say; at most %s is allowed",
				sizeString(zipMaxDirectory))
		}
		return n, err
	}
	n, err := z.ra.ReadAt(p, off)
	z.left -= int64(n)
	return n, err
}
