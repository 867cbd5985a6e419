package zstdfast_test

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/kilnhq/kiln/internal/zstdfast"
)

// upstream returns klauspost's encoder with the options Kiln's chunks use
// (internal/snapshot/engine), in the same order.
func upstream(tb testing.TB, window int, noEntropy bool) *zstd.Encoder {
	tb.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(window), zstd.WithNoEntropyCompression(noEntropy),
		zstd.WithEncoderCRC(false))
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

func ours(tb testing.TB, o zstdfast.Options) *zstdfast.Encoder {
	tb.Helper()
	enc, err := zstdfast.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

var decoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		panic(err)
	}
	return d
})

var decodeMu sync.Mutex

// roundTrip checks that upstream's decoder gives src back from frame.
func roundTrip(tb testing.TB, name string, src, frame []byte) {
	tb.Helper()
	decodeMu.Lock()
	got, err := decoder().DecodeAll(frame, nil)
	decodeMu.Unlock()
	if err != nil {
		tb.Fatalf("%s: decoding %d bytes made of %d: %v", name, len(frame), len(src), err)
	}
	if !bytes.Equal(got, src) {
		tb.Fatalf("%s: decoded %d bytes differ from the %d encoded (first difference at %d)", name, len(got), len(src), firstDiff(got, src))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Test data. All of it is made from seeded math/rand, so every run sees
// the same bytes.

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	r.Read(b)
	return b
}

var words = strings.Fields(`the of and to in is was for that with as on by he his
at from it an were are which this be or has had first one their its new after
who they two her she been other when there all during into school time may
years more most only over city some world would where later up such used many
can state about national out known university united then made kiln server
snapshot region chunk block world backup restore minecraft player`)

func englishText(r *rand.Rand, n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		sentence := 4 + r.Intn(14)
		for i := range sentence {
			w := words[r.Intn(len(words))]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
			if i < sentence-1 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(". ")
		if r.Intn(8) == 0 {
			b.WriteString("\n\n")
		}
	}
	return b.Bytes()[:n]
}

func pattern(n int) []byte {
	return bytes.Repeat([]byte("kiln:0123456789abcdef|"), n/22+1)[:n]
}

// regionData returns n bytes shaped like Minecraft's region files (.mca):
// an 8 KiB header of chunk locations and timestamps, then each chunk in
// whole 4 KiB sectors: a 4-byte length, compression type 2 and a zlib
// stream of NBT-like bytes, zero padded to the sector's end. A chunk's
// NBT ends in a long run of one byte (empty sections' light), which zlib
// turns into 60–110 bytes of one repeated deflate code, as in real
// worlds. (zlib at BestSpeed: Minecraft uses the default level, which
// takes longer to make, 10 s for 4 MiB under -race, and ends alike.)
func regionData(seed int64, n int) []byte {
	r := rand.New(rand.NewSource(seed))
	var out bytes.Buffer
	for out.Len() < n {
		regionFile(r, &out, n-out.Len())
	}
	return out.Bytes()[:n]
}

const sectorSize = 4096

// regionFile appends a region file to out, stopping at the first chunk
// that takes it to limit bytes or more.
func regionFile(r *rand.Rand, out *bytes.Buffer, limit int) {
	const chunks = 1024
	header := make([]byte, 2*sectorSize)
	var body bytes.Buffer
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	now := uint32(1_700_000_000 + r.Intn(1_000_000))
	for i := range chunks {
		if len(header)+body.Len() >= limit {
			break
		}
		if r.Intn(16) == 0 {
			continue // never generated
		}
		z.Reset()
		zw.Reset(&z)
		zw.Write(chunkNBT(r, i))
		zw.Close()
		sector := 2 + body.Len()/sectorSize
		var rec [5]byte
		binary.BigEndian.PutUint32(rec[:], uint32(z.Len()+1))
		rec[4] = 2 // zlib
		body.Write(rec[:])
		body.Write(z.Bytes())
		if pad := body.Len() % sectorSize; pad != 0 {
			body.Write(make([]byte, sectorSize-pad))
		}
		count := 2 + body.Len()/sectorSize - sector
		binary.BigEndian.PutUint32(header[4*i:], uint32(sector)<<8|uint32(count))
		binary.BigEndian.PutUint32(header[sectorSize+4*i:], now-uint32(r.Intn(100_000)))
	}
	out.Write(header)
	out.Write(body.Bytes())
}

// chunkNBT returns bytes like a chunk's uncompressed NBT: tag names,
// bit-packed block states and heightmaps with some locality, and a tail
// of one byte repeated.
func chunkNBT(r *rand.Rand, i int) []byte {
	var b bytes.Buffer
	tag := func(typ byte, name string) {
		b.WriteByte(typ)
		binary.Write(&b, binary.BigEndian, uint16(len(name)))
		b.WriteString(name)
	}
	tag(10, "")
	tag(3, "DataVersion")
	binary.Write(&b, binary.BigEndian, int32(3955))
	tag(3, "xPos")
	binary.Write(&b, binary.BigEndian, int32(i%32))
	tag(3, "zPos")
	binary.Write(&b, binary.BigEndian, int32(i/32))
	tag(8, "Status")
	binary.Write(&b, binary.BigEndian, uint16(14))
	b.WriteString("minecraft:full")
	tag(4, "LastUpdate")
	binary.Write(&b, binary.BigEndian, r.Int63n(1<<30))
	tag(9, "sections")
	sections := 2 + r.Intn(4)
	for range sections {
		tag(10, "block_states")
		tag(9, "palette")
		palette := 3 + r.Intn(12)
		for range palette {
			tag(8, "Name")
			name := "minecraft:" + words[r.Intn(len(words))]
			binary.Write(&b, binary.BigEndian, uint16(len(name)))
			b.WriteString(name)
		}
		tag(12, "data")
		// 4096 block indices, 4 bits each, in runs.
		var packed [256]uint64
		v := uint64(r.Intn(palette))
		for j := range packed {
			x, y := r.Uint64(), r.Uint64()
			for k := range 16 {
				if x>>(4*k)&15 < 3 { // a new block type, 3 times in 16
					v = (y >> (4 * k) & 15) % uint64(palette)
				}
				packed[j] |= v << (4 * k)
			}
		}
		binary.Write(&b, binary.BigEndian, packed[:])
		b.WriteByte(0)
	}
	tag(10, "Heightmaps")
	tag(12, "WORLD_SURFACE")
	var hm [37]uint64
	h := uint64(64 + r.Intn(40))
	for j := range 256 {
		h = uint64(int64(h) + int64(r.Intn(3)) - 1)
		hm[j/7] |= h << (9 * (j % 7))
	}
	binary.Write(&b, binary.BigEndian, hm[:])
	b.WriteByte(0)
	// Light of empty sections: one long run.
	tag(7, "SkyLight")
	run := 16<<10 + r.Intn(16<<10)
	binary.Write(&b, binary.BigEndian, int32(run))
	b.Write(bytes.Repeat([]byte{0xff}, run))
	b.WriteByte(0)
	return b.Bytes()
}

type input struct {
	name string
	data []byte
}

// region4M is 4 MiB of regionData.
var region4M = sync.OnceValue(func() []byte { return regionData(2, 4<<20) })

var corpus = sync.OnceValue(func() []input {
	r := rand.New(rand.NewSource(1))
	random := randomBytes(r, 1<<20)
	text := englishText(r, 1<<20)
	region := region4M()
	var mixed []byte
	for len(mixed) < 4<<20 {
		n := 1 + r.Intn(40<<10)
		switch r.Intn(5) {
		case 0:
			mixed = append(mixed, randomBytes(r, n)...)
		case 1:
			mixed = append(mixed, make([]byte, n)...)
		case 2:
			mixed = append(mixed, englishText(r, n)...)
		case 3:
			mixed = append(mixed, pattern(n)...)
		default:
			off := r.Intn(len(region) - n)
			mixed = append(mixed, region[off:off+n]...)
		}
	}
	in := []input{{"empty", []byte{}}, {"nil", nil}}
	for _, n := range []int{1, 7, 8, 9, 10, 16, 33, 1023, 1024, 1025, 64<<10 - 1, 64 << 10, 64<<10 + 1,
		128<<10 - 1, 128 << 10, 128<<10 + 1, 256<<10 + 3, 1 << 20, 4 << 20} {
		in = append(in, input{fmt.Sprintf("mixed/%d", n), mixed[:n]})
	}
	for _, n := range []int{1, 9, 128<<10 + 1, 1 << 20} {
		in = append(in,
			input{fmt.Sprintf("random/%d", n), random[:n]},
			input{fmt.Sprintf("zeros/%d", n), make([]byte, n)},
			input{fmt.Sprintf("text/%d", n), text[:n]},
			input{fmt.Sprintf("pattern/%d", n), pattern(n)},
		)
	}
	for _, n := range []int{10, 4096 + 5, 64<<10 + 1, 256<<10 + 3, 1 << 20, 4 << 20} {
		in = append(in, input{fmt.Sprintf("region/%d", n), region[:n]})
	}
	in = append(in, input{"region/1MiB@3M", region[3<<20:]})
	return in
})

type config struct {
	window    int
	noEntropy bool
}

func (c config) String() string {
	return fmt.Sprintf("window=%dKiB/noEntropy=%t", c.window>>10, c.noEntropy)
}

var configs = []config{{1 << 20, false}, {1 << 20, true}, {4 << 20, false}, {4 << 20, true}}

// TestIdenticalToUpstream checks that with MaxStep 0 the output is byte
// for byte upstream's, from an Encoder used for every input (twice
// round, so state carries from large inputs to small and back) and from
// a fresh one.
func TestIdenticalToUpstream(t *testing.T) {
	for _, c := range configs {
		t.Run(c.String(), func(t *testing.T) {
			up := upstream(t, c.window, c.noEntropy)
			reused := ours(t, zstdfast.Options{WindowSize: c.window, NoEntropy: c.noEntropy})
			in := slices.Clone(corpus())
			for round := range 2 {
				for _, x := range in {
					want := up.EncodeAll(x.data, nil)
					var got []byte
					if round == 0 {
						got = reused.EncodeAll(x.data, nil)
						fresh := ours(t, zstdfast.Options{WindowSize: c.window, NoEntropy: c.noEntropy})
						if got := fresh.EncodeAll(x.data, nil); !bytes.Equal(got, want) {
							t.Fatalf("%s: fresh encoder: %d bytes, upstream %d, first difference at %d", x.name, len(got), len(want), firstDiff(got, want))
						}
					} else {
						// Appending to dst.
						prefix := []byte("prefix")
						got = reused.EncodeAll(x.data, prefix)
						if !bytes.Equal(got[:len(prefix)], prefix) {
							t.Fatalf("%s: appending to dst overwrote it", x.name)
						}
						got = got[len(prefix):]
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("round %d, %s: reused encoder: %d bytes, upstream %d, first difference at %d", round, x.name, len(got), len(want), firstDiff(got, want))
					}
				}
				slices.Reverse(in)
			}
		})
	}
}

// TestSetNoEntropy: one Encoder switched between the two settings from
// call to call writes, each time, upstream's output for that setting.
func TestSetNoEntropy(t *testing.T) {
	const window = 4 << 20
	ups := map[bool]*zstd.Encoder{false: upstream(t, window, false), true: upstream(t, window, true)}
	enc := ours(t, zstdfast.Options{WindowSize: window, NoEntropy: true})
	text := englishText(rand.New(rand.NewSource(7)), 300<<10)
	for i, x := range corpus() {
		for _, noEntropy := range []bool{i%2 == 0, i%2 != 0} {
			enc.SetNoEntropy(noEntropy)
			for _, src := range [][]byte{x.data, text} {
				if got, want := enc.EncodeAll(src, nil), ups[noEntropy].EncodeAll(src, nil); !bytes.Equal(got, want) {
					t.Fatalf("%s, noEntropy %t: %d bytes, upstream %d", x.name, noEntropy, len(got), len(want))
				}
			}
		}
	}
	enc.SetNoEntropy(false)
	coded := len(enc.EncodeAll(text, nil))
	enc.SetNoEntropy(true)
	if raw := len(enc.EncodeAll(text, nil)); coded >= raw {
		t.Errorf("text with Huffman-coded literals: %d bytes, without: %d; want fewer", coded, raw)
	}
}

// TestIdenticalToUpstreamManyFrames runs an Encoder long enough for its
// position counter to pass upstream's reset line (math.MaxInt32 less two
// windows) several times, in single-block frames and in multi-block ones
// (each resets it on its own path), against upstream.
func TestIdenticalToUpstreamManyFrames(t *testing.T) {
	const window = 8 << 20 // each frame moves the counter at least a window on
	up := upstream(t, window, true)
	enc := ours(t, zstdfast.Options{WindowSize: window, NoEntropy: true})
	r := rand.New(rand.NewSource(3))
	region := region4M()
	wraps := map[bool]int{}
	for i := range 1000 {
		n := r.Intn(8 << 10)
		multi := r.Intn(2) == 0
		if multi {
			n = 64<<10 + 1 + r.Intn(64<<10)
		}
		off := r.Intn(len(region) - n)
		src := region[off : off+n]
		before := zstdfast.Cur(enc)
		want := up.EncodeAll(src, nil)
		got := enc.EncodeAll(src, nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d (%d bytes): %d bytes, upstream %d", i, n, len(got), len(want))
		}
		if zstdfast.Cur(enc) < before {
			wraps[multi]++
		}
	}
	t.Logf("counter reset in %d single-block frames, %d multi-block ones", wraps[false], wraps[true])
	if wraps[false] == 0 || wraps[true] == 0 {
		t.Errorf("counter reset in %d single-block frames, %d multi-block ones; want both", wraps[false], wraps[true])
	}
}

// TestEmpty checks that empty input gives upstream's frame: a header and
// one empty raw block, which decodes to nothing.
func TestEmpty(t *testing.T) {
	enc := ours(t, zstdfast.Options{})
	got := enc.EncodeAll(nil, nil)
	want := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x00, 0x01, 0x00, 0x00}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
	roundTrip(t, "empty", nil, got)
}

