package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/kilnhq/kiln/internal/files"
)

// ErrUnsupported: the archive's format is not one Decompress reads (by its
// extension), its data is corrupt or truncated, or it holds an entry that
// is refused (then the error is an *EntryError, which unwraps to this).
// The API answers 422 UNSUPPORTED_ARCHIVE.
var ErrUnsupported = errors.New("unsupported or corrupt archive")

// EntryError refuses a whole archive because of one of its entries: a name
// with ".." or NUL, an absolute name, a link out of the root, a device, a
// hard link to something that is not an earlier file of the archive, a
// duplicate. Nothing was changed in the server's tree. It unwraps to
// ErrUnsupported. Its message names the entry (quoted, cut at 200 bytes)
// and says why; it holds nothing from outside the archive and may be shown
// to the user.
//
// An EntryError may also refuse the archive as a whole for passing a
// limit on what it declares or holds (an xz dictionary, a zstd window, a
// zip central directory, the number of entries), before the memory it
// asks for is allocated. It then has no Name, and Reason is the whole
// message, naming the limit: "the archive's xz dictionary is 1.5 GiB; at
// most 64 MiB is allowed".
type EntryError struct {
	Name   string // the entry's name as the archive spells it; "" for a limit
	Reason string // "contains a \"..\" segment", "is a device file"…

	limit bool // a limit on the whole archive: Reason is the message
}

func (e *EntryError) Error() string {
	if e.limit {
		return e.Reason
	}
	name := e.Name
	if len(name) > 200 {
		name = name[:200] + "…"
	}
	return "archive entry " + strconv.Quote(name) + " " + e.Reason
}

// Unwrap makes errors.Is(err, ErrUnsupported) hold.
func (e *EntryError) Unwrap() error { return ErrUnsupported }

func refuse(name, format string, args ...any) *EntryError {
	return &EntryError{Name: name, Reason: fmt.Sprintf(format, args...)}
}

// ioError marks an error of the file system under the archive being read
// (EIO, …): it stays an I/O error (500), where any other failure of a
// decoder means corrupt data (ErrUnsupported).
type ioError struct{ err error }

func (e *ioError) Error() string { return e.err.Error() }
func (e *ioError) Unwrap() error { return e.err }

// readError turns an error met while reading archive src into what the
// caller returns: a refusal, the quota, a cancellation or an I/O error as
// they are, anything else (a decoder's complaint) as ErrUnsupported.
func readError(src string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*EntryError](err); ok {
		return err
	}
	if errors.Is(err, files.ErrQuota) {
		return files.ErrQuota
	}
	if ioe, ok := errors.AsType[*ioError](err); ok {
		return fmt.Errorf("read %s: %w", files.Display(src), ioe.err)
	}
	if errors.Is(err, errStopped) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("read %s: %w: %w", files.Display(src), ErrUnsupported, err)
}
