// Package fuzz holds the fuzz targets of the randflake module's parsers:
// the Randflake ID parsers and the Apache UNIQUE_ID token parser. (The
// cipher's target, FuzzEncryptIDs, lives in the root package, where it
// checks every kernel the CPU has on each input.) CI runs each target for a
// short, bounded time.
package fuzz