func TestNewErrors(t *testing.T) {
	for _, o := range []zstdfast.Options{
		{WindowSize: -1},
		{WindowSize: 512},
		{WindowSize: 3 << 10},
		{WindowSize: zstdfast.MaxWindowSize * 2},
		{MaxStep: -1},
	} {
		if _, err := zstdfast.New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		} else {
			t.Logf("New(%+v): %v", o, err)
		}
	}
	for _, o := range []zstdfast.Options{
		{},
		{WindowSize: zstdfast.MinWindowSize, MaxStep: 1},
		{WindowSize: zstdfast.MaxWindowSize, NoEntropy: true},
	} {
		if _, err := zstdfast.New(o); err != nil {
			t.Errorf("New(%+v): %v", o, err)
		}
	}
}

// TestMaxStep checks that capped steps decode back to the input, and that
// on region-like data they do not cost size.
func TestMaxStep(t *testing.T) {
	for _, c := range configs {
		steps := []int32{8, 32, 64}
		if c.window != 4<<20 {
			steps = []int32{32} // the window changes only the 4 MiB inputs
		}
		for _, step := range steps {
			t.Run(fmt.Sprintf("%v/MaxStep=%d", c, step), func(t *testing.T) {
				enc := ours(t, zstdfast.Options{WindowSize: c.window, NoEntropy: c.noEntropy, MaxStep: step})
				for _, x := range corpus() {
					roundTrip(t, x.name, x.data, enc.EncodeAll(x.data, nil))
				}
				if c.window != 4<<20 || !c.noEntropy {
					return
				}
				// Kiln's options: is it smaller than upstream's unbounded step?
				base := ours(t, zstdfast.Options{WindowSize: c.window, NoEntropy: c.noEntropy})
				var capped, unbounded int
				for piece := range slices.Chunk(region4M(), 1<<20) {
					capped += len(enc.EncodeAll(piece, nil))
					unbounded += len(base.EncodeAll(piece, nil))
				}
				t.Logf("4 MiB of region-like data in 1 MiB frames: %d bytes, %d with MaxStep 0 (%+.2f %%)",
					capped, unbounded, 100*float64(capped-unbounded)/float64(unbounded))
				if capped > unbounded {
					t.Errorf("%d bytes, more than the %d of MaxStep 0", capped, unbounded)
				}
			})
		}
	}
}

