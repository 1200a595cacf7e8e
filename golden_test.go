package randflake

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from this code")

// goldenVector is one known answer of this package: an ID's fields, its
// plaintext, its encryption under the secret and its string form. IDs are
// JSON strings so that 64-bit values survive every JSON reader.
type goldenVector struct {
	Secret    string `json:"secret"`
	Timestamp int64  `json:"timestamp"`
	NodeID    int64  `json:"node_id"`
	Sequence  int64  `json:"sequence"`
	RawID     string `json:"raw_id"`
	ID        string `json:"id"`
	String    string `json:"string"`
}

const goldenPath = "testdata/golden_vectors.json"

// goldenInputs are the fields of the known answers: the edges of every
// field, all-zero and all-ones secrets, and random ones from a fixed seed.
func goldenInputs() []goldenVector {
	rng := rand.New(rand.NewPCG(2024, 1027))
	var vs []goldenVector
	secrets := []string{"00000000000000000000000000000000", "ffffffffffffffffffffffffffffffff", "000102030405060708090a0b0c0d0e0f"}
	for _, s := range secrets {
		for _, ts := range []int64{Epoch, Epoch + 1, MaxTimestamp/2 + Epoch/2, MaxTimestamp} {
			for _, f := range [][2]int64{{0, 0}, {MaxNode, MaxSequence}, {1, 2}} {
				vs = append(vs, goldenVector{Secret: s, Timestamp: ts, NodeID: f[0], Sequence: f[1]})
			}
		}
	}
	for i := 0; i < 64; i++ {
		key := make([]byte, 16)
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		vs = append(vs, goldenVector{
			Secret:    hex.EncodeToString(key),
			Timestamp: Epoch + rng.Int64N(MaxTimestamp-Epoch+1),
			NodeID:    rng.Int64N(MaxNode + 1),
			Sequence:  rng.Int64N(MaxSequence + 1),
		})
	}
	return vs
}

// The known answers in testdata, written by this package (which matches
// the reference implementation bit for bit: see TestReferenceVectors*),
// are checked on every run, so a fresh clone tests compatibility without
// the reference's own vectors. Run with -update to rewrite them.
func TestGoldenVectors(t *testing.T) { forEachKernel(t, testGoldenVectors) }

func testGoldenVectors(t *testing.T) {
	computed := goldenInputs()
	for i := range computed {
		v := &computed[i]
		c := mustCipher(t, mustHex(t, v.Secret))
		raw := rawID(v.Timestamp, v.NodeID, v.Sequence)
		id := int64(c.EncryptID(raw))
		v.RawID, v.ID, v.String = strconv.FormatUint(raw, 10), strconv.FormatInt(id, 10), EncodeString(id)
		// The batch kernel agrees with the single-block cipher.
		batch := make([]uint64, 40)
		batch[i%40] = raw
		c.EncryptIDs(batch, batch)
		if int64(batch[i%40]) != id {
			t.Fatalf("vector %d: the %s kernel encrypts %d to %d, the block cipher to %d", i, Kernel(), raw, int64(batch[i%40]), id)
		}
	}
	if *update {
		data, err := json.MarshalIndent(computed, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(goldenPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenVectors -update to write it)", err)
	}
	var golden []goldenVector
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) != len(computed) {
		t.Fatalf("%s holds %d vectors, this code makes %d", goldenPath, len(golden), len(computed))
	}
	for i, want := range golden {
		if got := computed[i]; got != want {
			t.Errorf("vector %d: this code gives %+v, %s holds %+v", i, got, goldenPath, want)
			continue
		}
		in, err := NewInspector(mustHex(t, want.Secret))
		if err != nil {
			t.Fatal(err)
		}
		ts, node, seq, err := in.InspectString(want.String)
		if err != nil || ts != want.Timestamp || node != want.NodeID || seq != want.Sequence {
			t.Errorf("vector %d: InspectString(%q) = %d, %d, %d, %v; want %d, %d, %d", i, want.String, ts, node, seq, err, want.Timestamp, want.NodeID, want.Sequence)
		}
	}
}
