package randflake_test

import (
	"database/sql"
	"fmt"

	"github.com/randflake/randflake"
)

// A nullable ID column: database/sql's generic Null type works with ID,
// which scans from BIGINT (int64), text and bytes and stores as BIGINT.
func ExampleID_nullable() {
	var parent sql.Null[randflake.ID]
	if err := parent.Scan(nil); err != nil { // a NULL column
		panic(err)
	}
	fmt.Println(parent.Valid)

	if err := parent.Scan(int64(-4064785178339119907)); err != nil { // a BIGINT
		panic(err)
	}
	v, _ := parent.Value()
	fmt.Println(parent.Valid, parent.V, v)

	if err := parent.Scan("3vgoe12ccb8gh"); err != nil { // its string form
		panic(err)
	}
	fmt.Println(parent.V.Int64())
	// Output:
	// false
	// true cf5nrdaed5r6t -4064785178339119907
	// 4594531474933654033
}
