// Command bare is the ceiling for Kiln's benchmarks: a plain net/http
// server that does the least a request needs, and nothing else (no
// routing, auth, rate limit, database or log).
//
// By default (bench/api-list.sh) it answers every request with the body
// and Content-Type of Kiln's GET /api/client/v1/servers for an empty team.
//
// With -files DIR (bench/files-ops.sh, section rt) it is the floor of the
// 1 MiB write+contents round trip: a POST writes its body to a new file in
// DIR through a reused 256 KiB buffer, fsyncs it and renames it over
// DIR/rt.txt (what Kiln's write does, without the checks); a GET whose
// path contains "/files/contents" answers DIR/rt.txt between two quotes,
// sent by the kernel (sendfile) and not JSON-escaped — less work than Kiln,
// which escapes — with its length; a GET whose path contains
// "/files/download" answers the file its "file" query names in DIR with
// http.ServeFile (bench/files-ops.sh, section download); any other GET
// answers "{}".
//
// It listens on --addr (127.0.0.1:0 picks a free port) and prints the
// address it got as "listening <host:port>" on stdout.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

var body = []byte("{\"servers\":[],\"count\":0}\n")

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	files := flag.String("files", "", "serve the write+contents floor on this directory")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, "listening", ln.Addr().String())
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	if *files != "" {
		handler = filesFloor(*files)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	log.Fatal(srv.Serve(ln))
}

func filesFloor(dir string) http.HandlerFunc {
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	target := filepath.Join(dir, "rt.txt")
	fail := func(w http.ResponseWriter, err error) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			f, err := os.CreateTemp(dir, ".tmp-")
			if err != nil {
				fail(w, err)
				return
			}
			bp := bufs.Get().(*[]byte)
			_, err = io.CopyBuffer(f, r.Body, *bp)
			bufs.Put(bp)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(f.Name(), target)
			}
			if err != nil {
				_ = os.Remove(f.Name())
				fail(w, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("{}\n"))
		case strings.Contains(r.URL.Path, "/files/download"):
			http.ServeFile(w, r, filepath.Join(dir, filepath.Base(r.URL.Query().Get("file"))))
		case strings.Contains(r.URL.Path, "/files/contents"):
			f, err := os.Open(target)
			if err != nil {
				fail(w, err)
				return
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				fail(w, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.FormatInt(st.Size()+3, 10))
			_, _ = w.Write([]byte(`"`))
			_, _ = io.Copy(w, f)
			_, _ = w.Write([]byte("\"\n"))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("{}\n"))
		}
	}
}
