package zstdfast

import (
	"errors"
	"fmt"
	"math"
)

// eOption is an option for creating a encoder.
type eOption func(*encoderOptions) error

// options retains accumulated state of multiple options.
type encoderOptions struct {
	blockSize     int
	windowSize    int
	fullZero      bool
	noEntropy     bool
	allLitEntropy bool
	lowMem        bool
	maxStep       int32 // kiln: see Options.MaxStep
}

func (o *encoderOptions) setDefault() {
	// kiln: upstream's defaults after WithEncoderLevel(SpeedFastest),
	// WithEncoderConcurrency(1), WithLowerEncoderMem(true) and
	// WithEncoderCRC(false), in that order.
	*o = encoderOptions{
		blockSize:     1 << 16,
		windowSize:    4 << 20,
		allLitEntropy: false,
		lowMem:        true,
		fullZero:      true,
		maxStep:       math.MaxInt32,
	}
}

// encoder returns an encoder with the selected options.
func (o encoderOptions) encoder() *fastEncoder {
	return &fastEncoder{fastBase: fastBase{maxMatchOff: int32(o.windowSize), bufferReset: math.MaxInt32 - int32(o.windowSize*2), lowMem: o.lowMem}, maxStep: o.maxStep}
}

// withWindowSize will set the maximum allowed back-reference distance.
// The value must be a power of two between MinWindowSize and MaxWindowSize.
// A larger value will enable better compression but allocate more memory and,
// for above-default values, take considerably longer.
// The default value is determined by the compression level and max 8MB.
func withWindowSize(n int) eOption {
	return func(o *encoderOptions) error {
		switch {
		case n < MinWindowSize:
			return fmt.Errorf("window size must be at least %d", MinWindowSize)
		case n > MaxWindowSize:
			return fmt.Errorf("window size must be at most %d", MaxWindowSize)
		case (n & (n - 1)) != 0:
			return errors.New("window size must be a power of 2")
		}

		o.windowSize = n
		if o.blockSize > o.windowSize {
			o.blockSize = o.windowSize
		}
		return nil
	}
}

// withNoEntropyCompression will always skip entropy compression of literals.
// This can be useful if content has matches, but unlikely to benefit from entropy
// compression. Usually the slight speed improvement is not worth enabling this.
func withNoEntropyCompression(b bool) eOption {
	return func(o *encoderOptions) error {
		o.noEntropy = b
		return nil
	}
}

// kiln: withMaxStep sets Options.MaxStep.
func withMaxStep(n int32) eOption {
	return func(o *encoderOptions) error {
		switch {
		case n < 0:
			return fmt.Errorf("max step must be at least 0, got %d", n)
		case n == 0:
			o.maxStep = math.MaxInt32
		default:
			o.maxStep = n
		}
		return nil
	}
}
