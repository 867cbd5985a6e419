// Command sftpbench runs Kiln's SFTP server (internal/sftp) on a real data
// directory and server root for bench/sftp.sh, until SIGTERM:
//
//	sftpbench serve -data DIR -root DIR -creds FILE [-logins N]
//
// It opens a SQLite store in DIR, makes N tokens and one server row whose
// root is -root, writes "user password" lines (one login per token) to
// FILE (0600), listens on 127.0.0.1 (a free port) and prints
// "SFTPBENCH port=PORT pid=PID". A stand-in for the servers service
// answers Get and Access with that root and a ledger without a practical
// limit; everything else is Kiln's own code.
//
//	sftpbench idle -port PORT -creds FILE -n N
//
// opens N idle SFTP sessions (pkg/sftp client; logins taken in turn from
// FILE, at most 8 per login), prints "IDLE READY n=N" and holds them
// until SIGTERM: the bench reads the server's RSS before and after.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/kilnhq/kiln/internal/auth"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/secretbox"
	"github.com/kilnhq/kiln/internal/servers"
	kilnsftp "github.com/kilnhq/kiln/internal/sftp"
	"github.com/kilnhq/kiln/internal/store"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sftpbench serve|idle [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(ctx, os.Args[2:])
	case "idle":
		err = idle(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sftpbench:", err)
		os.Exit(1)
	}
}

// standIn is the servers service of one server: its root and a ledger.
type standIn struct {
	teamID, id, root string
	disk             *quota.Account
}

func (s *standIn) Get(_ context.Context, teamID, id string) (servers.Server, error) {
	if teamID != s.teamID || id != s.id {
		return servers.Server{}, servers.ErrNotFound
	}
	return servers.Server{ID: s.id, TeamID: s.teamID}, nil
}

func (s *standIn) Access(ctx context.Context, teamID, id string, write bool) (servers.Access, error) {
	if _, err := s.Get(ctx, teamID, id); err != nil {
		return servers.Access{}, err
	}
	a := servers.Access{Root: s.root}
	if write {
		a.Disk = s.disk
	}
	return a, nil
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	data := fs.String("data", "", "data directory (store, host key)")
	root := fs.String("root", "", "the server's root")
	credsFile := fs.String("creds", "", "where to write the logins")
	logins := fs.Int("logins", 1, "tokens (logins) to make")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here until the end")
	inFlight := fs.Int("inflight", 0, "requests a session works on at once (Config.MaxInFlight; 0: the default)")
	_ = fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *data == "" || *root == "" || *credsFile == "" {
		return errors.New("serve needs -data, -root and -creds")
	}
	db, err := store.Open(ctx, store.Options{DataDir: *data})
	if err != nil {
		return err
	}
	defer db.Close()
	a, err := auth.NewService(ctx, db)
	if err != nil {
		return err
	}
	defer a.Close()
	if _, _, err := a.Bootstrap(ctx); err != nil {
		return err
	}
	team, err := a.TeamByName(ctx, auth.BootstrapTeam)
	if err != nil {
		return err
	}
	id := uuid.NewString()
	now := store.Now()
	if _, err := db.Write().ExecContext(ctx, `INSERT INTO servers (id, team_id, name, software, version, status, node, port,
		memory_mb, disk_mb, cpu_percent, created_at, updated_at) VALUES ($1, $2, 'bench', 'kiln-test', '1', 'offline', 'local', 1,
		512, 1048576, 100, $3, $4)`, id, team.ID, now, now); err != nil {
		return fmt.Errorf("insert the server: %w", err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secretbox.New(key)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := &standIn{teamID: team.ID, id: id, root: *root, disk: quota.NewAccount(1<<50, quota.TempNames{})}
	svc := kilnsftp.NewService(db, box, srv, kilnsftp.ServiceOptions{PublicHost: "127.0.0.1", Port: port}, log)
	var lines []string
	for i := range *logins {
		_, tok, err := a.CreateToken(ctx, auth.BootstrapTeam, auth.KindUser, "bench"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		c, err := svc.Credentials(ctx, team.ID, tok.ID, tok.Name, id, false)
		if err != nil {
			return err
		}
		lines = append(lines, c.ComputedUsername+" "+c.Password)
	}
	if err := os.WriteFile(*credsFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	s, err := kilnsftp.NewServer(svc, kilnsftp.Config{DataDir: *data, MaxInFlight: *inFlight}, log)
	if err != nil {
		return err
	}
	fmt.Printf("SFTPBENCH port=%d pid=%d\n", port, os.Getpid())
	return s.Serve(ctx, ln)
}

func idle(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	port := fs.Int("port", 0, "the server's port")
	credsFile := fs.String("creds", "", "the logins")
	n := fs.Int("n", 50, "sessions")
	_ = fs.Parse(args)
	f, err := os.Open(*credsFile)
	if err != nil {
		return err
	}
	var logins [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if u, p, ok := strings.Cut(sc.Text(), " "); ok {
			logins = append(logins, [2]string{u, p})
		}
	}
	f.Close()
	if len(logins)*8 < *n {
		return fmt.Errorf("%d logins hold at most %d sessions", len(logins), len(logins)*8)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(*port))
	var open []*sftp.Client
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range *n {
		l := logins[i%len(logins)]
		conn, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
			User: l[0], Auth: []ssh.AuthMethod{ssh.Password(l[1])},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), // loopback bench
			Timeout:         10 * time.Second,
		})
		if err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		c, err := sftp.NewClient(conn)
		if err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		if _, err := c.Getwd(); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		open = append(open, c)
	}
	fmt.Printf("IDLE READY n=%d\n", len(open))
	<-ctx.Done()
	return nil
}