// FuzzEncodeAll checks that any input with any options decodes back to
// itself, and with MaxStep 0 is upstream's output. Encoders are kept per
// option set (up to 64 of ours), so their state carries from one input
// to the next.
func FuzzEncodeAll(f *testing.F) {
	f.Add([]byte(nil), uint8(12), false, int32(0))
	f.Add([]byte("a"), uint8(0), true, int32(1))
	f.Add(pattern(3000), uint8(0), false, int32(0))
	// Small seeds (the fuzzer minimizes what it finds byte by byte); small
	// windows make small inputs take several blocks.
	f.Add(englishText(rand.New(rand.NewSource(6)), 3000), uint8(1), true, int32(32))
	f.Add(regionData(7, 12<<10)[4<<10:], uint8(0), true, int32(0))
	f.Add(regionData(8, 12<<10)[4<<10:], uint8(2), false, int32(8))
	f.Add(randomBytes(rand.New(rand.NewSource(9)), 2000), uint8(3), false, int32(-1))

	type key struct {
		window    int
		noEntropy bool
		maxStep   int32
	}
	var mu sync.Mutex
	oursByKey := map[key]*zstdfast.Encoder{}
	upByKey := map[key]*zstd.Encoder{}

	f.Fuzz(func(t *testing.T, data []byte, windowLog uint8, noEntropy bool, maxStep int32) {
		mu.Lock()
		defer mu.Unlock()
		// Windows from 1 KiB to 8 MiB: larger ones only take memory.
		k := key{zstdfast.MinWindowSize << (windowLog % 14), noEntropy, maxStep}
		enc, ok := oursByKey[k]
		if !ok {
			var err error
			enc, err = zstdfast.New(zstdfast.Options{WindowSize: k.window, NoEntropy: noEntropy, MaxStep: maxStep})
			if maxStep < 0 {
				if err == nil {
					t.Fatalf("New with MaxStep %d: no error", maxStep)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(oursByKey) >= 64 {
				clear(oursByKey)
			}
			oursByKey[k] = enc
		}
		got := enc.EncodeAll(data, nil)
		roundTrip(t, fmt.Sprintf("%+v", k), data, got)
		if maxStep != 0 {
			return
		}
		up, ok := upByKey[k]
		if !ok {
			up = upstream(t, k.window, noEntropy)
			upByKey[k] = up
		}
		if want := up.EncodeAll(data, nil); !bytes.Equal(got, want) {
			t.Fatalf("%+v, %d bytes: %d bytes, upstream %d, first difference at %d", k, len(data), len(got), len(want), firstDiff(got, want))
		}
	})
}

var benchData = sync.OnceValue(func() []byte { return regionData(10, 16<<20) })

// BenchmarkEncodeAll compresses 16 MiB of region-like data in 1 MiB
// frames, as Kiln's snapshots do (4 MiB window, no entropy coding of
// literals), with upstream's encoder and this package's.
func BenchmarkEncodeAll(b *testing.B) {
	data := benchData()
	type encoder interface{ EncodeAll(src, dst []byte) []byte }
	for _, bc := range []struct {
		name string
		enc  encoder
	}{
		{"upstream", upstream(b, 4<<20, true)},
		{"MaxStep=0", ours(b, zstdfast.Options{WindowSize: 4 << 20, NoEntropy: true})},
		{"MaxStep=32", ours(b, zstdfast.Options{WindowSize: 4 << 20, NoEntropy: true, MaxStep: 32})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dst := make([]byte, 0, 2<<20)
			var size int
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				size = 0
				for piece := range slices.Chunk(data, 1<<20) {
					dst = bc.enc.EncodeAll(piece, dst[:0])
					size += len(dst)
				}
			}
			b.ReportMetric(100*float64(size)/float64(len(data)), "%size")
		})
	}
}

