package randflake

import (
	"strconv"
	"testing"
)

// BenchmarkSparx64Block measures one block through crypto/cipher.Block and
// through EncryptID; both are scalar whatever the kernel.
func BenchmarkSparx64Block(b *testing.B) {
	s := mustCipher(b, make([]byte, 16))
	b.Run("Encrypt", func(b *testing.B) {
		var blk [8]byte
		b.SetBytes(8)
		for i := 0; i < b.N; i++ {
			s.Encrypt(blk[:], blk[:])
		}
	})
	b.Run("EncryptID", func(b *testing.B) {
		var id uint64
		b.SetBytes(8)
		for i := 0; i < b.N; i++ {
			id = s.EncryptID(id)
		}
		sinkID = id
	})
	b.Run("DecryptID", func(b *testing.B) {
		var id uint64
		b.SetBytes(8)
		for i := 0; i < b.N; i++ {
			id = s.DecryptID(id)
		}
		sinkID = id
	})
}

var sinkID uint64

var batchSizes = []int{1, 8, 64, 1024, 65536}

// BenchmarkEncryptIDs runs every kernel this CPU supports on batches of IDs
// and reports ns per ID beside ns per batch.
func BenchmarkEncryptIDs(b *testing.B) {
	benchKernels(b, func(k kernel) func(*Sparx64, []uint64, []uint64) { return k.encrypt })
}

// BenchmarkDecryptIDs is BenchmarkEncryptIDs for decryption.
func BenchmarkDecryptIDs(b *testing.B) {
	benchKernels(b, func(k kernel) func(*Sparx64, []uint64, []uint64) { return k.decrypt })
}

func benchKernels(b *testing.B, pick func(kernel) func(*Sparx64, []uint64, []uint64)) {
	s := mustCipher(b, make([]byte, 16))
	for _, k := range kernels() {
		f := pick(k)
		for _, n := range batchSizes {
			b.Run("kernel="+k.name+"/n="+strconv.Itoa(n), func(b *testing.B) {
				buf := make([]uint64, n)
				for i := range buf {
					buf[i] = uint64(i)
				}
				b.SetBytes(int64(8 * n))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					f(s, buf, buf)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ID")
			})
		}
	}
}
