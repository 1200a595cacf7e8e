package lease_test

import (
	"strings"
	"testing"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

func TestNewBlockLayout(t *testing.T) {
	for _, c := range []struct {
		first, last, size int64
		want              lease.BlockLayout
		err               string
	}{
		{0, 0, 0, lease.BlockLayout{FirstNode: 0, LastNode: randflake.MaxNode, Size: 16}, ""},
		{0, 0, 1024, lease.BlockLayout{FirstNode: 0, LastNode: randflake.MaxNode, Size: 1024}, ""},
		{32, 63, 0, lease.BlockLayout{FirstNode: 32, LastNode: 63, Size: 16}, ""},
		{32, 63, 32, lease.BlockLayout{FirstNode: 32, LastNode: 63, Size: 32}, ""},
		{0, 99, 16, lease.BlockLayout{}, "blocks of 16 node IDs: want a number that divides the 100 node IDs of the range 0-99"},
		{0, 15, -1, lease.BlockLayout{}, "blocks of -1 node IDs"},
		{16, 15, 0, lease.BlockLayout{}, "randflake: "},
		{0, randflake.MaxNode + 1, 0, lease.BlockLayout{}, "randflake: "},
	} {
		l, err := lease.NewBlockLayout(c.first, c.last, c.size, 16)
		switch {
		case c.err == "" && (err != nil || l != c.want):
			t.Errorf("NewBlockLayout(%d, %d, %d, 16) = %+v, %v; want %+v", c.first, c.last, c.size, l, err, c.want)
		case c.err == "":
			if err := l.Check(); err != nil {
				t.Errorf("the layout %+v fails its own Check: %v", l, err)
			}
		case err == nil || !strings.HasPrefix(err.Error(), c.err):
			t.Errorf("NewBlockLayout(%d, %d, %d, 16) = %+v, %v; want an error beginning %q", c.first, c.last, c.size, l, err, c.err)
		}
	}
}