// TestRegionFiles measures upstream against this package on real region
// files: each file in ZSTDFAST_REGION_DIR cut into 1 MiB pieces, each
// piece one frame (4 MiB window, no entropy coding of literals, as
// Kiln's snapshots). Each encoder's time is the best of 3 passes, the
// encoders taking turns, so that a slow spell of the machine does not
// fall on one of them only. It then checks every frame: MaxStep 0's
// against upstream's, capped steps' through upstream's decoder.
func TestRegionFiles(t *testing.T) {
	dir := os.Getenv("ZSTDFAST_REGION_DIR")
	if dir == "" {
		t.Skip("SKIPPED: set ZSTDFAST_REGION_DIR to a directory of Minecraft region files (*.mca) to measure on them")
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.mca"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no *.mca in %s (%v)", dir, err)
	}
	var pieces [][]byte
	var total int
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
		pieces = slices.AppendSeq(pieces, slices.Chunk(b, 1<<20))
	}
	t.Logf("%d files, %d bytes, %d pieces of at most 1 MiB", len(names), total, len(pieces))

	const window = 4 << 20
	type encoder interface{ EncodeAll(src, dst []byte) []byte }
	type measure struct {
		name string
		enc  encoder
		step int32 // -1: upstream
		size int
		best time.Duration
	}
	ms := []*measure{{name: "upstream", enc: upstream(t, window, true), step: -1}}
	for _, step := range []int32{0, 16, 24, 32, 48} {
		ms = append(ms, &measure{name: fmt.Sprintf("MaxStep=%d", step),
			enc: ours(t, zstdfast.Options{WindowSize: window, NoEntropy: true, MaxStep: step}), step: step})
	}
	dst := make([]byte, 0, 2<<20)
	for round := range 3 {
		for _, m := range ms {
			m.size = 0
			start := time.Now()
			for _, p := range pieces {
				dst = m.enc.EncodeAll(p, dst[:0])
				m.size += len(dst)
			}
			if d := time.Since(start); round == 0 || d < m.best {
				m.best = d
			}
		}
	}
	up := ms[0]
	for _, m := range ms {
		t.Logf("%-10s %d bytes (%.2f MB, %.3f %% of input, %+.3f %% vs upstream), best of 3: %v (%.0f MB/s, %+.0f %% time vs upstream)",
			m.name, m.size, float64(m.size)/1e6, 100*float64(m.size)/float64(total), 100*(float64(m.size)/float64(up.size)-1),
			m.best.Round(time.Millisecond), float64(total)/m.best.Seconds()/1e6, 100*(m.best.Seconds()/up.best.Seconds()-1))
	}
	for _, m := range ms[1:] {
		for i, p := range pieces {
			got := m.enc.EncodeAll(p, dst[:0])
			if m.step == 0 {
				if want := up.enc.EncodeAll(p, nil); !bytes.Equal(got, want) {
					t.Fatalf("piece %d: MaxStep 0 differs from upstream", i)
				}
				continue
			}
			roundTrip(t, fmt.Sprintf("%s, piece %d", m.name, i), p, got)
		}
	}
}

func Example() {
	enc, err := zstdfast.New(zstdfast.Options{WindowSize: 4 << 20, NoEntropy: true, MaxStep: 32})
	if err != nil {
		panic(err)
	}
	src := bytes.Repeat([]byte("kiln "), 1000)
	frame := enc.EncodeAll(src, nil)

	// Decoding is upstream's.
	dec, err := zstd.NewReader(nil)
	if err != nil {
		panic(err)
	}
	defer dec.Close()
	out, err := dec.DecodeAll(frame, nil)
	fmt.Println(len(src), len(frame), bytes.Equal(out, src), err)
	// Output: 5000 23 true <nil>
}
