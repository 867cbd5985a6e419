// Command snapbench runs one operation of the snapshot engine
// (internal/snapshot/engine) on a server root with a local file blob store,
// for bench/snapshots.sh, and prints one result line:
//
//	snapbench -op create  -root DIR -store DIR [-parent K]  SNAP_RESULT ...
//	snapbench -op restore -root DIR -store DIR -manifest K  RESTORE_RESULT ...
//
// create calls engine.Create (no Known, no Pin: every chunk is looked up in
// the store with Stat, as the first snapshot of a server is; with -parent,
// the manifest of an earlier snapshot of the tree, as the service passes
// the server's last ready one); restore calls
// restore.Run with an unlimited disk reservation. The store is opened
// with blob.Open("file://DIR"). The seconds printed are the engine call's
// own (the script times the process from outside too).
//
// It exits 1 when the operation fails, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/quota"
	"github.com/kilnhq/kiln/internal/snapshot/engine"
	"github.com/kilnhq/kiln/internal/snapshot/restore"
)

func main() {
	op := flag.String("op", "", "create or restore")
	root := flag.String("root", "", "server root (host path)")
	storeDir := flag.String("store", "", "blob store directory (host path; created if missing)")
	manifest := flag.String("manifest", "", "restore: the manifest key (manifests/<uuid>)")
	parent := flag.String("parent", "", "create: the manifest key of an earlier snapshot of the tree")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile (every allocation sampled) to this file at the end")
	traceOut := flag.String("trace", "", "write a runtime execution trace to this file (go tool trace)")
	compression := flag.String("compression", "fastest", "create: fastest, default or better (kiln serve --snapshot-compression)")
	null := flag.Bool("null", false, "create: a store that holds nothing and discards what is put (the engine's own cost, for analysis)")
	flag.Parse()
	// As kiln serve runs (internal/node/procs.go): what is measured is
	// what the service does.
	node.TuneProcs(os.Getenv)
	if *root == "" || *storeDir == "" || (*op != "create" && *op != "restore") || (*op == "restore" && *manifest == "") {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "snapbench:", err)
			os.Exit(2)
		}
		defer f.Close()
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "snapbench:", err)
			os.Exit(2)
		}
		defer f.Close()
		_ = trace.Start(f)
		defer trace.Stop()
	}
	level, err := engine.ParseCompression(*compression)
	if err != nil {
		fmt.Fprintln(os.Stderr, "snapbench:", err)
		os.Exit(2)
	}
	if err := run(ctx, *op, *root, *storeDir, *manifest, *parent, level, *null); err != nil {
		fmt.Fprintln(os.Stderr, "snapbench:", err)
		stop()
		pprof.StopCPUProfile()
		trace.Stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, op, rootDir, storeDir, manifest, parent string, level engine.Compression, null bool) error {
	abs, err := filepath.Abs(storeDir)
	if err != nil {
		return err
	}
	var store engine.Store
	if null {
		store = nullStore{}
	} else if store, err = blob.Open(ctx, "file://"+abs, blob.Options{}); err != nil {
		return err
	}
	r, err := files.Open(rootDir)
	if err != nil {
		return err
	}
	defer r.Close()
	start := time.Now()
	switch op {
	case "create":
		res, err := engine.Create(ctx, r, store, engine.CreateOptions{Parent: parent, Compression: level})
		if err != nil {
			return err
		}
		if res.ParentErr != nil {
			return res.ParentErr
		}
		fmt.Printf("SNAP_RESULT manifest=%s size=%d stored=%d chunks=%d new_chunks=%d files=%d dirs=%d skipped=%d reused_files=%d reused_bytes=%d seconds=%.3f\n",
			res.ManifestKey, res.SizeBytes, res.StoredBytes, len(res.Chunks), res.NewChunks, res.Files, res.Dirs,
			res.Skipped.HardLinks+res.Skipped.Links+res.Skipped.Special, res.ReusedFiles, res.ReusedBytes, time.Since(start).Seconds())
	case "restore":
		resv, err := quota.NewAccount(1<<50, quota.TempNames{}).Reserve(0)
		if err != nil {
			return err
		}
		res, err := restore.Run(ctx, r, resv, store, manifest, restore.Options{})
		if err != nil {
			resv.Release()
			return err
		}
		resv.Commit()
		fmt.Printf("RESTORE_RESULT size=%d files=%d dirs=%d replaced=%d kept=%d kept_bytes=%d seconds=%.3f\n",
			res.SizeBytes, res.Files, res.Dirs, res.Replaced, res.Kept, res.KeptBytes, time.Since(start).Seconds())
	}
	return nil
}

// nullStore holds nothing: Stat never finds a blob, Put reads what it is
// given and drops it. With it Create does all its work but the store's
// (the file store's writes, fsyncs and renames).
type nullStore struct{}

func (nullStore) Put(_ context.Context, _ string, r io.Reader, _ int64) (bool, error) {
	_, err := io.Copy(io.Discard, r)
	return err == nil, err
}

func (nullStore) Get(context.Context, string) (io.ReadCloser, error) { return nil, blob.ErrNotFound }

func (nullStore) Stat(context.Context, string) (blob.Info, error) {
	return blob.Info{}, blob.ErrNotFound
}
