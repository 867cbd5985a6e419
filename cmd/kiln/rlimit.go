package main

import (
	"log/slog"
	"syscall"
)

// raiseNoFile raises the soft limit of open descriptors (RLIMIT_NOFILE)
// to the hard limit, logs both and returns the soft limit in force (0
// when it cannot be read). Every connection, server root held open, log
// pipe and database connection is a descriptor: the soft limit is often
// 1,024 while the hard one is far higher. Go's runtime raises it too when
// the syscall package starts (and gives children the original soft limit
// back when it starts them, so game servers keep theirs); this makes the
// step explicit, and logs what kiln serve has to work with.
func raiseNoFile(log *slog.Logger) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("file descriptor limit unknown", "err", err)
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("file descriptor limit not raised", "soft", lim.Cur, "hard", lim.Max, "err", err)
		} else {
			lim = raised
		}
	}
	log.Info("file descriptor limit", "soft", lim.Cur, "hard", lim.Max)
	return lim.Cur
}
