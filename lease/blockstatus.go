package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FleetStatus is what one read of a lease store shows an operator: the
// fleet marker, every block with its holder and its record, and the
// clocks. BlockSource.Status makes it without writing anything
// (randflake lease status prints it).
type FleetStatus struct {
	// Store names the store (StoreInfo.Name).
	Store string
	// Identity is the store's identity and position as read.
	Identity StoreIdentity
	// Read is this machine's clock when the store was read, and
	// StoreClock the store's own (zero where the store has no clock).
	Read, StoreClock time.Time
	// Promise is how far ahead this process's holders would promise, and
	// Wait how long a claim on unknown history waits, as configured here.
	Promise, Wait time.Duration
	// Takeover is how long after a claim made now its lease would start
	// at the earliest (rule 14: the longest detection bound of this
	// process and the marker, plus the clock skew); zero on a store whose
	// claims do not lapse, or a fresh one.
	Takeover time.Duration
	// Marker is the fleet marker.
	Marker MarkerStatus
	// Blocks are the fleet's blocks, in order.
	Blocks []BlockStatus
}

// MarkerStatus is the fleet marker as read.
type MarkerStatus struct {
	// State is "ok", "missing" (never initialised, or wiped), "edited"
	// (fails its check: edited, or from before this version), "another
	// fleet" (signed under another fleet's secret), or "fresh" (the store
	// was created empty and no marker was written yet).
	State string
	// Problem says what is wrong, where State is not ok.
	Problem string
	// FleetKeyID is the ID of the key it is signed under ("" if it
	// carries none), and OwnKeyID this process's.
	FleetKeyID, OwnKeyID string
	// Identity is the store identity the marker recorded, Horizon the
	// longest promise it recorded (seconds), Unknown the second up to
	// which every block's history is unknown (0 where the marker is not
	// ok).
	Identity string
	Horizon  int64
	Unknown  int64
	// Detect is the longest detection bound it recorded (seconds): how
	// long a holder of the fleet issues after its last check (rule 14).
	Detect int64
	// DigestOK reports whether the records read match the marker's
	// digest.
	DigestOK bool
}

// BlockStatus is one block as read.
type BlockStatus struct {
	// First and Last bound its node IDs.
	First, Last int64
	// Held reports whether a live claim holds it, and Holder who holds it,
	// as the store names the holder ("" where it does not say).
	Held   bool
	Holder string
	// Record is the state of its record: "ok", "none" (never used, or
	// wiped), "edited" (fails its check), or "unknown" (valid, but the
	// records do not match the marker, so it may not be the last one
	// written).
	Record string
	// Problem says what is wrong with the record, where Record is edited.
	Problem string
	// Until is the last second the record allows an ID on these node IDs
	// (the promise, or the last second used after a release), and At the
	// writer's clock when it was written; 0 without a valid record.
	Until, At int64
	// Free is the first second a claim read now could use it from: after
	// its record, the marker's unknown second and the takeover wait (0
	// while it is held).
	Free int64
}

// errStatusRead ends the read-only step of Status: a store applies
// nothing when its step's function fails.
var errStatusRead = errors.New("randflake: status read (nothing written)")

// Status reads the whole store in one step and describes it, without
// writing anything: the step's function always fails, so that the store
// applies no change.
func (s *BlockSource) Status(ctx context.Context) (FleetStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := FleetStatus{Store: s.info.Name, Promise: s.info.Promise, Wait: time.Duration(s.wait) * time.Second}
	if !s.info.Durable {
		return st, fmt.Errorf("randflake: %s records nothing: there is no status to read", s.info.Name)
	}
	var got bool
	_, err := s.store.Update(ctx, nil, true, func(v *StoreView) (*StoreChanges, error) {
		st = s.describe(v, s.now())
		got = true
		return nil, errStatusRead
	})
	if got && errors.Is(err, errStatusRead) {
		return st, nil
	}
	if err == nil {
		err = fmt.Errorf("randflake: %s: the store's step ended without reading", s.info.Name)
	}
	return st, err
}

