// Command archivebench runs one operation of package archive on a server
// root, for bench/files-archive.sh, and prints one ARCHIVE_RESULT line:
//
//	archivebench -root DIR -op compress -format tar.gz -names world,plugins
//	archivebench -root DIR -op decompress -archive ref.tar.gz -dir .
//
// It exits 1 when the operation fails, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/kilnhq/kiln/internal/files"
	"github.com/kilnhq/kiln/internal/files/archive"
	"github.com/kilnhq/kiln/internal/node"
	"github.com/kilnhq/kiln/internal/quota"
)

func main() {
	root := flag.String("root", "", "server root (host path)")
	op := flag.String("op", "", "compress or decompress")
	format := flag.String("format", "tar.gz", "compress: tar.gz, zip or tar.zst")
	names := flag.String("names", "", "compress: comma-separated root-relative names")
	dir := flag.String("dir", ".", "directory the archive is made in or extracted to")
	arch := flag.String("archive", "", "decompress: root-relative archive path")
	free := flag.Int64("free", 1<<40, "disk budget in bytes")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	traceFile := flag.String("trace", "", "write an execution trace to this file")
	flag.Parse()
	// As kiln serve runs (internal/node/procs.go): what is measured is
	// what the service does.
	node.TuneProcs(os.Getenv)
	if *root == "" || (*op != "compress" && *op != "decompress") {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "archivebench:", err)
			os.Exit(2)
		}
		defer f.Close()
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "archivebench:", err)
			os.Exit(2)
		}
		defer f.Close()
		_ = trace.Start(f)
		defer trace.Stop()
	}
	if err := run(ctx, *root, *op, *format, *names, *dir, *arch, *free); err != nil {
		fmt.Fprintln(os.Stderr, "archivebench:", err)
		stop()
		pprof.StopCPUProfile()
		trace.Stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, rootDir, op, format, names, dir, arch string, free int64) error {
	r, err := files.Open(rootDir)
	if err != nil {
		return err
	}
	defer r.Close()
	start := time.Now()
	switch op {
	case "compress":
		f, err := archive.ParseFormat("format", format)
		if err != nil {
			return err
		}
		res, _ := quota.NewAccount(free, quota.TempNames{}).Reserve(0)
		e, err := archive.Compress(ctx, r, dir, strings.Split(names, ","), f, res)
		if err != nil {
			return err
		}
		fmt.Printf("ARCHIVE_RESULT op=compress format=%s name=%s size=%d seconds=%.3f\n",
			f, e.Name, e.Size, time.Since(start).Seconds())
	case "decompress":
		res, _ := quota.NewAccount(free, quota.TempNames{}).Reserve(0)
		if err := archive.Decompress(ctx, r, arch, dir, res); err != nil {
			return err
		}
		fmt.Printf("ARCHIVE_RESULT op=decompress archive=%s seconds=%.3f\n", arch, time.Since(start).Seconds())
	}
	return nil
}
