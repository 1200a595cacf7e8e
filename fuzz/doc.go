// Package fuzz holds the fuzz targets of the randflake module: the cipher's
// batch kernels against its scalar form, the Randflake ID parsers and the
// Apache UNIQUE_ID token parser. CI runs each
// target for a short, bounded time, once per kernel the CPU supports
// (RANDFLAKE_KERNEL selects the kernel).
package fuzz