// describe turns a full view into a FleetStatus.
func (s *BlockSource) describe(v *StoreView, now time.Time) FleetStatus {
	st := FleetStatus{Store: s.info.Name, Identity: v.Identity, Read: now, StoreClock: v.Clock,
		Promise: s.info.Promise, Wait: time.Duration(s.wait) * time.Second}
	var digest [tagBytes]byte
	records := map[int64]blockRecord{}
	problems := map[int64]string{}
	for _, b := range v.Blocks {
		if b.Record == nil {
			continue
		}
		xorInto(&digest, digestOf(s.key, b.Record))
		r, err := parseRecord(s.key, b.Record, b.First, b.Last)
		if err != nil {
			problems[b.First] = fmt.Sprintf("the record %v", err)
			continue
		}
		records[b.First] = r
	}
	mk := &st.Marker
	mk.OwnKeyID = keyID(s.key)
	var m fleetMarker
	switch {
	case v.Marker == nil && v.Fresh:
		mk.State = "fresh"
	case v.Marker == nil:
		mk.State, mk.Problem = "missing", "the store has no fleet marker (never initialised, or wiped): the next claim waits out unknown history"
	default:
		var err error
		m, err = parseMarker(s.key, v.Marker)
		switch {
		case errors.Is(err, errOtherFleet):
			mk.State, mk.FleetKeyID = "another fleet", m.fleet
			mk.Problem = "signed under another fleet's secret: this process would be refused"
		case err != nil:
			mk.State, mk.Problem = "edited", fmt.Sprintf("the fleet marker %v", err)
		default:
			mk.State, mk.FleetKeyID = "ok", mk.OwnKeyID
			mk.Identity, mk.Horizon, mk.Unknown, mk.Detect = m.id, m.horizon, m.unknown, m.detect
			mk.DigestOK = m.digest == digest
			switch {
			case m.layout != s.layout:
				mk.State = "another layout"
				mk.Problem = fmt.Sprintf("blocks of %d node IDs in %d-%d, this process is configured for blocks of %d in %d-%d",
					m.layout.Size, m.layout.FirstNode, m.layout.LastNode, s.layout.Size, s.layout.FirstNode, s.layout.LastNode)
			case m.id != v.Identity.ID:
				mk.Problem = fmt.Sprintf("the store's identity changed from %q to %q (restored or failed over): the next claim waits out unknown history", m.id, v.Identity.ID)
			case !mk.DigestOK:
				mk.Problem = "the records do not match the marker (a record was deleted, edited or rolled back): the next claim waits out unknown history"
			}
		}
	}
	unknown := m.unknown
	if mk.State != "ok" || mk.Problem != "" {
		// The next claim makes the history unknown up to its clock + the
		// wait.
		unknown = max(unknown, now.Unix()+s.wait)
	}
	// Rule 14, as a claim would apply it (claim): the detection bound of
	// this process, of markers read before and of a valid marker now.
	var takeover int64
	if !(v.Marker == nil && v.Fresh) {
		var bounds fleetMarker
		if mk.State == "ok" {
			bounds = m
		}
		s.markBounds(&bounds)
		takeover = s.takeoverWait(bounds.detect)
	}
	st.Takeover = time.Duration(takeover) * time.Second
	for _, b := range v.Blocks {
		bs := BlockStatus{First: b.First, Last: b.Last, Held: b.Held, Holder: b.Holder}
		r, ok := records[b.First]
		switch {
		case b.Record == nil:
			bs.Record = "none"
		case !ok:
			bs.Record, bs.Problem = "edited", problems[b.First]
		case mk.State == "ok" && mk.DigestOK:
			bs.Record = "ok"
		default:
			bs.Record = "unknown"
		}
		if ok {
			bs.Until, bs.At = r.until, r.at
		}
		if !b.Held {
			bs.Free = max(unknown, bs.Until) + 1
			if takeover > 0 {
				bs.Free = max(bs.Free, now.Unix()+takeover+1)
			}
		}
		st.Blocks = append(st.Blocks, bs)
	}
	return st
}
