package files

import (
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Entry describes one file system object, as the seed's FileEntry.
type Entry struct {
	Name      string
	Size      int64
	Mode      fs.FileMode // type and permission bits, Go's form
	ModTime   time.Time
	CreatedAt time.Time // birth time where the file system records it, else ModTime
	MIME      string
}

// IsDir, IsFile and IsSymlink tell the kind; a device, pipe or socket is
// none of them.
func (e Entry) IsDir() bool     { return e.Mode.IsDir() }
func (e Entry) IsFile() bool    { return e.Mode.IsRegular() }
func (e Entry) IsSymlink() bool { return e.Mode&fs.ModeSymlink != 0 }

// ModeString is the ls form: "-rw-r--r--", "drwxr-xr-x", "lrwxrwxrwx".
func (e Entry) ModeString() string { return string(e.AppendModeString(nil)) }

// AppendModeString appends ModeString to dst (a list answer writes 10,000
// of them without a string each).
func (e Entry) AppendModeString(dst []byte) []byte {
	var b [10]byte
	switch {
	case e.Mode.IsDir():
		b[0] = 'd'
	case e.Mode&fs.ModeSymlink != 0:
		b[0] = 'l'
	case e.Mode&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case e.Mode&fs.ModeSocket != 0:
		b[0] = 's'
	case e.Mode&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case e.Mode&fs.ModeDevice != 0:
		b[0] = 'b'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	perm := e.Mode.Perm()
	for i := range 9 {
		if perm&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	// setuid/setgid/sticky, as ls shows them.
	if e.Mode&fs.ModeSetuid != 0 {
		b[3] = special(b[3], 's')
	}
	if e.Mode&fs.ModeSetgid != 0 {
		b[6] = special(b[6], 's')
	}
	if e.Mode&fs.ModeSticky != 0 {
		b[9] = special(b[9], 't')
	}
	return append(dst, b[:]...)
}

// special is how ls shows a setuid, setgid or sticky bit (letter, lower
// case) over the execute position x: upper case when x is not set.
func special(x, letter byte) byte {
	if x == 'x' {
		return letter
	}
	return letter - 'a' + 'A'
}

// ModeBits is the octal permission string: "644", "755".
func (e Entry) ModeBits() string { return strconv.FormatUint(uint64(e.Mode.Perm()), 8) }

// fromStatx builds an Entry from a statx answer.
func fromStatx(name string, st *unix.Statx_t) Entry {
	e := Entry{Name: name, Size: int64(st.Size), Mode: modeOf(uint32(st.Mode))}
	e.ModTime = time.Unix(st.Mtime.Sec, int64(st.Mtime.Nsec)).UTC()
	e.CreatedAt = e.ModTime
	if st.Mask&unix.STATX_BTIME != 0 && st.Btime.Sec != 0 {
		e.CreatedAt = time.Unix(st.Btime.Sec, int64(st.Btime.Nsec)).UTC()
	}
	if !e.IsFile() {
		e.Size = 0 // a directory's or link's "size" means nothing to a user
		if e.IsSymlink() {
			e.Size = int64(st.Size)
		}
	}
	return e
}

// modeOf converts a Unix st_mode to an fs.FileMode.
func modeOf(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// knownTypes are the files of Minecraft servers that the system's MIME
// table does not know, so a client can pick an editor or a viewer.
var knownTypes = map[string]string{
	".properties": "text/x-java-properties",
	".yml":        "application/yaml",
	".yaml":       "application/yaml",
	".toml":       "application/toml",
	".json":       "application/json",
	".json5":      "application/json5",
	".txt":        "text/plain; charset=utf-8",
	".log":        "text/plain; charset=utf-8",
	".md":         "text/markdown; charset=utf-8",
	".cfg":        "text/plain; charset=utf-8",
	".conf":       "text/plain; charset=utf-8",
	".ini":        "text/plain; charset=utf-8",
	".sh":         "application/x-sh",
	".jar":        "application/java-archive",
	".zip":        "application/zip",
	".gz":         "application/gzip",
	".tgz":        "application/gzip",
	".zst":        "application/zstd",
	".xz":         "application/x-xz",
	".tar":        "application/x-tar",
	".mca":        "application/x-minecraft-region",
	".mcr":        "application/x-minecraft-region",
	".nbt":        "application/x-minecraft-nbt",
	".dat":        "application/x-minecraft-nbt",
	".dat_old":    "application/x-minecraft-nbt",
	".png":        "image/png",
	".lock":       "application/octet-stream",
}

// typeByName is the MIME type the name suggests, "" when it says nothing.
func typeByName(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if ext == "" {
		return ""
	}
	if t, ok := knownTypes[ext]; ok {
		return t
	}
	return mime.TypeByExtension(ext)
}

// typeOf is the MIME type of an entry: by kind, then by name, then by the
// first bytes of content (sniff is called only when the name says nothing;
// it returns up to 512 bytes, or nil).
func typeOf(e Entry, sniff func() []byte) string {
	switch {
	case e.IsDir():
		return "inode/directory"
	case e.IsSymlink():
		return "inode/symlink"
	case e.Mode&fs.ModeNamedPipe != 0:
		return "inode/fifo"
	case e.Mode&fs.ModeSocket != 0:
		return "inode/socket"
	case e.Mode&fs.ModeCharDevice != 0:
		return "inode/chardevice"
	case e.Mode&fs.ModeDevice != 0:
		return "inode/blockdevice"
	}
	if t := typeByName(e.Name); t != "" {
		return t
	}
	if e.Size == 0 {
		return "inode/x-empty"
	}
	if head := sniff(); len(head) > 0 {
		return http.DetectContentType(head)
	}
	return "application/octet-stream"
}
