// Command bare is the ceiling for bench/api-list.sh: a plain net/http
// server that answers every request with the body and Content-Type of
// Kiln's GET /api/client/v1/servers for an empty team, and nothing else (no
// routing, auth, rate limit, database or log).
//
// It listens on --addr (127.0.0.1:0 picks a free port) and prints the
// address it got as "listening <host:port>" on stdout.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

var body = []byte("{\"servers\":[],\"count\":0}\n")

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, "listening", ln.Addr().String())
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	log.Fatal(srv.Serve(ln))
}
