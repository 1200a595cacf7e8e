package randflake

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustCipher(t testing.TB, key []byte) *Sparx64 {
	t.Helper()
	s, err := NewSparx64(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The test vector published with the Sparx specification.
func TestSparx64SpecVector(t *testing.T) {
	s := mustCipher(t, mustHex(t, "00112233445566778899aabbccddeeff"))
	pt := mustHex(t, "0123456789abcdef")
	want := mustHex(t, "2bbef15201f55f98")
	got := make([]byte, 8)
	s.Encrypt(got, pt)
	if !bytes.Equal(got, want) {
		t.Fatalf("Encrypt = %x, want %x", got, want)
	}
	s.Decrypt(got, got)
	if !bytes.Equal(got, pt) {
		t.Fatalf("Decrypt = %x, want %x", got, pt)
	}
	// The same block through the ID entry points of every kernel: the ID
	// whose little-endian bytes are the plaintext.
	id := binary.LittleEndian.Uint64(pt)
	wantID := binary.LittleEndian.Uint64(want)
	for _, k := range kernels() {
		dst := []uint64{0}
		k.encrypt(s, dst, []uint64{id})
		if dst[0] != wantID {
			t.Errorf("%s: EncryptIDs = %#x, want %#x", k.name, dst[0], wantID)
		}
	}
}

func TestNewSparx64KeySize(t *testing.T) {
	for n := 0; n <= 40; n++ {
		s, err := NewSparx64(make([]byte, n))
		if n == Sparx64KeySize {
			if err != nil || s == nil {
				t.Fatalf("16-byte key: %v", err)
			}
			continue
		}
		if err == nil || s != nil {
			t.Fatalf("%d-byte key accepted", n)
		}
		if !errors.Is(err, ErrInvalidSecret) {
			t.Fatalf("%d-byte key: error %v is not ErrInvalidSecret", n, err)
		}
	}
	if _, err := NewSparx64(nil); err == nil {
		t.Fatal("nil key accepted")
	}
}

func TestSparx64ShortBlockPanics(t *testing.T) {
	s := mustCipher(t, make([]byte, 16))
	for _, f := range []func(dst, src []byte){s.Encrypt, s.Decrypt} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("short block did not panic")
				}
			}()
			f(make([]byte, 8), make([]byte, 7))
		}()
	}
}

// referenceVector is one entry of the reference implementation's
// cross-language vectors.
type referenceVector struct {
	Secret      string `json:"secret"`
	NodeID      int64  `json:"node_id"`
	LeaseStart  int64  `json:"lease_start"`
	LeaseEnd    int64  `json:"lease_end"`
	Timestamp   int64  `json:"timestamp"`
	Sequence    int64  `json:"sequence"`
	RawID       string `json:"raw_id"`
	EncryptedID string `json:"encrypted_id"`
	EncodedID   string `json:"encoded_id"`
}

// referenceVectors loads the vectors from the file named by
// RANDFLAKE_VECTORS (CI sets it; a missing file is then a failure) or, when
// it is unset, from ../shared/vectors beside the checkout if present.
func referenceVectors(t *testing.T) []referenceVector {
	t.Helper()
	path := os.Getenv("RANDFLAKE_VECTORS")
	if path == "" {
		path = filepath.Join("..", "shared", "vectors", "randflake_reference_vectors.json")
		if _, err := os.Stat(path); err != nil {
			referenceMissing.Store(true)
			t.Skip("the reference implementation's vectors are not beside the checkout (set RANDFLAKE_VECTORS to their path): compatibility is checked against " + goldenPath + " only")
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vs []referenceVector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no vectors in " + path)
	}
	return vs
}

// referenceMissing is set when a test found no reference vectors, so that
// TestMain says so at the end of the run.
var referenceMissing atomic.Bool

func parseInt64(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSparx64ReferenceVectors(t *testing.T) {
	vs := referenceVectors(t)
	for _, k := range kernels() {
		for i, v := range vs {
			s := mustCipher(t, mustHex(t, v.Secret))
			raw := uint64(parseInt64(t, v.RawID))
			enc := uint64(parseInt64(t, v.EncryptedID))
			// Put the vector among other IDs so SIMD lanes other than the
			// first are checked too.
			for _, pos := range []int{0, 5, 63} {
				src := make([]uint64, 64)
				src[pos] = raw
				dst := make([]uint64, 64)
				k.encrypt(s, dst, src)
				if dst[pos] != enc {
					t.Errorf("%s: vector %d at %d: encrypt(%d) = %d, want %d", k.name, i, pos, raw, int64(dst[pos]), int64(enc))
				}
				k.decrypt(s, dst, dst)
				if dst[pos] != raw {
					t.Errorf("%s: vector %d at %d: decrypt gave %d, want %d", k.name, i, pos, dst[pos], raw)
				}
			}
		}
	}
}

// Every kernel against the scalar cipher, for every length up to 1,100 and
// some longer ones, at offsets that break any alignment, in place and not.
func TestKernelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := make([]int, 0, 1110)
	for n := 0; n <= 1100; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 2047, 4096, 4099, 65536+31)
	if testing.Short() {
		lengths = lengths[:200]
	}
	for _, k := range kernels() {
		t.Run(k.name, func(t *testing.T) {
			for _, n := range lengths {
				key := make([]byte, 16)
				for i := range key {
					key[i] = byte(rng.Uint32())
				}
				s := mustCipher(t, key)
				off := rng.IntN(4)
				const guard = 3
				buf := make([]uint64, off+n+guard)
				for i := range buf {
					buf[i] = rng.Uint64()
				}
				src := buf[off : off+n]
				orig := append([]uint64(nil), buf...)
				want := make([]uint64, n)
				for i, x := range src {
					want[i] = s.EncryptID(x)
				}

				out := make([]uint64, n+guard)
				for i := range out {
					out[i] = 0xdeadbeef
				}
				k.encrypt(s, out[:n], src)
				if err := compareIDs(out[:n], want); err != nil {
					t.Fatalf("n=%d off=%d: encrypt: %v", n, off, err)
				}
				for i := n; i < len(out); i++ {
					if out[i] != 0xdeadbeef {
						t.Fatalf("n=%d: encrypt wrote past dst at %d", n, i)
					}
				}
				for i := range buf {
					if buf[i] != orig[i] {
						t.Fatalf("n=%d: encrypt modified src at %d", n, i)
					}
				}
				back := make([]uint64, n)
				k.decrypt(s, back, out[:n])
				if err := compareIDs(back, src); err != nil {
					t.Fatalf("n=%d off=%d: decrypt(encrypt(x)) != x: %v", n, off, err)
				}

				// In place, inside a larger buffer whose guards must survive.
				k.encrypt(s, src, src)
				if err := compareIDs(src, want); err != nil {
					t.Fatalf("n=%d off=%d: in-place encrypt: %v", n, off, err)
				}
				k.decrypt(s, src, src)
				if err := compareIDs(buf, orig); err != nil {
					t.Fatalf("n=%d off=%d: in-place round trip: %v", n, off, err)
				}
			}
		})
	}
}

