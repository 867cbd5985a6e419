package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/kilnhq/kiln/internal/files"
)

// fileEntryJSON is the seed's FileEntry.
type fileEntryJSON struct {
	Name        string `json:"name"`
	Size        int64  `json:"size"`
	IsFile      bool   `json:"is_file"`
	IsDirectory bool   `json:"is_directory"`
	IsSymlink   bool   `json:"is_symlink"`
	MIME        string `json:"mime"`
	Mode        string `json:"mode"`
	ModeBits    string `json:"mode_bits"`
	ModifiedAt  string `json:"modified_at"`
	CreatedAt   string `json:"created_at"`
}

func toFileEntry(e files.Entry) fileEntryJSON {
	return fileEntryJSON{
		Name: e.Name, Size: e.Size, IsFile: e.IsFile(), IsDirectory: e.IsDir(), IsSymlink: e.IsSymlink(),
		MIME: e.MIME, Mode: e.ModeString(), ModeBits: e.ModeBits(),
		ModifiedAt: e.ModTime.UTC().Format(time.RFC3339), CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339),
	}
}

// query reads a query parameter; required ones must be present and
// non-empty. A parameter given twice is refused: which one would win is
// not obvious to a caller.
// pageQuery reads the limit and cursor of a paged list whose pages hold
// at most `most` entries: limit 0 when not given (the domain's default), -1 for a
// given 0 (out of range, not "the default": the domain refuses it).
func pageQuery(r *http.Request, most int) (limit int, cursor string, err error) {
	if v, err := query(r, "limit", false, ""); err != nil {
		return 0, "", err
	} else if v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, "", validationf("limit", "must be a whole number between 1 and %d", most)
		}
		if n == 0 {
			n = -1
		}
		limit = n
	}
	cursor, err = query(r, "cursor", false, "")
	return limit, cursor, err
}

func query(r *http.Request, name string, required bool, def string) (string, error) {
	vals, ok := r.URL.Query()[name]
	switch {
	case len(vals) > 1:
		return "", validationf(name, "is given more than once")
	case !ok || vals[0] == "":
		if required {
			return "", validationf(name, "is required")
		}
		return def, nil
	}
	return vals[0], nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	dir, err := query(r, "directory", false, "/")
	if err != nil {
		return err
	}
	limit, err := intQuery(r, "limit", files.MaxListLimit, 1, files.MaxListLimit)
	if err != nil {
		return err
	}
	cursor, err := query(r, "cursor", false, "")
	if err != nil {
		return err
	}
	page, err := s.deps.Files.List(r.Context(), principal(r).TeamID, id, dir, cursor, limit)
	if err != nil {
		return err
	}
	writeFileList(w, page.Entries, page.Next.String())
	return nil
}

func (s *Server) fileContents(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	file, err := query(r, "file", true, "")
	if err != nil {
		return err
	}
	f, e, err := s.deps.Files.Download(r.Context(), principal(r).TeamID, id, file)
	if err != nil {
		return err
	}
	defer f.Close()
	if e.Size > files.MaxContents {
		return files.ErrTooLarge
	}
	return writeQuotedFile(w, f, e.Size)
}

func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	file, err := query(r, "file", true, "")
	if err != nil {
		return err
	}
	f, e, err := s.deps.Files.Download(r.Context(), principal(r).TeamID, id, file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(e.Size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": e.Name}))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	// io.Copy uses sendfile from the *os.File where it can. A failure now
	// cannot change the status line any more: the client sees a short body.
	if _, err := io.Copy(w, f); err != nil {
		s.log.DebugContext(r.Context(), "download interrupted", "err", err)
	}
	return nil
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	file, err := query(r, "file", true, "")
	if err != nil {
		return err
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "text/plain" && mt != "application/octet-stream") {
		return newHTTPError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			"Content-Type must be text/plain or application/octet-stream")
	}
	if r.ContentLength > files.MaxWrite {
		return newHTTPError(http.StatusRequestEntityTooLarge, codeFileTooLarge,
			fmt.Sprintf("the body is larger than %d bytes", files.MaxWrite))
	}
	body := http.MaxBytesReader(w, r.Body, files.MaxWrite)
	_, err = s.deps.Files.Write(r.Context(), principal(r).TeamID, id, file, body)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return newHTTPError(http.StatusRequestEntityTooLarge, codeFileTooLarge,
			fmt.Sprintf("the body is larger than %d bytes", files.MaxWrite))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, okBody)
	return nil
}

func (s *Server) createDirectory(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusOK, func(teamID, id string, req *struct {
		Root string `json:"root"`
		Name string `json:"name"`
	}) error {
		return s.deps.Files.CreateDirectory(r.Context(), teamID, id, req.Root, req.Name)
	})
}

func (s *Server) renameFiles(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusOK, func(teamID, id string, req *struct {
		Root  string `json:"root"`
		Files []struct {
			From string `json:"from"`
			To   string `json:"to"`
		} `json:"files"`
	}) error {
		moves := make([]files.Move, len(req.Files))
		for i, f := range req.Files {
			moves[i] = files.Move(f) // same fields; the tags are the API's
		}
		return s.deps.Files.Rename(r.Context(), teamID, id, req.Root, moves)
	})
}

func (s *Server) copyFile(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	var req struct {
		Location string `json:"location"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	e, err := s.deps.Files.Copy(r.Context(), principal(r).TeamID, id, req.Location)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "file": toFileEntry(e)})
	return nil
}

func (s *Server) deleteFiles(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusOK, func(teamID, id string, req *struct {
		Root  string   `json:"root"`
		Files []string `json:"files"`
	}) error {
		return s.deps.Files.Delete(r.Context(), teamID, id, req.Root, req.Files)
	})
}

func (s *Server) chmodFiles(w http.ResponseWriter, r *http.Request) error {
	return serverAction(w, r, http.StatusOK, func(teamID, id string, req *struct {
		Root  string `json:"root"`
		Files []struct {
			File string `json:"file"`
			Mode string `json:"mode"`
		} `json:"files"`
	}) error {
		cs := make([]files.ModeChange, len(req.Files))
		for i, f := range req.Files {
			cs[i] = files.ModeChange(f)
		}
		return s.deps.Files.Chmod(r.Context(), teamID, id, req.Root, cs)
	})
}

// searchResultJSON is the seed's FileSearchResult.
type searchResultJSON struct {
	Name      string        `json:"name"`
	Directory string        `json:"directory"`
	File      fileEntryJSON `json:"file"`
}

func (s *Server) searchFiles(w http.ResponseWriter, r *http.Request) error {
	id, err := serverID(r)
	if err != nil {
		return err
	}
	pattern, err := query(r, "pattern", true, "")
	if err != nil {
		return err
	}
	dir, err := query(r, "directory", false, "/")
	if err != nil {
		return err
	}
	limit, err := intQuery(r, "limit", files.MaxResults, 1, files.MaxResults)
	if err != nil {
		return err
	}
	res, truncated, err := s.deps.Files.Search(r.Context(), principal(r).TeamID, id, dir, pattern, limit)
	if err != nil {
		return err
	}
	out := struct {
		Results   []searchResultJSON `json:"results"`
		Count     int                `json:"count"`
		Truncated bool               `json:"truncated"`
	}{Results: make([]searchResultJSON, len(res)), Count: len(res), Truncated: truncated}
	for i, m := range res {
		out.Results[i] = searchResultJSON{Name: m.Entry.Name, Directory: m.Directory, File: toFileEntry(m.Entry)}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
