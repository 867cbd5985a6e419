package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/kilnhq/kiln/internal/blob"
	"github.com/kilnhq/kiln/internal/instance"
	"github.com/kilnhq/kiln/internal/snapshot"
	"github.com/kilnhq/kiln/internal/store"
)

const snapshotsCheckAbout = `Verify the snapshot store as restic check does: for every ready snapshot of
every team, its manifest is in the store and valid (read whole, every entry
checked as a restore checks it), and every chunk it references is there; with
--read-data every chunk is also read and checked against its SHA-256 (this
reads the whole store once: chunks shared by snapshots are read once). It
prints the damaged snapshots (id, team, server, name, what is wrong) and exits
with status 1 when there is any. A damaged snapshot is marked so (its damage
field in the API; a restore or a download of it is refused with that
sentence), a corrupt chunk is moved to quarantine/ in the store (so the next
snapshot holding its data stores it again), and a snapshot marked damaged
before and found whole again loses its mark. It works on the database and
the blob store of kiln serve (give the same --data-dir or --database-url and
--blob-url), also while kiln serve runs.`

// checkNode is the node name the check's instance row carries: no kiln
// serve can have it (nodeNameRE has no space), so kiln serve takes the
// claims the check holds on chunks for those of a live process of another
// node, and leaves them to it (internal/snapshot's ledger).
const checkNode = "kiln admin"

// blobConfig is the blob store of kiln serve, as kiln admin snapshots
// check is told of it (the same flags).
type blobConfig struct {
	URL, AccessKeyID, SecretKey string
}

func (c *blobConfig) register(s *settings) {
	s.fs.StringVar(&c.URL, "blob-url", "", "the blob store of kiln serve: file:///abs/dir or s3://bucket/prefix?endpoint=https://…&region=… (default: file://<data-dir>/blobs)")
	s.fs.StringVar(&c.AccessKeyID, "blob-access-key-id", "", "S3 access key id of --blob-url")
	s.fs.StringVar(&c.SecretKey, "blob-secret-access-key", "", "S3 secret access key of --blob-url (prefer the environment variable KILN_BLOB_SECRET_ACCESS_KEY)")
}

// snapshotsCheck runs `kiln admin snapshots check`.
func snapshotsCheck(ctx context.Context, db *store.DB, sc storeConfig, bc blobConfig, readData bool, stdout, stderr io.Writer) error {
	u := bc.URL
	if u == "" {
		dir, err := filepath.Abs(filepath.Join(sc.DataDir, "blobs"))
		if err != nil {
			return err
		}
		u = "file://" + dir
	}
	// No CleanBefore: the staged writes of a kiln serve running beside
	// are not this command's to remove.
	st, err := blob.Open(ctx, u, blob.Options{AccessKeyID: bc.AccessKeyID, SecretAccessKey: bc.SecretKey})
	if err != nil {
		return usageError{"--blob-url: " + err.Error()}
	}
	fmt.Fprintf(stderr, "kiln: blob store %s\n", st)
	host, _ := os.Hostname()
	reg, err := instance.Register(ctx, db, instance.Options{NodeID: checkNode, Hostname: host, PID: os.Getpid()})
	if err != nil {
		return err
	}
	beat, stopBeat := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		_ = reg.Run(beat)
	}()
	defer func() {
		stopBeat()
		<-beating
		_ = reg.Close(context.WithoutCancel(ctx))
	}()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc := snapshot.New(db, st, nil, nil, snapshot.Options{Owner: reg.Instance().ID, Node: checkNode}, log)
	defer svc.Close()
	rep, err := svc.Check(ctx, snapshot.CheckOptions{ReadData: readData})
	if err != nil {
		return fmt.Errorf("check the snapshot store: %w", err)
	}
	writeCheckReport(stdout, rep, readData)
	if n := len(rep.Damaged); n > 0 {
		return fmt.Errorf("%d damaged snapshot(s)", n)
	}
	return nil
}

// writeCheckReport prints what a check found: a summary line, then the
// damaged snapshots one a line, then the chunks moved aside.
func writeCheckReport(w io.Writer, rep snapshot.CheckReport, readData bool) {
	what := "looked up"
	if readData {
		what = fmt.Sprintf("read and verified (%.1f MiB)", float64(rep.ReadBytes)/(1<<20))
	}
	fmt.Fprintf(w, "checked %d ready snapshot(s): %d chunk(s) %s\n", rep.Snapshots, rep.Chunks, what)
	if rep.Healed > 0 {
		fmt.Fprintf(w, "%d snapshot(s) marked damaged before are whole again (unmarked)\n", rep.Healed)
	}
	if len(rep.Damaged) == 0 {
		fmt.Fprintln(w, "no damage found")
		return
	}
	fmt.Fprintf(w, "%d damaged snapshot(s):\n", len(rep.Damaged))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tTEAM\tSERVER\tNAME\tPROBLEM")
	for _, d := range rep.Damaged {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%q\t%s\n", d.ID, d.TeamName, d.ServerID, d.Name, checkProblem(d))
	}
	tw.Flush()
	if len(rep.Quarantined) > 0 {
		fmt.Fprintf(w, "%d corrupt chunk(s) moved aside (the next snapshot holding their data stores them again):\n", len(rep.Quarantined))
		for _, q := range rep.Quarantined {
			fmt.Fprintf(w, "  %s -> %s\n", q.Key, q.To)
		}
	}
}

// checkProblem says in a few words what is wrong with a damaged snapshot.
func checkProblem(d snapshot.DamagedSnapshot) string {
	switch {
	case d.ManifestMissing:
		return "manifest missing"
	case d.ManifestCorrupt:
		return "manifest corrupt"
	}
	return fmt.Sprintf("%d chunk(s) missing, %d corrupt", d.MissingChunks, d.CorruptChunks)
}
