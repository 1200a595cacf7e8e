package lease_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/leasetest"
)

// Status reads the marker and every block, and writes nothing, whatever
// state the store is in.
func TestBlockSourceStatus(t *testing.T) {
	t.Parallel()
	b := newBackend(t, unitLayout)
	opts := leasetest.MemOptions{TTL: 2 * time.Second}
	holder, _ := newSource(t, b, opts, 1)
	l, err := holder.Acquire(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reader, _ := newSource(t, b, opts, 1)
	status := func(what string) lease.FleetStatus {
		t.Helper()
		marker, recs := b.Marker(), records(b)
		st, err := reader.Status(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(b.Marker(), marker) {
			t.Errorf("%s: Status changed the marker", what)
		}
		for first, rec := range records(b) {
			if rec != recs[first] {
				t.Errorf("%s: Status changed the record of node IDs %d-", what, first)
			}
		}
		if len(st.Blocks) != int(unitLayout.Count()) {
			t.Fatalf("%s: %d blocks, want %d", what, len(st.Blocks), unitLayout.Count())
		}
		return st
	}

	before := time.Now().Unix()
	st := status("a store with one holder")
	if st.Marker.State != "ok" || !st.Marker.DigestOK || st.Marker.FleetKeyID == "" || st.Marker.FleetKeyID != st.Marker.OwnKeyID || st.Marker.Problem != "" {
		t.Errorf("a store with one holder: marker %+v, want ok, its digest matching, this fleet's key ID", st.Marker)
	}
	// Rule 14: every claim but a fresh store's first waits the takeover,
	// a block never used included.
	takeover := lease.TakeoverWait(reader.Store().Info())
	if takeover == 0 || st.Takeover != takeover || st.Marker.Detect == 0 {
		t.Errorf("a store with one holder: takeover %v, marker's detection bound %ds; want the store's takeover wait %v (not 0), the marker's bound recorded",
			st.Takeover, st.Marker.Detect, takeover)
	}
	w := int64(takeover / time.Second)
	for _, bs := range st.Blocks {
		mine := bs.First == l.FirstNode
		switch {
		case mine && (!bs.Held || bs.Record != "ok" || bs.Until < l.End || bs.Free != 0):
			t.Errorf("the held block: %+v, want held, its record ok with the promise (lease %v)", bs, l)
		case !mine && (bs.Held || bs.Record != "none" || bs.Free < before+w+1 || bs.Free > time.Now().Unix()+w+1):
			t.Errorf("a block never used: %+v, want no record, free after the takeover wait of %v from the read (%d to %d)", bs, takeover, before, time.Now().Unix())
		}
	}

	// The holder's record edited by hand.
	rec := b.Record(l.FirstNode)
	b.SetRecord(l.FirstNode, bytes.Replace(rec, []byte("rfb1 "), []byte("rfb1 1"), 1))
	st = status("an edited record")
	if bs := st.Blocks[l.FirstNode/unitLayout.Size]; bs.Record != "edited" || bs.Problem == "" {
		t.Errorf("an edited record: %+v, want edited, with the problem", bs)
	}
	if st.Marker.DigestOK || st.Marker.Problem == "" {
		t.Errorf("an edited record: marker %+v, want its digest not matching, said", st.Marker)
	}
	b.SetRecord(l.FirstNode, rec)

	// Another fleet's marker.
	marker := b.Marker()
	ob := newBackend(t, unitLayout)
	oh, _ := ob.Open(opts)
	theirs, err := lease.NewBlockSource(oh, lease.BlockSourceConfig{Secret: otherSecret, Layout: unitLayout})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Acquire(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	b.SetMarker(ob.Marker())
	st = status("another fleet's marker")
	if st.Marker.State != "another fleet" || st.Marker.FleetKeyID == st.Marker.OwnKeyID || st.Marker.FleetKeyID == "" {
		t.Errorf("another fleet's marker: %+v, want another fleet, its key ID", st.Marker)
	}

	// No marker at all.
	b.SetMarker(nil)
	before = time.Now().Unix()
	st = status("no marker")
	if st.Marker.State != "missing" || st.Marker.Problem == "" {
		t.Errorf("no marker: %+v, want missing", st.Marker)
	}
	for _, bs := range st.Blocks {
		if !bs.Held && bs.Free <= before+int64(st.Wait/time.Second) {
			t.Errorf("no marker: block %+v free at %d, want after the wait of unknown history (%v from %d)", bs, bs.Free, st.Wait, before)
		}
	}
	b.SetMarker(marker)
	if st := status("the marker put back"); st.Marker.State != "ok" || !st.Marker.DigestOK {
		t.Errorf("the marker put back: %+v, want ok", st.Marker)
	}
}
