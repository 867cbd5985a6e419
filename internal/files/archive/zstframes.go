package archive

import (
	"errors"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/panics"
)

// zstdFrameSize is how much of the tar stream goes into one zstd frame.
// Frames are compressed independently, one per core at the same time, and
// concatenated (RFC 8878 §3.1: a zstd stream is a sequence of frames, and
// every decoder — zstd -d, ours — reads it as one). klauspost's streaming
// encoder compresses one block after another on one core, which on the
// 1 GiB world left the second core idle (docs/benchmarks.md). Frames of
// 4 MiB lose next to nothing to the history they cannot share (a world is
// mostly region files whose chunks are deflated already): the archive
// stays smaller than zstd -1's.
const zstdFrameSize = 4 << 20

// zstdPipe is chunkPipe for tar.zst with the compression inside: the
// producer writes the tar stream, which is cut into zstdFrameSize frames
// compressed by one worker per core; the consumer (Root.WriteFile, through
// WriteTo) gets the frames in order, each written from the buffer it was
// compressed into — no copy between compressor and file. At most about
// 2×workers+2 frames are in memory, input and output buffer each (one
// being filled, 2×workers queued or being compressed — a queue that deep
// keeps both cores busy, one less left them idle 10 % of the time — one
// being written): 48 MiB on 2 cores.
//
// Producer: Write, then CloseWithError once. Consumer: WriteTo or Read,
// and Stop when it gives up (the producer's next Write fails with
// errConsumerGone).
type zstdPipe struct {
	enc   *zstd.Encoder // EncodeAll runs concurrently, up to its concurrency
	wg    sync.WaitGroup
	jobs  chan *frameJob // to the workers
	order chan *frameJob // the same jobs in stream order, to the consumer
	free  chan []byte    // emptied buffers, for reuse
	done  chan struct{}  // closed by Stop

	// producer's
	cur    []byte
	frames int
	closed bool
	err    error // set before order is closed

	// consumer's
	stopOnce sync.Once
	reading  *frameJob // Read: the frame being read
	pending  []byte    // Read: what is left of it
}

type frameJob struct {
	in, out []byte
	ready   chan struct{} // closed when out holds in's frame, or err is set
	err     error         // the encoder panicked (panics.Catch): the stream fails
}

// cores is how many CPU-bound workers a compression runs: the Go Ps, but
// no more than the CPUs. kiln serve runs two Ps a core for its
// disk-bound work (node.TuneProcs); a compressor with a worker per P was
// 13 % slower there (tar.zst of the 1 GiB world: 0.85× of zstd -1 -T0
// with 2 Ps, 0.72× with 4 on 2 cores), each spare worker contending for
// a core with an encoder's memory.
func cores() int { return max(1, min(runtime.GOMAXPROCS(0), runtime.NumCPU())) }

func newZstdPipe(level zstd.EncoderLevel) (*zstdPipe, error) {
	workers := cores()
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderConcurrency(workers))
	if err != nil {
		return nil, err
	}
	p := &zstdPipe{
		enc:   enc,
		jobs:  make(chan *frameJob, workers),
		order: make(chan *frameJob, 2*workers),
		free:  make(chan []byte, 2*(2*workers+2)),
		done:  make(chan struct{}),
	}
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for j := range p.jobs {
				// A panic of the encoder fails this archive, never the
				// process (the goroutine is a request's).
				j.err = panics.Catch(func() error {
					j.out = p.enc.EncodeAll(j.in, j.out[:0])
					return nil
				})
				close(j.ready)
			}
		}()
	}
	return p, nil
}

func (p *zstdPipe) buffer() []byte {
	select {
	case b := <-p.free:
		return b[:0]
	default:
		return make([]byte, 0, zstdFrameSize)
	}
}

func (p *zstdPipe) recycle(b []byte) {
	if cap(b) < zstdFrameSize {
		return
	}
	select {
	case p.free <- b:
	default:
	}
}

// Write is the producer's side; it fails with errConsumerGone once the
// consumer stopped.
func (p *zstdPipe) Write(b []byte) (int, error) {
	if p.closed {
		return 0, errors.New("archive: write to a closed zstd pipe")
	}
	n := 0
	for len(b) > 0 {
		if p.cur == nil {
			p.cur = p.buffer()
		}
		k := min(len(b), zstdFrameSize-len(p.cur))
		p.cur = append(p.cur, b[:k]...)
		b, n = b[k:], n+k
		if len(p.cur) == zstdFrameSize {
			if err := p.submit(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// submit queues the frame being filled; it blocks while the consumer is
// workers frames behind.
func (p *zstdPipe) submit() error {
	j := &frameJob{in: p.cur, out: p.buffer(), ready: make(chan struct{})}
	p.cur = nil
	select {
	case p.order <- j:
	case <-p.done:
		return errConsumerGone
	}
	p.frames++
	p.jobs <- j // the workers take every job until jobs is closed
	return nil
}

// CloseWithError ends the producer's side: the consumer gets the last
// frames, then err (io.EOF when nil). A stream given no bytes is still one
// (empty) frame, as a streaming encoder writes. Called once; it returns
// when the workers are done.
func (p *zstdPipe) CloseWithError(err error) {
	if p.closed {
		return
	}
	p.closed = true
	if err == nil && (len(p.cur) > 0 || p.frames == 0) {
		if p.cur == nil {
			p.cur = p.buffer()
		}
		_ = p.submit() // errConsumerGone: the consumer has its own error
	}
	p.err = err
	close(p.order)
	close(p.jobs)
	p.wg.Wait()
	_ = p.enc.Close()
}

// Stop is the consumer's side giving up.
func (p *zstdPipe) Stop() { p.stopOnce.Do(func() { close(p.done) }) }

// WriteTo writes every frame to w as it is ready, in order.
func (p *zstdPipe) WriteTo(w io.Writer) (int64, error) {
	var n int64
	err := writeOut(w, p.pending, &n, p.Stop)
	p.pending = nil
	if err != nil {
		return n, err
	}
	for j := range p.order {
		<-j.ready
		if j.err != nil {
			p.Stop()
			return n, j.err
		}
		err := writeOut(w, j.out, &n, p.Stop)
		p.recycle(j.in)
		p.recycle(j.out)
		if err != nil {
			return n, err
		}
	}
	return n, p.err
}

// Read is for consumers that do not use WriteTo.
func (p *zstdPipe) Read(b []byte) (int, error) {
	for len(p.pending) == 0 {
		if p.reading != nil {
			p.recycle(p.reading.in)
			p.recycle(p.reading.out)
			p.reading = nil
		}
		j, ok := <-p.order
		if !ok {
			if p.err != nil {
				return 0, p.err
			}
			return 0, io.EOF
		}
		<-j.ready
		if j.err != nil {
			p.Stop()
			return 0, j.err
		}
		p.reading, p.pending = j, j.out
	}
	k := copy(b, p.pending)
	p.pending = p.pending[k:]
	return k, nil
}