func compareIDs(got, want []uint64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("index %d: %#x, want %#x", i, got[i], want[i])
		}
	}
	return nil
}

// EncryptIDs processes min(len(dst), len(src)) IDs and leaves the rest of
// the longer slice alone.
func TestEncryptIDsLengthMismatch(t *testing.T) {
	s := mustCipher(t, make([]byte, 16))
	src := []uint64{1, 2, 3, 4, 5}
	dst := make([]uint64, 3)
	s.EncryptIDs(dst, src)
	for i := range dst {
		if dst[i] != s.EncryptID(src[i]) {
			t.Fatalf("dst[%d] wrong", i)
		}
	}
	dst = []uint64{7, 7, 7, 7, 7, 7, 7}
	s.EncryptIDs(dst, src[:2])
	if dst[0] != s.EncryptID(1) || dst[1] != s.EncryptID(2) || dst[2] != 7 || dst[6] != 7 {
		t.Fatalf("short src: %v", dst)
	}
	s.EncryptIDs(nil, src)
	s.DecryptIDs(dst, nil)
}

// The cipher.Block form and the ID form agree on the byte mapping.
func TestBlockAndIDFormsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := mustCipher(t, mustHex(t, "000102030405060708090a0b0c0d0e0f"))
	for i := 0; i < 1000; i++ {
		id := rng.Uint64()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], id)
		s.Encrypt(b[:], b[:])
		if got, want := binary.LittleEndian.Uint64(b[:]), s.EncryptID(id); got != want {
			t.Fatalf("Encrypt/EncryptID disagree for %#x: %#x vs %#x", id, got, want)
		}
		if s.DecryptID(s.EncryptID(id)) != id {
			t.Fatalf("DecryptID(EncryptID(%#x)) != id", id)
		}
	}
}

func TestEncryptIDsDoesNotAllocate(t *testing.T) {
	s := mustCipher(t, make([]byte, 16))
	for _, n := range []int{1, 5, 33, 1000} {
		buf := make([]uint64, n)
		if a := testing.AllocsPerRun(50, func() { s.EncryptIDs(buf, buf); s.DecryptIDs(buf, buf) }); a != 0 {
			t.Errorf("n=%d: %v allocations", n, a)
		}
	}
}

// CI sets RANDFLAKE_EXPECT_KERNEL to the kernel its CPU must select, so a
// detection bug cannot hide behind a silent fallback to generic.
func TestExpectedKernelSelected(t *testing.T) {
	want := os.Getenv("RANDFLAKE_EXPECT_KERNEL")
	if want == "" {
		t.Skip("RANDFLAKE_EXPECT_KERNEL not set")
	}
	if got := Kernel(); got != want {
		t.Fatalf("Kernel() = %q, want %q (available: %v)", got, want, kernelNames())
	}
}

func kernelNames() []string {
	var names []string
	for _, k := range kernels() {
		names = append(names, k.name)
	}
	return names
}

func TestSelectKernel(t *testing.T) {
	all := kernels()
	if all[len(all)-1].name != "generic" {
		t.Fatal("generic is not the last kernel")
	}
	if got := selectKernel("").name; got != all[0].name {
		t.Fatalf("default kernel %q, want fastest %q", got, all[0].name)
	}
	for _, k := range all {
		if got := selectKernel(k.name).name; got != k.name {
			t.Fatalf("selectKernel(%q) = %q", k.name, got)
		}
	}
	if got := selectKernel("no-such-kernel").name; got != all[0].name {
		t.Fatalf("unknown name selected %q", got)
	}
}

func TestKernelWidths(t *testing.T) {
	for _, k := range kernels() {
		if k.width < 0 || k.width > maxWidth || k.width&(k.width-1) != 0 {
			t.Errorf("kernel %s: width %d is not a power of two up to %d", k.name, k.width, maxWidth)
		}
	}
}
