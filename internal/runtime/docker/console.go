package docker

import "bytes"

// maxLine caps one console line, as in the process runtime: longer lines
// are delivered in pieces so a runaway server cannot make Kiln buffer
// without bound.
const maxLine = 8 << 10

// lineWriter turns one output stream (the demultiplexed stdout or stderr)
// into console lines: each complete line without its "\r\n" or "\n", lines
// over maxLine split. It is not safe for concurrent use; stdcopy writes
// both streams from one goroutine, so fn is never called concurrently.
type lineWriter struct {
	fn  func(string)
	buf []byte
}

func newLineWriter(fn func(string)) *lineWriter { return &lineWriter{fn: fn} }

// Write never fails, so stdcopy keeps copying.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			take := min(len(p), maxLine-len(w.buf))
			w.buf = append(w.buf, p[:take]...)
			p = p[take:]
			if len(w.buf) == maxLine {
				w.emit()
			}
			continue
		}
		if len(w.buf)+i > maxLine {
			take := maxLine - len(w.buf)
			w.buf = append(w.buf, p[:take]...)
			p = p[take:]
			w.emit()
			continue
		}
		w.buf = append(w.buf, p[:i]...)
		p = p[i+1:]
		w.buf = bytes.TrimRight(w.buf, "\r")
		w.emit()
	}
	return n, nil
}

// Flush delivers a last line that had no newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.emit()
	}
}

func (w *lineWriter) emit() {
	w.fn(string(w.buf))
	w.buf = w.buf[:0]
}
