package archive

import (
	"io"
	"sync"
)

// chunkPipe connects a producer (the archive encoder, or the reader of an
// archive entry) to Root.WriteFile or Stager.Create through a few large
// buffers. Unlike io.Pipe it lets the producer run ahead by up to
// chunks×chunkSize bytes, so compression does not stop for every file
// write, and it implements WriterTo, which io.Copy (inside WriteFile and
// Create) prefers: the file gets chunkSize writes rather than io.Copy's
// 32 KiB.
type chunkPipe struct {
	full chan []byte   // filled buffers, in order; closed by CloseWithError
	free chan []byte   // emptied buffers, for reuse
	done chan struct{} // closed when the consumer stops
	cur  []byte        // being filled by the producer

	err      error // the producer's error (nil: EOF), set before full is closed
	stopOnce sync.Once
	closed   bool
	pending  []byte // Read: the rest of the buffer being read
}

const (
	chunkSize = 1 << 20
	chunks    = 4
)

func newChunkPipe() *chunkPipe {
	return &chunkPipe{
		full: make(chan []byte, chunks),
		free: make(chan []byte, chunks+1),
		done: make(chan struct{}),
	}
}

// Write is the producer's side; it fails with errConsumerGone once the
// consumer stopped.
func (p *chunkPipe) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if p.cur == nil {
			select {
			case p.cur = <-p.free:
				p.cur = p.cur[:0]
			default:
				p.cur = make([]byte, 0, chunkSize)
			}
		}
		k := copy(p.cur[len(p.cur):cap(p.cur)], b)
		p.cur = p.cur[:len(p.cur)+k]
		b = b[k:]
		n += k
		if len(p.cur) == cap(p.cur) {
			if err := p.send(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (p *chunkPipe) send() error {
	select {
	case p.full <- p.cur:
		p.cur = nil
		return nil
	case <-p.done:
		return errConsumerGone
	}
}

// CloseWithError ends the producer's side: the consumer sees err after the
// data written so far (io.EOF when err is nil). Called once.
func (p *chunkPipe) CloseWithError(err error) {
	if p.closed {
		return
	}
	p.closed = true
	if len(p.cur) > 0 && err == nil {
		_ = p.send()
	}
	p.err = err
	close(p.full)
}

// Stop is the consumer's side giving up: the producer's next Write fails.
func (p *chunkPipe) Stop() { p.stopOnce.Do(func() { close(p.done) }) }

// WriteTo hands every buffer to w as it is filled.
func (p *chunkPipe) WriteTo(w io.Writer) (int64, error) {
	var n int64
	err := writeOut(w, p.pending, &n, p.Stop)
	p.pending = nil
	if err != nil {
		return n, err
	}
	for buf := range p.full {
		if err := writeOut(w, buf, &n, p.Stop); err != nil {
			return n, err
		}
		select {
		case p.free <- buf:
		default:
		}
	}
	return n, p.err
}

// writeOut is one write of a pipe's WriteTo: b to w, counted in n; a
// failed write stops the pipe (stop), so its producer fails too.
func writeOut(w io.Writer, b []byte, n *int64, stop func()) error {
	if len(b) == 0 {
		return nil
	}
	k, err := w.Write(b)
	*n += int64(k)
	if err != nil {
		stop()
	}
	return err
}

// Read is for consumers that do not use WriteTo.
func (p *chunkPipe) Read(b []byte) (int, error) {
	for len(p.pending) == 0 {
		buf, ok := <-p.full
		if !ok {
			if p.err != nil {
				return 0, p.err
			}
			return 0, io.EOF
		}
		p.pending = buf
	}
	k := copy(b, p.pending)
	p.pending = p.pending[k:]
	return k, nil
}
